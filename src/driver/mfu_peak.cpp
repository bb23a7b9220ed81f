#include "minimllm/driver/mfu_peak.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/metrics/device_peak.hpp"

namespace minimllm {
namespace {

// Dense rate of this rank's GEMM in the run's precision, used as the MFU peak when the deck gives none
// and the device is not in the datasheet table.
double measure_gemm_gflops(GemmPrecision precision) {
  const int n = 1024;
  t_mat a("peak::a", n, n), b("peak::b", n, n), c("peak::c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  Workspace workspace;  // bf16 rounds its operands into scratch: the arena fits them after the warm-up
  const auto call = [&] {
    const WorkspaceScope scope(workspace);
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, precision);
  };
  call();  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_seconds();
    call();
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * n * n * n / best * 1e-9;
}

}  // namespace

std::pair<double, std::string> choose_peak(const RunConfig& config, GemmPrecision precision,
                                           const World& world) {
  if (config.runtime.peak_gflops_per_rank > 0.0)
    return {config.runtime.peak_gflops_per_rank, "deck runtime.peak_gflops_per_rank"};
  const std::string device = device_name();
  const auto datasheet =
      dense_peak_gflops(device, precision == GemmPrecision::bf16 ? Precision::bf16 : Precision::fp32);
  // Collective on every rank whatever its own answer: a rank whose GPU is unknown makes all measure.
  const int sharing = ranks_sharing_device(world.comm);
  const double local_per_rank = datasheet ? *datasheet / sharing : 0.0;
  double smallest = 0.0;
  const int known = datasheet ? 1 : 0;
  int all_known = 0;
  MPI_Allreduce(&known, &all_known, 1, MPI_INT, MPI_MIN, world.comm);
  if (all_known) {
    MPI_Allreduce(&local_per_rank, &smallest, 1, MPI_DOUBLE, MPI_MIN, world.comm);
    std::string source = fmt::format("datasheet dense {} peak of {}", to_string(precision), device);
    if (sharing > 1) source += fmt::format(", shared by {} ranks", sharing);
    return {smallest, source};
  }
  double local = measure_gemm_gflops(precision), sum = 0.0;
  MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, world.comm);
  return {sum / world.size,
          fmt::format("measured: {} GEMM 1024^3 ({}) with {} BLAS thread(s), mean over ranks",
                      to_string(default_gemm_backend()), to_string(precision), config.runtime.blas_threads)};
}

}  // namespace minimllm
