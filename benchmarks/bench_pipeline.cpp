// Pipeline parallelism's bubble: a text-only model of 4 LLM blocks (width 256, 4 heads) trained
// for a few steps on one unit of 2 stages (parallel.pp = 2, 2 ranks), each step m equal samples of 256
// tokens packed one per micro-batch (static, parallel.tokens_per_rank = 256), m = 1, 2, 4, 8. Counters:
// the measured bubble (/steps pipeline_bubble: 1 - the stages' mean busy time in their 1F1B schedules
// over the longest stage's span), the ideal 1F1B bubble (p - 1) / (m + p - 1) beside it, and the step time
// (median after the warm-up step). The measured bubble also holds the transfers and the stages' imbalance
// (the first stage embeds, the last runs the LM head and the loss). Run with mpiexec -n 2.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/driver/trainer.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

constexpr int kTokens = 256;

RunConfig pipeline_deck(int micro_batches) {
  RunConfig config = parse_run_config(
      "name: pipeline_bubble\n"
      "seed: 3\n"
      "steps: 5\n"
      "model:\n"
      "  init_std: 0.02\n"
      "  encoder: {width: 32, heads: 2, layers: 1, mlp_ratio: 2, patch: 4, channels: 3}\n"
      "  llm: {width: 256, heads: 4, layers: 4, mlp_ratio: 4, vocab: 256}\n"
      "data:\n"
      "  global_batch: 1\n"
      "  text: {median: 256, sigma: 0.1, min: 256, max: 256}\n"
      "  images: {mean_per_sample: 0.0, max_per_sample: 0, min_side: 8, max_side: 8, classes: 2}\n"
      "parallel: {policy: static, pp: 2, tokens_per_rank: 256}\n"
      "runtime: {peak_gflops_per_rank: 100, blas_threads: 1}\n",
      "<bench_pipeline>");
  config.data.global_batch = micro_batches;
  return config;
}

void BM_PipelineBubble(benchmark::State& state) {
  const World world = World::of(MPI_COMM_WORLD);
  if (world.size != 2) {
    state.SkipWithError("run with mpiexec -n 2");
    return;
  }
  const int micro_batches = static_cast<int>(state.range(0));
  const RunConfig config = pipeline_deck(micro_batches);
  std::vector<double> bubble, ideal, step;
  for (auto _ : state) {
    const TrainResult result = train(config, world, {});
    for (size_t s = 1; s < result.steps.size(); ++s) {  // after the warm-up step
      bubble.push_back(result.steps[s].pipeline_bubble);
      ideal.push_back(result.steps[s].ideal_bubble);
      step.push_back(result.steps[s].step_seconds);
    }
    state.SetIterationTime(median(step));
  }
  state.counters["micro_batches"] = micro_batches;
  state.counters["measured_bubble"] = median(bubble);
  state.counters["ideal_bubble"] = median(ideal);
  state.counters["step_ms"] = 1e3 * median(step);
  state.counters["tokens"] = micro_batches * kTokens;
}
BENCHMARK(BM_PipelineBubble)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
