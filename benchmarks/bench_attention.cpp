// Attention forward+backward at packed-token scale, beside the GEMM rates measured in the same run with the
// same threads (counters sgemm_GFLOP/s, portable_GFLOP/s, and BM_SgemmReference); counter of_gemm is the
// rate over the better of the two (target: >= 50% at 4096 packed tokens as 8 x 512, head dim 64). FLOPs count
// visible query-key pairs only: 4 per pair and feature forward, twice that backward (the recomputation of P
// in backward is not counted).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "minimllm/kernels/attention.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

// The GEMM rates of this machine with the execution space's threads, measured once before the benchmarks
// (best of 5 at 1024^3) for BLAS sgemm and for the portable Kokkos kernel; the attainable rate is the
// better of the two, and every attention rate is reported as a fraction of it from the same run.
double sgemm_gflops = 0.0, portable_gflops = 0.0, gemm_gflops = 0.0;

double measure_gemm_gflops(GemmBackend backend) {
  const int n = 1024;
  t_mat a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, backend);
    Kokkos::fence();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, t);  // the first call warms BLAS up
  }
  return 2.0 * n * n * n / best * 1e-9;
}

// GFLOP/s (Google Benchmark's rate over real time), the GEMM rates, and of_gemm: this benchmark's rate
// over the attainable GEMM rate, from the loop's own wall time.
void report_rate(benchmark::State& state, double flops, double seconds) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sgemm_GFLOP/s"] = sgemm_gflops;
  state.counters["portable_GFLOP/s"] = portable_gflops;
  if (seconds > 0.0)
    state.counters["of_gemm"] =
        flops * static_cast<double>(state.iterations()) / seconds * 1e-9 / gemm_gflops;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Packed batch of `samples` equal-length causal samples totalling `tokens`; kernels 0 = automatic (host
// kernels on host backends, team kernels on GPUs), 1 = host, 2 = teams.
void BM_AttentionForwardBackward(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0)), samples = static_cast<int>(state.range(1));
  const AttentionShape shape{static_cast<int>(state.range(2)), 64};
  const auto kernels = static_cast<AttentionKernels>(state.range(3));
  if (kernels == AttentionKernels::host && !kMemSpaceIsHostAccessible) {
    // One GPU thread per (sample, head) with large per-thread arrays: correct (tested), not a rate.
    state.SkipWithError("host kernels on a GPU: not a meaningful rate");
    return;
  }
  const int width = shape.heads * shape.head_dim;
  std::vector<int> lengths(samples, tokens / samples);
  const auto segs = make_self_segments(lengths, true);
  t_mat q("q", tokens, width), k("k", tokens, width), v("v", tokens, width), dout("dout", tokens, width);
  t_mat out("out", tokens, width), lse("lse", tokens, shape.heads);
  t_mat dq("dq", tokens, width), dk("dk", tokens, width), dv("dv", tokens, width);
  Kokkos::deep_copy(q, 0.1f), Kokkos::deep_copy(k, 0.2f), Kokkos::deep_copy(v, 0.3f),
      Kokkos::deep_copy(dout, 1.0f);
  Workspace workspace;  // as in a model pass: the kernels' temporaries are reused, not reallocated
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const WorkspaceScope scope(workspace);
    attention_forward(q, k, v, segs, shape, out, lse, kernels);
    attention_backward(dout, q, k, v, out, lse, segs, shape, dq, dk, dv, kernels);
    Kokkos::fence();
  }
  state.SetLabel(kernels == AttentionKernels::host    ? "host kernels"
                 : kernels == AttentionKernels::teams ? "team kernels"
                                                      : "automatic");
  const double seconds = seconds_since(t0);
  report_rate(state, 3.0 * attention_forward_flops(lengths, true, shape), seconds);  // fwd + 2x fwd for bwd
}
// 4096 tokens with 4 heads as in docs/PERFORMANCE.md, and 4096 as 8 x 512 with each kernel set explicitly
// (host kernels against team kernels on the same backend); 8192 packed tokens with llm_heavy's 8 heads of
// 64 (the GPU check's case): 16 samples of 512, and one sequence of 8192.
BENCHMARK(BM_AttentionForwardBackward)
    ->ArgNames({"tokens", "samples", "heads", "kernels"})
    ->Args({4096, 1, 4, 0})
    ->Args({4096, 8, 4, 0})
    ->Args({4096, 8, 4, 1})
    ->Args({4096, 8, 4, 2})
    ->Args({8192, 16, 8, 0})
    ->Args({8192, 1, 8, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_AttentionForward(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0));
  const AttentionShape shape{static_cast<int>(state.range(1)), 64};
  const int width = shape.heads * shape.head_dim;
  const auto segs = make_self_segments({tokens}, true);
  t_mat q("q", tokens, width), out("out", tokens, width), lse("lse", tokens, shape.heads);
  Kokkos::deep_copy(q, 0.1f);
  Workspace workspace;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const WorkspaceScope scope(workspace);
    attention_forward(q, q, q, segs, shape, out, lse);
    Kokkos::fence();
  }
  const double seconds = seconds_since(t0);
  report_rate(state, attention_forward_flops({tokens}, true, shape), seconds);
}
BENCHMARK(BM_AttentionForward)
    ->ArgNames({"tokens", "heads"})
    ->Args({4096, 4})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_SgemmReference(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  t_mat a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  for (auto _ : state) {
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmReference)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    using namespace minimllm;
    set_blas_threads(ExecSpace().concurrency());  // the same cores as the attention kernels
    sgemm_gflops = measure_gemm_gflops(GemmBackend::blas);
    portable_gflops = measure_gemm_gflops(GemmBackend::portable);
    gemm_gflops = std::max(sgemm_gflops, portable_gflops);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Kokkos::finalize();
  return 0;
}
