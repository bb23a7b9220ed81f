#!/usr/bin/env bash
# End-to-end test of slurm/ on a real one-node Slurm cluster on loopback (scripts/local-slurm.sh, which
# advertises 4 CPUs so that 4-rank jobs fit on a 2-core machine). Run as root; CI runs it after
# scripts/test.sh. It takes a few minutes on 2 cores, most of it the jobs themselves.
#
#   scripts/test-slurm.sh [--keep-cluster]
#
# What it submits and checks:
#   - one run with slurm/minimllm.sbatch under `sbatch --export=NONE` (srun launcher) and one with
#     the mpiexec launcher: exit state COMPLETED, an HDF5 file named <job name>-<job id>.h5;
#   - a run with --env-hook under --export=NONE: the hook is sourced and its variable reaches both ranks;
#     `minimllm.sbatch --dry-run` in a job prints the launcher line with the job's id and ranks, runs nothing;
#   - a weak sweep (2 samples per rank, walltime per size) and a strong sweep (global batch 8, one
#     walltime) with slurm/sweep.sh over 1, 2 and 4 ranks on one node, 2 repetitions, 3 steps each,
#     collected with a deadline; each job's TimeLimit is the walltime asked for its size; each sweep's
#     report job (--dependency=afterany) started after every job of the sweep had ended, COMPLETED, and
#     wrote the report; `sweep.sh --dry-run` prints the sbatch lines and submits nothing;
#   - every HDF5 file: one /steps row per step (steps 0..N-1), the global batch, /ranks tables of
#     [steps, ranks], the /run attributes of docs/HDF5.md, and the Slurm provenance: /run slurm_job_id
#     equal to the job id, /run slurm_environment holding SLURM_JOB_ID=<id>;
#   - the reports: report.md with a row per run and the efficiency table, non-empty PNGs;
#   - the multi-node mode of slurm/sweep.sh on its one node (--nodes 1 --ranks-per-node 2, policy dhp),
#     in the foreground: sweep.sh waits for its report job and exits 0;
#   - a job past its walltime (-t 2, --signal=USR1@60, --checkpoint-every): checkpointed on SIGUSR1,
#     requeued, continued from the checkpoint with losses bitwise those of an uninterrupted run;
#   - `scancel --signal=TERM` on a running job: minimllm stops after its step, the job ends with exit 143,
#     /run stopped says SIGTERM; a job past its walltime without --signal (-t 1): Slurm's SIGTERM at the
#     limit stops it after a step the same way (JobState TIMEOUT);
#   - failures are caught: a sweep whose jobs fail (bad --policy) makes `collect` exit 1; sizes the
#     cluster cannot hold (8 ranks, 2 nodes) are refused before anything is submitted (exit 1); held
#     jobs hit the deadline (exit 1); bad sweep arguments exit 2; the failing sweep's report job FAILED.
# Every check prints ok or FAIL; the script exits 1 if any failed. Files stay in $MINIMLLM_SLURM_TEST_DIR
# (default: a new /tmp/minimllm-test-slurm.XXXXXX). The cluster is stopped at the end unless it was
# already running before or --keep-cluster is given. MINIMLLM_BIN=PATH tests that minimllm instead of
# building build/src/minimllm.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

keep_cluster=0
case ${1:-} in
  "") ;;
  --keep-cluster) keep_cluster=1 ;;
  -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
  *) echo "test-slurm.sh: unknown argument '$1' (valid: --keep-cluster, --help)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "test-slurm.sh: must run as root (slurmd runs as root)" >&2; exit 2; }

t_start=$(date +%s)
elapsed() { echo "$(($(date +%s) - t_start)) s"; }
failures=0
provenance_only=0  # files whose only problems are the Slurm provenance attributes
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# check NAME CMD...: ok if CMD succeeds
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }

echo "== build (minimllm only) and dependencies"
scripts/setup-deps.sh
if [ -n "${MINIMLLM_BIN:-}" ]; then  # another build of minimllm to test
  bin=$(cd "$(dirname "$MINIMLLM_BIN")" && pwd)/$(basename "$MINIMLLM_BIN")
  [ -x "$bin" ] || { echo "test-slurm.sh: MINIMLLM_BIN=$MINIMLLM_BIN: not an executable file" >&2; exit 2; }
