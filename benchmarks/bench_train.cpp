// One full training step of the real trainer on the LLM-heavy deck (one rank), in fp32 and with bf16 GEMM
// inputs, and on the GPT-2-small-shaped deck in fp32. MFU is achieved FLOP/s over the trainer's peak for
// the precision: the hardware's (a known GPU's datasheet dense peak, or the CPU's cores x FMA width x
// clock), with the label saying which.
// Also reports peak resident memory over the trainer's analytic estimate (target <= 1.3), and the step's
// achieved FLOP/s over the GEMM rate at the model's own shapes and precision, measured in the same run
// (step_over_gemm; the GPU target is >= 0.5).
// Decks are read from $MINIMLLM_INPUTS when set (a carried build), else from the source tree's inputs/.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/core/allocation_counter.hpp"
#include "minimllm/core/clock.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/model/model.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

// GEMM GFLOP/s at the LLM's own shapes and precision: every linear layer's forward product and both
// backward ones (model.hpp LinearShape) over `rows` rows, all timed together, best of 3 passes after a
// warm-up. Rows: the step's LLM rows in one product, a slight overstatement of the rate where the
// step runs several micro-batches, so the ratio to it errs low.
double model_gemm_gflops(const LlmConfig& llm, int rows, GemmPrecision precision) {
  struct Operands {
    t_mat x, w, y, dx, dw;
  };
  std::map<std::pair<int, int>, Operands> operands;  // layers of the same shape share operands
  double flops = 0.0;
  for (const LinearShape& l : llm_linear_shapes(llm)) {
    flops += 6.0 * rows * l.in * l.out;
    Operands& o = operands[{l.in, l.out}];
    if (o.x.size() > 0) continue;
    o = {t_mat("x", rows, l.in), t_mat("w", l.in, l.out), t_mat("y", rows, l.out), t_mat("dx", rows, l.in),
         t_mat("dw", l.in, l.out)};
    Kokkos::deep_copy(o.x, 0.5f), Kokkos::deep_copy(o.w, 0.25f), Kokkos::deep_copy(o.y, 0.125f);
  }
  double best = 1e30;
  Workspace workspace;  // bf16 GEMMs round their operands into its scratch, as in a training pass
  for (int pass = 0; pass < 4; ++pass) {
    const double t0 = now_seconds();
    const WorkspaceScope scope(workspace);
    for (const LinearShape& l : llm_linear_shapes(llm)) {
      const Operands& o = operands.at({l.in, l.out});
      gemm(Trans::no, Trans::no, 1.0f, o.x, o.w, 0.0f, o.y, precision);    // Y = X W
      gemm(Trans::no, Trans::yes, 1.0f, o.y, o.w, 0.0f, o.dx, precision);  // dX = dY W^T
      gemm(Trans::yes, Trans::no, 1.0f, o.x, o.y, 1.0f, o.dw, precision);  // dW += X^T dY
    }
    if (pass > 0) best = std::min(best, now_seconds() - t0);  // pass 0 warms up handles and scratch
  }
  return flops / best * 1e-9;
}

// Device allocations of one training step: a run of `steps` steps less a run of steps - 1.
// On CUDA each is a cudaMalloc and each free a device-wide synchronisation (Kokkos 3.4 has no memory
// pool): a cost a step pays per allocation, reported so that it can be weighed against the step time.
double device_allocations_per_step(RunConfig config) {
  std::int64_t counts[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    config.steps = 2 + run;
    const AllocationCounter allocations(AllocationCounter::Spaces::mem_space);
    train(config, World::of(MPI_COMM_SELF), {});
    counts[run] = allocations.count();
  }
  return static_cast<double>(counts[1] - counts[0]);
}

void BM_TrainingStep(benchmark::State& state, const char* deck, const char* precision) {
  RunConfig config = load_run_config(benchmark_inputs_dir() + "/" + deck);
  config.steps = 3;  // step 0 is the warm-up; steps 1.. are timed
  config.runtime.precision = precision;
  TrainResult result;
  std::vector<double> step_gflops, mfu;
  for (auto _ : state) {
    result = train(config, World::of(MPI_COMM_SELF), {});
    for (size_t i = 1; i < result.steps.size(); ++i) {
      step_gflops.push_back(result.steps[i].model_flops / result.steps[i].step_seconds * 1e-9);
      mfu.push_back(result.steps[i].mfu);
    }
  }
  const StepRecord& last = result.steps.back();
  const double gemm_gflops =
      model_gemm_gflops(config.model.llm, static_cast<int>(last.text_tokens + last.image_tokens),
                        gemm_precision_from_string(precision));
  state.SetLabel(result.peak_source + "; collectives " + result.collectives);
  state.counters["peak_GFLOP/s"] = result.peak_gflops_per_rank;
  state.counters["MFU"] = median(mfu);
  state.counters["step_GFLOP/s"] = median(step_gflops);
  state.counters["gemm_model_GFLOP/s"] = gemm_gflops;
  state.counters["step_over_gemm"] = median(step_gflops) / gemm_gflops;
  state.counters["device_allocs/step"] = device_allocations_per_step(config);
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
// GPT-2 small's shape (12 x 768, vocabulary 50,257, 4 sequences of 1,024 tokens): ~20 s a step on one core.
BENCHMARK_CAPTURE(BM_TrainingStep, gpt2_124m, "gpt2_124m.yaml", "fp32")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
