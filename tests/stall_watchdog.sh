#!/usr/bin/env bash
# The stall watchdog end to end (run by tests/cli_contract.cmake): a 2-rank run with
# runtime.stall_timeout: 2; rank 1 is stopped (SIGSTOP) after the first steps; the run must end by itself
# (non-zero exit) within the timeout plus a margin, rank 0 printing its one stall line, instead of hanging.
# Usage: stall_watchdog.sh MPIEXEC MINIMLLM WORK_DIR. Prints "ok" or "FAIL: ..." and exits 0 or 1.
set -u
mpiexec=$1 minimllm=$2 dir=$3
cd "$dir" || exit 1
printf 'name: stall\nruntime: {stall_timeout: 2, peak_gflops_per_rank: 100}\n' >stall.yaml
rm -f stall.h5 stall.out stall.err
"$mpiexec" -n 2 "$minimllm" run stall.yaml --steps 1000000 --out stall.h5 >stall.out 2>stall.err &
launcher=$!
stopped=""
cleanup() {
  [ -n "$stopped" ] && kill -KILL "$stopped" 2>/dev/null
  kill -KILL "$launcher" 2>/dev/null
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- stdout (tail)"
  tail -5 stall.out
  echo "--- stderr"
  cat stall.err
  exit 1
}
# Rank 1: the minimllm process of this launch (working directory here) whose launcher environment says rank 1.
here=$(pwd -P)
for _ in $(seq 200); do
  if grep -qE "^step +[0-9]+/" stall.out 2>/dev/null; then
    for pid in $(pgrep -x minimllm); do
      [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$here" ] || continue
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxE 'PMI_RANK=1|OMPI_COMM_WORLD_RANK=1'; then
        stopped=$pid
      fi
    done
    [ -n "$stopped" ] && break
  fi
  kill -0 "$launcher" 2>/dev/null || fail "the run ended before a rank could be stopped"
  sleep 0.1
done
[ -n "$stopped" ] || fail "no step line or no rank-1 process found"
kill -STOP "$stopped"
start=$(date +%s)
while kill -0 "$launcher" 2>/dev/null; do
  [ $(($(date +%s) - start)) -le 15 ] || fail "still running 15 s after rank 1 stopped (stall_timeout 2 s)"
  sleep 0.2
done
wait "$launcher"
rc=$?
[ "$rc" -ne 0 ] || fail "exit 0 after a stalled rank"
grep -qE "rank 0: stalled: no progress for [0-9]+ s in [a-z_ ]+ of step [0-9]+ \(runtime.stall_timeout: 2 s\)" stall.err ||
  fail "no stall line from rank 0 (exit $rc)"
echo "ok (exit $rc after $(($(date +%s) - start)) s)"