else
  [ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "${MINIMLLM_BUILD_JOBS:-$(nproc)}" --target minimllm >/dev/null
  bin=$repo/build/src/minimllm
fi
python=/usr/bin/python3

echo "== one-node Slurm cluster on loopback ($(elapsed))"
export SLURM_LOCAL_CPUS=${SLURM_LOCAL_CPUS:-4}
was_running=0
status=$(scripts/local-slurm.sh status 2>/dev/null || true)
grep -q '^slurmctld: running' <<<"$status" && was_running=1
scripts/local-slurm.sh start >/dev/null
export SLURM_CONF=${SLURM_LOCAL_BASE:-/tmp/local-slurm}/etc/slurm.conf
cleanup() {
  if ((keep_cluster == 0 && was_running == 0)); then scripts/local-slurm.sh stop 2>/dev/null || true; fi
}
trap cleanup EXIT

work=${MINIMLLM_SLURM_TEST_DIR:-$(mktemp -d /tmp/minimllm-test-slurm.XXXXXX)}
mkdir -p "$work"
echo "files in $work"
steps=3

# job_state ID: JobState from scontrol, "" if unknown
job_state() { scontrol show job -o "$1" 2>/dev/null | sed -n 's/.*\bJobState=\([A-Z_]*\).*/\1/p'; }
# job_field ID NAME: the value of NAME= in `scontrol show job -o ID` ("" if unknown)
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
# manifest_ids DIR: the job ids of a study, one per line
manifest_ids() { sed -n 's/^job=\([0-9]*\).*/\1/p' "$1/manifest.txt"; }
# report_job DIR: the study's report job id
report_job() { sed -n 's/^report_job=\([0-9]*\)$/\1/p' "$1/manifest.txt"; }
# h5_stopped FILE: /run stopped of a run file ("" if none)
h5_stopped() {
  "$python" -c 'import sys, h5py; v = h5py.File(sys.argv[1], "r")["run"].attrs.get("stopped", b""); print(v.decode() if isinstance(v, bytes) else v)' \
    "$1" 2>/dev/null || true
}
# wait_jobs DEADLINE ID...: until no job is pending or running; 1 on deadline
wait_jobs() {
  local end=$(($(date +%s) + $1)) id busy; shift
  while :; do
    busy=0
    for id in "$@"; do
      case $(job_state "$id") in PENDING|RUNNING|CONFIGURING|COMPLETING) busy=1 ;; esac
    done
    ((busy)) || return 0
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 1
  done
}

# check_h5 FILE JOB_ID RANKS STEPS GLOBAL_BATCH: prints one line per problem, nothing if all is well
check_h5() {
  "$python" - "$@" <<'EOF'
import sys, h5py, numpy as np
path, job, ranks, steps, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
problems = []
try:
    f = h5py.File(path, "r")
except OSError as e:
    print(f"{path}: cannot open: {e}"); sys.exit(0)
with f:
    run = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["run"].attrs.items()}
    s = f["steps"][:]
    if len(s) != steps or list(s["step"]) != list(range(steps)):
        problems.append(f"/steps has steps {list(s['step'])}, expected 0..{steps - 1}")
    if batch != "deck" and not (s["samples"] == int(batch)).all():
        problems.append(f"/steps samples {sorted(set(s['samples']))}, expected the global batch {batch}")
    if not (np.isfinite(s["loss"]).all() and (s["step_seconds"] > 0).all()):
        problems.append("/steps has a non-finite loss or a non-positive step time")
    for name in ("step_seconds", "llm_seconds", "grad_sync_seconds"):
        if f"ranks/{name}" not in f or f[f"ranks/{name}"].shape != (steps, ranks):
            problems.append(f"/ranks/{name} missing or not [{steps}, {ranks}]")
    for key in ("name", "deck_path", "deck_text", "minimllm_version", "kokkos", "mpi_library", "hostname",
                "gemm_backend", "ranks", "parameters", "placement", "policy", "peak_gflops_per_rank",
                "peak_source", "memory_estimate_mib", "peak_resident_mib"):
        if key not in run:
            problems.append(f"/run has no attribute {key}")
    if run.get("ranks") != ranks:
        problems.append(f"/run ranks = {run.get('ranks')}, expected {ranks}")
    # Slurm provenance, written by minimllm itself when it runs under Slurm.
    where = "(minimllm writes it when run under Slurm)"
    if "slurm_job_id" not in run:
        problems.append(f"PROVENANCE: /run has no attribute slurm_job_id {where}")
    elif str(run["slurm_job_id"]) != job:
        problems.append(f"PROVENANCE: /run slurm_job_id = {run['slurm_job_id']!r}, expected the job id {job!r}")
    if "slurm_environment" not in run:
        problems.append(f"PROVENANCE: /run has no attribute slurm_environment {where}")
    elif f"SLURM_JOB_ID={job}" not in str(run["slurm_environment"]).split("\n"):
        problems.append(f"PROVENANCE: /run slurm_environment has no line SLURM_JOB_ID={job}")
