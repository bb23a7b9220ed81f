#!/usr/bin/env bash
# Validates the cost model (what the planners optimise and `minimllm simulate` projects) against measured
# training steps on this machine: for each rank count, calibrates the deck's model on that many ranks (so
# cores are as busy, and calls as large, as in those runs) and right away trains every policy with that
# calibration; prints predicted vs measured median step time per policy (steps after the warm-up), PASS
# when within the tolerance, FAIL otherwise. Exit status 1 if any policy fails.
#
#   scripts/validate-simulator.sh [options]
#     --deck FILE          deck (default inputs/modality_incoherent.yaml)
#     --ranks "1 2"        rank counts to train on (default "1 2")
#     --steps N            steps per policy run, the first a warm-up (default 10)
#     --tolerance T        relative tolerance (default 0.15)
#     --calibration FILE   use this one calibration for every rank count instead of making them
#     --same-run           calibrate inside each policy's run, just before its steps (`run --calibrate`,
#                          quick settings) instead of once per rank count: least exposed to a shared
#                          machine changing speed between calibration and measurement
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
calibration=""
same_run=0
build=build
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deck) deck=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --tolerance) tolerance=$2; shift 2 ;;
    --calibration) calibration=$2; shift 2 ;;
    --same-run) same_run=1; shift ;;
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "validate-simulator.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
minimllm=$build/src/minimllm
[ -x "$minimllm" ] || { echo "validate-simulator.sh: $minimllm not built (scripts/build.sh $build)" >&2; exit 2; }
[ -f "$deck" ] || { echo "validate-simulator.sh: no deck $deck" >&2; exit 2; }
work=${work:-runs/validate-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$work"

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "validate-simulator: deck $deck, ranks $ranks, $steps steps per policy, tolerance $tolerance, work dir $work"
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
  # The comparison printed at the end: policy, step ms, tokens/s, speed-up, predicted ms, pred/meas, ...
  awk -v n="$n" -v drift="$drift" '
    /^policy comparison/ { on = 1; next }
    on && $1 != "policy" && NF >= 6 { print n, $1, $2, $5, $6, drift }' "$log" >> "$table"
done

echo
echo "predicted vs measured step time (medians of steps 1-$((steps - 1)); calibrations: $([ "$same_run" = 1 ] && echo "at the start of each run (/run/calibration in $work/np*-<policy>.h5)" || echo "in $work"))"
printf '%-6s %-8s %12s %13s %10s  %-6s %s\n' ranks policy "measured ms" "predicted ms" "pred/meas" result \
  "drift (LLM cost after / before)"
failed=0
while read -r n policy measured predicted ratio drift; do
  verdict=$(awk -v r="$ratio" -v t="$tolerance" 'BEGIN { d = r - 1; if (d < 0) d = -d; print (d <= t) ? "PASS" : "FAIL" }')
  [ "$verdict" = PASS ] || failed=1
  printf '%-6s %-8s %12s %13s %10s  %-6s %s\n' "$n" "$policy" "$measured" "$predicted" "$ratio" "$verdict" "$drift"
done < "$table"
# Policies predicted alike on the same ranks made the same plans (on 1 rank all do): their measured
# spread is the machine's own noise during the runs, which the drift (two end points) can miss.
awk '{ key = $1 " " $4; n[key]++; if (!(key in lo) || $3 < lo[key]) lo[key] = $3; if ($3 > hi[key]) hi[key] = $3 }
     END { for (k in n) if (n[k] > 1) { split(k, f, " ");
             printf "noise: %d policies on %s rank(s) predicted alike (same work) measured %s-%s ms (%.0f%% apart)\n",
                    n[k], f[1], lo[k], hi[k], 100 * (hi[k] / lo[k] - 1) } }' "$table" | sort
echo "load average at the end: $(load) (with $(nproc) cores, a load above $(nproc) means the machine was shared)"
exit $failed
