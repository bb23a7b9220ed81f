// What the distributed optimizer (parallel.distributed_optimizer, ZeRO-1) changes, on one model in one
// run: the optimizer's part of a step, from a finished backward to every rank holding the new
// parameters, and the training state each rank holds.
//   replicated  GradientSync::finish (one all-reduce after the backward, the loss sum, the norm) + AdamW
//               over every parameter;
//   zero1       GradientSync::finish (one reduce-scatter, the loss sum, the norm over the shards) + AdamW
//               over the own shard + the parameters' all-gather.
// Both start from the same per-rank gradient (a fixed pattern, restored before each repetition outside
// the timed region), alternate repetition by repetition so that drift in the machine's load hits both
// alike, and are timed fenced, max over ranks; medians of `reps` after a warm-up. Counters: the times
// (ms), zero1 / replicated, and bytes per rank of AdamW's moments and of the whole training state
// (parameters, gradients, moments, reduce-scatter buffer) with their ratios. Run with mpiexec -n 2;
// MINIMLLM_BENCH_REPS sets the repetitions (default 9). Decks: $MINIMLLM_INPUTS or the source tree's.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "minimllm/core/statistics.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/step/optimizer.hpp"
#include "minimllm/step/step_executor.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

// A rank-dependent gradient of moderate size (what a backward leaves), on the device.
t_vec pattern_gradient(std::size_t count, int rank) {
  t_vec g("bench_optimizer::gradient", count);
  Kokkos::parallel_for(
      "bench_optimizer::pattern", count, KOKKOS_LAMBDA(const std::size_t i) {
        g(i) = 1e-3f * static_cast<float>(static_cast<int>((i * 7919 + 13 * rank) % 2001) - 1000) / 1000.0f;
      });
  return g;
}

void BM_OptimizerStep(benchmark::State& state, const char* deck) {
  RunConfig config = load_run_config(benchmark_inputs_dir() + "/" + deck);
  const World world = World::of(MPI_COMM_WORLD);
  Model model(config.model, config.seed);
  CommPool pool(MPI_COMM_WORLD, 4, choose_collectives(MPI_COMM_WORLD, config.runtime.collectives).factory);
  const t_vec gradient = pattern_gradient(model.parameter_count(), world.rank);
  GradSyncOptions all_reduce;
  all_reduce.overlap = false;  // no backward to overlap with here
  GradSyncOptions reduce_scatter = all_reduce;
  reduce_scatter.reduce_scatter = true;
  GradientSync replicated_sync(model, all_reduce), zero1_sync(model, reduce_scatter);
  AdamW replicated(model, config.optimizer), zero1(model, config.optimizer, pool.gradients());
  const int reps = benchmark_repetitions(9);
  std::vector<double> seconds[2];
  for (auto _ : state) {
    for (int r = 0; r <= reps; ++r) {
      for (const bool sharded : {false, true}) {
        Kokkos::deep_copy(model.grads(), gradient);
        Kokkos::fence();
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        GradientSync& sync = sharded ? zero1_sync : replicated_sync;
        StepOutcome outcome;
        sync.begin(*pool.gradients());
        sync.finish(model, *pool.world(), outcome);
        (sharded ? zero1 : replicated).step(model, r);
        Kokkos::fence();
        const double t = max_over_ranks(MPI_Wtime() - t0);
        if (r > 0) seconds[sharded].push_back(t);  // r = 0: warm-up
      }
    }
    state.SetIterationTime(median(seconds[1]));
  }
  const std::size_t n = model.parameter_count();
  const double t_replicated = median(seconds[0]), t_zero1 = median(seconds[1]);
  state.counters["ranks"] = world.size;
  state.counters["parameters_M"] = n / 1e6;
  state.counters["t_replicated_ms"] = 1e3 * t_replicated;
  state.counters["t_zero1_ms"] = 1e3 * t_zero1;
  state.counters["time_zero1_over_replicated"] = t_replicated > 0.0 ? t_zero1 / t_replicated : 0.0;
  // Per rank (rank 0 reports: its shard is the largest).
  state.counters["moments_MiB_replicated"] = replicated.state_bytes() / 1048576.0;
  state.counters["moments_MiB_zero1"] = zero1.state_bytes() / 1048576.0;
  state.counters["moments_zero1_over_replicated"] = zero1.state_bytes() / replicated.state_bytes();
  const double state_replicated = training_state_bytes(n, 1),
               state_zero1 = training_state_bytes(n, world.size);
  state.counters["state_MiB_replicated"] = state_replicated / 1048576.0;
  state.counters["state_MiB_zero1"] = state_zero1 / 1048576.0;
  state.counters["state_zero1_over_replicated"] = state_zero1 / state_replicated;
}
BENCHMARK_CAPTURE(BM_OptimizerStep, quickstart, "quickstart.yaml")
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_OptimizerStep, llm_heavy, "llm_heavy.yaml")
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
