#!/usr/bin/env bash
# Fault injection end to end ("nothing lost, nothing hangs"; ctest `fault_injection`).
#
# Usage: tests/fault_injection.sh MPIEXEC MINIMLLM WORK_DIR [SEED [KILLS [SCENARIOS]]]
#   SEED       seeds the kill targets and times (default 13), so a failure can be replayed
#   KILLS      how many runs are killed (default 20)
#   SCENARIOS  comma-separated subset of: kill,checkpoint,disk,missing,stall,nan,overwrite,signal (default: all)
# WORK_DIR is emptied and used for every file. Needs /usr/bin/python3 (or $PYTHON) with h5py.
# Prints one "ok"/"FAIL"/"skip" line per check, with the exit code and message observed; exits 0 when
# nothing failed, 1 otherwise, 2 on bad arguments, 77 (ctest: skipped) without h5py.
#
# Every scenario runs 2 MPI ranks and checks the exit code, the message, that nothing is left running, and
# that every completed step is readable: the HDF5 file opens with h5py, /steps holds the steps 0..n-1 with
# finite values, every /ranks, /plans and /predicted table holds n (or n+1) rows, and where the run is
# deterministic its rows equal those of an uninterrupted reference run (so nothing half-written reads as
# data). "Completed" means: at least one row per "step N/M" line the run printed (a row is flushed before
# its line is printed).
#   kill       KILLS runs, each killed with SIGKILL at a seeded random point: rank 0, rank 1 or the
#              launcher (mpiexec); about 1 in 4 early (a random time up to when the reference run printed
#              its first step line: set-up or step 0), the rest mid-run (0-250 ms after step line 1-6).
#              Exit non-zero, no process left, the file absent (only when no step was printed) or
#              readable as above. Then 5 runs whose rank 0 is killed the moment run.h5 appears (the file
#              must be readable: it used to be empty or truncated about 1 time in 3), and a run on a killed
#              run's file over its stale <out>.lock (--overwrite) must succeed and remove the lock.
#   checkpoint 3 runs checkpointing every step (--checkpoint-every 1), rank 0 killed mid-run: the checkpoint
#              is whole and `run --restart` from it finishes with the reference run's losses, bit for bit.
#   disk       a full disk on a tmpfs (skipped where mount fails): a 64 KiB one at set-up (exit 1, one line
#              naming the file, no file or lock left) and a 4 MiB one filled up by another process
#              mid-run (exit 1, one line "stopped before writing step row N", rows 0..N-1 readable).
#   missing    the deck, then the calibration file (`minimllm calibrate`), present only in rank A's
#              working directory (mpiexec -n 1 -wdir A ... : -n 1 -wdir B ...), each rank missing it in
#              turn: exit 2 within 60 s, the missing file named on exactly one line, no output file.
#   stall      rank 1 stopped (SIGSTOP) with runtime.stall_timeout: 2: the run ends by itself (non-zero)
#              within 15 s, rank 0 names itself, the phase and the step; the flushed rows readable.
#   nan        optimizer.lr: 1e6: exit 1, one line naming the step and the tensor, the same text in
#              /run/stopped, the steps before it readable.
#   overwrite  a second run with --overwrite on a running run's --out: exit 2 naming the running writer;
#              the first run still completes every row (with a real running writer).
#   signal     SIGUSR1, SIGTERM, SIGINT to one rank, both ranks or the launcher, mid-run or at start-up
#              (before the first step): every rank stops after the same step with the documented exit code
#              (75, 143, 130, 138), /run/stopped set, the checkpoint holding that step.
#
# The faults covered, and where (docs/DESIGN.md, "Faults", lists what each does and the exit codes):
#   --overwrite of a running file          cli_contract overwrite_running_output, stale_lock_file,
#                                          policy_all_running_output; here overwrite, stale_lock
#   a file missing on one rank             cli_contract rank_local_missing_*; here missing
#   a non-finite loss or gradient          cli_contract *non_finite*; here nan
#   a full disk at set-up and mid-run      cli_contract disk_full_np{1,2}; here disk_*
#   --policy all's outputs checked first   cli_contract policy_all_*
#   a run too large for the memory         cli_contract run_memory_too_large
#   --out naming an input                  cli_contract out_is_*, calibrate_out_is_deck
#   a start-up estimate of many steps      cli_contract run_many_steps_starts_promptly
#   a stalled rank                         here stall
#   kill -9 while <out> is created         here kill_at_creation
#   NCCL handle used after ncclCommAbort   none (needs a GPU, NCCL and an injected NCCL error)
set -u