for p in problems:
    print(f"{path}: {p}")
EOF
}

# check_file LABEL FILE JOB RANKS STEPS BATCH: one ok/FAIL line per file, the problems under a FAIL
check_file() {
  local label=$1 out; shift
  out=$(check_h5 "$@")
  if [ -z "$out" ]; then ok "$label: $(basename "$1") has every step and the /run attributes"; return; fi
  fail "$label: $(basename "$1")"
  printf '       %s\n' "${out//$'\n'/$'\n'       }"
  grep -qv ': PROVENANCE: ' <<<"$out" || provenance_only=$((provenance_only + 1))
}

png_ok() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

echo "== submit: single runs, a hooked run, a dry run, sweeps (weak, strong, multi-node, failing, held) ($(elapsed))"
mkdir -p "$work/single" "$work/hook" "$work/dry"
single_srun=$(sbatch --parsable --export=NONE -J mllm-single-srun -N 1 -n 2 -o "$work/single/%x-%j.out" \
  slurm/minimllm.sbatch --steps "$steps" --out-dir "$work/single" --bin "$bin")
single_mpiexec=$(sbatch --parsable -J mllm-single-mpiexec -N 1 -n 2 -o "$work/single/%x-%j.out" \
  slurm/minimllm.sbatch --launcher mpiexec --steps "$steps" --global-batch 6 --out-dir "$work/single" --bin "$bin")
# The environment hook under --export=NONE: the wrapper (--bin) prints what each rank sees.
printf 'export SITE_MARK=from-the-hook\necho "site hook: sourced"\n' >"$work/hook/site.sh"
# shellcheck disable=SC2016  # the wrapper's own expansions
printf '#!/bin/sh\necho "rank sees SITE_MARK=${SITE_MARK:-unset}"\nexec "%s" "$@"\n' "$bin" >"$work/hook/minimllm"
chmod +x "$work/hook/minimllm"
hooked=$(sbatch --parsable --export=NONE -J mllm-hook -N 1 -n 2 -o "$work/hook/%x-%j.out" \
  slurm/minimllm.sbatch --steps 2 --out-dir "$work/hook" --bin "$work/hook/minimllm" --env-hook "$work/hook/site.sh")
dry=$(sbatch --parsable -J mllm-dry -N 1 -n 2 -o "$work/dry/%x-%j.out" \
  slurm/minimllm.sbatch --dry-run --steps 2 --out-dir "$work/dry/runs" --bin "$bin")
sweep=(--ranks "1 2 4" --reps 2 --steps "$steps" --bin "$bin" --poll 1 --no-wait)
slurm/sweep.sh weak --batch-per-rank 2 --study "$work/weak" --time-per-size "1=7 2=6 4=5" "${sweep[@]}" 2>/dev/null
slurm/sweep.sh strong --global-batch 8 --study "$work/strong" --time 8 "${sweep[@]}" 2>/dev/null
# In the foreground (sweep.sh waits for its report job), in the background of this script.
slurm/sweep.sh strong --nodes 1 --ranks-per-node 2 --reps 1 --steps "$steps" --policy dhp --study "$work/nodes" \
  --bin "$bin" --poll 1 --deadline 600 >"$work/nodes.sweep.log" 2>&1 &
nodes_sweep=$!
slurm/sweep.sh strong --ranks 1 --reps 1 --steps 2 --policy bogus --study "$work/failing" --bin "$bin" \
  --no-wait 2>/dev/null
slurm/sweep.sh strong --ranks 1 --reps 1 --steps 2 --sbatch "--hold" --study "$work/held" --bin "$bin" \
  --no-wait 2>/dev/null
ok "submitted ($(elapsed))"

