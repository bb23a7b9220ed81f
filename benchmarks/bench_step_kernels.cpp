// The step's non-GEMM kernels at small-batch scale: AdamW's fused pass over a flat buffer (GB/s over the
// 28 bytes each parameter moves: p, g, m, v read, p, m, v written), the softmax cross-entropy over a
// [rows, vocab] logits block (GB/s over one read and one write of it), and the LM head fused with the loss
// (GFLOP/s of its three GEMMs; of_gemm: over the BLAS sgemm rate measured in the same run with the same
// threads). Thread scaling: run with OMP_NUM_THREADS=1 and 2 on the OpenMP backend.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/loss.hpp"
#include "minimllm/kernels/optimizer.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

double sgemm_gflops = 0.0;

double measure_sgemm_gflops() {
  const int n = 1024;
  t_mat a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c);
    Kokkos::fence();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, t);
  }
  return 2.0 * n * n * n / best * 1e-9;
}

t_mat filled(const char* label, int rows, int cols, float scale) {
  t_mat m(std::string(label), rows, cols);
  Kokkos::parallel_for(
      "bench::fill", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(int r) {
        for (int c = 0; c < cols; ++c) m(r, c) = scale * static_cast<float>((r * 7 + c * 13) % 97 - 48);
      });
  return m;
}

t_ivec targets_for(int rows, int vocab) {
  t_ivec t("targets", rows);
  Kokkos::parallel_for(
      "bench::targets", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(int r) { t(r) = (r * 31) % vocab; });
  return t;
}

void BM_AdamW(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  t_vec p("p", n), g("g", n), m("m", n), v("v", n);
  Kokkos::deep_copy(p, 0.5f), Kokkos::deep_copy(g, 0.01f);
  AdamWHyper hyper;
  hyper.weight_decay = 0.1f;
  int step = 1;
  for (auto _ : state) {
    adamw_update(p, g, m, v, hyper, step++, static_cast<std::size_t>(n) - 1024);
    Kokkos::fence();
  }
  state.counters["GB/s"] = benchmark::Counter(28.0 * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->ArgName("params")->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SoftmaxXent(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), vocab = static_cast<int>(state.range(1));
  const t_mat logits = filled("logits", rows, vocab, 0.05f);
  const t_mat dlogits("dlogits", rows, vocab);
  const t_ivec targets = targets_for(rows, vocab);
  const t_vec losses("losses", rows);
  for (auto _ : state) {
    softmax_xent_forward_backward(logits, targets, 1.0f, losses, dlogits);
    Kokkos::fence();
  }
  state.counters["GB/s"] =
      benchmark::Counter(8.0 * rows * vocab * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SoftmaxXent)
    ->ArgNames({"rows", "vocab"})
    ->Args({256, 50304})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The fused LM head + loss over `rows` rows of width `width` (chunks of lm_head_chunk_rows(vocab) rows).
void BM_LmHeadXent(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), width = static_cast<int>(state.range(1));
  const int vocab = static_cast<int>(state.range(2));
  const t_mat normed = filled("normed", rows, width, 0.01f), lm_head = filled("lm_head", width, vocab, 0.01f);
  const t_mat d_lm_head("d_lm_head", width, vocab), d_normed("d_normed", rows, width);
  const t_ivec targets = targets_for(rows, vocab);
  const t_vec losses("losses", rows);
  Workspace workspace;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const WorkspaceScope scope(workspace);
    lm_head_xent_forward_backward(normed, lm_head, targets, 1.0f, losses, d_lm_head, d_normed,
                                  GemmPrecision::fp32);
    Kokkos::fence();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 6.0 * rows * width * static_cast<double>(vocab);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["sgemm_GFLOP/s"] = sgemm_gflops;
  state.counters["of_gemm"] = flops * static_cast<double>(state.iterations()) / seconds * 1e-9 / sgemm_gflops;
  state.counters["chunk_rows"] = lm_head_chunk_rows(vocab);
}
BENCHMARK(BM_LmHeadXent)
    ->ArgNames({"rows", "width", "vocab"})
    ->Args({1024, 256, 50304})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    using namespace minimllm;
    set_blas_threads(ExecSpace().concurrency());
    sgemm_gflops = measure_sgemm_gflops();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Kokkos::finalize();
  return 0;
}
