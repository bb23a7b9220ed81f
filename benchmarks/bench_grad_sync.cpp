// How much of the gradient all-reduce the backward pass hides (runtime.overlap_grad_sync). The same step
// (a deck's step 0, data parallel: one LLM group per rank) runs in three modes:
//   overlap  buckets all-reduced during the backward (the default),
//   serial   one all-reduce after the backward,
//   nosync   no gradient all-reduce at all (the floor),
// each timed as run_step's wall time, fenced, max over ranks. Every repetition runs all three, in an order
// rotated from one repetition to the next, and the sync's cost is taken within the repetition, so that drift
// in the machine's speed cancels and no mode always follows the same one:
//   sync_step = median over repetitions of (t_serial - t_nosync), exposed_step of (t_overlap - t_nosync),
//   hidden = 1 - exposed_step / sync_step
// is the share of the all-reduce's time that overlapping removes from the step (the measure), and
// hidden_se its standard error within the run (from the two differences' median absolute deviations; runs of
// the same binary scatter more than it says, so repeat the run). It resolves only where the sync is well
// above the steps' noise: the batch-of-2 cases put one sample per rank, where the sync is a larger share of
// the step. Beside it, the sync's tail: from the end of the slowest rank's backward to the end of the step's
// sync (so without waiting for a slower rank's compute, which dominates grad_sync_seconds under imbalance):
// sync_serial (the whole blocking all-reduce), exposed_overlap (what is left of the overlapped one) and
// hidden_tail = 1 - exposed_overlap / sync_serial, which ignores any slow-down of the backward itself (the
// price of overlap when progress and compute share a core). Run with mpiexec -n 2; MINIMLLM_BENCH_REPS sets
// the repetitions (default 5). Decks: $MINIMLLM_INPUTS or the source tree's.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "minimllm/core/statistics.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/step/run_step.hpp"
#include "minimllm/step/step_comms.hpp"
#include "minimllm/step/step_inputs.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

enum Mode { kOverlap, kSerial, kNoSync, kModes };

// The median's standard error, from the median absolute deviation (normal noise: sigma = 1.4826 MAD, and
// the median's error 1.2533 sigma / sqrt(n)).
double median_standard_error(const std::vector<double>& values) {
  const double m = median(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::abs(v - m));
  return 1.2533 * 1.4826 * median(deviations) / std::sqrt(static_cast<double>(values.size()));
}

// bucket_mb < 0: the deck's runtime.grad_bucket_mb; global_batch 0: the deck's data.global_batch.
void BM_GradSyncOverlap(benchmark::State& state, const char* deck, double bucket_mb, int global_batch) {
  RunConfig config = load_run_config(benchmark_inputs_dir() + "/" + deck);
  if (global_batch > 0) config.data.global_batch = global_batch;
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
  const PlannedStep planned =
      planned_step(batch, make_grouped_plan(batch, std::vector<int>(world.size, 1)), world.rank, world.size);
  const int reps = benchmark_repetitions(5);
  std::array<std::vector<double>, kModes> step, sync;
  int started_early = 0;
  for (auto _ : state) {
    for (int r = 0; r <= reps; ++r) {
      for (int m = 0; m < kModes; ++m) {
        const int mode = (m + r) % kModes;
        MPI_Barrier(MPI_COMM_WORLD);
        Kokkos::fence();
        const double t0 = MPI_Wtime();
        // run_step's stages, with the end of this rank's backward timed between them.
        StepExecutor& executor = *executors[mode];
        const StepComms comms = acquire_step_comms(pool, planned.plan);
        StepInputs inputs = upload_step_inputs(sampler, planned, comms, config.model.llm.width,
                                               model.attention_shape(), model.cp_comm());
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
  std::vector<double> sync_step, exposed_step;  // per repetition, against that repetition's nosync step
  for (std::size_t r = 0; r < step[kNoSync].size(); ++r) {
    sync_step.push_back(step[kSerial][r] - step[kNoSync][r]);
    exposed_step.push_back(step[kOverlap][r] - step[kNoSync][r]);
  }
  const double synced = median(sync_step), exposed_in_step = median(exposed_step);
  const double synced_se = median_standard_error(sync_step), exposed_se = median_standard_error(exposed_step);
  const double sync_serial = median(sync[kSerial]), exposed = median(sync[kOverlap]);
  state.counters["ranks"] = world.size;
  state.counters["bucket_MiB"] = bucket_mb;
  state.counters["grad_MiB"] = model.grads().extent(0) * 4.0 / (1 << 20);
  state.counters["buckets"] = static_cast<double>(executors[kOverlap]->gradient_sync().buckets().size());
  state.counters["started_early"] = started_early;
  state.counters["t_overlap_ms"] = 1e3 * median(step[kOverlap]);
  state.counters["t_serial_ms"] = 1e3 * median(step[kSerial]);
  state.counters["t_nosync_ms"] = 1e3 * median(step[kNoSync]);
  state.counters["sync_step_ms"] = 1e3 * synced;
  state.counters["exposed_step_ms"] = 1e3 * exposed_in_step;
  // 0 when the sync does not even show in the step times (unresolved), not a negative share.
  state.counters["hidden"] = synced > 0.0 ? 1.0 - exposed_in_step / synced : 0.0;
  // First-order propagation of both differences' errors into the ratio.
  state.counters["hidden_se"] =
      synced > 0.0 ? std::hypot(exposed_se / synced, exposed_in_step * synced_se / (synced * synced)) : 0.0;
  state.counters["sync_serial_ms"] = 1e3 * sync_serial;
  state.counters["exposed_overlap_ms"] = 1e3 * exposed;
  state.counters["hidden_tail"] = sync_serial > 0.0 ? 1.0 - exposed / sync_serial : 0.0;
}
// The deck's bucket size (8 MiB unless it says otherwise), then one bucket per layer; llm_heavy also with
// one sample per rank.
struct GradSyncCase {
  const char* name;
  const char* deck;
  double bucket_mb;
  int global_batch;
};
constexpr GradSyncCase kCases[] = {
    {"quickstart", "quickstart.yaml", -1.0, 0},      {"quickstart_per_layer", "quickstart.yaml", 0.0, 0},
    {"llm_heavy", "llm_heavy.yaml", -1.0, 0},        {"llm_heavy_per_layer", "llm_heavy.yaml", 0.0, 0},
    {"llm_heavy_batch2", "llm_heavy.yaml", -1.0, 2}, {"llm_heavy_batch2_per_layer", "llm_heavy.yaml", 0.0, 2},
};

void register_cases() {
  for (const GradSyncCase& c : kCases)
    benchmark::RegisterBenchmark(
        (std::string("BM_GradSyncOverlap/") + c.name).c_str(),
        [c](benchmark::State& state) { BM_GradSyncOverlap(state, c.deck, c.bucket_mb, c.global_batch); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  minimllm::register_cases();
  return minimllm::run_mpi_benchmarks(argc, argv);
}
