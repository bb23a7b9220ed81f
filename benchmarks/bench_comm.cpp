// Communicator pool costs under MPI (run with mpiexec; rank 0 reports). Every benchmark is collective,
// so all ranks run the same benchmarks with fixed iteration counts.
//   BM_PoolHit:         acquire() on a cached group (ns per acquire, a step of 4 groups)
//   BM_CommCreate/n:    MPI_Comm_create_group over ranks 0..n-1 (slowest member, manual time)
//   BM_NcclCommCreate/n: the same with the NCCL backend (MPI sub-communicator, unique id, ncclCommInitRank),
//                       registered only where choose_collectives would pick NCCL (a GPU per rank)
//   BM_WarmPool/cap:    a repeating plan after one warm-up pass; creations_per_step must be 0 when the
//                       plan's groups fit the capacity (cap 64), and shows the churn when they do not (cap 2)
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

using Group = std::vector<int>;
using Step = std::vector<Group>;

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

Group first_ranks(int count) {
  Group group(count);
  std::iota(group.begin(), group.end(), 0);
  return group;
}

// A step whose groups change per rank, written for 4 ranks and restricted to the ranks that exist.
std::vector<Step> plan(int world) {
  const std::vector<Step> four = {{{0, 1}, {2}, {3}}, {{0}, {1, 2, 3}}, {{0, 2}, {1, 3}}, {{0, 3}, {1}, {2}}};
  std::vector<Step> projected;
  for (const auto& step : four) {
    projected.emplace_back();
    for (const auto& group : step) {
      Group kept;
      for (int r : group) {
        if (r < world) kept.push_back(r);
      }
      if (!kept.empty()) projected.back().push_back(kept);
    }
  }
  return projected;
}

void BM_PoolHit(benchmark::State& state) {
  const int world = world_size();
  if (world < 2) {
    state.SkipWithError("needs at least 2 ranks (singleton groups are not pooled)");
    return;
  }
  // Four shared groups (repeats when the world is small); all cached before timing.
  const std::vector<Group> groups = {first_ranks(world), {0, 1}, {world - 2, world - 1}, {0, world - 1}};
  CommPool pool(MPI_COMM_WORLD, 8, create_mpi_communicator);
  for (const auto& group : groups) pool.acquire(group);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (const auto& group : groups) benchmark::DoNotOptimize(pool.acquire(group));
  }
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  state.counters["ns_per_acquire"] = ns / (static_cast<double>(state.iterations()) * groups.size());
}
BENCHMARK(BM_PoolHit)->Iterations(200000);

void BM_CommCreate(benchmark::State& state, const CommunicatorFactory& factory) {
  const int size = static_cast<int>(state.range(0));
  const Group group = first_ranks(size);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    std::unique_ptr<Communicator> comm;
    if (rank < size) comm = factory(MPI_COMM_WORLD, group);
    double seconds = MPI_Wtime() - start, slowest = 0.0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    state.SetIterationTime(slowest);
    // Destruction (ncclCommDestroy) is outside the timed region but inside the loop.
  }
  state.counters["ranks"] = size;
}

void BM_WarmPool(benchmark::State& state) {
  const std::vector<Step> steps = plan(world_size());
  CommPool pool(MPI_COMM_WORLD, static_cast<int>(state.range(0)), create_mpi_communicator);
  for (const auto& step : steps) pool.acquire_step(step);  // warm-up pass
  const CommPoolStats before = pool.stats();
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pool.acquire_step(steps[next]));
    next = (next + 1) % steps.size();
  }
  const CommPoolStats& after = pool.stats();
  const double per_step = 1.0 / static_cast<double>(state.iterations());
  state.counters["creations_per_step"] = (after.creations - before.creations) * per_step;
  state.counters["hits_per_step"] = (after.hits - before.hits) * per_step;
  state.counters["evictions_per_step"] = (after.evictions - before.evictions) * per_step;
}
BENCHMARK(BM_WarmPool)->Arg(64)->Arg(2)->Iterations(2000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  return minimllm::run_mpi_benchmarks(argc, argv, [] {
    // Group sizes 1..world are known only now. Manual time: the slowest member's creation time.
    auto* create =
        benchmark::RegisterBenchmark("BM_CommCreate", minimllm::BM_CommCreate,
                                     minimllm::CommunicatorFactory(minimllm::create_mpi_communicator));
    for (int size = 1; size <= minimllm::world_size(); ++size) create->Arg(size);
    create->Iterations(200)->UseManualTime()->Unit(benchmark::kMicrosecond);
    if (minimllm::choose_collectives(MPI_COMM_WORLD, "auto").backend == "nccl") {
      auto* nccl =
          benchmark::RegisterBenchmark("BM_NcclCommCreate", minimllm::BM_CommCreate,
                                       minimllm::CommunicatorFactory(minimllm::create_nccl_communicator));
      for (int size = 1; size <= minimllm::world_size(); ++size) nccl->Arg(size);
      nccl->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);
    }
  });
}
