// Provenance of a run for /run (docs/HDF5.md). Build facts come from build_info.hpp, which
// cmake/BuildInfo.cmake regenerates at every build; run facts are gathered from every rank here.
#include "minimllm/driver/provenance.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>  // KOKKOS_ENABLE_CUDA
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <set>
#include <variant>

#include "build_info.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/kernels/gemm.hpp"      // blas_config
#include "minimllm/metrics/cpu_peak.hpp"  // detect_cpu
#include "minimllm/parallel/communicator.hpp"

#if defined(KOKKOS_ENABLE_CUDA) || defined(MINIMLLM_ENABLE_NCCL)
#include <cuda_runtime.h>
#endif

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

extern char** environ;

namespace minimllm {
namespace {

// "13.0" from CUDA's 13000-style version numbers.
[[maybe_unused]] std::string cuda_version_string(int v) {
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

const std::string* find_string(const std::vector<RunAttribute>& attributes, const std::string& name) {
  for (const RunAttribute& a : attributes)
    if (a.name == name) return std::get_if<std::string>(&a.value);
  return nullptr;
}
const long long* find_int(const std::vector<RunAttribute>& attributes, const std::string& name) {
  for (const RunAttribute& a : attributes)
    if (a.name == name) return std::get_if<long long>(&a.value);
  return nullptr;
}

}  // namespace

std::string version_text() {
  return fmt::format(
      "minimllm {}\nrevision {}{}, {} build, {}\nKokkos {}.{}.{}, {} backend\nMPI: {}\nBLAS: {}\n",
      MINIMLLM_VERSION, MINIMLLM_GIT_REVISION, MINIMLLM_GIT_DIRTY == 1 ? " (with local changes)" : "",
      MINIMLLM_BUILD_TYPE, MINIMLLM_COMPILER, KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
      KOKKOS_VERSION % 100, Kokkos::DefaultExecutionSpace::name(), mpi_library_version(), blas_config());
}

std::string utc_now() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return stamp;
}

std::string slurm_environment() {
  std::vector<std::string> lines;
  for (char** e = environ; e && *e; ++e)
    if (std::string(*e).rfind("SLURM_", 0) == 0) lines.emplace_back(*e);
  std::sort(lines.begin(), lines.end());
  std::string joined;
  for (const std::string& line : lines) joined += (joined.empty() ? "" : "\n") + line;
  return joined;
}

std::string distinct_over_ranks(const std::string& mine, const World& world) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(world.size), offsets(world.size, 0);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, world.comm);
  for (int r = 1; r < world.size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(offsets.back() + lengths.back(), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                 world.comm);
  std::set<std::string> distinct;
  for (int r = 0; r < world.size; ++r) distinct.insert(all.substr(offsets[r], lengths[r]));
  std::string joined;
  for (const std::string& value : distinct) joined += (joined.empty() ? "" : "\n") + value;
  return joined;
}

std::vector<RunAttribute> gather_provenance(const RunConfig& config, const World& world,
                                            const std::string& command_line) {
  const std::string hostnames = distinct_over_ranks(host_name(), world);
  const std::string devices = distinct_over_ranks(device_name(), world);
  const CpuDescription cpu = detect_cpu();
  const std::string cpus = distinct_over_ranks(!cpu.model_name.empty() ? cpu.model_name
                                               : !cpu.arch.empty()     ? cpu.arch
                                                                       : "unknown",
                                               world);
  const long long nodes = 1 + std::count(hostnames.begin(), hostnames.end(), '\n');
  const char* job = std::getenv("SLURM_JOB_ID");
  std::vector<RunAttribute> p = {
      {"name", config.name},
      {"deck_path", config.deck_path},
      {"deck_text", config.deck_text},
      {"deck_sha256", sha256_hex(config.deck_text)},
      {"command_line", command_line},
      {"start_time_utc", utc_now()},
      {"minimllm_version", std::string(MINIMLLM_VERSION)},
      {"git_revision", std::string(MINIMLLM_GIT_REVISION)},
      {"git_dirty", static_cast<long long>(MINIMLLM_GIT_DIRTY)},
      {"compiler", std::string(MINIMLLM_COMPILER)},
      {"build_type", std::string(MINIMLLM_BUILD_TYPE)},
      {"cxx_flags", std::string(MINIMLLM_CXX_FLAGS)},
      {"kokkos", kokkos_description()},
      {"mpi_library", mpi_library_version()},
      {"blas", blas_config()},
      {"hostname", host_name()},
      {"hostnames", hostnames},
      {"nodes", nodes},
      {"ranks", static_cast<long long>(world.size)},
      {"ranks_per_node", static_cast<long long>(ranks_per_node(world))},
      {"devices", devices},
      {"cpus", cpus},
      {"slurm_job_id", std::string(job ? job : "")},
      {"slurm_environment", slurm_environment()},
  };
#if defined(KOKKOS_ENABLE_CUDA) || defined(MINIMLLM_ENABLE_NCCL)
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  p.push_back({"cuda_runtime_version", cuda_version_string(runtime)});
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)  // 0: no driver on this machine
    p.push_back({"cuda_driver_version", cuda_version_string(driver)});
#endif
#ifdef MINIMLLM_ENABLE_NCCL
  p.push_back({"nccl_version", nccl_library_version()});  // dlopen'ed at run time: may be absent
#endif
  return p;
}

std::string provenance_summary(const std::vector<RunAttribute>& p) {
  const std::string revision = find_string(p, "git_revision") ? *find_string(p, "git_revision") : "unknown";
  const long long dirty = find_int(p, "git_dirty") ? *find_int(p, "git_dirty") : -1;
  const std::string job = find_string(p, "slurm_job_id") ? *find_string(p, "slurm_job_id") : "";
  return fmt::format("build: git {}{} | {} {} | {} node(s), up to {} ranks per node{}",
                     revision.substr(0, 12),
                     dirty == 1  ? " (dirty)"
                     : dirty < 0 ? " (dirty: unknown)"
                                 : "",
                     MINIMLLM_COMPILER, MINIMLLM_BUILD_TYPE, find_int(p, "nodes") ? *find_int(p, "nodes") : 0,
                     find_int(p, "ranks_per_node") ? *find_int(p, "ranks_per_node") : 0,
                     job.empty() ? "" : " | SLURM job " + job);
}

}  // namespace minimllm
