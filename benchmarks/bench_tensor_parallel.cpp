// Tensor parallelism on a wide layer: one LLM block of width 1024 (16 heads, MLP 4096) and its
// loss over 512 rows, forward and backward (Model::llm_forward_backward), on one rank alone (the other
// waits) and split over two ranks (parallel.tp = 2: column/row-parallel block, vocabulary-parallel loss).
// Counters: both times (ms, median of MINIMLLM_BENCH_REPS after a warm-up, max over ranks, alternating),
// the speed-up, and the communication share: the pass's all-reduces (the embedding's, two per block forward
// and two backward, the loss's input gradient: 6 of rows x width floats) timed alone on the same group,
// over the split pass's time. Run with mpiexec -n 2.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/rank_grid.hpp"
#include "minimllm/step/packing.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

constexpr int kRows = 512;
constexpr int kAllReducesPerPass = 6;

RunConfig wide_layer() {
  return parse_run_config(
      "name: wide_layer\n"
      "seed: 3\n"
      "model:\n"
      "  init_std: 0.02\n"
      "  encoder: {width: 32, heads: 2, layers: 1, mlp_ratio: 2, patch: 4, channels: 3}\n"
      "  llm: {width: 1024, heads: 16, layers: 1, mlp_ratio: 4, vocab: 512}\n"
      "data:\n"
      "  global_batch: 1\n"
      "  text: {median: 512, sigma: 0.1, min: 512, max: 512}\n"
      "  images: {mean_per_sample: 0.0, max_per_sample: 0, min_side: 8, max_side: 8, classes: 2}\n",
      "<bench_tensor_parallel>");
}

// One forward and backward of the LLM over the batch; seconds, fenced.
double pass_seconds(Model& model, const LlmInput& input) {
  const t_mat none("bench::received", 0, model.config().llm.width);
  Kokkos::fence();
  const double t0 = MPI_Wtime();
  model.llm_forward_backward(input, none, 1.0f / kRows, none);
  Kokkos::fence();
  return MPI_Wtime() - t0;
}

void BM_TensorParallelWideLayer(benchmark::State& state) {
  const World world = World::of(MPI_COMM_WORLD);
  if (world.size != 2) {
    state.SkipWithError("run with mpiexec -n 2");
    return;
  }
  const RunConfig config = wide_layer();
  const Sampler sampler(config);
  SampleMeta sample;
  sample.text_len = kRows;
  const LlmInput input = pack_samples(sampler, 0, {sample}).llm;
  ModelParallel layout;
  layout.tp = 2;
  const RankGrid grid(world, layout, config.model.llm.layers, create_mpi_communicator);
  Model whole(config.model, config.seed);
  Model split(config.model, config.seed, GemmPrecision::fp32, Recompute::none, grid.sharding());
  const t_vec rows("bench::all_reduce", static_cast<std::size_t>(kRows) * config.model.llm.width);
  Communicator& group = *grid.sharding().llm.comm;
  const int reps = benchmark_repetitions(7);
  std::vector<double> one_rank, two_ranks, all_reduces;
  for (auto _ : state) {
    for (int r = 0; r <= reps; ++r) {
      MPI_Barrier(world.comm);
      const double t_whole = world.rank == 0 ? pass_seconds(whole, input) : 0.0;
      MPI_Barrier(world.comm);
      const double t_split = max_over_ranks(pass_seconds(split, input));
      MPI_Barrier(world.comm);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < kAllReducesPerPass; ++i) group.allreduce_sum(rows.data(), rows.size());
      const double t_comm = max_over_ranks(MPI_Wtime() - t0);
      if (r == 0) continue;  // warm-up
      one_rank.push_back(max_over_ranks(t_whole));
      two_ranks.push_back(t_split);
      all_reduces.push_back(t_comm);
    }
    state.SetIterationTime(median(two_ranks));
  }
  const double t1 = median(one_rank), t2 = median(two_ranks), tc = median(all_reduces);
  state.counters["t_one_rank_ms"] = 1e3 * t1;
  state.counters["t_tp2_ms"] = 1e3 * t2;
  state.counters["speedup_tp2"] = t1 / t2;
  state.counters["all_reduces_ms"] = 1e3 * tc;
  state.counters["communication_share"] = tc / t2;
}
BENCHMARK(BM_TensorParallelWideLayer)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) { return minimllm::run_mpi_benchmarks(argc, argv); }
