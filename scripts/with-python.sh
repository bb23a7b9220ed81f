# Sourced by scripts/report.sh and scripts/reproduce-papers.sh. exec_python_with "MODULES" SCRIPT ARGS...:
# runs SCRIPT with a Python that imports MODULES (comma-separated): $MINIMLLM_PYTHON if set (and only it),
# else Debian's /usr/bin/python3, else the python3 on PATH (a pyenv or virtualenv python3 often lacks
# Debian's packages); exits 1 naming what was tried when none does.
exec_python_with() {
  local modules=$1 script=$2
  shift 2
  local candidates
  if [ -n "${MINIMLLM_PYTHON:-}" ]; then
    candidates=("$MINIMLLM_PYTHON")
  else
    candidates=(/usr/bin/python3 python3)
  fi
  for py in "${candidates[@]}"; do
    if "$py" -c "import $modules" 2>/dev/null; then
      exec "$py" "$script" "$@"
    fi
  done
  echo "$(basename "$script"): error: no Python with $modules among: ${candidates[*]}" \
    "(Debian: apt-get install python3-h5py python3-matplotlib; or set MINIMLLM_PYTHON)" >&2
  exit 1
}
