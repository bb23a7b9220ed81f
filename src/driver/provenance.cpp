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

constexpr std::array<std::uint32_t, 64> kSha256Rounds = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// One 64-byte block into the state h.
void sha256_block(const unsigned char* block, std::array<std::uint32_t, 8>& h) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = std::uint32_t(block[4 * i]) << 24 | std::uint32_t(block[4 * i + 1]) << 16 |
           std::uint32_t(block[4 * i + 2]) << 8 | std::uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 =
        k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256Rounds[i] + w[i];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

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

std::string utc_now() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return stamp;
}

std::string sha256_hex(const std::string& bytes) {
  std::array<std::uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const std::size_t full = bytes.size() / 64 * 64;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < full; i += 64) sha256_block(data + i, h);
  // Padding: 0x80, zeros, and the message length in bits (big-endian), in one or two final blocks.
  unsigned char tail[128] = {0};
  const std::size_t rest = bytes.size() - full;
  std::copy(data + full, data + bytes.size(), tail);
  tail[rest] = 0x80;
  const std::size_t tail_size = rest < 56 ? 64 : 128;
  const std::uint64_t bits = static_cast<std::uint64_t>(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (std::size_t i = 0; i < tail_size; i += 64) sha256_block(tail + i, h);
  std::string hex;
  for (std::uint32_t word : h) hex += fmt::format("{:08x}", word);
  return hex;
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
      {"hostname", host_name()},
      {"hostnames", hostnames},
      {"nodes", nodes},
      {"ranks", static_cast<long long>(world.size)},
      {"ranks_per_node", static_cast<long long>(ranks_per_node(world))},
      {"devices", devices},
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
