#!/usr/bin/env bash
# Validates the simulator and the cost model (what the planners optimise and `minimllm simulate`
# projects) against measured training steps on this machine: for each rank count, calibrates the deck's
# model on that many ranks (so cores are as busy, and calls as large, as in those runs), right away trains
# every policy with that calibration (`minimllm run`), then projects the same steps with `minimllm
# simulate` at the same ranks with the same calibration. Prints, per policy, the measured median step time
# (steps after the warm-up), the simulator's projection of the same steps (median; what being dynamic
# costs included: planning on the critical path, communicator creation and sample movement, which `minimllm
# run` does too: docs/PARALLELISM.md) and the run's own prediction (/steps/predicted_seconds),
# PASS when the simulator is within the tolerance, FAIL otherwise. Exit status 1 if any policy fails.
#
#   scripts/validate-simulator.sh [options]
#     --deck FILE          deck (default inputs/modality_incoherent.yaml)
#     --ranks "1 2"        rank counts to train on (default "1 2")
#     --steps N            steps per policy run, the first a warm-up (default 10)
#     --tolerance T        relative tolerance (default 0.15)
#     --within-factor F    instead of --tolerance: PASS when simulated / measured is within a factor F
#                          (1/F to F); for a smoke test on a shared machine (CI: F 10), where measured
#                          steps of a few ms can be several times slower, while a broken reading (0 or
#                          nan) still fails
#     --calibration FILE   use this one calibration for every rank count instead of making them
#     --same-run           calibrate inside each policy's run, just before its steps (`run --calibrate`,
#                          quick settings) instead of once per rank count: least exposed to a shared
#                          machine changing speed between calibration and measurement (the simulator
#                          then uses a calibration made after the runs)
#     --cp N --cp-comm M   train and project on a copy of the deck with `parallel: {cp: N, cp_comm: M}`
#                          (static's context-parallel groups of N ranks, by p2p, a2a or all_gather);
#                          the deck must have no parallel section of its own
#     --build DIR          build directory (default build)
#     --work DIR           where the calibration, run logs and HDF5 files go (default runs/validate-<date>)
#
# Timings on a shared machine drift with its load. After each rank count's runs the script calibrates
# again (same settings) and prints how far the LLM cost moved between the two calibrations ("drift"), and
# how far apart the measured times of policies that made the same plans are ("noise"): when the machine
# itself changed speed by more than the tolerance, a FAIL there says nothing about the model. It also
# prints the load average. Repeat before concluding from one table.
set -euo pipefail
cd "$(dirname "$0")/.."

deck=inputs/modality_incoherent.yaml
ranks="1 2"
steps=10
tolerance=0.15
factor=""
calibration=""
same_run=0
build=build
work=""
cp_override=""
cp_comm_override=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deck) deck=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --tolerance) tolerance=$2; shift 2 ;;
    --within-factor) factor=$2; shift 2 ;;
    --calibration) calibration=$2; shift 2 ;;
    --same-run) same_run=1; shift ;;
    --cp) cp_override=$2; shift 2 ;;
    --cp-comm) cp_comm_override=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "validate-simulator.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
minimllm=$build/src/minimllm
# A Python with h5py: $MINIMLLM_PYTHON, else Debian's, else the one on PATH (as scripts/report.sh).
python=""
for py in ${MINIMLLM_PYTHON:-/usr/bin/python3 python3}; do
  if "$py" -c 'import h5py' 2> /dev/null; then python=$py; break; fi
done
[ -n "$python" ] || { echo "validate-simulator.sh: needs a python3 with h5py (apt-get install python3-h5py," \
  "or set MINIMLLM_PYTHON) to read the files" >&2; exit 2; }