echo "== invalid requests"
rc=0; slurm/sweep.sh weak --ranks "1 2" --study "$work/bad" --bin "$bin" 2>"$work/bad.err" || rc=$?
check "weak sweep without --batch-per-rank exits 2 naming the option" \
  test "$rc" = 2 -a -n "$(grep -- '--batch-per-rank' "$work/bad.err")"
rc=0; slurm/sweep.sh strong --ranks "1 8" --reps 1 --steps 2 --study "$work/too-big" --bin "$bin" \
  --no-wait 2>"$work/too-big.err" || rc=$?
check "8 ranks on the 4-CPU node: sbatch --test-only refuses, sweep exits 1 and submits nothing" \
  test "$rc" = 1 -a -n "$(grep 'sbatch refuses 8 ranks' "$work/too-big.err")" -a ! -e "$work/too-big"
rc=0; slurm/sweep.sh strong --nodes "1 2" --ranks-per-node 2 --reps 1 --steps 2 --study "$work/two-nodes" \
  --bin "$bin" --no-wait 2>"$work/two-nodes.err" || rc=$?
check "-N 2 on a one-node cluster: refused before submission, sweep exits 1" \
  test "$rc" = 1 -a -n "$(grep 'sbatch refuses 4 ranks on 2 node' "$work/two-nodes.err")" -a ! -e "$work/two-nodes"
rc=0; slurm/sweep.sh collect "$work/held" --deadline 3 --poll 1 2>"$work/held.err" || rc=$?
check "held jobs: collect stops at its deadline with exit 1" test "$rc" = 1 -a -n "$(grep deadline "$work/held.err")"
mapfile -t held < <(manifest_ids "$work/held"; report_job "$work/held")
check "held sweep: one job and its report job to cancel (${held[*]})" test "${#held[@]}" = 2
scancel "${held[@]}"

echo "== dry runs on the cluster ($(elapsed))"
rc=0; slurm/sweep.sh strong --ranks "1 2" --reps 1 --steps 2 --study "$work/printed" --bin "$bin" --dry-run \
  >"$work/printed.sh" 2>"$work/printed.err" || rc=$?
# shellcheck disable=SC2016  # $(sbatch and $jobN: the printed script's own
check "sweep --dry-run: exit 0 ($rc), two jobs and a report job printed" \
  test "$rc" = 0 -a "$(grep -c '^job[0-9]=$(sbatch --parsable ' "$work/printed.sh")" = 3
# shellcheck disable=SC2016
check "sweep --dry-run: the report job depends on both (afterany:\$job1:\$job2)" \
  grep -q -- '--job-name=mllm-strong-report .*--dependency=afterany:$job1:$job2 ' "$work/printed.sh"
check "sweep --dry-run: no study directory, no job writing to it" \
  test ! -e "$work/printed" -a "$(scontrol show jobs -o | grep -c "StdOut=$work/printed/")" = 0
check "minimllm.sbatch --dry-run in a job: finished" wait_jobs 120 "$dry"
check "minimllm.sbatch --dry-run in a job: its log is the launcher line with the job's id and 2 ranks, nothing ran" \
  test "$(grep -v '^export ' "$work/dry/mllm-dry-$dry.out" 2>/dev/null)" = \
  "srun --export=ALL --kill-on-bad-exit=1 --mpi=pmi2 -n 2 $bin run $repo/inputs/quickstart.yaml --out $work/dry/runs/mllm-dry-$dry.h5 --steps 2" \
  -a ! -e "$work/dry/runs" -a "$(job_state "$dry")" = COMPLETED

echo "== wait for the single runs ($(elapsed))"
check "single runs finished before the deadline" wait_jobs 300 "$single_srun" "$single_mpiexec"
for id in "$single_srun" "$single_mpiexec"; do
  state=$(job_state "$id")
  check "job $id ended COMPLETED (got ${state:-unknown})" test "$state" = COMPLETED
done
check_file "single, srun under --export=NONE" "$work/single/mllm-single-srun-$single_srun.h5" \
  "$single_srun" 2 "$steps" deck
check_file "single, mpiexec" "$work/single/mllm-single-mpiexec-$single_mpiexec.h5" "$single_mpiexec" 2 "$steps" 6

echo "== the environment hook ($(elapsed))"
check "hooked run finished" wait_jobs 300 "$hooked"
log=$work/hook/mllm-hook-$hooked.out
check "hooked run (--export=NONE) ended COMPLETED (got $(job_state "$hooked"))" test "$(job_state "$hooked")" = COMPLETED
check "the hook was sourced before the run" \
  grep -q "^minimllm.sbatch: sourcing the environment hook $work/hook/site.sh" "$log"
