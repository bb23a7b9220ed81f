#!/usr/bin/env bash
# shellcheck disable=SC2016  # conditions in single quotes are expanded when `that` evaluates them
# slurm/minimllm.sbatch and slurm/sweep.sh without a Slurm cluster: stub sbatch and srun on PATH.
#
#   tests/slurm_dry_run.sh WORK_DIR
#
# - minimllm.sbatch --dry-run prints the launcher command line with absolute paths (relative ones resolved
#   against SLURM_SUBMIT_DIR, whatever the current directory), the hook and the exports, and creates nothing;
#   a missing --env-hook or MINIMLLM_ENV_HOOK is exit 2 with one line naming the file;
# - in a (stubbed) job the hook is sourced first: a variable it exports reaches the launcher; a hook that
#   fails ends the job with exit 2; SIGTERM to the batch script is forwarded to the launcher and the job
#   ends with its 143;
# - sweep.sh --dry-run prints one sbatch line per job and a report job depending on all of them
#   (afterany), walltimes per size, absolute paths; it never calls sbatch and creates nothing; the script
#   it prints, run against a stub sbatch, submits exactly what sweep.sh itself submits;
# - invalid sweep arguments (--time-per-size) are exit 2 with one line.
# Every check prints ok or FAIL; exit 1 if any failed. The real thing runs in scripts/test-slurm.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:?usage: tests/slurm_dry_run.sh WORK_DIR}
rm -rf "$work"
mkdir -p "$work/stubs" "$work/submit" "$work/elsewhere"
work=$(cd "$work" && pwd)

failures=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# expect NAME EXPECTED ACTUAL: ok if equal, else both shown
expect() {
  if [ "$2" = "$3" ]; then ok "$1"; return; fi
  fail "$1"
  diff <(printf '%s\n' "$2") <(printf '%s\n' "$3") | sed 's/^/       /' || true
}
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
that() { eval "$1"; }  # check NAME that 'CONDITION': a compound condition
one_line() { [ "$(wc -l <"$1")" = 1 ] && grep -q -- "$2" "$1"; }

# Stubs: sbatch records each call (its arguments, %q-quoted, one call per line) and prints job ids 101,
# 102, ...; --test-only succeeds. srun prints the hook's variable, creates the --out file, or waits for
# SIGTERM and exits 143 as minimllm does.
cat >"$work/stubs/sbatch" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
[ -n "${STUB_SBATCH_LOG:-}" ] || { echo "stub sbatch: called without STUB_SBATCH_LOG (a dry run submitted)" >&2; exit 99; }
for arg in "$@"; do [ "$arg" != --test-only ] || exit 0; done
printf '%q ' "$@" >>"$STUB_SBATCH_LOG"; echo >>"$STUB_SBATCH_LOG"
echo $((100 + $(wc -l <"$STUB_SBATCH_LOG")))
EOF
cat >"$work/stubs/srun" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
echo "stub srun: SITE_MARK=${SITE_MARK:-unset} OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
echo "stub srun: $*"
if [ "${STUB_SRUN_WAIT:-0}" = 1 ]; then
  trap 'echo "stub srun: stopped by SIGTERM after a step"; exit 143' TERM
  touch "$STUB_SRUN_READY"
  while :; do sleep 0.1; done
