// Context parallelism on one long sequence: the LLM phase (forward+backward) of one step on all ranks
// of the world as one group, against the same step on one rank, in the same run. Reports the speed-up
// and the share of the parallel LLM phase spent in the K/V exchange. Run with mpiexec -n 2.
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
std::pair<double, double> llm_phase(const RunConfig& config, MPI_Comm comm, int reps) {
  const World world = World::of(comm);
  const Sampler sampler(config);
  Model model(config.model, config.seed);
  CommPool pool(comm, 4, choose_collectives(comm, "auto").factory);
  StepExecutor executor(model);
  const GlobalBatch batch = sampler.batch(0);
  const PlannedStep planned = planned_step(batch, make_grouped_plan(batch, {world.size}), world.rank,
                                           world.size, model.linear_weight_in_attention_pairs());
  std::vector<double> llm, kv;
  for (int r = 0; r <= reps; ++r) {
    StepOutcome o = run_step(sampler, executor, pool, planned);
    double t[2] = {o.seconds[Phase::llm], o.seconds[Phase::kv_exchange]};
    MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, comm);
    if (r > 0) llm.push_back(t[0]), kv.push_back(t[1]);  // the first step warms up
  }
  std::sort(llm.begin(), llm.end());
  std::sort(kv.begin(), kv.end());
  return {llm[llm.size() / 2], kv[kv.size() / 2]};
}

void BM_ContextParallelLongSequence(benchmark::State& state) {
  const RunConfig config = long_sequence(static_cast<int>(state.range(0)));
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::pair<double, double> one, all;
  for (auto _ : state) {
    one = llm_phase(config, MPI_COMM_SELF, 3);  // every rank alone, at the same time: one core each
    MPI_Barrier(MPI_COMM_WORLD);
    all = llm_phase(config, MPI_COMM_WORLD, 3);
    state.SetIterationTime(all.first);
  }
  state.counters["ranks"] = ranks;
  state.counters["t_1rank_ms"] = 1e3 * one.first;
  state.counters["t_group_ms"] = 1e3 * all.first;
  state.counters["speedup"] = one.first / all.first;
  state.counters["kv_share"] = all.second / all.first;
}
BENCHMARK(BM_ContextParallelLongSequence)
    ->ArgName("tokens")
    ->Arg(4096)
    ->Arg(8192)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
