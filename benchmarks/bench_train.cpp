// One full training step of the real trainer on the LLM-heavy deck (one rank), in fp32 and with bf16
// GEMM inputs. MFU is achieved FLOP/s over the trainer's peak for the precision: a known GPU's datasheet
// dense peak, else the GEMM rate the trainer measures at start-up in the same run (the label says which).
// Also reports peak resident memory over the trainer's analytic estimate (target <= 1.3).
// Decks are read from $MINIMLLM_INPUTS when set (a carried build), else from the source tree's inputs/.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "minimllm/driver/trainer.hpp"
#include "mpi_benchmark_main.hpp"

#ifndef MINIMLLM_SOURCE_DIR
#error "MINIMLLM_SOURCE_DIR must name the source tree (for inputs/)"
#endif

namespace minimllm {
namespace {

std::string inputs_dir() {
  const char* dir = std::getenv("MINIMLLM_INPUTS");
  return dir && *dir ? std::string(dir) : std::string(MINIMLLM_SOURCE_DIR) + "/inputs";
}

void BM_TrainingStep(benchmark::State& state, const char* deck, const char* precision) {
  RunConfig config = load_run_config(inputs_dir() + "/" + deck);
  config.steps = 3;  // step 0 is the warm-up; steps 1.. are timed
  config.runtime.precision = precision;
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
  state.SetLabel(result.peak_source + "; collectives " + result.collectives);
  state.counters["peak_GFLOP/s"] = result.peak_gflops_per_rank;
  state.counters["MFU"] = mfu[mfu.size() / 2];
  state.counters["tokens/s"] = result.steps.back().tokens_per_second;
  state.counters["rss_over_estimate"] = result.peak_resident_mib / result.memory_estimate_mib;
  state.counters["estimate_MiB"] = result.memory_estimate_mib;
}
BENCHMARK_CAPTURE(BM_TrainingStep, llm_heavy, "llm_heavy.yaml", "fp32")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainingStep, llm_heavy_bf16, "llm_heavy.yaml", "bf16")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
