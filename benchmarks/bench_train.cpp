// One full training step of the real trainer on the LLM-heavy deck (one rank), with the BLAS sgemm
// rate measured by the trainer in the same run: MFU here is achieved FLOP/s over that sgemm rate.
// Also reports peak resident memory over the trainer's analytic estimate (target <= 1.3).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>

#include "minimllm/driver/trainer.hpp"

#ifndef MINIMLLM_SOURCE_DIR
#error "MINIMLLM_SOURCE_DIR must name the source tree (for inputs/)"
#endif

namespace minimllm {
namespace {

void BM_TrainingStep(benchmark::State& state, const char* deck) {
  RunConfig config = load_run_config(std::string(MINIMLLM_SOURCE_DIR) + "/inputs/" + deck);
  config.steps = 3;  // step 0 is the warm-up; steps 1.. are timed
  TrainResult result;
  std::vector<double> step_seconds, mfu;
  for (auto _ : state) {
    result = train(config, World::of(MPI_COMM_SELF), {});
    for (size_t i = 1; i < result.steps.size(); ++i) {
      step_seconds.push_back(result.steps[i].step_seconds);
      mfu.push_back(result.steps[i].mfu);
    }
  }
  std::sort(mfu.begin(), mfu.end());
  state.counters["sgemm_GFLOP/s"] = result.peak_gflops_per_rank;
  state.counters["MFU_vs_sgemm"] = mfu[mfu.size() / 2];
  state.counters["tokens/s"] = result.steps.back().tokens_per_second;
  state.counters["rss_over_estimate"] = result.peak_resident_mib / result.memory_estimate_mib;
  state.counters["estimate_MiB"] = result.memory_estimate_mib;
}
BENCHMARK_CAPTURE(BM_TrainingStep, llm_heavy, "llm_heavy.yaml")->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
