#!/usr/bin/env bash
# scripts/report.sh [scripts/report.py arguments]: runs the report (see scripts/report.py --help) with a
# Python that has h5py, numpy and matplotlib: $MINIMLLM_PYTHON if set (and only it), else Debian's
# /usr/bin/python3, else the python3 on PATH (a pyenv or virtualenv python3 often lacks Debian's packages).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${MINIMLLM_PYTHON:-}" ]; then
  candidates=("$MINIMLLM_PYTHON")
else
  candidates=(/usr/bin/python3 python3)
fi
for py in "${candidates[@]}"; do
  if "$py" -c 'import h5py, numpy, matplotlib' 2>/dev/null; then
    exec "$py" "$here/report.py" "$@"
  fi
done
echo "report.sh: error: no Python with h5py, numpy and matplotlib among: ${candidates[*]}" \
  "(Debian: apt-get install python3-h5py python3-matplotlib; or set MINIMLLM_PYTHON)" >&2
exit 1
