// How much of the gradient all-reduce the backward pass hides (runtime.overlap_grad_sync). The same step
// (a deck's step 0, data parallel: one LLM group per rank) runs in three modes, interleaved so that drift
// in the machine's load hits all three alike:
//   overlap  buckets all-reduced during the backward (the default),
//   serial   one all-reduce after the backward,
//   nosync   no gradient all-reduce at all (the floor),
// each timed as run_step's wall time, fenced, max over ranks; medians of `reps` steps after a warm-up.
//   hidden = 1 - (t_overlap - t_nosync) / (t_serial - t_nosync)
// is the share of the all-reduce's time that overlapping removes from the step. Beside it, the sync's tail:
// from the end of the slowest rank's backward to the end of the step's sync (so without waiting for a
// slower rank's compute, which dominates grad_sync_seconds under imbalance): sync_serial (the whole
// blocking all-reduce), exposed_overlap (what is left of the overlapped one) and
// hidden_tail = 1 - exposed_overlap / sync_serial, which ignores any slow-down of the backward itself (the
// price of overlap when progress and compute share a core). Run with mpiexec -n 2;
// MINIMLLM_BENCH_REPS sets the repetitions (default 5). Decks: $MINIMLLM_INPUTS or the source tree's.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "minimllm/core/statistics.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/plan/step_plan.hpp"
#include "minimllm/step/run_step.hpp"
#include "minimllm/step/step_comms.hpp"
#include "minimllm/step/step_inputs.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

enum Mode { kOverlap, kSerial, kNoSync, kModes };

// bucket_mb < 0: the deck's runtime.grad_bucket_mb.
void BM_GradSyncOverlap(benchmark::State& state, const char* deck, double bucket_mb) {
  RunConfig config = load_run_config(benchmark_inputs_dir() + "/" + deck);
  set_blas_threads(config.runtime.blas_threads);
  const World world = World::of(MPI_COMM_WORLD);
  const Sampler sampler(config);
  Model model(config.model, config.seed, gemm_precision_from_string(config.runtime.precision));
  CommPool pool(MPI_COMM_WORLD, 4, choose_collectives(MPI_COMM_WORLD, config.runtime.collectives).factory);
  if (bucket_mb < 0.0) bucket_mb = config.runtime.grad_bucket_mb;
  std::array<std::unique_ptr<StepExecutor>, kModes> executors = {
      std::make_unique<StepExecutor>(model, GradSyncOptions{true, bucket_mb, false}),
      std::make_unique<StepExecutor>(model, GradSyncOptions{false, bucket_mb, false}),
      std::make_unique<StepExecutor>(model, GradSyncOptions{false, bucket_mb, true})};
  const GlobalBatch batch = sampler.batch(0);
  const PlannedStep planned = planned_step(batch, make_grouped_plan(batch, std::vector<int>(world.size, 1)),
                                           world.rank, world.size, model.linear_weight_in_attention_pairs());
  const int reps = benchmark_repetitions(5);
  std::array<std::vector<double>, kModes> step, sync;
  int started_early = 0;
  for (auto _ : state) {
    for (int r = 0; r <= reps; ++r) {
      for (int mode = 0; mode < kModes; ++mode) {
        MPI_Barrier(MPI_COMM_WORLD);
        Kokkos::fence();
        const double t0 = MPI_Wtime();
        // run_step's stages, with the end of this rank's backward timed between them.
        StepExecutor& executor = *executors[mode];
        const StepComms comms = acquire_step_comms(pool, planned.plan);
        StepInputs inputs =
            upload_step_inputs(sampler, planned, comms, config.model.llm.width, config.model.llm.width);
        executor.gradient_sync().begin(*comms.gradients);
        StepOutcome o = executor.run(planned.work, inputs, planned.plan.placement);
        Kokkos::fence();
        const double backward_end = MPI_Wtime();
        executor.gradient_sync().finish(model, *comms.world, o);
        Kokkos::fence();
        const double t1 = MPI_Wtime();
        const double t = max_over_ranks(t1 - t0);
        // The sync time after the slowest rank's backward ended: the part of grad_sync that is not
        // waiting for another rank's compute (the ranks share one node's clock).
        const double s = max_over_ranks(t1) - max_over_ranks(backward_end);
        if (r == 0) continue;  // warm-up
        step[mode].push_back(t);
        sync[mode].push_back(s);
      }
    }
    started_early = executors[kOverlap]->gradient_sync().started_early();
    state.SetIterationTime(median(step[kOverlap]));
  }
  const double t_overlap = median(step[kOverlap]), t_serial = median(step[kSerial]),
               t_nosync = median(step[kNoSync]);
  const double sync_serial = median(sync[kSerial]), exposed = median(sync[kOverlap]);
  state.counters["ranks"] = world.size;
  state.counters["bucket_MiB"] = bucket_mb;
  state.counters["grad_MiB"] = model.grads().extent(0) * 4.0 / (1 << 20);
  state.counters["buckets"] = static_cast<double>(executors[kOverlap]->gradient_sync().buckets().size());
  state.counters["started_early"] = started_early;
  state.counters["t_overlap_ms"] = 1e3 * t_overlap;
  state.counters["t_serial_ms"] = 1e3 * t_serial;
  state.counters["t_nosync_ms"] = 1e3 * t_nosync;
  state.counters["hidden"] = t_serial > t_nosync ? 1.0 - (t_overlap - t_nosync) / (t_serial - t_nosync) : 0.0;
  state.counters["sync_serial_ms"] = 1e3 * sync_serial;
  state.counters["exposed_overlap_ms"] = 1e3 * exposed;
  state.counters["hidden_tail"] = sync_serial > 0.0 ? 1.0 - exposed / sync_serial : 0.0;
}
// The deck's bucket size (8 MiB unless it says otherwise), then one bucket per layer.
BENCHMARK_CAPTURE(BM_GradSyncOverlap, quickstart, "quickstart.yaml", -1.0)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GradSyncOverlap, quickstart_per_layer, "quickstart.yaml", 0.0)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GradSyncOverlap, llm_heavy, "llm_heavy.yaml", -1.0)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GradSyncOverlap, llm_heavy_per_layer, "llm_heavy.yaml", 0.0)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
