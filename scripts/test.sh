#!/usr/bin/env bash
# README command 2: install what is missing, then build and run the whole test suite three times:
# on Debian's Kokkos 3.4 (Serial backend), on Kokkos 3.4 built with OpenMP (2 threads per rank), so
# races cannot hide behind the Serial backend, and on Kokkos 4.6.01 (OpenMP, 2 threads per rank), the
# 4.x that users bring on clusters. The last two build with -Werror (MINIMLLM_WERROR).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh --openmp --kokkos4
deps=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}

echo "== Serial backend (Debian Kokkos 3.4) =="
scripts/build.sh build -DMINIMLLM_REQUIRE_CBC=ON
(cd build && ctest --output-on-failure --timeout 900)

echo "== OpenMP backend (Kokkos 3.4 from Debian's source, 2 threads, -Werror) =="
scripts/build.sh build-openmp -DMINIMLLM_REQUIRE_CBC=ON -DKokkos_ROOT="$deps/kokkos-openmp" -DMINIMLLM_TEST_THREADS=2 -DMINIMLLM_WERROR=ON
(cd build-openmp && OMP_PROC_BIND=false ctest --output-on-failure --timeout 900)

echo "== Kokkos 4.6.01 (vendored release, OpenMP backend, 2 threads, -Werror, every header compiled alone) =="
scripts/build.sh build-kokkos4 -DMINIMLLM_REQUIRE_CBC=ON -DKokkos_ROOT="$deps/kokkos-4.6.01" -DMINIMLLM_TEST_THREADS=2 -DMINIMLLM_WERROR=ON -DMINIMLLM_CHECK_HEADERS=ON
(cd build-kokkos4 && ctest --output-on-failure --timeout 900)
