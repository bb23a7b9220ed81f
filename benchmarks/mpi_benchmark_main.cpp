#include "mpi_benchmark_main.hpp"

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "minimllm/core/device.hpp"

namespace minimllm {
namespace {

// The other ranks run the same benchmarks silently.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int run_mpi_benchmarks(int argc, char** argv, const std::function<void()>& register_dynamic) {
  MPI_Init(&argc, &argv);
  initialize_kokkos(MPI_COMM_WORLD, argc, argv);  // one GPU per rank, as the program does
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (register_dynamic) register_dynamic();
  if (rank != 0) {
    // Only rank 0 may write --benchmark_out; the others drop the flag.
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}

std::string benchmark_inputs_dir() {
  const char* dir = std::getenv("MINIMLLM_INPUTS");
  return dir && *dir ? std::string(dir) : std::string(MINIMLLM_SOURCE_DIR) + "/inputs";
}

int benchmark_repetitions(int fallback) {
  const char* reps = std::getenv("MINIMLLM_BENCH_REPS");
  return reps && *reps ? std::max(1, std::atoi(reps)) : fallback;
}

double max_over_ranks(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

}  // namespace minimllm
