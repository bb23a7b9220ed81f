#!/usr/bin/env bash
# Installs a build into a temporary prefix (`cmake --install`), then configures, builds and runs
# tests/install_consumer against it with find_package(minimllm): the install rules, the exported targets,
# the package config with its dependencies and the installed headers are checked end to end, and the
# installed program runs. The prefix is removed at the end.
#   scripts/test-install.sh [BUILD_DIR]    (default: build; it must have been built)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  echo "test-install.sh: $build_dir is not a configured build directory" >&2
  exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/minimllm-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Where a step fails, its log says why.
step() {
  local name=$1
  shift
  if ! "$@" > "$work/$name.log" 2>&1; then
    echo "test-install.sh: $name failed: $*" >&2
    cat "$work/$name.log" >&2
    exit 1
  fi
}
start=$SECONDS
step install cmake --install "$build_dir" --prefix "$work/prefix"
# The consumer finds the Kokkos the build used (Kokkos_DIR from the build's cache), the rest as usual.
kokkos_dir=$(sed -n 's/^Kokkos_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
step configure cmake -S tests/install_consumer -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" ${kokkos_dir:+-DKokkos_DIR="$kokkos_dir"}
step build cmake --build "$work/consumer" -j "${MINIMLLM_BUILD_JOBS:-$(nproc)}"
"$work/consumer/consumer" > "$work/consumer.out" || {
  echo "test-install.sh: the consumer linked to the installed minimllm::driver failed:" >&2
  cat "$work/consumer.out" >&2
  exit 1
}
# The installed program prints the same text (its --version ends with one more empty line).
"$work/prefix/bin/minimllm" --version | sed '/^$/d' > "$work/installed.out"
if ! cmp -s "$work/consumer.out" "$work/installed.out"; then
  echo "test-install.sh: the consumer's version text differs from the installed program's" >&2
  diff "$work/consumer.out" "$work/installed.out" >&2 || true
  exit 1
fi
echo "test-install.sh: installed $build_dir ($(find "$work/prefix" -type f | wc -l) files), built and ran" \
  "tests/install_consumer with find_package(minimllm) in $((SECONDS - start)) s: $(head -1 "$work/consumer.out")"