check "the hook's variable reached both ranks" test "$(grep -c '^rank sees SITE_MARK=from-the-hook$' "$log")" = 2
check_file "hooked run" "$work/hook/mllm-hook-$hooked.h5" "$hooked" 2 2 deck

echo "== collect the sweeps ($(elapsed))"
for kind in weak strong; do
  rc=0; slurm/sweep.sh collect "$work/$kind" --deadline 600 --poll 1 >"$work/$kind.collect.log" 2>&1 || rc=$?
  check "$kind sweep: every job COMPLETED and the report written (collect exit $rc)" test "$rc" = 0
  [ "$rc" = 0 ] || sed 's/^/       /' "$work/$kind.collect.log"
  while read -r id ranks rep; do
    batch=$([ "$kind" = weak ] && echo $((2 * ranks)) || echo 8)
    file=$work/$kind/mllm-$kind-n$ranks-rep$rep-$id.h5
    if [ ! -f "$file" ]; then fail "$kind: job $id (ranks $ranks, rep $rep) left no $file"; continue; fi
    check_file "$kind, $ranks ranks, rep $rep" "$file" "$id" "$ranks" "$steps" "$batch"
  done < <(sed -n 's/^job=\([0-9]*\) ranks=\([0-9]*\) nodes=[0-9]* rep=\([0-9]*\).*/\1 \2 \3/p' \
    "$work/$kind/manifest.txt")
  report=$work/$kind/report
  check "$kind report: report.md has every run (6)" \
    test "$(grep -o "^| mllm-$kind-[^ ]*" "$report/report.md" 2>/dev/null | sort -u | wc -l)" = 6
  check "$kind report: efficiency table for 1, 2, 4 ranks" \
    test "$(grep -cE '^\| (1|2|4) \| 1 \| 2 \|' "$report/report.md" 2>/dev/null)" = 3
  check "$kind report: ${kind^} scaling section" grep -q "^## ${kind^} scaling" "$report/report.md"
  for png in step-breakdown.png "scaling-$kind.png"; do check "$kind report: $png is a non-empty PNG" png_ok "$report/$png"; done
  n_imbalance=$(find "$report" -name 'imbalance-*.png' -size +1k | wc -l)
  check "$kind report: an imbalance heatmap per multi-rank run (4, got $n_imbalance)" test "$n_imbalance" = 4
  while read -r id ranks; do
    case $kind:$ranks in weak:1) want=00:07:00 ;; weak:2) want=00:06:00 ;; weak:4) want=00:05:00 ;; *) want=00:08:00 ;; esac
    check "$kind: job $id ($ranks ranks) has the walltime asked for its size ($want)" \
      test "$(job_field "$id" TimeLimit)" = "$want"
  done < <(sed -n 's/^job=\([0-9]*\) ranks=\([0-9]*\) nodes=1 rep=1 .*/\1 \2/p' "$work/$kind/manifest.txt")
  rj=$(report_job "$work/$kind")
  check "$kind: report job ${rj:-?} finished" wait_jobs 300 "$rj"
  check "$kind: report job $rj ended COMPLETED (got $(job_state "$rj"))" test "$(job_state "$rj")" = COMPLETED
  last_end=$(for id in $(manifest_ids "$work/$kind"); do job_field "$id" EndTime; done | sort | tail -n 1)
  check "$kind: report job started ($(job_field "$rj" StartTime)) after the sweep's last job ended ($last_end)" \
    test ! "$(job_field "$rj" StartTime)" \< "$last_end"
  check "$kind: the report job wrote the report of all 6 jobs" \
    grep -q "all 6 job(s) completed; report: $work/$kind/report/report.md" "$work/$kind/mllm-$kind-report-$rj.out"
done

echo "== multi-node mode, one node ($(elapsed))"
rc=0; wait "$nodes_sweep" || rc=$?
check "--nodes 1 --ranks-per-node 2 (policy dhp) in the foreground: sweep.sh waited for its report job, exit $rc" \
  test "$rc" = 0 -a -n "$(grep "report job [0-9]* completed; report: $work/nodes/report/report.md" "$work/nodes.sweep.log")"
