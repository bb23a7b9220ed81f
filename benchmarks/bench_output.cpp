// HDF5 output cost per step against a real training step, in one run: the step of a preset is timed by
// the real trainer (one rank, no output), then the writer appends what the trainer writes per step — the
// 12 /ranks rows, the 4 /plans rows and /plans/policy for `ranks` columns, and the /steps row with its
// flush — to a fresh file. Counters: median step time, median output time per step, and their ratio
// (target <= 1%). A second ratio, insitu_over_step, is the trainer's own measurement with a real file
// (median TrainResult::output_seconds after the first step, which creates the tables, over the same
// median step time).
#include <benchmark/benchmark.h>
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "minimllm/core/statistics.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/step/step_metrics.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  return (fs::temp_directory_path() / ("minimllm_bench_output_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

struct StepTiming {
  double step_seconds = 0.0;      // median over steps after the warm-up, no output
  double insitu_over_step = 0.0;  // the trainer's own output time per step with a real file / step_seconds
};

// Trains the preset twice on one rank (without and with a file); cached per deck.
const StepTiming& step_timing(const std::string& deck) {
  static std::map<std::string, StepTiming> cache;
  auto found = cache.find(deck);
  if (found != cache.end()) return found->second;
  RunConfig config = load_run_config(benchmark_inputs_dir() + "/" + deck);
  config.steps = 6;
  config.machine.peak_gflops = 100.0;  // MFU is not measured here
  StepTiming timing;
  const TrainResult plain = train(config, World::of(MPI_COMM_SELF), {});
  std::vector<double> steps;
  for (size_t i = 1; i < plain.steps.size(); ++i) steps.push_back(plain.steps[i].step_seconds);
  timing.step_seconds = median(steps);
  TrainOptions options;
  options.out_path = scratch("insitu.h5");
  options.overwrite = true;
  const TrainResult written = train(config, World::of(MPI_COMM_SELF), options);
  const std::vector<double> later(written.output_seconds.begin() + 1, written.output_seconds.end());
  timing.insitu_over_step = median(later) / timing.step_seconds;
  fs::remove(options.out_path);
  return cache.emplace(deck, timing).first->second;
}

void BM_OutputVsStep(benchmark::State& state, const char* deck) {
  const int ranks = static_cast<int>(state.range(0));
  const StepTiming& timing = step_timing(deck);
  const std::string path = scratch("rows.h5");
  std::vector<double> output_seconds;
  {
    Hdf5RunWriter writer(path, true);
    std::vector<double> values(ranks, 0.25);
    std::vector<int> groups(ranks, 1);
    StepRecord record;
    const std::vector<std::string> policies = policy_names();
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      for (const std::string& table : rank_table_names()) writer.append_row("/ranks/" + table, values);
      for (const char* table : {"/plans/llm_group_of_rank", "/plans/llm_group_size",
                                "/plans/llm_group_samples", "/plans/encoder_images_of_rank"})
        writer.append_row(table, groups);
      writer.append_enum("/plans/policy", policies, "dhp");
      writer.append_step(record);  // flushes the file
      output_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      ++record.step;
    }
  }
  fs::remove(path);
  const double output = median(output_seconds);
  state.counters["step_ms"] = 1e3 * timing.step_seconds;
  state.counters["output_us"] = 1e6 * output;
  state.counters["output_over_step"] = output / timing.step_seconds;
  state.counters["insitu_over_step"] = timing.insitu_over_step;
}
BENCHMARK_CAPTURE(BM_OutputVsStep, quickstart, "quickstart.yaml")
    ->Arg(2)
    ->Arg(1024)
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_OutputVsStep, reference_small, "reference/small.yaml")
    ->Arg(2)
    ->Arg(1024)
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
