// GEMM throughput per core (per GPU with cuBLAS): vendor BLAS against the portable Kokkos kernel, on square
// sizes and the transformer's projection shapes (forward and both backward products).
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>

#include "minimllm/kernels/gemm.hpp"

namespace minimllm {
namespace {

// Arguments: backend, trans_a, trans_b, m, n, k (C is m x n, op(A) m x k, op(B) k x n).
void BM_Gemm(benchmark::State& state) {
  const auto backend = static_cast<GemmBackend>(state.range(0));
  const Trans trans_a = state.range(1) ? Trans::yes : Trans::no;
  const Trans trans_b = state.range(2) ? Trans::yes : Trans::no;
  const int m = static_cast<int>(state.range(3));
  const int n = static_cast<int>(state.range(4));
  const int k = static_cast<int>(state.range(5));
  const t_mat a("a", trans_a == Trans::yes ? k : m, trans_a == Trans::yes ? m : k);
  const t_mat b("b", trans_b == Trans::yes ? n : k, trans_b == Trans::yes ? k : n);
  const t_mat c("c", m, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  for (auto _ : state) {
    gemm(trans_a, trans_b, 1.0f, a, b, 0.0f, c, backend);
    Kokkos::fence();
  }
  state.SetLabel(to_string(backend));
  state.counters["GFLOP"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void add_shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"backend", "ta", "tb", "m", "n", "k"});
  // Only the backends this build can run: the vendor library of its memory space, and the portable kernel.
  const GemmBackend vendor = kMemSpaceIsHostAccessible ? GemmBackend::blas : GemmBackend::cublas;
  for (const GemmBackend backend : {vendor, GemmBackend::portable}) {
    const auto id = static_cast<int64_t>(backend);
    for (const int64_t size : {256, 512, 1024, 2048}) bench->Args({id, 0, 0, size, size, size});
    // Projection 512 -> 1536 over 4096 tokens: forward Y = X W, then dX = dY W^T and dW = X^T dY.
    bench->Args({id, 0, 0, 4096, 1536, 512});
    bench->Args({id, 0, 1, 4096, 512, 1536});
    bench->Args({id, 1, 0, 512, 1536, 4096});
  }
}

BENCHMARK(BM_Gemm)->Apply(add_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace minimllm

// BENCHMARK_MAIN would leave Kokkos uninitialised.
int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  minimllm::set_blas_threads(1);  // per-core numbers, comparable with the single-threaded portable kernel
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Kokkos::finalize();
  return 0;
}
