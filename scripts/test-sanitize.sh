#!/usr/bin/env bash
# The test suite under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer: builds
# minimllm on Debian's Kokkos 3.4 (Serial backend, as build/) into build-sanitize/ with
# -DMINIMLLM_SANITIZE=address,undefined (-O1 -g, no benchmarks), then runs with ctest the unit tests, the
# MPI tests at 1 and 2 ranks and the command-line contract (cli_contract). CI runs it after scripts/test.sh.
#
#   scripts/test-sanitize.sh [BUILD_DIR] [ctest arguments...]
#
# Default BUILD_DIR: build-sanitize. Not run, to keep CI short (sanitized code trains ~20x slower): the MPI
# tests at 3 and 4 ranks (_np3, _np4: they oversubscribe the 2 cores; 2 ranks run every communication path,
# in fewer group shapes), cli_contract's 30-step benchmark_valid (its shorter benchmark runs stay) and
# fault_injection (its kills and stalls are timed against Release-speed steps; it runs on the Serial build
# of scripts/test.sh). Any report fails its test: errors stop the program
# (halt_on_error), leaks are reported at exit, and every report exits 86. Leaks inside third-party
# libraries would be suppressed in tests/sanitizer/lsan.supp (none is needed today); minimllm's never are.
# docs/PORTABILITY.md, "Sanitizers", says more.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
esac
build_dir=${1:-build-sanitize}
shift || true
repo=$(pwd)
scripts/setup-deps.sh

scripts/build.sh "$build_dir" -DMINIMLLM_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DMINIMLLM_ENABLE_BENCHMARKS=OFF

if ! grep -q "^MINIMLLM_SANITIZE:STRING=address,undefined$" "$build_dir/CMakeCache.txt"; then
  echo "test-sanitize.sh: $build_dir was configured without -DMINIMLLM_SANITIZE=address,undefined;" \
    "remove it or name another build directory" >&2
  exit 1
fi

# halt_on_error: the first error ends the program, as memory is not to be trusted after it. exitcode 86
# for every report (ASan, LSan, UBSan), so that no test that expects exit 1 can take one for its failure.
# No leak is suppressed in minimllm's code; tests/sanitizer/lsan.supp says which third-party ones are and why.
export ASAN_OPTIONS="halt_on_error=1:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$repo/tests/sanitizer/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:exitcode=86:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
start=$SECONDS
(cd "$build_dir" && ctest --output-on-failure --timeout 900 -E '_np[34]$|^fault_injection$' "$@")
echo "test-sanitize.sh: tests passed in $((SECONDS - start)) s"
