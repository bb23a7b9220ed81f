#!/usr/bin/env bash
# Builds (scripts/build-cuda.sh) and packs a CUDA build for a GPU machine that has CUDA 13 but no MPI,
# HDF5, BLAS, yaml-cpp or fmt:
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]      (defaults: build-cuda, gpu-bundle)
# Writes OUT_DIR/minimllm-gpu.tar.xz (stripped test and benchmark programs, minimllm, the non-system
# shared libraries they need, MPICH's mpiexec/hydra with UCX's shared-memory module, inputs/, a manifest)
# and checks it: unpacked elsewhere, with only the bundle on LD_LIBRARY_PATH, every library of every
# program must resolve inside it, except glibc and what the GPU machine supplies itself (libcuda, cuBLAS;
# NCCL is opened at run time, and gpu-check.sh finds it).
# Size budget: the device tool carries at most 64 MiB with the working tree; the script fails above
# MINIMLLM_BUNDLE_MAX_MIB (default 48).
# gpu-bundle/ is git-ignored; on the device: run scripts/gpu-check.sh with carry ["gpu-bundle"].
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
out_dir=${2:-gpu-bundle}
max_mib=${MINIMLLM_BUNDLE_MAX_MIB:-48}

# The CUDA build first (incremental; Kokkos-CUDA is built once and cached), so that this one command
# prepares everything the GPU machine needs.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "nvcc" "$build/CMakeCache.txt"; then
  echo "gpu-bundle: $build is not a CUDA build; name another directory (default: build-cuda)" >&2
  exit 2
fi
scripts/build-cuda.sh "$build"

# Supplied by the GPU machine: glibc (its own, newer than Debian 12's), the driver, and the CUDA 13
# libraries too large to carry (cuBLAS/cuBLASLt ~600 MB, NCCL ~220 MB); gpu-check.sh finds the latter.
system_libs='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl)[.]so'
device_libs='^(libcuda|libnvidia-[a-z-]*|libcublas|libcublasLt|libnccl)[.]so'
# The C++ runtime goes into lib/fallback: gpu-check.sh uses it only where the machine's own is older.
fallback_libs='^(libstdc\+\+|libgcc_s)[.]so'

