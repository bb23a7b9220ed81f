#!/usr/bin/env bash
# On a GPU machine: runs the test suite and the GPU benchmarks of a CUDA build and records the results.
#   scripts/gpu-check.sh [BUNDLE.tar.xz | BUILD_DIR] [REGEX]
# Default: gpu-bundle/minimllm-gpu.tar.xz when it exists (made here by scripts/gpu-bundle.sh), else
# build-cuda/. REGEX: run only the programs whose name it matches.
#
# With the device tool, in one call:  run(command="scripts/gpu-check.sh", carry=["gpu-bundle"])
# The GPU machines have CUDA 13, cmake and ninja but no MPI, HDF5, BLAS, yaml-cpp or fmt, and no package
# registry; the bundle brings those (and mpiexec), the machine supplies glibc, the driver, cuBLAS and
# NCCL (found below, in the CUDA toolkit or in Python's nvidia-* packages).
#
# Writes to $OUT when set (the device tool's folder), else gpu-check-out/, three files (the tool returns
# at most 8): results.txt (one line per run, then the key numbers), gpu-check.log (everything) and
# details.tar.gz (benchmark JSON, per-program logs, the quickstart HDF5 files).
# Runs: the machine and library checks; the tests of the GPU paths (MPI tests also on 2 ranks, which
# share the GPU and so use MPI collectives staged through the host, not NCCL); bench_gemm (llm_heavy's
# shapes, fp32 and bf16), bench_attention (8192 packed tokens), bench_train (llm_heavy.yaml, fp32 and
# bf16), bench_comm (NCCL communicator creation); quickstart on 1 and 2 ranks in fp32 and bf16; the
# remaining tests.
# The whole run keeps within MINIMLLM_GPU_BUDGET seconds (default 540, under the tool's 600): each
# program's limit is cut to what is left, and programs that no longer fit are recorded as SKIPPED.
# Exit status: 0 when every run passed, 1 otherwise, 2 when there is nothing to run.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${1:-}
only=${2:-.}
if [ -z "$target" ]; then
  target=build-cuda
  [ -f gpu-bundle/minimllm-gpu.tar.xz ] && target=gpu-bundle/minimllm-gpu.tar.xz
fi
out=${OUT:-gpu-check-out}
budget=${MINIMLLM_GPU_BUDGET:-540}
test_limit=${MINIMLLM_GPU_TEST_TIMEOUT:-120}
bench_limit=${MINIMLLM_GPU_BENCH_TIMEOUT:-120}
work=$(mktemp -d /tmp/gpu-check.XXXXXX)  # details, packed at the end
results="$out/results.txt"
failures=0
start_time=$SECONDS

section() { printf '\n==== %s\n' "$*"; }

# run NAME LIMIT COMMAND...: one run, its output also in $work/NAME.log; outcome and time to results.
run() {
  local name=$1 limit=$2 started=$SECONDS status=ok rc left
  shift 2
  left=$((budget - (SECONDS - start_time) - 15))  # keep 15 s for the summary
  if ((left < 10)); then
    printf '%-36s %-22s %5ds\n' "$name" "SKIPPED (budget)" 0 | tee -a "$results"
    return
  fi
  ((limit > left)) && limit=$left
  section "$name (limit ${limit}s): $*"
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$work/$name.log"
  rc=${PIPESTATUS[0]}
  if ((rc == 124 || rc == 137)); then
    status="TIMEOUT after ${limit}s"
  elif ((rc != 0)); then
    status="FAILED (exit $rc)"
  fi
  [ "$status" = ok ] || failures=$((failures + 1))
  printf '%-36s %-22s %5ds\n' "$name" "$status" $((SECONDS - started)) | tee -a "$results"
}

# The directory of the first file named $1 among the places a CUDA 13 machine keeps its libraries.
find_lib_dir() {
  local dir found
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
    /usr/lib/x86_64-linux-gnu; do
    [ -e "$dir/$1" ] && { echo "$dir"; return; }
  done
  found=$(ldconfig -p 2>/dev/null | awk -v lib="$1" '$1 == lib {print $NF; exit}')
  [ -n "$found" ] && { dirname "$found"; return; }
  # Python's nvidia-* wheels (PyTorch's CUDA 13 runtime).
  found=$(find /opt /usr/local /usr/lib /root -name "$1" 2>/dev/null | grep -m1 nvidia)
  [ -n "$found" ] && dirname "$found"
}

