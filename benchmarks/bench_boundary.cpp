// BoundaryExchange::forward (pack with self rows copied directly, MPI_Alltoallv, unpack) against a plain
// MPI_Alltoallv moving the same bytes between the same pairs with no packing, timed alternately in one loop
// so the ratio (target: >= 90% of plain) comes from one table. Run under mpiexec; all ranks run every
// benchmark with a fixed iteration count so the collectives stay in lockstep, and rank 0 reports.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "minimllm/core/world.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/parallel/boundary_exchange.hpp"
#include "mpi_benchmark_main.hpp"

namespace minimllm {
namespace {

constexpr int kWidth = 512;  // floats per row

// Every rank sends `rows` rows (bytes_per_rank of them), split evenly over all ranks including itself;
// rows are taken from and stored at shuffled positions, as an embedding exchange would.
RowRoute even_route(int rows, int rank, int ranks) {
  auto share = [&](int peer) { return rows / ranks + (peer < rows % ranks ? 1 : 0); };
  RowRoute route;
  for (int p = 0; p < ranks; ++p) {
    route.send_counts.push_back(share(p));
    route.recv_counts.push_back(share(rank));  // every peer sends this rank the same share
  }
  std::mt19937 rng(1234u + static_cast<unsigned>(rank));
  route.send_rows.resize(rows);
  for (int i = 0; i < rows; ++i) route.send_rows[i] = i;
  std::shuffle(route.send_rows.begin(), route.send_rows.end(), rng);
  route.recv_rows.resize(share(rank) * static_cast<std::size_t>(ranks));
  for (std::size_t i = 0; i < route.recv_rows.size(); ++i) route.recv_rows[i] = static_cast<int>(i);
  std::shuffle(route.recv_rows.begin(), route.recv_rows.end(), rng);
  return route;
}

std::vector<int> in_floats(const std::vector<int>& rows) {
  std::vector<int> floats(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) floats[i] = rows[i] * kWidth;
  return floats;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (std::size_t p = 1; p < counts.size(); ++p) displs[p] = displs[p - 1] + counts[p - 1];
  return displs;
}

// Median of the elements first, first + 2, first + 4, ...
double median_of(const std::vector<double>& interleaved, std::size_t first) {
  std::vector<double> v;
  for (std::size_t i = first; i < interleaved.size(); i += 2) v.push_back(interleaved[i]);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void BM_BoundaryForward(benchmark::State& state, std::int64_t bytes_per_rank) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int rows = static_cast<int>(bytes_per_rank / (kWidth * sizeof(float)));
  const RowRoute route = even_route(rows, rank, ranks);

  // Plain Alltoallv: same counts between the same pairs, contiguous host buffers, nothing else.
  const std::vector<int> send_counts = in_floats(route.send_counts),
                         recv_counts = in_floats(route.recv_counts);
  const std::vector<int> send_displs = displacements(send_counts), recv_displs = displacements(recv_counts);
  std::vector<float> plain_send(route.send_rows.size() * kWidth, 1.0f),
      plain_recv(route.recv_rows.size() * kWidth);
  auto plain = [&] {
    MPI_Alltoallv(plain_send.data(), send_counts.data(), send_displs.data(), MPI_FLOAT, plain_recv.data(),
                  recv_counts.data(), recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  };

  // The exchange on an MPI wire, like the plain Alltoallv it is compared with.
  BoundaryExchange bx(create_mpi_communicator(MPI_COMM_WORLD, consecutive_ranks(0, ranks)), route, kWidth);
  t_mat src("src", rows, kWidth), dst("dst", route.recv_rows.size(), kWidth);
  Kokkos::deep_copy(src, 1.0f);
  Workspace workspace;  // the packed rows come from it, as in a training step
  auto exchange = [&] {
    const WorkspaceScope scope(workspace);
    bx.forward(src, dst);
    Kokkos::fence();
  };
  plain(), exchange();  // warm-up: MPI connections, first touch, the workspace's arena

  // Per-call times, both variants alternating, so a burst of load elsewhere hits both alike.
  std::vector<double> times;  // plain, boundary, plain, boundary, ...
  times.reserve(2 * static_cast<std::size_t>(state.max_iterations));
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    plain();
    times.push_back(MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    exchange();
    times.push_back(MPI_Wtime() - t0);
    state.SetIterationTime(times.back());
  }
  // The slowest rank sets the pace of each call; the median call resists noise from other processes.
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  const double plain_s = median_of(times, 0), bx_s = median_of(times, 1);
  const double bytes = static_cast<double>(bx.bytes_sent());
  state.counters["rows"] = rows;
  state.counters["bx_GB/s"] = bytes / bx_s * 1e-9;
  state.counters["mpi_GB/s"] = bytes / plain_s * 1e-9;
  state.counters["bx/mpi"] = plain_s / bx_s;
}

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  return minimllm::run_mpi_benchmarks(argc, argv, [] {
    for (std::int64_t kib = 64; kib <= 64 * 1024; kib *= 4) {
      const std::int64_t bytes = kib * 1024;
      // About 256 MiB per rank per benchmark, at least 20 calls; fixed, so all ranks agree.
      const auto iterations = std::max<std::int64_t>(20, std::min<std::int64_t>(1000, (256 << 20) / bytes));
      benchmark::RegisterBenchmark(("BM_BoundaryForward/KiB:" + std::to_string(kib)).c_str(),
                                   minimllm::BM_BoundaryForward, bytes)
          ->Iterations(iterations)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  });
}
