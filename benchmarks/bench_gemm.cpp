// GEMM throughput per core (per GPU with cuBLAS): vendor BLAS against the portable Kokkos kernel, in fp32
// and with bf16 inputs (tensor cores on cuBLAS), on square sizes and on the shapes of the llm_heavy
// deck's model (width 512, MLP 2048, vocab 4096, 4096 rows): its forward products and both backward ones.
// BM_GemmVersus runs both backends in every iteration at those shapes and reports their rates, the
// portable kernel's ratio to the vendor's and the fraction of the CPU's dense peak, as counters.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/metrics/cpu_peak.hpp"

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Arguments: trans_a, trans_b, m, n, k (fp32). Vendor and portable alternate within each iteration, so
// their ratio is measured under the same load (the machine is shared); rates are medians of the calls.
void BM_GemmVersus(benchmark::State& state) {
  const Trans trans_a = state.range(0) ? Trans::yes : Trans::no;
  const Trans trans_b = state.range(1) ? Trans::yes : Trans::no;
  const int m = static_cast<int>(state.range(2));
  const int n = static_cast<int>(state.range(3));
  const int k = static_cast<int>(state.range(4));
  const t_mat a("a", trans_a == Trans::yes ? k : m, trans_a == Trans::yes ? m : k);
  const t_mat b("b", trans_b == Trans::yes ? n : k, trans_b == Trans::yes ? k : n);
  const t_mat c("c", m, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  const GemmBackend vendor = kMemSpaceIsHostAccessible ? GemmBackend::blas : GemmBackend::cublas;
  std::vector<double> seconds[2];
  const auto timed = [&](GemmBackend backend) {
    Kokkos::fence();
    const double t0 = now_seconds();
    gemm(trans_a, trans_b, 1.0f, a, b, 0.0f, c, backend);
    Kokkos::fence();
    return now_seconds() - t0;
  };
  timed(vendor), timed(GemmBackend::portable);  // warm-up
  for (auto _ : state) {
    seconds[0].push_back(timed(vendor));
    seconds[1].push_back(timed(GemmBackend::portable));
  }
  const double flop = 2.0 * m * n * k;
  const double vendor_gflops = flop / median(seconds[0]) * 1e-9;
  const double portable_gflops = flop / median(seconds[1]) * 1e-9;
  state.SetLabel(std::string(to_string(vendor)) + " vs portable fp32");
  state.counters["vendor_GFLOPs"] = vendor_gflops;
  state.counters["portable_GFLOPs"] = portable_gflops;
  state.counters["portable_over_best"] = portable_gflops / std::max(vendor_gflops, portable_gflops);
  if (kMemSpaceIsHostAccessible) {
    if (const auto peak = cpu_dense_peak(detect_cpu(), Precision::fp32, 1)) {  // one BLAS thread, one core
      state.counters["vendor_peak_fraction"] = vendor_gflops / peak->gflops;
      state.counters["portable_peak_fraction"] = portable_gflops / peak->gflops;
    }
  }
}

void add_model_shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"ta", "tb", "m", "n", "k"});
  constexpr int64_t rows = 4096, width = 512, hidden = 2048, vocab = 4096;
  bench->Args({0, 0, 1024, 1024, 1024});
  for (const int64_t out : {3 * width, width, hidden}) bench->Args({0, 0, rows, out, width});
  bench->Args({0, 0, rows, width, hidden});
  bench->Args({0, 0, rows, vocab, width});
  bench->Args({0, 1, rows, width, 3 * width});
  bench->Args({0, 1, rows, width, vocab});
  bench->Args({1, 0, width, 3 * width, rows});
  bench->Args({1, 0, width, hidden, rows});
}

BENCHMARK(BM_GemmVersus)
    ->Apply(add_model_shapes)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(7);

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