# The median of FIELD over rows 1.. of TABLE in FILE, in ms; the script stops when any is missing.
read_median() {
  local value
  value=$("$python" scripts/h5tables.py median "$1" "$2" "$3" --from 1 --scale 1e3) ||
    { echo "validate-simulator.sh: cannot read $2/$3 of $1 (above); the file's layout is not docs/HDF5.md's" >&2; exit 2; }
  echo "$value"
}
[ -x "$minimllm" ] || { echo "validate-simulator.sh: $minimllm not built (scripts/build.sh $build)" >&2; exit 2; }
[ -f "$deck" ] || { echo "validate-simulator.sh: no deck $deck" >&2; exit 2; }
work=${work:-runs/validate-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$work"
if [ -n "$cp_override$cp_comm_override" ]; then
  [ -n "$cp_override" ] && [ -n "$cp_comm_override" ] ||
    { echo "validate-simulator.sh: --cp and --cp-comm go together" >&2; exit 2; }
  ! grep -q '^parallel:' "$deck" ||
    { echo "validate-simulator.sh: $deck has a parallel section: set cp and cp_comm there instead" >&2; exit 2; }
  { cat "$deck"; echo "parallel: {cp: $cp_override, cp_comm: $cp_comm_override}"; } > "$work/deck.yaml"
  deck=$work/deck.yaml
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "validate-simulator: deck $deck, ranks $ranks, $steps steps per policy, $([ -n "$factor" ] && echo "within a factor $factor" || echo "tolerance $tolerance"), work dir $work"
table=$work/table.txt
: > "$table"
for n in $ranks; do
  cal=$calibration
  cost_model=(--cost-model "$cal")
  if [ "$same_run" = 1 ]; then
    cost_model=(--calibrate)
  elif [ -z "$cal" ]; then
    cal=$work/calibration-np$n.yaml
    echo "== calibrating on $n rank(s) (load average $(load))"
    mpiexec -n "$n" "$minimllm" calibrate "$deck" --out "$cal" --overwrite \
      | tee "$work/calibrate-np$n.log" | grep -v '^  pass'
    cost_model=(--cost-model "$cal")
  fi
  echo "== $n rank(s): every policy, $steps steps (load average $(load))"
  log=$work/run-np$n.log
  mpiexec -n "$n" "$minimllm" run "$deck" --policy all --steps "$steps" "${cost_model[@]}" \
    --out "$work/np$n.h5" --overwrite > "$log"
  drift="-"
  if [ -z "$calibration" ] && [ "$same_run" = 0 ]; then
    echo "== calibrating again on $n rank(s): did the machine's speed hold? (load average $(load))"
    mpiexec -n "$n" "$minimllm" calibrate "$deck" --out "$work/recalibration-np$n.yaml" --overwrite \
      > "$work/recalibrate-np$n.log"
    drift=$(awk -v a="$cal" -v b="$work/recalibration-np$n.yaml" '
      function llm_cost(file,   line, on, a2, a1, c) {  # one LLM sample of 256 tokens
        while ((getline line < file) > 0) {
          if (line ~ /^llm:/) on = 1; else if (line ~ /^[a-z]/) on = 0
          if (on && line ~ /^  a2:/) a2 = substr(line, 7)
          if (on && line ~ /^  a1:/) a1 = substr(line, 7)
          if (on && line ~ /^  c:/) c = substr(line, 6)
        }
        return a2 * 256 * 256 + a1 * 256 + c
      }
      BEGIN { printf "%.3f", llm_cost(b) / llm_cost(a) }')
  fi
  # The simulator on the same steps, ranks and calibration (one node: every rank shares the links
  # calibrate measured; static at the deck's parallel.cp, as run trains it).
  sim_cal=$cal
  if [ "$same_run" = 1 ]; then  # each run calibrated itself: one more calibration for the simulator
    sim_cal=$work/calibration-np$n.yaml
    mpiexec -n "$n" "$minimllm" calibrate "$deck" --out "$sim_cal" --overwrite > "$work/calibrate-np$n.log"
  fi
  cp_degree=$(awk '/^parallel:/ { on = 1 } on && match($0, /cp: *[0-9]+/) { v = substr($0, RSTART, RLENGTH); sub(/cp: */, "", v); print v; exit }' "$deck")
  echo "== simulate on $n virtual rank(s) with the same calibration (load average $(load))"
  "$minimllm" simulate "$deck" --ranks "$n" --ranks-per-node "$n" --cp "${cp_degree:-1}" --policy all \
    --steps "$steps" --cost-model "$sim_cal" --out "$work/sim-np$n.h5" --overwrite > "$work/simulate-np$n.log"
  # Per policy, read by field name (scripts/h5tables.py; a missing table or field stops the script): the
  # measured and the run's predicted step (/steps step_seconds, predicted_seconds of np<N>-<policy>.h5) and
  # the simulator's projection of the same steps (/simulation/<policy> makespan_s; the run moves its
  # samples too), each the median over steps 1.., in ms. The policies are those the run trained.
  policies=$(awk '/^policy comparison/ { on = 1; next } on && $1 != "policy" && NF >= 6 { print $1 }' "$log")
  [ -n "$policies" ] || { echo "validate-simulator.sh: no policy comparison in $log" >&2; exit 2; }
  for policy in $policies; do
    run_file=$work/np$n-$policy.h5
    measured=$(read_median "$run_file" /steps step_seconds)
    predicted=$(read_median "$run_file" /steps predicted_seconds)
    simulated=$(read_median "$work/sim-np$n.h5" "/simulation/$policy" makespan_s)
    echo "$n $policy $measured $predicted $simulated $drift" >> "$table"
  done
done

echo
echo "simulated and predicted vs measured step time (medians of steps 1-$((steps - 1)); calibrations: $([ "$same_run" = 1 ] && echo "at the start of each run (/run/calibration in $work/np*-<policy>.h5)" || echo "in $work"))"
printf '%-6s %-13s %12s %13s %9s %13s %9s  %-6s %s\n' ranks policy "measured ms" "simulated ms" "sim/meas" \
  "run pred. ms" "pred/meas" result "drift (LLM cost after / before)"
failed=0
while read -r n policy measured predicted simulated drift; do
  read -r sim_ratio pred_ratio verdict < <(awk -v m="$measured" -v s="$simulated" -v p="$predicted" -v t="$tolerance" \
    -v f="$factor" '
    BEGIN { r = s / m; d = r - 1; if (d < 0) d = -d
            ok = f != "" ? (r >= 1 / f && r <= f) : d <= t
            printf "%.3f %.3f %s\n", r, p / m, (s == s && ok) ? "PASS" : "FAIL" }')
  [ "$verdict" = PASS ] || failed=1
  printf '%-6s %-13s %12.2f %13.2f %9s %13.2f %9s  %-6s %s\n' "$n" "$policy" "$measured" "$simulated" "$sim_ratio" \
    "$predicted" "$pred_ratio" "$verdict" "$drift"
done < "$table"
# Policies predicted alike on the same ranks made the same plans (on 1 rank all do): their measured
# spread is the machine's own noise during the runs, which the drift (two end points) can miss.
awk '{ key = $1 " " $4; n[key]++; if (!(key in lo) || $3 < lo[key]) lo[key] = $3; if ($3 > hi[key]) hi[key] = $3 }
     END { for (k in n) if (n[k] > 1) { split(k, f, " ");
             printf "noise: %d policies on %s rank(s) predicted alike (same work) measured %s-%s ms (%.0f%% apart)\n",
                    n[k], f[1], lo[k], hi[k], 100 * (hi[k] / lo[k] - 1) } }' "$table" | sort
echo "load average at the end: $(load) (with $(nproc) cores, a load above $(nproc) means the machine was shared)"
exit $failed
