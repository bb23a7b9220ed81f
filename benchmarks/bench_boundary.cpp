// BoundaryExchange::forward (pack, MPI_Alltoallv, unpack) against a plain MPI_Alltoallv moving the same
// bytes between the same pairs with no packing, timed alternately in one loop so the ratio (target:
// >= 90% of plain) comes from one table. Run under mpiexec; every rank runs every benchmark with a fixed
// iteration count so the collectives stay in lockstep, and rank 0 reports.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "minimllm/parallel/boundary_exchange.hpp"

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

  BoundaryExchange bx(MPI_COMM_WORLD, route, kWidth);
  t_mat src("src", rows, kWidth), dst("dst", route.recv_rows.size(), kWidth);
  Kokkos::deep_copy(src, 1.0f);
  auto exchange = [&] {
    bx.forward(src, dst);
    Kokkos::fence();
  };
  plain(), exchange();  // warm-up: MPI connections, first touch, BoundaryExchange's buffers

  double plain_s = 0.0, bx_s = 0.0;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    plain();
    plain_s += MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    exchange();
    const double dt = MPI_Wtime() - t0;
    bx_s += dt;
    state.SetIterationTime(dt);
  }
  // The slowest rank sets the pace of a collective.
  double times[2] = {plain_s, bx_s};
  MPI_Allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double bytes = static_cast<double>(bx.bytes_sent()) * static_cast<double>(state.iterations());
  state.counters["rows"] = rows;
  state.counters["bx_GB/s"] = bytes / times[1] * 1e-9;
  state.counters["mpi_GB/s"] = bytes / times[0] * 1e-9;
  state.counters["bx/mpi"] = times[0] / times[1];
}

// Rank 0 alone prints.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Only rank 0 writes --benchmark_out; a custom file reporter without that flag is an error.
  if (rank != 0)
    argc = static_cast<int>(
        std::remove_if(argv + 1, argv + argc,
                       [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }) -
        argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    Kokkos::finalize();
    MPI_Finalize();
    return 1;
  }
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
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    minimllm::NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
