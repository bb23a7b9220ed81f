#!/usr/bin/env bash
# Fails when a source file of the project (src, include, kernels, tests, benchmarks) is not formatted
# as .clang-format says; lists the files. `scripts/check-format.sh --fix` formats them in place.
# Also fails on a fence other than step_fence() under src/step and src/parallel (the step's path: a
# device-wide Kokkos::fence() would wait for gradient buckets in flight; include/minimllm/core/clock.hpp).
#   CLANG_FORMAT: the clang-format to use (default: clang-format-14, else clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$clang_format" ]; then
  echo "check-format.sh: clang-format not found (Debian: apt-get install clang-format; or set CLANG_FORMAT)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- src include kernels tests benchmarks | grep -E '\.(c|cc|cpp|cxx|h|hh|hpp|hxx|cu|cuh)$' || true)
if [ "${1:-}" = "--fix" ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format.sh: ${#bad[@]} of ${#files[@]} files are not clang-formatted ($("$clang_format" --version | grep -o 'version [0-9.]*')):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "  fix with: scripts/check-format.sh --fix" >&2
  exit 1
fi
raw_fences=$(git grep -nE 'Kokkos::fence\(|[.]fence\(\)' -- src/step src/parallel || true)
if [ -n "$raw_fences" ]; then
  echo "check-format.sh: a fence other than step_fence() on the step's path (include/minimllm/core/clock.hpp):" >&2
  echo "$raw_fences" >&2
  exit 1
fi
echo "check-format.sh: ${#files[@]} files clang-formatted; the step's path fences only with step_fence()"
