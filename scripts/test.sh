#!/usr/bin/env bash
# README command 2: install what is missing, then build and run the test suite on three builds: on
# Debian's Kokkos 3.4 (Serial backend), on Kokkos 3.4 built with OpenMP (2 threads per rank), so races
# cannot hide behind the Serial backend, and on Kokkos 4.6.01 (OpenMP, 2 threads per rank), the 4.x that
# users bring on clusters. The last two build with -Werror (MINIMLLM_WERROR). The first is also installed to a
# temporary prefix and used by another project through find_package (scripts/test-install.sh).
# The whole suite runs on the first build. The two OpenMP builds leave out what does not vary a kernel and
# the first build runs: the MPI tests at 3 and 4 ranks (_np3, _np4: more group shapes, which do not depend on
# the backend; 1 and 2 ranks still run every communication path), fault_injection (kills, a full disk, a
# stalled rank) and fuzz_inputs (60 s of mutated inputs); the 3.4 OpenMP build also leaves out
# validate_simulator (the script's reading of the files), which Kokkos 4.6 runs. On 2 cores, 3-4 ranks with 2
# threads each spend most of their time spinning in MPI (each blocking call waits out a scheduler slice,
# 5-8 ms): those tests took 6 of the Kokkos 4.6 build's 8 test minutes and kept CI above 45.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh --openmp --kokkos4
deps=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}

echo "== Serial backend (Debian Kokkos 3.4) =="
scripts/build.sh build -DMINIMLLM_REQUIRE_CBC=ON
(cd build && ctest --output-on-failure --timeout 900)
# The install rules and the package config: cmake --install to a temporary prefix, and a project that uses
# it through find_package(minimllm) builds and runs (once: the rules do not depend on the backend).
scripts/test-install.sh build

echo "== OpenMP backend (Kokkos 3.4 from Debian's source, 2 threads, -Werror) =="
scripts/build.sh build-openmp -DMINIMLLM_REQUIRE_CBC=ON -DKokkos_ROOT="$deps/kokkos-openmp" -DMINIMLLM_TEST_THREADS=2 -DMINIMLLM_WERROR=ON
(cd build-openmp && OMP_PROC_BIND=false ctest --output-on-failure --timeout 900 -E '_np[34]$|^fault_injection$|^fuzz_inputs$|^validate_simulator$')

echo "== Kokkos 4.6.01 (vendored release, OpenMP backend, 2 threads, -Werror, every header compiled alone) =="
scripts/build.sh build-kokkos4 -DMINIMLLM_REQUIRE_CBC=ON -DKokkos_ROOT="$deps/kokkos-4.6.01" -DMINIMLLM_TEST_THREADS=2 -DMINIMLLM_WERROR=ON -DMINIMLLM_CHECK_HEADERS=ON
(cd build-kokkos4 && OMP_PROC_BIND=false ctest --output-on-failure --timeout 900 -E '_np[34]$|^fault_injection$|^fuzz_inputs$')
