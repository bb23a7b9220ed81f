#!/usr/bin/env bash
# scripts/reproduce-papers.sh [--reduced] [--minimllm BIN] [--out-dir DIR] [--doc FILE]: projects each seed
# system's headline experiment (inputs/papers/) with `minimllm simulate` and writes docs/REPRODUCTION.md
# (scripts/reproduce_papers.py --help). Re-run it when a cost changes; `--reduced` (2 steps, the document in
# the output folder) is what the tests run. Python: $MINIMLLM_PYTHON if set, else Debian's /usr/bin/python3,
# else python3, whichever has h5py and numpy.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${MINIMLLM_PYTHON:-}" ]; then
  candidates=("$MINIMLLM_PYTHON")
else
  candidates=(/usr/bin/python3 python3)
fi
for py in "${candidates[@]}"; do
  if "$py" -c 'import h5py, numpy' 2>/dev/null; then
    exec "$py" "$here/reproduce_papers.py" "$@"
  fi
done
echo "reproduce-papers.sh: error: no Python with h5py and numpy among: ${candidates[*]}" \
  "(Debian: apt-get install python3-h5py; or set MINIMLLM_PYTHON)" >&2
exit 1