usage() { sed -n '2,/^set -u$/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
for arg in "$@"; do
  case $arg in -h | --help)
    usage
    exit 0
    ;;
  esac
done
if [ $# -lt 3 ]; then
  usage >&2
  exit 2
fi
mpiexec=$1 minimllm=$2 work=$3
seed=${4:-13} kills=${5:-20} scenarios=${6:-kill,checkpoint,disk,missing,stall,nan,overwrite,signal}
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
if ! "$python" -c 'import h5py' 2>/dev/null; then
  echo "fault_injection: skipped: $python cannot import h5py (Debian: python3-h5py); set PYTHON" >&2
  exit 77
fi
case $minimllm in /*) ;; *) minimllm=$(pwd -P)/$minimllm ;; esac
case $work in "" | /) exit 2 ;; esac
for m in "$work"/disk/*; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done # an interrupted run's
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
work=$(pwd -P)
comm=$(basename "$minimllm" | cut -c1-15) # the process name pgrep sees
started=$(date +%s)
failures=0
mounts=()

ok() { echo "ok   $*"; }
skip() { echo "skip $*"; }
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}
wants() { [[ ",$scenarios," == *",$1,"* ]]; }

# The launchers, proxies and ranks whose working directory is DIR or below it (pids, one a line).
procs_in() {
  local p cwd
  for p in /proc/[0-9]*; do
    case $(cat "$p/comm" 2>/dev/null) in "$comm" | mpiexec* | hydra_pmi_proxy) ;; *) continue ;; esac
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case $cwd in "$1" | "$1"/*) echo "${p#/proc/}" ;; esac
  done
}
# Ends what this script started (everything running in WORK_DIR): stopped ranks too.
cleanup() {
  local pid
  for pid in $(procs_in "$work"); do
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM # (the EXIT trap runs)

# rank_pid DIR RANK: the pid of rank RANK's minimllm running in DIR (from its launcher's environment).
rank_pid() {
  local pid
  for pid in $(pgrep -x "$comm"); do
    [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$1" ] || continue
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxE "PMI_RANK=$2|OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}
# wait_for PID SECONDS: waits for a child; its exit code in $rc, or 124 past the bound, when it and every
# process running in the current directory are killed (a hung run must not slow the next scenarios).
wait_for() {
  local deadline=$(($(date +%s) + $2)) p
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kill -KILL "$1" 2>/dev/null
      for p in $(procs_in "$PWD"); do kill -CONT "$p" && kill -KILL "$p"; done 2>/dev/null
      wait "$1" 2>/dev/null
      rc=124
      return
    fi
    sleep 0.05
  done
  wait "$1" 2>/dev/null # (no "Killed" notice)
  rc=$?
}
# no_leftovers DIR: nothing runs in DIR any more (a rank the launcher failed to end would hang a job).
no_leftovers() {
  local i left
  for i in $(seq 100); do
    left=$(procs_in "$1")
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "processes still running in $1: $(echo "$left" | tr '\n' ' ')"
  return 1
}
step_lines() {
  local n
  n=$(grep -cE '^step +[0-9]+/' "$1" 2>/dev/null)
  echo "${n:-0}"
}
# The first line of FILE that is not the launcher's banner of '=' or blank, else "(nothing)".
first_line() {
  local line
  line=$(grep -vE '^(=+|\s*)$' "$1" | head -1)
  echo "${line:-(nothing)}"
}
# The launcher's or the ranks' account of a killed rank ("... EXIT STRING: Killed (signal 9)"), if any.
killed_line() {
  local line
  line=$(grep -hE 'EXIT STRING|signal [0-9]+' out err 2>/dev/null | head -1)
  echo "${line:-nothing printed}"
}
# After step line N of OUT appears (or the launcher PID ends): 0 when it appeared.
await_step_line() {
  local i
  for i in $(seq 600); do
    [ "$(step_lines "$1")" -ge "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# h5check FILE MIN_ROWS [exact] [REFERENCE]: the file's rows are readable and sane (header comment); prints
# "rows N" (and "stopped <text>" when /run/stopped is set) or why not, exit 0 or 1.
h5check() {
  "$python" - "$@" <<'EOF'
import math, sys
import h5py, numpy as np
path, need = sys.argv[1], int(sys.argv[2])
exact = "exact" in sys.argv[3:]
ref = next((a for a in sys.argv[3:] if a != "exact"), "")
try:
    with h5py.File(path, "r") as f:
        assert int(f.attrs["schema_version"]) == 3, "schema_version is not 3"
        run = {k: f["run"].attrs[k] for k in f["run"].attrs}  # every attribute readable
        steps = f["steps"][()]
        n = len(steps)
        assert (steps["step"] == np.arange(n)).all(), f"step column is {list(steps['step'])}, not 0..{n - 1}"
        for field in ("loss", "grad_norm", "step_seconds"):
            if field in steps.dtype.names:
                assert np.isfinite(steps[field]).all(), f"non-finite {field} in {list(steps[field])}"
        assert (steps["samples"] > 0).all() and (steps["text_tokens"] > 0).all(), "empty batches in rows"
        tables = []
        f.visititems(lambda name, obj: tables.append(obj) if isinstance(obj, h5py.Dataset) else None)
        for d in tables:
            if d.name != "/steps":
                rows = d[()].shape[0]
                assert n <= rows <= n + 1, f"{d.name} has {rows} rows, /steps {n}"
        if ref:
            with h5py.File(ref, "r") as g:
                r = g["steps"][()]
            m = min(n, len(r))
            for field in ("text_tokens", "image_tokens", "loss_targets", "samples"):
                assert (steps[field][:m] == r[field][:m]).all(), f"{field} differs from the reference run"
            rel = np.abs(steps["loss"][:m] - r["loss"][:m]) / np.abs(r["loss"][:m])
            assert (rel <= 1e-5).all(), f"loss differs from the reference run: {list(rel)}"
        assert n >= need, f"{n} rows, fewer than the {need} steps printed"
        assert not exact or n == need, f"{n} rows, not {need}"
        stopped = run.get("stopped", "")
        print(f"rows {n}" + (f", stopped {stopped}" if stopped else ""))
except Exception as e:  # noqa: BLE001 - any failure to read is the finding
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
EOF
}

# The deck: steps of ~0.1-0.5 s on 2 ranks with --global-batch 128, no start-up GEMM measurement. One GEMM
# backend for every class: runtime.gemm auto times them at start-up, so two processes (the reference and a
# killed run) could choose differently for a near-tie and round differently; the restarts are compared bitwise.
deck=$work/fi.yaml
printf 'name: fi\nruntime: {peak_gflops_per_rank: 100, gemm: blas}\n' >"$deck"
run_args=(run "$deck" --global-batch 128 --steps 16)

# The uninterrupted reference run (its rows are what a killed run's rows must equal), timed to its first step.
reference() {
  mkdir -p "$work/reference" && cd "$work/reference" || exit 2
  local t0 first=""
  t0=$(date +%s%N)
  "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out run.h5 >out 2>err &
  local launcher=$!
  while kill -0 "$launcher" 2>/dev/null; do
    if [ -z "$first" ] && [ "$(step_lines out)" -ge 1 ]; then first=$((($(date +%s%N) - t0) / 1000000)); fi
    sleep 0.02
  done
  wait "$launcher"
  rc=$?
  setup_ms=${first:-1000}
  if [ "$rc" -eq 0 ] && msg=$(h5check run.h5 16 exact); then
    ok "reference: exit 0, $msg, first step line after $setup_ms ms"
  else
    fail "reference: exit $rc, ${msg:-}; $(first_line err)"
    exit 1
  fi
  cd "$work" || exit 2
}

# kill: KILLS runs killed with SIGKILL at seeded random points.
scenario_kill() {
  RANDOM=$seed
  local i dir target when delay after launcher victim lines msg stale=""
  for i in $(seq -w 1 "$kills"); do
    dir=$work/kill$i
    mkdir -p "$dir" && cd "$dir" || exit 2
    case $((RANDOM % 3)) in 0) target="rank 0" ;; 1) target="rank 1" ;; *) target=launcher ;; esac
    if [ $((RANDOM % 4)) -eq 0 ]; then
      delay=$((RANDOM % (setup_ms + 1)))
      when="early, ${delay} ms after launch"
    else
      after=$((1 + RANDOM % 6)) delay=$((RANDOM % 250))
      when="mid-run, ${delay} ms after step line $after"
    fi
    "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out run.h5 >out 2>err &
    launcher=$!
    case $when in mid-run*) await_step_line out "$after" "$launcher" ;; esac
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    victim=$launcher
    if [ "$target" != launcher ]; then
      victim=""
      for _ in $(seq 200); do
        victim=$(rank_pid "$dir" "${target#rank }") && break
        kill -0 "$launcher" 2>/dev/null || break
        sleep 0.01
      done
    fi
    if [ -n "$victim" ]; then kill -KILL "$victim" 2>/dev/null; fi
    wait_for "$launcher" 30
    local what="kill$i ($target, $when)"
    lines=$(step_lines out) msg=""
    if [ -z "$victim" ]; then
      fail "$what: no $target process to kill (exit $rc): $(first_line err)"
    elif [ "$rc" -eq 124 ]; then
      fail "$what: still running 30 s after the kill"
    elif [ "$rc" -eq 0 ]; then
      fail "$what: exit 0 after a kill"
    elif ! left=$(no_leftovers "$dir"); then
      fail "$what: exit $rc, $left"
    elif [ ! -e run.h5 ]; then
      if [ "$lines" -eq 0 ]; then
        ok "$what: exit $rc, killed before the file was created, no step printed; $(killed_line)"
      else
        fail "$what: exit $rc, $lines step lines printed but no file"
      fi
    elif msg=$(h5check run.h5 "$lines" "$work/reference/run.h5"); then
      ok "$what: exit $rc, $lines step lines, $msg, equal to the reference; $(killed_line)"
    else
      fail "$what: exit $rc, $lines step lines, file unreadable or wrong: $msg ($(stat -c %s run.h5) bytes)"
    fi
    [ -z "$stale" ] && [ -e run.h5.lock ] && [ -e run.h5 ] && stale=$dir
    cd "$work" || exit 2
  done
  # The narrowest window: rank 0 killed the moment run.h5 appears (the file must be readable then).
  for i in 1 2 3 4 5; do
    dir=$work/kill_at_creation$i
    mkdir -p "$dir" && cd "$dir" || exit 2
    "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out run.h5 >out 2>err &
    launcher=$!
    victim=""
    while [ -z "$victim" ] && kill -0 "$launcher" 2>/dev/null; do victim=$(rank_pid "$dir" 0); done
    while [ ! -e run.h5 ] && kill -0 "$victim" 2>/dev/null; do :; done
    kill -KILL "$victim" 2>/dev/null
    wait_for "$launcher" 30
    msg=""
    if [ ! -e run.h5 ]; then
      fail "kill_at_creation$i: exit $rc, no file appeared before the run ended"
    elif msg=$(h5check run.h5 0) && [ "$rc" -ne 0 ] && no_leftovers "$dir" >/dev/null; then
      ok "kill_at_creation$i (rank 0 killed once run.h5 exists): exit $rc, $msg ($(stat -c %s run.h5) bytes)"
    else
      fail "kill_at_creation$i (rank 0 killed once run.h5 exists): exit $rc, file unreadable: $msg ($(stat -c %s run.h5) bytes)"
    fi
    cd "$work" || exit 2
  done
  # A lock file left by a killed run holds no lock: a new run over it succeeds and removes it.
  if [ -z "$stale" ]; then
    skip "stale_lock: no killed run left a lock file"
    return
  fi
  cd "$stale" || exit 2
  "$mpiexec" -n 2 "$minimllm" run "$deck" --steps 2 --out run.h5 --overwrite >out2 2>err2 &
  wait_for $! 60
  if [ "$rc" -eq 0 ] && [ ! -e run.h5.lock ] && msg=$(h5check run.h5 2 exact); then
    ok "stale_lock: --overwrite over ${stale##*/}'s stale run.h5.lock: exit 0, $msg, lock file removed"
  else
    fail "stale_lock: --overwrite over ${stale##*/}'s stale lock: exit $rc, ${msg:-}; $(first_line err2)"
  fi
  cd "$work" || exit 2
}