[ "$rc" = 0 ] || sed 's/^/       /' "$work/nodes.sweep.log"
id=$(sed -n 's/^job=\([0-9]*\) ranks=2 nodes=1 .*/\1/p' "$work/nodes/manifest.txt")
check_file "multi-node mode" "$work/nodes/mllm-strong-n2-rep1-$id.h5" "$id" 2 "$steps" deck

echo "== a sweep whose jobs fail ($(elapsed))"
rc=0; slurm/sweep.sh collect "$work/failing" --deadline 120 --poll 1 >"$work/failing.log" 2>&1 || rc=$?
check "failing jobs (bad --policy): collect exits 1 and names the state" \
  test "$rc" = 1 -a -n "$(grep 'ended FAILED' "$work/failing.log")"
rj=$(report_job "$work/failing")
wait_jobs 120 "$rj" || true
check "failing jobs: their report job ran anyway (afterany) and ended FAILED (got $(job_state "$rj"))" \
  test "$(job_state "$rj")" = FAILED

echo "== report on loose files ($(elapsed))"
rc=0; scripts/report.sh "$work/single" --out "$work/single/report" >/dev/null 2>&1 || rc=$?
check "report on the two single runs (exit $rc)" test "$rc" = 0
check "single-run report: report.md lists both runs" \
  test "$(grep -o '^| mllm-single-[^ ]*' "$work/single/report/report.md" 2>/dev/null | sort -u | wc -l)" = 2
check "single-run report: step-breakdown.png" png_ok "$work/single/report/step-breakdown.png"
rc=0; scripts/report.sh "$work/single/no-such.h5" --out "$work/single/report2" 2>"$work/report-bad.err" || rc=$?
check "report on a missing file exits 2 naming it" test "$rc" = 2 -a -n "$(grep 'no-such.h5' "$work/report-bad.err")"

echo "== walltime: SIGUSR1 before the limit, checkpoint, requeue, restart ($(elapsed))"
# A 2-minute job far too long for its limit: Slurm signals the ranks 60 s before the limit (--signal; its
# timer ticks every ~30 s, so at 60-90 s of the job's time, which starts before the ranks do: a margin for
# a loaded machine's launch), minimllm checkpoints after its step and exits 75, the script requeues the
# job, which runs again from the checkpoint. Cancelled once the restarted run has steps.
mkdir -p "$work/requeue"
# The quickstart deck with one GEMM backend: runtime.gemm auto times at start-up, so the reference run (another
# process) could choose differently for a near-tie and round differently; the restart is compared bitwise.
rq_deck=$work/requeue/quickstart-blas.yaml
sed 's/^runtime: {\(.*\)}$/runtime: {\1, gemm: blas}/' "$repo/inputs/quickstart.yaml" >"$rq_deck"
grep -q 'gemm: blas' "$rq_deck" || { echo "test-slurm.sh: could not pin runtime.gemm in $rq_deck" >&2; exit 2; }
rq=$(sbatch --parsable -J mllm-requeue -N 1 -n 2 -t 2 --signal=USR1@60 --open-mode=append \
  -o "$work/requeue/%x-%j.out" \
  slurm/minimllm.sbatch --deck "$rq_deck" --steps 1000000 --policy static --checkpoint-every 100000 --out-dir "$work/requeue" \
  --bin "$bin")
# Beside it, on the other two CPUs: a job past its walltime without --signal (Slurm sends SIGTERM at the
# limit, then SIGKILL after KillWait, 5 s here), and one that `scancel --signal=TERM` stops.
mkdir -p "$work/signals"
long_run=(slurm/minimllm.sbatch --steps 1000000 --policy static --out-dir "$work/signals" --bin "$bin")
timeout_job=$(sbatch --parsable -J mllm-timeout -N 1 -n 1 -t 1 -o "$work/signals/%x-%j.out" "${long_run[@]}")
term_job=$(sbatch --parsable -J mllm-term -N 1 -n 1 -o "$work/signals/%x-%j.out" "${long_run[@]}")
first=$work/requeue/mllm-requeue-$rq.h5
second=$work/requeue/mllm-requeue-$rq-restart1.h5
rows() { "$python" -c 'import sys, h5py; print(len(h5py.File(sys.argv[1], "r")["steps"]))' "$1" 2>/dev/null || echo 0; }
end=$(($(date +%s) + 300))
while [ "$(date +%s)" -lt "$end" ] && [ "$(rows "$second")" -lt 3 ]; do sleep 2; done
restarts=$(scontrol show job -o "$rq" | sed -n 's/.*\bRestarts=\([0-9]*\).*/\1/p')
scancel "$rq"; wait_jobs 60 "$rq" || true
log=$work/requeue/mllm-requeue-$rq.out
check "requeue: the job was requeued (Restarts=${restarts:-?})" test "${restarts:-0}" -ge 1
k=$(rows "$first")
check "requeue: the first run stopped on SIGUSR1 after its last step ($((k - 1))) with its checkpoint" \
  grep -q "stopped by SIGUSR1 after step $((k - 1)) of" "$log"