stage=$(mktemp -d /tmp/minimllm-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root="$stage/minimllm-gpu"
mkdir -p "$root"/{tests,benchmarks,src,lib/fallback,lib/ucx,mpich/bin}

programs=()
for p in "$build"/tests/test_* "$build"/benchmarks/bench_* "$build"/src/minimllm; do
  [ -f "$p" ] && [ -x "$p" ] || continue
  rel=${p#"$build"/}
  cp "$p" "$root/$rel"
  strip --strip-unneeded "$root/$rel"
  programs+=("$root/$rel")
done
((${#programs[@]})) || { echo "gpu-bundle: no programs in $build" >&2; exit 2; }
# The MPI tests ctest runs at several rank counts (gpu-check.sh runs those on 2 ranks too).
sed -n 's/^add_test(\[=*\[\(test_[a-z_]*\)_np2\].*/\1/p' "$build/tests/CTestTestfile.cmake" | sort -u \
  >"$root/tests/mpi-tests.txt"

# MPICH's launcher and its proxy, and UCX's shared-memory transport module (loaded with dlopen).
for tool in mpiexec.hydra hydra_pmi_proxy; do cp "$(command -v $tool)" "$root/mpich/bin/"; done
ln -s mpiexec.hydra "$root/mpich/bin/mpiexec"
ucx_dir=/usr/lib/x86_64-linux-gnu/ucx
cp -L "$ucx_dir/libuct_cma.so.0" "$root/lib/ucx/"

# Shared libraries: the closure of ldd over programs, tools and modules.
declare -A copied=()
device_needed=()
for f in "${programs[@]}" "$root"/mpich/bin/mpiexec.hydra "$root"/mpich/bin/hydra_pmi_proxy "$root"/lib/ucx/*.so*; do
  while read -r name path; do
    [[ $name =~ $system_libs ]] && continue
    if [[ $name =~ $device_libs ]]; then device_needed+=("$name"); continue; fi
    [ -n "${copied[$name]:-}" ] && continue
    [ -f "$path" ] || { echo "gpu-bundle: $f needs $name, which is not found here" >&2; exit 1; }
    dest="$root/lib"
    [[ $name =~ $fallback_libs ]] && dest="$root/lib/fallback"
    cp -L "$path" "$dest/$name"
    copied[$name]=1
  done < <(ldd "$f" | awk '/=>/ {print $1, $3}')
done

cp -r inputs "$root/inputs"
{
  echo "minimllm GPU bundle"
  echo "source: $(git describe --always --dirty 2>/dev/null || echo unknown) ($(git rev-parse HEAD 2>/dev/null))"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from $(cd "$build" && pwd)"
  echo "compiler: $(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
  echo "nvcc: $(PATH=/usr/local/cuda/bin:$PATH nvcc --version 2>/dev/null | tail -1)"
  echo "device code: sm_80 machine code and compute_80 PTX (Kokkos's arch)$(grep -o 'sm_[0-9][0-9]*' \
    "$build"/nvcc-multi-sm 2>/dev/null | sort -u | sed 's/^/ + /' | tr -d '\n') machine code"
  echo "needed from the GPU machine: glibc, $(printf '%s\n' "${device_needed[@]}" | sort -u | tr '\n' ' ')"
  echo "files:"
  (cd "$root" && find . -type f -printf '%10s %p\n' | sort -k2)
} >"$root/MANIFEST"

mkdir -p "$out_dir"
bundle="$out_dir/minimllm-gpu.tar.xz"
tar -C "$stage" -cf - minimllm-gpu | xz -T"${MINIMLLM_BUILD_JOBS:-2}" -9 >"$bundle.tmp"
mv "$bundle.tmp" "$bundle"
bytes=$(stat -c %s "$bundle")
echo "gpu-bundle: $bundle: $((bytes / 1048576)) MiB compressed ($(du -sm "$root" | cut -f1) MiB unpacked," \
  "${#programs[@]} programs, ${#copied[@]} libraries)"

# Self-consistency: unpack the bundle elsewhere and resolve every program's libraries with only the
# bundle on LD_LIBRARY_PATH. Each must resolve inside the bundle, be glibc, or be the GPU machine's own;
# anything else resolving to this machine's /lib or /usr would be missing there.
check=$(mktemp -d /tmp/minimllm-bundle-check.XXXXXX)
trap 'rm -rf "$stage" "$check"' EXIT
tar -xJf "$bundle" -C "$check"
unpacked="$check/minimllm-gpu"
unresolved=0
for p in "$unpacked"/{tests/test_*,benchmarks/bench_*,src/minimllm,mpich/bin/mpiexec.hydra,mpich/bin/hydra_pmi_proxy,lib/ucx/*.so*}; do
  [ -f "$p" ] && [[ $p != *.txt ]] || continue
  bad=$(LD_LIBRARY_PATH="$unpacked/lib:$unpacked/lib/fallback" ldd "$p" 2>&1 | awk -v root="$unpacked/" \
    -v sys="$system_libs" -v device="$device_libs" '
      /=>/ { name = $1; path = $3
             if (name ~ sys || name ~ device) next
             if (path == "not" || index(path, root) != 1) print name " (" (path == "not" ? "not found" : path) ")" }')
  if [ -n "$bad" ]; then
    echo "gpu-bundle: ${p#"$check"/}: $(echo $bad)" >&2
    unresolved=$((unresolved + 1))
  fi
done
if ((unresolved)); then
  echo "gpu-bundle: $unresolved program(s) would miss libraries on the GPU machine" >&2
  exit 1
fi
echo "gpu-bundle: every library resolves inside the bundle, except glibc and the GPU machine's own:" \
  "$(printf '%s\n' "${device_needed[@]}" | sort -u | tr '\n' ' ')"
if ((bytes > max_mib * 1048576)); then
  echo "gpu-bundle: $bundle is over the $max_mib MiB budget" >&2
  exit 1
fi
