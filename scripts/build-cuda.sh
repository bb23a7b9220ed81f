#!/usr/bin/env bash
# Configures and builds minimllm (tests and benchmarks included) against Kokkos 3.4.01 with the CUDA
# backend, with NCCL, nvcc_wrapper as the C++ compiler: compile and link only, no GPU needed.
#   scripts/build-cuda.sh [BUILD_DIR] [extra cmake arguments...]     (default BUILD_DIR: build-cuda)
# nvcc is slow and memory-hungry: MINIMLLM_BUILD_JOBS (default 2) caps the parallel compiles.
# Device code: Kokkos 3.4's sm_80 (machine code and PTX) plus machine code for MINIMLLM_CUDA_EXTRA_SM
# (default 90, Hopper: H100/H200), so a Hopper GPU runs minimllm's kernels without JIT-compiling PTX at
# start-up; set it empty for sm_80 alone (faster builds).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh --cuda
kokkos_cuda=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}/kokkos-cuda
build_dir=${1:-build-cuda}
shift || true
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"  # nvcc_wrapper runs nvcc from PATH
extra_sm=${MINIMLLM_CUDA_EXTRA_SM-90}
extra_flags=()
[ -z "$extra_sm" ] || extra_flags=(-DCMAKE_CXX_FLAGS="-gencode=arch=compute_${extra_sm},code=sm_${extra_sm}")
MINIMLLM_BUILD_JOBS=${MINIMLLM_BUILD_JOBS:-2} scripts/build.sh "$build_dir" -DKokkos_ROOT="$kokkos_cuda" \
  -DCMAKE_CXX_COMPILER="$kokkos_cuda/bin/nvcc_wrapper" -DMINIMLLM_ENABLE_NCCL=ON "${extra_flags[@]}" "$@"