# disk: a tmpfs too small for set-up, and one filled up mid-run.
scenario_disk() {
  local dir=$work/disk lines err msg=""
  mkdir -p "$dir/setup" "$dir/midrun" && cd "$dir" || exit 2
  if ! mount -t tmpfs -o size=64k tmpfs "$dir/setup" 2>/dev/null; then
    skip "disk: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    cd "$work" || exit 2
    return
  fi
  mounts+=("$dir/setup")
  "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out setup/run.h5 >out1 2>err1 &
  wait_for $! 60
  err=$(grep -vE '^\s*$' err1)
  if [ "$rc" -eq 1 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
    echo "$err" | grep -qE 'setup/run\.h5: .*(no space left|KiB free)' && [ -z "$(ls -A setup)" ]; then
    ok "disk_setup (64 KiB tmpfs): exit 1, no file or lock left; $err"
  else
    fail "disk_setup (64 KiB tmpfs): exit $rc, files: $(find setup -mindepth 1 -printf '%f '); stderr: $err"
  fi
  umount "$dir/setup" && unset 'mounts[-1]'

  mount -t tmpfs -o size=4m tmpfs "$dir/midrun" || return
  mounts+=("$dir/midrun")
  "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out midrun/run.h5 >out2 2>err2 &
  local launcher=$!
  await_step_line out2 3 "$launcher"
  # Another process fills the file system.
  dd if=/dev/zero of=midrun/filler bs=16k 2>/dev/null
  wait_for "$launcher" 60
  lines=$(step_lines out2) msg=""
  # A failure of rank 0 alone mid-run ends in MPI_Abort (README, "Exit codes"): MPICH adds its own line.
  err=$(grep -vE '^\s*$|^Abort\([0-9]+\) on node' err2)
  local row
  row=$(echo "$err" | sed -nE 's/.*stopped before writing step row ([0-9]+).*/\1/p')
  rm -f midrun/filler # h5py needs no space, but a clean tmpfs tells nothing stale
  if [ "$rc" -eq 1 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && [ -n "$row" ] && [ "$row" -ge "$lines" ] &&
    msg=$(h5check midrun/run.h5 "$row" exact "$work/reference/run.h5") && [ ! -e midrun/run.h5.lock ]; then
    ok "disk_midrun (4 MiB tmpfs filled after step line 3): exit 1, $lines step lines, $msg; $err (then MPI_Abort)"
  else
    fail "disk_midrun (4 MiB tmpfs filled after step line 3): exit $rc, $lines step lines, ${msg:-}; $err"
  fi
  umount "$dir/midrun" && unset 'mounts[-1]'
  cd "$work" || exit 2
}

# missing: a file only one rank's working directory holds.
scenario_missing() {
  local dir=$work/missing
  mkdir -p "$dir/a" "$dir/b" && cd "$dir" || exit 2
  cp "$deck" a/deck.yaml
  if ! (cd a && "$minimllm" calibrate deck.yaml --sizes 3 --repeats 1 --out cal.yaml >../cal.out 2>&1); then
    fail "missing: minimllm calibrate failed: $(tail -1 cal.out)"
    return
  fi
  local args what first second count name file
  for what in deck calibration; do
    if [ $what = deck ]; then
      args=(run deck.yaml --steps 2 --out local.h5)
    else
      args=(run "$deck" --steps 2 --cost-model cal.yaml --out local.h5)
    fi
    for first in a b; do
      second=$([ $first = a ] && echo b || echo a)
      "$mpiexec" -n 1 -wdir "$dir/$first" "$minimllm" "${args[@]}" : -n 1 -wdir "$dir/$second" "$minimllm" \
        "${args[@]}" >out 2>err &
      wait_for $! 60
      name=missing_${what}_on_rank_$([ $first = a ] && echo 1 || echo 0)
      file=$([ $what = deck ] && echo deck.yaml || echo cal.yaml)
      count=$(grep -c "$file" err)
      if [ "$rc" -eq 2 ] && [ "$count" -eq 1 ] && [ "$(grep -cvE '^\s*$' err)" -eq 1 ] &&
        [ ! -e a/local.h5 ] && [ ! -e b/local.h5 ] && [ ! -e a/local.h5.lock ]; then
        ok "$name: exit 2, one line, no output file; $(first_line err)"
      else
        fail "$name: exit $rc (124: still running after 60 s), $count line(s) naming $file, files: $(find a b -name 'local*' -printf '%p '); $(first_line err)"
      fi
      rm -f a/local.h5 b/local.h5
    done
  done
  cd "$work" || exit 2
}

# stall: rank 1 stopped; the watchdog (runtime.stall_timeout: 2) ends the run.
scenario_stall() {
  local dir=$work/stall victim="" launcher t0 lines line msg=""
  mkdir -p "$dir" && cd "$dir" || exit 2
  printf 'name: stall\nruntime: {stall_timeout: 2, peak_gflops_per_rank: 100}\n' >stall.yaml
  "$mpiexec" -n 2 "$minimllm" run stall.yaml --steps 1000000 --out run.h5 >out 2>err &
  launcher=$!
  if await_step_line out 2 "$launcher"; then victim=$(rank_pid "$dir" 1); fi
  if [ -z "$victim" ]; then
    fail "stall: the run ended, or printed no step line, before rank 1 could be stopped: $(first_line err)"
    wait_for "$launcher" 5
    cd "$work" || exit 2
    return
  fi
  kill -STOP "$victim"
  t0=$(date +%s)
  wait_for "$launcher" 15
  kill -KILL "$victim" 2>/dev/null
  lines=$(step_lines out)
  line=$(grep -E 'stalled: no progress' err | head -1)
  if [ "$rc" -eq 124 ]; then
    fail "stall: still running 15 s after rank 1 stopped (stall_timeout 2 s)"
  elif [ "$rc" -ne 0 ] &&
    echo "$line" | grep -qE "rank 0: stalled: no progress for [0-9]+ s in [a-z_ ]+ of step [0-9]+ \(runtime.stall_timeout: 2 s" &&
    msg=$(h5check run.h5 "$lines"); then
    ok "stall: exit $rc $(($(date +%s) - t0)) s after rank 1 stopped, $lines step lines, $msg; $line"
  else
    fail "stall: exit $rc, $lines step lines, ${msg:-}; ${line:-no stall line}; $(first_line err)"
  fi
  cd "$work" || exit 2
}

# nan: a learning rate that makes the loss or the gradient non-finite.
scenario_nan() {
  local dir=$work/nan lines err step msg=""
  mkdir -p "$dir" && cd "$dir" || exit 2
  printf 'name: nan\noptimizer: {lr: 1.0e6}\nruntime: {peak_gflops_per_rank: 100}\n' >nan.yaml
  "$mpiexec" -n 2 "$minimllm" run nan.yaml --global-batch 128 --steps 16 --out run.h5 >out 2>err &
  wait_for $! 60
  lines=$(step_lines out)
  err=$(grep -vE '^\s*$' err)
  step=$(echo "$err" | sed -nE 's/^minimllm: step ([0-9]+): non-finite .*gradient in [a-z_0-9.]+$/\1/p')
  if [ "$rc" -eq 1 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && [ -n "$step" ] && [ "$step" -eq "$lines" ] &&
    msg=$(h5check run.h5 "$step" exact) && [ "$msg" = "rows $step, stopped ${err#minimllm: }" ]; then
    ok "nan: exit 1, $lines step lines, $msg (= the message); $err"
  else
    fail "nan: exit $rc, $lines step lines, ${msg:-}; $err"
  fi
  cd "$work" || exit 2
}

# overwrite: --overwrite of a file a running minimllm writes.
scenario_overwrite() {
  local dir=$work/overwrite launcher rc2 err msg=""
  mkdir -p "$dir" && cd "$dir" || exit 2
  "$mpiexec" -n 2 "$minimllm" run "$deck" --global-batch 128 --steps 12 --out run.h5 >out1 2>err1 &
  launcher=$!
  await_step_line out1 2 "$launcher"
  "$mpiexec" -n 2 "$minimllm" run "$deck" --steps 2 --out run.h5 --overwrite >out2 2>err2 &
  wait_for $! 60
  rc2=$rc
  err=$(grep -vE '^\s*$' err2)
  wait_for "$launcher" 60
  local readable=yes
  msg=$(h5check run.h5 12 exact) || readable=no
  if [ "$rc2" -eq 2 ] && echo "$err" | grep -qE 'run\.h5 is being written by another running minimllm \(pid [0-9]+\)' &&
    [ "$rc" -eq 0 ] && [ $readable = yes ]; then
    ok "overwrite_running: the second run exit 2 ($err); the first exit 0, $msg"
  else
    fail "overwrite_running: the second run exit $rc2 ($(echo "$err" | head -1)); the first exit $rc, its file: $msg"
  fi
  cd "$work" || exit 2
}

# checkpoint: runs checkpointing after every step, rank 0 killed with SIGKILL at seeded random points
# mid-run: the checkpoint is whole (the one before the kill or the one being written, never a half-written
# file), and `run --restart` from it finishes the run with exit 0, its rows the remaining steps with losses
# equal bit for bit to the uninterrupted reference run's (same ranks, same policy).
scenario_checkpoint() {
  RANDOM=$((seed + 1))
  local i dir after delay launcher victim what verdict killed_rc
  for i in 1 2 3; do
    dir=$work/checkpoint$i
    mkdir -p "$dir" && cd "$dir" || exit 2
    after=$((2 + RANDOM % 10)) delay=$((RANDOM % 250))
    what="checkpoint$i (rank 0 killed ${delay} ms after step line $after)"
    "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out run.h5 --checkpoint-every 1 >out 2>err &
    launcher=$!
    await_step_line out "$after" "$launcher"
    sleep "$(printf '0.%03d' "$delay")"
    victim=$(rank_pid "$dir" 0) && kill -KILL "$victim" 2>/dev/null
    wait_for "$launcher" 30
    killed_rc=$rc
    if [ ! -e run.ckpt.h5 ]; then
      fail "$what: exit $rc, no checkpoint run.ckpt.h5 after $(step_lines out) step lines"
      cd "$work" || exit 2
      continue
    fi
    "$mpiexec" -n 2 "$minimllm" "${run_args[@]}" --out rest.h5 --restart run.ckpt.h5 >out2 2>err2
    rc=$?
    verdict=$("$python" - rest.h5 "$work/reference/run.h5" <<'EOF'
import sys, h5py
rest, ref = (h5py.File(p, "r")["steps"][()] for p in sys.argv[1:])
k = len(ref) - len(rest)
if list(rest["step"]) != list(range(k, len(ref))):
    print(f"restart rows are steps {list(rest['step'])}, not {k}..{len(ref) - 1}")
elif (rest["loss"] != ref["loss"][k:]).any():
    print(f"losses differ from the reference in steps {k}..{len(ref) - 1}")
else:
    print(f"bitwise from step {k}")
EOF
    )
    if [ "$rc" -eq 0 ] && [[ $verdict == bitwise* ]]; then
      ok "$what: killed run exit $killed_rc; restart from its checkpoint: exit 0, losses $verdict to the end"
    else
      fail "$what: restart exit $rc ($(first_line err2)); $verdict"
    fi
    cd "$work" || exit 2
  done
}

# signal: stops the way batch systems send them: SIGUSR1, SIGTERM and SIGINT, to one rank, to
# every rank or to the launcher (which forwards them), mid-run or at start-up before the first step. Every
# rank stops after the same step: exit 75 (SIGUSR1 with a checkpoint), 143 (SIGTERM), 130 (SIGINT), 138
# (SIGUSR1 without --checkpoint); /run/stopped names the signal and the step; the rows are readable; the
# checkpoint, where one is written, holds the state after that step; nothing is left running.
# sig_caught PID SIGNAL: the process has installed its handler of SIGNAL (/proc/PID/status SigCgt).
sig_caught() {
  local mask
  mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$mask" ] && [ $(((16#$mask >> ($2 - 1)) & 1)) -eq 1 ]
}
scenario_signal() {
  local name target signal when checkpoint expected dir launcher pids pid lines msg stopped code
  while read -r -u 3 name target signal when checkpoint expected; do
    dir=$work/signal_$name
    mkdir -p "$dir" && cd "$dir" || exit 2
    local args=(run "$deck" --global-batch 128 --steps 40 --out run.h5) note=""
    [ "$checkpoint" = yes ] && args+=(--checkpoint-every 1000 --checkpoint run.ckpt.h5) && note=", checkpointing"
    "$mpiexec" -n 2 "$minimllm" "${args[@]}" >out 2>err &
    launcher=$!
    pids=""
    for _ in $(seq 400); do # both ranks, their handlers installed (the first thing main does)
      pids="$(rank_pid "$dir" 0) $(rank_pid "$dir" 1)"
      set -- $pids
      [ $# -eq 2 ] && sig_caught "$1" 10 && sig_caught "$2" 10 && break
      kill -0 "$launcher" 2>/dev/null || break
      sleep 0.01
    done
    [ "$when" = mid-run ] && await_step_line out 2 "$launcher"
    case $target in
      launcher) kill -s "$signal" "$launcher" ;;
      ranks) for pid in $pids; do kill -s "$signal" "$pid"; done ;;
      rank1) set -- $pids && kill -s "$signal" "$2" ;;
    esac
    wait_for "$launcher" 60
    code=$rc
    lines=$(step_lines out)
    local what="signal_$name (SIG$signal to $target, $when$note)"
    msg=$(h5check run.h5 "$lines" exact) || {
      fail "$what: exit $code, file: $msg"
      cd "$work" || exit 2
      continue
    }
    stopped=$(echo "$msg" | sed -n 's/.*stopped //p')
    local problems=""
    [[ $stopped == "SIG$signal after step "* ]] || problems+=" /run/stopped is '${stopped}';"
    [ "$when" = start-up ] && [ "$lines" -ne 1 ] && problems+=" $lines steps ran, not 1;"
    [ "$lines" -ge 40 ] && problems+=" every step ran;"
    if [ "$checkpoint" = yes ]; then
      local held
      held=$("$python" -c "import h5py; print(int(h5py.File('run.ckpt.h5', 'r')['checkpoint'].attrs['next_step']))" 2>&1)
      [ "$held" = "$lines" ] || problems+=" the checkpoint holds '$held' steps, not $lines;"
    fi
    left=$(no_leftovers "$dir") || problems+=" $left;"
    if [ "$code" -eq 0 ] && [ "$target" = launcher ] && [ -z "$problems" ] && grep -q "stopped by SIG$signal" out; then
      # MPICH's hydra before 4.1 resets to 0 the exit status of a process it forwarded a signal to, depending
      # on the order of the socket close and waitpid events (its forced_cleanup; pmodels/mpich#5930): the
      # ranks stopped and exited as they should, the launcher lost their code.
      skip "$what: every rank stopped after step $((lines - 1)) as asked, but hydra reported exit 0, not $expected (its forced_cleanup, fixed in MPICH 4.1)"
    elif [ "$code" -eq "$expected" ] && [ -z "$problems" ]; then
      ok "$what: exit $code, $msg"
    else
      fail "$what: exit $code (expected $expected), $msg;$problems $(first_line err)"
    fi
    cd "$work" || exit 2
  done 3<<'CASES'
usr1_launcher launcher USR1 mid-run yes 75
usr1_startup ranks USR1 start-up yes 75
usr1_no_checkpoint ranks USR1 mid-run no 138
term_ranks ranks TERM mid-run yes 143
term_launcher launcher TERM mid-run yes 143
int_one_rank rank1 INT mid-run no 130
int_launcher launcher INT mid-run no 130
CASES
}

echo "fault_injection: seed $seed, $kills kills, scenarios $scenarios, $("$minimllm" --version 2>/dev/null || echo "$minimllm")"
reference
for s in kill checkpoint disk missing stall nan overwrite signal; do
  # (bash's own "Killed" notices of the killed launchers are dropped)
  if wants $s; then "scenario_$s" 2> >(grep -v ' Killed ' >&2); fi
done
echo "fault_injection: $failures failure(s) in $(($(date +%s) - started)) s"
[ "$failures" -eq 0 ]
