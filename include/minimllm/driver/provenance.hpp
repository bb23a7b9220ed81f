// Where a run came from, for the /run attributes of its HDF5 file (docs/HDF5.md): the deck and its
// SHA-256, the source revision and compiler (captured by CMake at build time), Kokkos, MPI, CUDA and
// NCCL, the hosts and devices of every rank, and the SLURM job.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/sha256.hpp"  // sha256_hex, for the deck's
#include "minimllm/core/world.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"

namespace minimllm {

// Collective over world (host and device names are gathered from every rank); the same list on every rank.
// command_line: how the program was invoked (empty when train() was called from a test or benchmark).
std::vector<RunAttribute> gather_provenance(const RunConfig& config, const World& world,
                                            const std::string& command_line);

// What `minimllm --version` prints: the version, the source revision, build type and compiler, the Kokkos
// version and backend, the MPI library and the BLAS, one per line. Callable before MPI and Kokkos start.
std::string version_text();

// Now, in UTC, as ISO 8601: "2026-11-28T21:16:12Z".
std::string utc_now();

// One line for the banner: revision, compiler, nodes and ranks per node, SLURM job.
std::string provenance_summary(const std::vector<RunAttribute>& provenance);

// This process's SLURM_* environment variables as sorted `name=value` lines ("" outside SLURM).
std::string slurm_environment();

// Distinct values of one string per rank, sorted, newline-separated (collective over world).
std::string distinct_over_ranks(const std::string& mine, const World& world);

}  // namespace minimllm
