#!/usr/bin/env bash
# scripts/reproduce-papers.sh [--reduced] [--minimllm BIN] [--out-dir DIR] [--doc FILE]: projects each seed
# system's headline experiment (inputs/papers/) with `minimllm simulate` and writes docs/REPRODUCTION.md
# (scripts/reproduce_papers.py --help). Re-run it when a cost changes; `--reduced` (2 steps, the document in
# the output folder) is what the tests run. Needs a Python with h5py and numpy (scripts/with-python.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/with-python.sh"
exec_python_with "h5py, numpy" "$here/reproduce_papers.py" "$@"