fi
while (($#)); do [ "$1" != --out ] || { echo data >"$2"; break; }; shift; done
EOF
printf '#!/bin/sh\nexit 0\n' >"$work/submit/minimllm"
chmod +x "$work/stubs/sbatch" "$work/stubs/srun" "$work/submit/minimllm"
printf 'export SITE_MARK=from-the-hook\ncd /\n' >"$work/submit/site.sh"
printf 'echo "site hook: module not found" >&2\nfalse\n' >"$work/submit/broken.sh"
echo "model: {}" >"$work/submit/deck.yaml"
export PATH=$work/stubs:$PATH
unset MINIMLLM_ENV_HOOK SLURM_JOB_ID SLURM_NTASKS SLURM_JOB_NAME SLURM_SUBMIT_DIR SLURM_RESTART_COUNT \
  SLURM_CPUS_PER_TASK OMP_NUM_THREADS STUB_SBATCH_LOG
sbatch_script=$repo/slurm/minimllm.sbatch
sweep=$repo/slurm/sweep.sh
q="'"

echo "== minimllm.sbatch --dry-run"
out=$(cd "$work/submit" && bash "$sbatch_script" --dry-run --bin minimllm --deck deck.yaml --steps 4 --out-dir 'my runs' \
  --env-hook site.sh -- --seed 7)
expect "outside a job: hook, export, launcher line with absolute paths and JOBID/NTASKS" \
  ". $work/submit/site.sh
export OMP_NUM_THREADS=1
srun --export=ALL --kill-on-bad-exit=1 --mpi=pmi2 -n NTASKS $work/submit/minimllm run $work/submit/deck.yaml --out $q$work/submit/my runs/minimllm-JOBID.h5$q --steps 4 --seed 7" "$out"
check "dry run created nothing (no out dir)" test ! -e "$work/submit/my runs"
out=$(cd "$work/elsewhere" && SLURM_JOB_ID=42 SLURM_NTASKS=3 SLURM_JOB_NAME=study SLURM_SUBMIT_DIR=$work/submit \
  bash "$sbatch_script" --dry-run --bin minimllm --deck deck.yaml --launcher mpiexec --checkpoint-every 5)
expect "in a job started elsewhere: paths relative to SLURM_SUBMIT_DIR, mpiexec, job id and ranks" \
  "export SLURM_EXPORT_ENV=ALL
export OMP_NUM_THREADS=1
mpiexec -n 3 $work/submit/minimllm run $work/submit/deck.yaml --out $work/submit/runs/study-42.h5 --checkpoint-every 5 --checkpoint $work/submit/runs/study-42.ckpt.h5" "$out"
check "dry run in a job created nothing" test ! -e "$work/submit/runs" -a ! -e "$work/elsewhere/runs"

rc=0; (cd "$work/submit" && bash "$sbatch_script" --dry-run --bin minimllm --deck deck.yaml --env-hook no-such.sh) \
  2>"$work/hook.err" || rc=$?
check "a missing --env-hook: exit 2 ($rc), one line naming the file" \
  that '[ "$rc" = 2 ] && one_line "$work/hook.err" "--env-hook $work/submit/no-such.sh: no such file"'
rc=0; (cd "$work/submit" && MINIMLLM_ENV_HOOK=/no/such/site.sh bash "$sbatch_script" --dry-run --bin minimllm \
  --deck deck.yaml) 2>"$work/hook-env.err" || rc=$?
check "a missing MINIMLLM_ENV_HOOK: exit 2 ($rc), one line naming it" \
  that '[ "$rc" = 2 ] && one_line "$work/hook-env.err" "MINIMLLM_ENV_HOOK=/no/such/site.sh: no such file"'

echo "== minimllm.sbatch in a stubbed job (srun is a stub)"
job_env=(SLURM_JOB_ID=7 SLURM_NTASKS=2 SLURM_JOB_NAME=hooked SLURM_SUBMIT_DIR="$work/submit")
rc=0; (cd "$work/elsewhere" && env "${job_env[@]}" bash "$sbatch_script" --bin minimllm --deck deck.yaml \
  --env-hook site.sh >"$work/job.log" 2>&1) || rc=$?
check "job with the hook: exit 0 ($rc)" test "$rc" = 0
check "the hook was sourced first, and said so in the job's log" \
  grep -q "^minimllm.sbatch: sourcing the environment hook $work/submit/site.sh$" "$work/job.log"
check "the variable the hook exported reached the launcher" grep -q '^stub srun: SITE_MARK=from-the-hook ' "$work/job.log"
check "the hook's cd changed no path: the output is in the submit directory" test -s "$work/submit/runs/hooked-7.h5"
rc=0; (cd "$work/submit" && env "${job_env[@]}" bash "$sbatch_script" --bin minimllm --deck deck.yaml \
  --env-hook broken.sh >"$work/broken.log" 2>&1) || rc=$?
check "a hook that fails: exit 2 ($rc), the launcher never started" \
  that '[ "$rc" = 2 ] && grep -q "error: --env-hook $work/submit/broken.sh: returned 1" "$work/broken.log" && ! grep -q "stub srun" "$work/broken.log"'

rm -f "$work/ready"
(cd "$work/submit" && exec env "${job_env[@]}" SLURM_JOB_ID=8 STUB_SRUN_WAIT=1 STUB_SRUN_READY="$work/ready" \
  bash "$sbatch_script" --bin minimllm --deck deck.yaml >"$work/term.log" 2>&1) &
job=$!
for _ in $(seq 1 100); do [ ! -e "$work/ready" ] || break; sleep 0.1; done
kill -TERM "$job"
rc=0; wait "$job" || rc=$?
check "SIGTERM to the batch script: forwarded to the launcher, job exit 143 ($rc)" \
  that '[ "$rc" = 143 ] && grep -q "SIGTERM: forwarded to the ranks" "$work/term.log" && grep -q "stopped by a signal (exit 143)" "$work/term.log"'

echo "== sweep.sh --dry-run"
sweep_args=(weak --batch-per-rank 2 --ranks "1 2" --reps 2 --steps 3 --bin minimllm --deck deck.yaml
  --study "my study" --time 10 --time-per-size "2=00:05:00" --env-hook site.sh --sbatch "-p debug" --poll 2)
rc=0; (cd "$work/submit" && bash "$sweep" "${sweep_args[@]}" --dry-run >"$work/sweep-dry.sh" 2>"$work/sweep-dry.err") || rc=$?
check "sweep --dry-run: exit 0 ($rc), no sbatch called, no study directory" \
  that '[ "$rc" = 0 ] && ! grep -q "stub sbatch" "$work/sweep-dry.err" && [ ! -e "$work/submit/my study" ]'
study="$q$work/submit/my study$q"
job() {  # job N RANKS REP BATCH TIME: the line sweep.sh prints for it
  echo "job$1=\$(sbatch --parsable --job-name=mllm-weak-n$2-rep$3 $q--output=$work/submit/my study/%x-%j.out$q -N 1 -n $2 -p debug --time=$5 $repo/slurm/minimllm.sbatch --deck $work/submit/deck.yaml --out-dir $study --bin $work/submit/minimllm --env-hook $work/submit/site.sh --steps 3 --global-batch $4)"
}
expect "sweep --dry-run: one sbatch line per job (sizes round-robin, walltime per size), then the report job" \
  "$(job 1 1 1 2 10)
$(job 2 2 1 4 00:05:00)
$(job 3 1 2 2 10)
$(job 4 2 2 4 00:05:00)
job5=\$(sbatch --parsable --job-name=mllm-weak-report $q--output=$work/submit/my study/%x-%j.out$q --dependency=afterany:\$job1:\$job2:\$job3:\$job4 -p debug -N 1 -n 1 --time=00:30:00 $q--wrap=$repo/slurm/sweep.sh collect '\\''$work/submit/my study'\\'' --deadline 600 --poll 2 --env-hook $work/submit/site.sh$q)" \
  "$(grep '^job' "$work/sweep-dry.sh")"
expect "sweep --dry-run: under each job, what its batch script would run" \
  "#   srun --export=ALL --kill-on-bad-exit=1 --mpi=pmi2 -n 2 $work/submit/minimllm run $work/submit/deck.yaml --out $q$work/submit/my study/mllm-weak-n2-rep1-JOBID.h5$q --steps 3 --global-batch 4" \
  "$(grep '^#   srun' "$work/sweep-dry.sh" | sed -n 2p)"

# The printed script, run with the stub, submits what sweep.sh submits (the dependency with real ids).
STUB_SBATCH_LOG=$work/dry.calls bash "$work/sweep-dry.sh" >/dev/null
rc=0; (cd "$work/submit" && STUB_SBATCH_LOG=$work/real.calls bash "$sweep" "${sweep_args[@]}" --no-wait \
  2>"$work/sweep-real.err") || rc=$?
check "sweep with the stub sbatch and --no-wait: exit 0 ($rc)" test "$rc" = 0
expect "the dry run's script submits exactly what sweep.sh submits" "$(cat "$work/real.calls")" "$(cat "$work/dry.calls")"
check "the report job depends on every job: --dependency=afterany:101:102:103:104" \
  grep -q -- '--dependency=afterany:101:102:103:104 ' "$work/real.calls"
# shellcheck disable=SC2034  # read by `that`
manifest="$work/submit/my study/manifest.txt"
check "manifest: job lines with their walltime, the report job, the hook" that \
  '[ "$(grep -c "^job=.* time=10$" "$manifest")" = 2 ] && [ "$(grep -c "^job=.* time=00:05:00$" "$manifest")" = 2 ] &&
   grep -q "^report_job=105$" "$manifest" && grep -qx "env_hook=$work/submit/site.sh" "$manifest"'
check "--no-wait names the report job and where the report goes" \
  grep -q "report job 105 writes $work/submit/my study/report/report.md" "$work/sweep-real.err"
rc=0; (cd "$work/submit" && STUB_SBATCH_LOG=$work/none.calls bash "$sweep" "${sweep_args[@]}" --study other \
  --no-report-job --no-wait 2>/dev/null) || rc=$?
check "--no-report-job: only the 4 jobs are submitted (exit $rc)" \
  that '[ "$rc" = 0 ] && [ "$(wc -l <"$work/none.calls")" = 4 ] && ! grep -q -- --dependency "$work/none.calls"'

echo "== invalid sweep arguments"
rc=0; (cd "$work/submit" && bash "$sweep" strong --ranks "1 2" --bin minimllm --deck deck.yaml --time-per-size "3=10" \
  --dry-run 2>"$work/bad-size.err" >/dev/null) || rc=$?
check "--time-per-size naming no size of the sweep: exit 2 ($rc), one line" \
  that '[ "$rc" = 2 ] && one_line "$work/bad-size.err" "3 is not a size of this sweep (1 2)"'
rc=0; (cd "$work/submit" && bash "$sweep" strong --ranks 1 --bin minimllm --deck deck.yaml --time-per-size "1=1:2:3:4" \
  --dry-run 2>"$work/bad-time.err" >/dev/null) || rc=$?
check "--time-per-size with an invalid walltime: exit 2 ($rc), one line" \
  that '[ "$rc" = 2 ] && one_line "$work/bad-time.err" "not a walltime"'
rc=0; (cd "$work/submit" && bash "$sweep" strong --ranks 1 --bin minimllm --deck deck.yaml --env-hook gone.sh \
  --dry-run 2>"$work/bad-hook.err" >/dev/null) || rc=$?
check "sweep --env-hook missing: exit 2 ($rc), one line naming it" \
  that '[ "$rc" = 2 ] && one_line "$work/bad-hook.err" "$work/submit/gone.sh: no such file"'

echo "== $failures failure(s)"
((failures == 0))
