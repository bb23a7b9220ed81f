#!/usr/bin/env bash
# Measures how much a reference problem's loss at its reference step varies with the layout: the deck is
# run under every planner (--policy all) at each given rank count, and the loss at the reference step is
# read from each HDF5 file. The spread bounds the float-reassociation noise that the reference tolerance
# must sit well above (docs/RUN_RULES.md).
#   scripts/reference-spread.sh DECK [RANKS...]      e.g. inputs/reference/small.yaml 1 2 3 4 (default 1 2)
# Environment: POLICIES (default `all`: every planner; or a list such as "static dhp"), MINIMLLM (binary,
# default build/src/minimllm), MPIEXEC (default mpiexec), OUT (directory for the files, default
# spread-<deck name>), TAG (prefix of the file names, e.g. the build's backend), PYTHON (default
# /usr/bin/python3, with h5py). Files already in OUT are included in the table.
set -euo pipefail
deck=${1:?usage: $0 DECK [RANKS...]}
shift
if [ $# -gt 0 ]; then ranks=("$@"); else ranks=(1 2); fi
policies=${POLICIES:-all}
tag=${TAG:-}
minimllm=${MINIMLLM:-build/src/minimllm}
mpiexec=${MPIEXEC:-mpiexec}
python=${PYTHON:-/usr/bin/python3}
name=$(basename "$deck" .yaml)
out=${OUT:-spread-$name}
mkdir -p "$out"
for n in "${ranks[@]}"; do
  for policy in $policies; do
    # --policy all names its files <out>-<policy>.h5. Exit code 3 (INVALID) is expected while a reference
    # is being established; anything else is a failure.
    base="$out/${tag}np$n$([ "$policy" = all ] || echo "-$policy")"
    set +e
    "$mpiexec" -n "$n" "$minimllm" run "$deck" --policy "$policy" --out "$base.h5" --overwrite > "$base.log" 2>&1
    rc=$?
    set -e
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
      echo "$0: $n ranks, policy $policy failed with exit code $rc; see $base.log" >&2
      exit 1
    fi
  done
done
"$python" - "$out" <<'PY'
import glob, os, sys
import h5py
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.h5"))):
    with h5py.File(path, "r") as f:
        run = f["/run"].attrs
        step = int(run["reference_step"]) if "reference_step" in run else len(f["/steps"]) - 1
        loss = f["/steps"]["loss"]
        if step >= len(loss):
            continue
        inv = float(run.get("invariance_max_relative_difference", float("nan")))
        rows.append((os.path.basename(path), int(run["ranks"]), str(run["policy"]), inv, step, float(loss[step])))
if not rows:
    sys.exit("no run reached its reference step")
mean = sum(r[5] for r in rows) / len(rows)
print(f"{'file':<26} {'ranks':>5} {'policy':<8} {'step':>4} {'loss':>18} {'vs mean':>9} {'vs static':>9}")
for name, ranks, policy, inv, step, loss in rows:
    print(f"{name:<26} {ranks:>5} {policy:<8} {step:>4} {loss:>18.12f} {(loss - mean) / mean:>9.1e} {inv:>9.1e}")
lo, hi = min(r[5] for r in rows), max(r[5] for r in rows)
print(f"{len(rows)} runs: mean {mean:.12f}, spread (max - min) / mean = {(hi - lo) / mean:.2e}")
print(f"largest layout-invariance difference (vs static, first steps): {max(r[3] for r in rows):.2e}")
PY
