#!/usr/bin/env bash
# scripts/report.sh [scripts/report.py arguments]: runs the report (see scripts/report.py --help) with a
# Python that has h5py, numpy and matplotlib (scripts/with-python.sh says which it tries).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/with-python.sh"
exec_python_with "h5py, numpy, matplotlib" "$here/report.py" "$@"
