// Context parallelism on one long sequence: the LLM phase (forward+backward) of one step on all ranks
// of the world as one group, against the same step on one rank, in the same run, for each mechanism
// (parallel.cp_comm: 0 = p2p, the ring; 1 = all_gather; 2 = a2a, Ulysses, whose 4 heads a group of 3 cannot
// share: it runs the ring, cp_comm_for_group, and the label says so). Reports the speed-up, the time per
// layer, the share of the parallel LLM phase spent communicating (the ring's posting and waiting, or the
// collectives) and the activation memory per rank the model's accounting gives. Run with mpiexec -n 2 (or 3).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>

#include "minimllm/core/world.hpp"
#include "minimllm/step/run_step.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

RunConfig long_sequence(int tokens) {
  RunConfig c = parse_run_config(R"(
name: cp_bench
model:
  encoder: {width: 32, heads: 2, layers: 1, patch: 4, channels: 3}
  llm: {width: 256, heads: 4, layers: 2, vocab: 512}
data:
  global_batch: 1
  images: {mean_per_sample: 0, max_per_sample: 0, min_side: 4, max_side: 4, classes: 1}
)",
                                 "bench_context_parallel");
  c.data.text = {tokens, 0.0, tokens, tokens};
  return c;
}

// Median LLM-phase seconds and K/V exchange seconds (max over the communicator) of `reps` steps.
struct LlmPhase {
  double llm = 0.0, kv = 0.0, activation_bytes = 0.0;
};

LlmPhase llm_phase(const RunConfig& config, MPI_Comm comm, int reps, CpComm mode) {
  const World world = World::of(comm);
  const Sampler sampler(config);
  Model model(config.model, config.seed, GemmPrecision::fp32, Recompute::none, {}, mode);
  CommPool pool(comm, 4, choose_collectives(comm, "auto").factory);
  StepExecutor executor(model);
  const GlobalBatch batch = sampler.batch(0);
  const PlannedStep planned =
      planned_step(batch, make_grouped_plan(batch, {world.size}), world.rank, world.size);
  std::vector<double> llm, kv;
  for (int r = 0; r <= reps; ++r) {
    StepOutcome o = run_step(sampler, executor, pool, planned);
    double t[2] = {o.seconds[Phase::llm], o.seconds[Phase::kv_exchange]};
    MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, comm);
    if (r > 0) llm.push_back(t[0]), kv.push_back(t[1]);  // the first step warms up
  }
  std::sort(llm.begin(), llm.end());
  std::sort(kv.begin(), kv.end());
  // This rank's rows, and the other members' key rows as the mechanism holds them.
  const MicroBatchWork& mb = planned.work.micro_batches.at(0);
  const int rows = mb.member_rows.at(world.rank);
  const int keys = world.size == 1 ? 0
                   : mode != CpComm::all_gather
                       ? *std::max_element(mb.member_rows.begin(), mb.member_rows.end())
                       : mb.sample_offsets.back();
  return {llm[llm.size() / 2], kv[kv.size() / 2], model.activation_bytes(rows, 0, keys)};
}

void BM_ContextParallelLongSequence(benchmark::State& state) {
  const RunConfig config = long_sequence(static_cast<int>(state.range(0)));
  const CpComm mode = state.range(1) == 0   ? CpComm::p2p
                      : state.range(1) == 1 ? CpComm::all_gather
                                            : CpComm::a2a;
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const CpComm runs = cp_comm_for_group(mode, ranks, config.model.llm.heads);
  state.SetLabel(runs == mode ? to_string(mode)
                              : std::string(to_string(mode)) + " (runs " + to_string(runs) + ")");
  LlmPhase one, all;
  for (auto _ : state) {
    one = llm_phase(config, MPI_COMM_SELF, 3, mode);  // every rank alone, at the same time: one core each
    MPI_Barrier(MPI_COMM_WORLD);
    all = llm_phase(config, MPI_COMM_WORLD, 3, mode);
    state.SetIterationTime(all.llm);
  }
  state.counters["ranks"] = ranks;
  state.counters["t_1rank_ms"] = 1e3 * one.llm;
  state.counters["t_group_ms"] = 1e3 * all.llm;
  state.counters["ms_per_layer"] = 1e3 * all.llm / config.model.llm.layers;  // forward and backward
  state.counters["speedup"] = one.llm / all.llm;
  state.counters["kv_share"] = all.kv / all.llm;
  state.counters["act_MiB"] = all.activation_bytes / 1048576.0;
}
BENCHMARK(BM_ContextParallelLongSequence)
    ->ArgNames({"tokens", "cp_comm"})
    ->Args({4096, 0})
    ->Args({4096, 1})
    ->Args({4096, 2})
    ->Args({8192, 0})
    ->Args({8192, 1})
    ->Args({8192, 2})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
