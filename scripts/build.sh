#!/usr/bin/env bash
# Configures and builds minimllm into a build directory (incremental when it already exists).
#   scripts/build.sh [BUILD_DIR] [extra cmake arguments...]
# Default BUILD_DIR: build. Uses every core unless MINIMLLM_BUILD_JOBS says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$build_dir" -j "${MINIMLLM_BUILD_JOBS:-$(nproc)}"