prepare_bundle() {
  local bundle=$1 root=/tmp/minimllm-gpu dir lib missing
  section "bundle $bundle"
  rm -rf "$root" && tar -xJf "$bundle" -C /tmp || return 2
  build=$root
  head -8 "$root/MANIFEST"
  local dirs=("$root/lib")
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    [ -e "$root/lib/$lib" ] && continue
    dir=$(find_lib_dir "$lib")
    echo "$lib: ${dir:-NOT FOUND}"
    [ -n "$dir" ] && [[ " ${dirs[*]} " != *" $dir "* ]] && dirs+=("$dir")
  done
  export LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Debian 12's C++ runtime only where the machine's own is missing or older than the programs need.
  missing=$(ldd "$root/tests/test_kernels" 2>&1 | grep -E "not found|GLIBCXX|CXXABI|GCC_" || true)
  if [ -n "$missing" ]; then
    echo "using the bundled C++ runtime: $missing"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$root/lib/fallback"
  fi
  export PATH="$root/mpich/bin:$PATH"
  export UCX_MODULE_DIR="$root/lib/ucx"
  export HYDRA_LAUNCHER=fork  # one machine: no ssh
  export MINIMLLM_INPUTS="$root/inputs"
  # MPICH's mpiexec connects back to this host by name.
  if ! getent hosts "$(hostname)" >/dev/null 2>&1; then
    echo "127.0.0.1 $(hostname)" >>/etc/hosts && echo "added $(hostname) to /etc/hosts"
  fi
  mpi_tests="$root/tests/mpi-tests.txt"
}

prepare_build() {
  if [ ! -x "$build/tests/test_kernels" ] && [ ! -x "$build/src/minimllm" ]; then
    echo "gpu-check: $build holds no CUDA build; make a bundle with scripts/gpu-bundle.sh where the" \
      "dependencies are (scripts/build-cuda.sh first) and carry gpu-bundle/"
    return 2
  fi
  build=$(cd "$build" && pwd)
  if [ -d "$build/lib" ]; then export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  export MINIMLLM_INPUTS="$repo/inputs"
  mpi_tests="$work/mpi-tests.txt"
  sed -n 's/^add_test(\[=*\[\(test_[a-z_]*\)_np2\].*/\1/p' "$build/tests/CTestTestfile.cmake" 2>/dev/null |
    sort -u >"$mpi_tests"
}

# Key numbers from the benchmark JSON files, appended to results.txt.
report_numbers() {
  python3 - "$work" <<'EOF' 2>&1
import json, os, sys
work = sys.argv[1]
def load(name):
    path = os.path.join(work, name + ".json")
    try:
        return json.load(open(path))["benchmarks"]
    except Exception as e:
        print(f"{name}: no results ({e.__class__.__name__})")
        return []
for b in load("bench_gemm"):
    if b.get("run_type") == "iteration":
        print(f"gemm {b['name'].split('/real_time')[0]:<70} {b.get('label',''):<14} {b.get('GFLOP', 0) / 1e3:9.1f} TFLOP/s")
for b in load("bench_attention"):
    if b.get("run_type") == "iteration":
        if b.get("error_occurred"):
            print(f"attention {b['name']:<60} skipped: {b.get('error_message', '')}")
            continue
        ratio = b.get('GFLOP/s', 0) / b['sgemm_GFLOP/s'] if b.get('sgemm_GFLOP/s') else 0
        print(f"attention {b['name']:<60} {b['real_time']:10.2f} {b['time_unit']}  {b.get('GFLOP/s', 0) / 1e3:8.2f} TFLOP/s"
              f" = {ratio:.2f} x fp32 GEMM 1024^3 (target at 8192 tokens >= 0.4)")
for b in load("bench_train"):
    if b.get("run_type") == "iteration":
        print(f"train {b['name']:<44} MFU {100 * b.get('MFU', 0):5.1f}% of {b.get('peak_GFLOP/s', 0) / 1e3:.1f} TFLOP/s "
              f"| step {b.get('step_GFLOP/s', 0) / 1e3:.2f} TFLOP/s = {b.get('step_over_gemm', 0):.2f} x GEMM at model shapes "
              f"({b.get('gemm_model_GFLOP/s', 0) / 1e3:.2f} TFLOP/s; target >= 0.5) "
              f"| {b.get('tokens/s', 0):,.0f} tokens/s | {b.get('device_allocs/step', 0):.0f} device allocations/step "
              f"| rss/estimate {b.get('rss_over_estimate', 0):.2f} | {b.get('label','')}")
for b in load("bench_comm"):
    if b.get("run_type") == "iteration" and "Create" in b["name"]:
        print(f"comm {b['name']:<50} {b['real_time']:10.3f} {b['time_unit']}")
EOF
}

