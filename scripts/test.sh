#!/usr/bin/env bash
# README command 2: install what is missing, then build and run the whole test suite twice:
# on Debian's Kokkos (Serial backend) and on Kokkos built with OpenMP (2 threads per rank), so
# races cannot hide behind the Serial backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh --openmp
kokkos_openmp=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}/kokkos-openmp

echo "== Serial backend (Debian Kokkos) =="
scripts/build.sh build
(cd build && ctest --output-on-failure --timeout 900)

echo "== OpenMP backend (Kokkos from Debian's source, 2 threads) =="
scripts/build.sh build-openmp -DKokkos_ROOT="$kokkos_openmp" -DMINIMLLM_TEST_THREADS=2
(cd build-openmp && OMP_PROC_BIND=false ctest --output-on-failure --timeout 900)
