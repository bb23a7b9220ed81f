#!/usr/bin/env bash
# On a GPU machine: runs every test and benchmark that exists in a CUDA build and records the results.
#   scripts/gpu-check.sh [BUILD_DIR] [REGEX]    (default build-cuda; REGEX: run only programs it matches)
# Writes to $OUT when set (the device tool's folder), else gpu-check-out/: gpu-check.log (everything),
# summary.txt (one line per run), bench_{gemm,attention,train}.json, quickstart.h5 (-np2.h5 with mpiexec).
# Exit status: 0 when every run passed, 1 otherwise, 2 when there is nothing to run.
#
# The GPU machines have CUDA 13, cmake and ninja, but no MPI, HDF5, OpenBLAS, yaml-cpp or fmt, and no
# package registry: build here with scripts/build-cuda.sh and carry BUILD_DIR (its programs and
# CMakeCache.txt suffice) plus the shared libraries they need that the machine lacks, in BUILD_DIR/lib
# (the "libraries" section of the log names any still missing). Without mpiexec every program runs as
# one MPI rank (MPICH singleton); with it, the MPI tests also run on 2 ranks (sharing the GPU).
# Per-program time limits: MINIMLLM_GPU_TEST_TIMEOUT (240 s), MINIMLLM_GPU_BENCH_TIMEOUT (300 s).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
only=${2:-.}
out=${OUT:-gpu-check-out}
test_limit=${MINIMLLM_GPU_TEST_TIMEOUT:-240}
bench_limit=${MINIMLLM_GPU_BENCH_TIMEOUT:-300}
summary="$out/summary.txt"
failures=0

section() { printf '\n==== %s\n' "$*"; }

# run NAME LIMIT COMMAND...: one run; its outcome and wall time go to the summary.
run() {
  local name=$1 limit=$2 start=$SECONDS status=ok rc
  shift 2
  section "$name: $*"
  timeout "$limit" "$@"
  rc=$?
  if ((rc == 124)); then
    status="TIMEOUT after ${limit}s"
  elif ((rc != 0)); then
    status="FAILED (exit $rc)"
  fi
  [ "$status" = ok ] || failures=$((failures + 1))
  printf '%-36s %-22s %5ds\n' "$name" "$status" $((SECONDS - start)) | tee -a "$summary"
}

prepare() {
  if [ ! -x "$build/tests/test_kernels" ] && [ ! -x "$build/src/minimllm" ]; then
    if ! command -v mpicxx >/dev/null; then
      echo "gpu-check: $build holds no CUDA build, and this machine cannot make one (no MPI): build it" \
        "with scripts/build-cuda.sh where the dependencies are, and carry it"
      return 2
    fi
    scripts/build-cuda.sh "$build" || return 2
  fi
  build=$(cd "$build" && pwd)
  # The build's absolute paths (ctest files, bench_train's inputs/) name the tree it was configured in;
  # where that path does not exist here, make it point at this tree.
  local configured
  configured=$(sed -n 's/^minimllm_SOURCE_DIR:STATIC=//p' "$build/CMakeCache.txt" 2>/dev/null)
  if [ -n "$configured" ] && [ ! -e "$configured" ]; then
    mkdir -p "$(dirname "$configured")" && ln -s "$PWD" "$configured" &&
      echo "gpu-check: linked $configured -> $PWD"
  fi
  if [ -d "$build/lib" ]; then export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  # The code is sm_80 (Kokkos 3.4 has no Hopper arch) with PTX, which the driver JIT-compiles for sm_90
  # at first launch; a large cache keeps that to once per machine.
  export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
}

main() {
  prepare || return
  section "machine"
  date -u
  nvidia-smi || echo "gpu-check: nvidia-smi failed"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  if command -v nvcc >/dev/null; then nvcc --version | tail -2; fi
  if command -v cuobjdump >/dev/null; then
    cuobjdump --list-elf --list-ptx "$build/tests/test_kernels" 2>/dev/null | head -4
  fi
  local mpiexec
  mpiexec=$(command -v mpiexec || true)
  echo "mpiexec: ${mpiexec:-none (every program runs as one rank)}"

  section "libraries"
  local p name missing programs=() runnable=()
  for p in "$build"/tests/test_* "$build"/src/minimllm "$build"/benchmarks/bench_*; do
    [ -f "$p" ] && [ -x "$p" ] && [[ $(basename "$p") =~ $only ]] && programs+=("$p")
  done
  for p in "${programs[@]}"; do
    missing=$(ldd "$p" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')
    if [ -n "$missing" ]; then
      echo "$(basename "$p"): missing $missing"
      printf '%-36s %s\n' "$(basename "$p")" "NOT RUN: missing libraries" >>"$summary"
      failures=$((failures + 1))
    else
      runnable+=("$p")
    fi
  done
  echo "${#runnable[@]} of ${#programs[@]} programs have every library they need"
  ((${#programs[@]})) || return 2

  for p in "${runnable[@]}"; do
    name=$(basename "$p")
    case "$p" in
      */tests/*)
        run "$name" "$test_limit" "$p"
        # ctest runs this program at several rank counts: an MPI test.
        if [ -n "$mpiexec" ] && grep -q "\[${name}_np2\]" "$build/tests/CTestTestfile.cmake" 2>/dev/null
        then
          run "${name}_np2" "$test_limit" "$mpiexec" -n 2 "$p"
        fi
        ;;
      */src/minimllm)
        run minimllm_quickstart "$test_limit" "$p" run --steps 6 --out "$out/quickstart.h5" --overwrite
        if [ -n "$mpiexec" ]; then
          run minimllm_quickstart_np2 "$test_limit" "$mpiexec" -n 2 "$p" run --steps 6 \
            --out "$out/quickstart-np2.h5" --overwrite
        fi
        ;;
      */bench_gemm | */bench_attention | */bench_train)
        run "$name" "$bench_limit" "$p" --benchmark_out="$out/$name.json" --benchmark_out_format=json
        ;;
      *)
        run "$name" "$bench_limit" "$p"
        ;;
    esac
  done

  section "summary ($build)"
  cat "$summary"
  ((failures == 0))
}

mkdir -p "$out"
: >"$summary"
main 2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
