#!/usr/bin/env bash
# README command 1: install what is missing, build, and train on the quickstart deck with 2 MPI ranks.
#   scripts/quickstart.sh [extra `minimllm run` arguments, e.g. --steps 10]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh build
mkdir -p runs
exec mpiexec -n 2 build/src/minimllm run inputs/quickstart.yaml \
  --out "runs/quickstart-$(date -u +%Y%m%d-%H%M%S).h5" "$@"
