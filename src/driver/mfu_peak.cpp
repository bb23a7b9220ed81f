#include "minimllm/driver/mfu_peak.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "minimllm/core/device.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/metrics/device_peak.hpp"

namespace minimllm {

std::pair<double, std::string> choose_peak(const RunConfig& config, GemmPrecision precision,
                                           const World& world) {
  if (config.machine.peak_gflops > 0.0)
    return {config.machine.peak_gflops,
            "machine section (machine.peak_gflops or runtime.peak_gflops_per_rank)"};
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
