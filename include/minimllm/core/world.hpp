// The ranks a run uses and facts about where it runs (for the banner and the HDF5 provenance).
#pragma once

#include <mpi.h>

#include <numeric>
#include <string>
#include <vector>

namespace minimllm {

struct World {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int size = 1;

  static World of(MPI_Comm comm);
  bool is_root() const { return rank == 0; }
};

std::string kokkos_description();   // e.g. "Kokkos 3.4.1, OpenMP (2 threads)"
std::string mpi_library_version();  // first line of MPI_Get_library_version
std::string host_name();
double peak_resident_mib();  // peak resident set size of this process (since the last reset)
double resident_mib();       // its resident set size now (VmRSS; the peak where that is unknown)
// Restarts the peak at the current resident size (Linux /proc/self/clear_refs), so that each training
// run in one process (--policy all) reports its own peak; false where that is not possible.
bool reset_peak_resident();
// The ranks first, first + 1, ..., first + count - 1 (a block of consecutive ranks).
inline std::vector<int> consecutive_ranks(int first, int count) {
  std::vector<int> ranks(count);
  std::iota(ranks.begin(), ranks.end(), first);
  return ranks;
}

int ranks_per_node(const World& world);  // most ranks sharing a node (same value on every rank)
int node_count(const World& world);      // nodes the ranks are on (same value on every rank)

}  // namespace minimllm