check "requeue: the script requeued the job on exit 75" grep -q "exit code 75 .*" "$log"
check "requeue: the requeued run continued from the checkpoint after $k steps" \
  grep -q "restart: from .*mllm-requeue-$rq.ckpt.h5 (the state after $k steps" "$log"
# The restarted run's first steps against an uninterrupted run of as many steps: bitwise equal losses.
rc=0; (cd "$work/requeue" && mpiexec -n 2 "$bin" run "$rq_deck" --policy static \
  --steps $((k + 3)) --out reference.h5 >reference.log 2>&1) || rc=$?
verdict=$("$python" - "$first" "$second" "$work/requeue/reference.h5" <<'EOF'
import sys, h5py
first, second, ref = (h5py.File(p, "r")["steps"][:] for p in sys.argv[1:])
k = len(first)
if list(first["step"]) != list(range(k)): print(f"first run's steps are not 0..{k - 1}"); sys.exit()
if list(second["step"][:3]) != [k, k + 1, k + 2]: print(f"restart begins at {second['step'][0]}, not {k}"); sys.exit()
diff = [i for i in range(3) if second["loss"][i] != ref["loss"][k + i]]
print("bitwise" if not diff else f"losses differ at steps {[k + i for i in diff]}")
EOF
)
check "requeue: the restart's losses equal an uninterrupted run's bit for bit (reference exit $rc: $verdict)" \
  test "$rc" = 0 -a "$verdict" = bitwise


echo "== scancel --signal=TERM, and a walltime without --signal ($(elapsed))"
# The TERM job has been running since before the requeue test's 1-3 minutes: far past its second step.
log=$work/signals/mllm-term-$term_job.out
check "the job to stop is running with steps done" grep -q '^step  *2/1000000' "$log"
scancel --signal=TERM "$term_job"
check "scancel --signal=TERM: the job ended" wait_jobs 60 "$term_job"
check "scancel --signal=TERM: minimllm stopped after a step (its log)" grep -q 'stopped by SIGTERM after step' "$log"
check "scancel --signal=TERM: the batch script passed on exit 143" \
  grep -q '^minimllm.sbatch: stopped by a signal (exit 143)' "$log"
check "scancel --signal=TERM: the job's exit code is 143 (got $(job_field "$term_job" ExitCode))" \
  test "$(job_field "$term_job" ExitCode)" = 143:0
stopped=$(h5_stopped "$work/signals/mllm-term-$term_job.h5")
check "scancel --signal=TERM: /run stopped says so ($stopped)" test "${stopped#SIGTERM after step }" != "$stopped"
log=$work/signals/mllm-timeout-$timeout_job.out
check "walltime without --signal: the job ended within 3 minutes" wait_jobs 180 "$timeout_job"
check "walltime without --signal: JobState TIMEOUT (got $(job_state "$timeout_job"))" test "$(job_state "$timeout_job")" = TIMEOUT
check "walltime without --signal: Slurm's SIGTERM stopped minimllm after a step, exit 143" \
  grep -q '^minimllm.sbatch: stopped by a signal (exit 143)' "$log"
stopped=$(h5_stopped "$work/signals/mllm-timeout-$timeout_job.h5")
check "walltime without --signal: /run stopped says SIGTERM ($stopped)" test "${stopped#SIGTERM after step }" != "$stopped"

echo "== $failures failure(s); $(elapsed) in all; files in $work"
if ((provenance_only)); then
  echo "   $provenance_only of them fail only the PROVENANCE checks: this minimllm does not write /run" \
    "slurm_job_id and slurm_environment (docs/SCALING.md, Provenance)"
fi
((failures == 0)) || exit 1
