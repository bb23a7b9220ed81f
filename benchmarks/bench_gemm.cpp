// GEMM throughput per core (per GPU with cuBLAS): vendor BLAS against the portable Kokkos kernel, in fp32
// and with bf16 inputs (tensor cores on cuBLAS), on square sizes and on the shapes of the llm_heavy
// deck's model (width 512, MLP 2048, vocab 4096, 4096 rows): its forward products and both backward ones.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <string>

#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

// Arguments: backend, trans_a, trans_b, m, n, k, bf16 (C is m x n, op(A) m x k, op(B) k x n).
void BM_Gemm(benchmark::State& state) {
  const auto backend = static_cast<GemmBackend>(state.range(0));
  const Trans trans_a = state.range(1) ? Trans::yes : Trans::no;
  const Trans trans_b = state.range(2) ? Trans::yes : Trans::no;
  const int m = static_cast<int>(state.range(3));
  const int n = static_cast<int>(state.range(4));
  const int k = static_cast<int>(state.range(5));
  const GemmPrecision precision = state.range(6) ? GemmPrecision::bf16 : GemmPrecision::fp32;
  const t_mat a("a", trans_a == Trans::yes ? k : m, trans_a == Trans::yes ? m : k);
  const t_mat b("b", trans_b == Trans::yes ? n : k, trans_b == Trans::yes ? k : n);
  const t_mat c("c", m, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  Workspace workspace;  // bf16 rounds its operands into scratch: the arena fits them after the warm-up
  const auto call = [&] {
    const WorkspaceScope scope(workspace);
    gemm(trans_a, trans_b, 1.0f, a, b, 0.0f, c, backend, precision);
  };
  call();  // warm-up: handles, scratch
  Kokkos::fence();
  for (auto _ : state) {
    call();
    Kokkos::fence();
  }
  state.SetLabel(std::string(to_string(backend)) + " " + to_string(precision));
  state.counters["GFLOP"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void add_shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"backend", "ta", "tb", "m", "n", "k", "bf16"});
  // Only the backends this build can run: the vendor library of its memory space, and the portable kernel.
  const GemmBackend vendor = kMemSpaceIsHostAccessible ? GemmBackend::blas : GemmBackend::cublas;
  constexpr int64_t rows = 4096, width = 512, hidden = 2048, vocab = 4096;
  for (const int64_t bf16 : {0, 1}) {
    for (const GemmBackend backend : {vendor, GemmBackend::portable}) {
      const auto id = static_cast<int64_t>(backend);
      for (const int64_t size : {256, 1024, 2048, 8192}) {
        if (size == 8192 && backend != GemmBackend::cublas) continue;  // minutes on one core
        bench->Args({id, 0, 0, size, size, size, bf16});
      }
      // llm_heavy's block and head: forward Y = X W for QKV, attention output, MLP in, MLP out, LM head...
      for (const int64_t out : {3 * width, width, hidden}) bench->Args({id, 0, 0, rows, out, width, bf16});
      bench->Args({id, 0, 0, rows, width, hidden, bf16});
      bench->Args({id, 0, 0, rows, vocab, width, bf16});
      // ...and backward: dX = dY W^T (QKV, LM head), dW = X^T dY (QKV, MLP in).
      bench->Args({id, 0, 1, rows, width, 3 * width, bf16});
      bench->Args({id, 0, 1, rows, width, vocab, bf16});
      bench->Args({id, 1, 0, width, 3 * width, rows, bf16});
      bench->Args({id, 1, 0, width, hidden, rows, bf16});
    }
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