main() {
  # minimllm's kernels carry sm_80 and sm_90 machine code; Kokkos's own few are sm_80 + PTX, which the
  # driver compiles for newer GPUs at first launch (Kokkos then warns that it runs sm_80 kernels on a
  # newer device: expected, see scripts/patches/): a large cache keeps that to once per machine.
  export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
  case "$target" in
    *.tar.xz) prepare_bundle "$target" || return 2 ;;
    *) build=$target; prepare_build || return 2 ;;
  esac

  section "machine"
  date -u
  nvidia-smi || echo "gpu-check: nvidia-smi failed"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  if command -v nvcc >/dev/null; then nvcc --version | tail -2; fi
  if command -v cuobjdump >/dev/null; then
    echo "device code in test_kernels:"; cuobjdump --list-elf --list-ptx "$build/tests/test_kernels" 2>/dev/null | head -6
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
      printf '%-36s %s\n' "$(basename "$p")" "NOT RUN: missing libraries" | tee -a "$results"
      failures=$((failures + 1))
    else
      runnable+=("$p")
    fi
  done
  echo "${#runnable[@]} of ${#programs[@]} programs have every library they need"
  ((${#programs[@]})) || return 2
  if [ -n "$mpiexec" ]; then run mpi_hello 30 "$mpiexec" -n 2 hostname; fi

  # Order: the tests of the GPU paths, then the benchmarks the check is for, then the slower tests, so
  # that a short budget loses the least.
  local order=(test_device test_kernels test_attention test_transfer test_comm_pool test_boundary_exchange
    test_training bench_gemm bench_attention bench_train bench_comm minimllm test_layouts
    test_model_gradients test_)
  local done_list=" " want
  for want in "${order[@]}"; do
    for p in "${runnable[@]}"; do
      name=$(basename "$p")
      [[ $done_list == *" $name "* ]] && continue
      [[ $name == "$want"* ]] || continue
      done_list+="$name "
      case "$name" in
        test_*)
          run "$name" "$test_limit" "$p"
          if [ -n "$mpiexec" ] && grep -qx "$name" "$mpi_tests" 2>/dev/null; then
            run "${name}_np2" "$test_limit" "$mpiexec" -n 2 "$p"
          fi
          ;;
        minimllm)
          for precision in fp32 bf16; do
            sed "s/^runtime:.*/runtime: {peak_gflops_per_rank: 0, blas_threads: 1, precision: $precision}/" \
              "$MINIMLLM_INPUTS/quickstart.yaml" >"$work/quickstart-$precision.yaml"
            run "quickstart_$precision" "$test_limit" "$p" run "$work/quickstart-$precision.yaml" --steps 20 \
              --out "$work/quickstart-$precision.h5" --overwrite
          done
          if [ -n "$mpiexec" ]; then
            run quickstart_fp32_np2 "$test_limit" "$mpiexec" -n 2 "$p" run "$work/quickstart-fp32.yaml" \
              --steps 20 --out "$work/quickstart-fp32-np2.h5" --overwrite
          fi
          ;;
        bench_gemm | bench_attention | bench_train)
          run "$name" "$bench_limit" "$p" --benchmark_min_time=0.2 --benchmark_out="$work/$name.json" \
            --benchmark_out_format=json
          ;;
        bench_comm)
          run "$name" "$bench_limit" "$p" --benchmark_filter=Create --benchmark_out="$work/$name.json" \
            --benchmark_out_format=json
          ;;
        *)
          run "$name" "$bench_limit" "$p"
          ;;
      esac
    done
  done

  section "numbers"
  report_numbers | tee -a "$results"
  section "summary ($build, $((SECONDS - start_time)) s)"
  cat "$results"
  ((failures == 0))
}

mkdir -p "$out"
: >"$results"
main 2>&1 | tee "$out/gpu-check.log"
status=${PIPESTATUS[0]}
tar -C "$work" -czf "$out/details.tar.gz" . 2>/dev/null
rm -rf "$work"
exit "$status"
