#include "minimllm/driver/mfu_peak.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <map>
#include <thread>
#include <tuple>

#include "minimllm/core/device.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/metrics/cpu_peak.hpp"
#include "minimllm/metrics/device_peak.hpp"

namespace minimllm {
namespace {

// The smallest value over ranks when every rank knows one; nullopt (on every rank) otherwise.
std::optional<double> smallest_if_all_known(std::optional<double> local, MPI_Comm comm) {
  const int known = local ? 1 : 0;
  int all_known = 0;
  MPI_Allreduce(&known, &all_known, 1, MPI_INT, MPI_MIN, comm);
  if (!all_known) return std::nullopt;
  double value = *local, smallest = 0.0;
  MPI_Allreduce(&value, &smallest, 1, MPI_DOUBLE, MPI_MIN, comm);
  return smallest;
}

// The cores this rank computes on: its host threads (Kokkos) or its BLAS threads, whichever is more,
// at most the machine's.
int cores_per_rank(const RunConfig& config) {
  const int host_threads = Kokkos::DefaultHostExecutionSpace().concurrency();
  const int machine = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::min(machine, std::max(host_threads, config.runtime.blas_threads));
}

// This rank's GEMM rate on the backend at n^3, measured once per process: a process's later runs (tests,
// studies) reuse it, since the machine under them is the same (and a 1024^3 GEMM per run is not free).
double gemm_rate(GemmPrecision precision, GemmBackend backend, int n) {
  static std::map<std::tuple<int, int, int>, double> measured;
  const std::tuple<int, int, int> key{static_cast<int>(precision), static_cast<int>(backend), n};
  const auto it = measured.find(key);
  if (it != measured.end()) return it->second;
  return measured[key] = measure_gemm_gflops(precision, n, backend);
}

constexpr int kFullSize = 1024, kProbeSize = 256;

// Rates of `backends` on this rank: the first at 1024^3; each later one first probed at 256^3, and one
// whose probe runs under half the best full rate so far on every rank cannot be the fastest (a GEMM this
// small runs no faster than a large one), so its probe's rate stands (a slow kernel is not timed at full
// size: under the sanitizers that took ~25 s per run). Collective: every rank decides alike.
std::vector<std::pair<double, bool>> backend_rates(GemmPrecision precision,
                                                   const std::vector<GemmBackend>& backends, MPI_Comm comm) {
  std::vector<std::pair<double, bool>> rates;  // (GFLOP/s, probed only)
  double best = 0.0;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    if (i > 0) {
      const double probe = gemm_rate(precision, backends[i], kProbeSize);
      double ratio = best > 0.0 ? probe / best : 1.0, largest = 0.0;
      MPI_Allreduce(&ratio, &largest, 1, MPI_DOUBLE, MPI_MAX, comm);
      if (largest < 0.5) {
        rates.emplace_back(probe, true);
        continue;
      }
    }
    rates.emplace_back(gemm_rate(precision, backends[i], kFullSize), false);
    best = std::max(best, rates.back().first);
  }
  return rates;
}

}  // namespace

PeakChoice choose_peak(const RunConfig& config, GemmPrecision precision, const World& world) {
  PeakChoice p;
  const Precision hw_precision = precision == GemmPrecision::bf16 ? Precision::bf16 : Precision::fp32;

  // Attainable: every backend this build can run on its memory, the fastest.
  std::vector<GemmBackend> backends;
  if (default_gemm_backend() == GemmBackend::cublas)
    backends = {GemmBackend::cublas};
  else if (default_gemm_backend() == GemmBackend::blas)
    backends = {GemmBackend::blas, GemmBackend::portable};
  else
    backends = {GemmBackend::portable};
  const std::vector<std::pair<double, bool>> measured = backend_rates(precision, backends, world.comm);
  std::vector<double> local, sum(backends.size());
  for (const auto& [gflops, probed] : measured) local.push_back(gflops);
  MPI_Allreduce(local.data(), sum.data(), static_cast<int>(local.size()), MPI_DOUBLE, MPI_SUM, world.comm);
  const auto best = std::max_element(sum.begin(), sum.end()) - sum.begin();
  p.attainable_gflops = sum[best] / world.size;
  std::string rates;
  for (std::size_t i = 0; i < backends.size(); ++i)
    rates +=
        fmt::format("{}{} {:.1f}{}", i ? ", " : "", to_string(backends[i]), sum[i] / world.size,
                    measured[i].second ? " (256^3 probe: under half the best, not timed at 1024^3)" : "");
  p.attainable_source = fmt::format("measured: fastest GEMM 1024^3 ({}) of [{}] GFLOP/s, mean over ranks",
                                    to_string(precision), rates);

  // Hardware peak. Every branch is collective on every rank whatever its own answer.
  const std::string device = device_name();
  const int sharing = ranks_sharing_device(world.comm);
  const auto datasheet = dense_peak_gflops(device, hw_precision);
  const auto gpu = smallest_if_all_known(
      datasheet ? std::optional<double>(*datasheet / sharing) : std::nullopt, world.comm);
  const int cores = cores_per_rank(config);
  const auto cpu =
      kMemSpaceIsHostAccessible ? cpu_dense_peak(detect_cpu(), hw_precision, cores) : std::nullopt;
  const auto cpu_smallest =
      smallest_if_all_known(cpu ? std::optional<double>(cpu->gflops) : std::nullopt, world.comm);
  if (config.machine.peak_gflops > 0.0) {
    p.peak_gflops = config.machine.peak_gflops;
    p.peak_source = "machine section (machine.peak_gflops or runtime.peak_gflops_per_rank)";
  } else if (gpu) {
    p.peak_gflops = *gpu;
    p.peak_source = fmt::format("datasheet dense {} peak of {}", to_string(precision), device);
    if (sharing > 1) p.peak_source += fmt::format(", shared by {} ranks", sharing);
  } else if (cpu_smallest) {
    p.peak_gflops = *cpu_smallest;
    // Every rank knew its peak, this one included (smallest_if_all_known).
    p.peak_source = cpu.value_or(CpuPeak{}).source + (world.size > 1 ? ", smallest over ranks" : "");
  } else {
    p.peak_gflops = p.attainable_gflops;
    p.peak_source = "unknown hardware peak: the attainable rate (" + p.attainable_source + ")";
  }
  // No rate the program measures can exceed a true peak: a formula below a measured GEMM understates the
  // hardware (a clock or unit count it got wrong), and MFU above the attainable fraction would be a lie.
  if (config.machine.peak_gflops <= 0.0 && p.peak_gflops < p.attainable_gflops) {
    p.peak_source =
        fmt::format("the attainable rate, since the hardware formula's {:.1f} GFLOP/s is below it ({})",
                    p.peak_gflops, p.peak_source);
    p.peak_gflops = p.attainable_gflops;
  }
  if (config.machine.peak_gflops > 0.0) {
    p.planning_gflops = config.machine.peak_gflops;
    p.planning_source = p.peak_source;
  } else {
    p.planning_gflops = p.attainable_gflops;
    p.planning_source = "attainable: " + p.attainable_source;
  }
  return p;
}

}  // namespace minimllm
