#include "minimllm/core/world.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <fstream>
#include <sstream>
#include <string>

namespace minimllm {

World World::of(MPI_Comm comm) {
  World w;
  w.comm = comm;
  MPI_Comm_rank(comm, &w.rank);
  MPI_Comm_size(comm, &w.size);
  return w;
}

std::string kokkos_description() {
  std::ostringstream out;
  out << "Kokkos " << KOKKOS_VERSION / 10000 << "." << KOKKOS_VERSION / 100 % 100 << "."
      << KOKKOS_VERSION % 100 << ", " << Kokkos::DefaultExecutionSpace::name() << " ("
      << Kokkos::DefaultExecutionSpace().concurrency() << " threads)";
  return out.str();
}

std::string mpi_library_version() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string s(version, length);
  return s.substr(0, s.find('\n'));
}

std::string host_name() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

namespace {

// This rank's place on its node (MPI_COMM_TYPE_SHARED): the node's rank count and this rank's index there.
struct NodePlace {
  int ranks = 1, local_rank = 0;
};

NodePlace node_place(const World& world) {
  MPI_Comm node;
  MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node);
  NodePlace place;
  MPI_Comm_size(node, &place.ranks);
  MPI_Comm_rank(node, &place.local_rank);
  MPI_Comm_free(&node);
  return place;
}

}  // namespace

int ranks_per_node(const World& world) {
  const int local = node_place(world).ranks;
  int largest = 1;
  MPI_Allreduce(&local, &largest, 1, MPI_INT, MPI_MAX, world.comm);
  return largest;
}

int node_count(const World& world) {
  const int leader = node_place(world).local_rank == 0 ? 1 : 0;
  int leaders = 0;
  MPI_Allreduce(&leader, &leaders, 1, MPI_INT, MPI_SUM, world.comm);
  return leaders;
}

double peak_resident_mib() {
  // Linux's VmHWM can be reset (reset_peak_resident); getrusage's maximum cannot, so it is the fallback.
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // Linux reports kilobytes
}

double resident_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return peak_resident_mib();
}

bool reset_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";  // resets VmHWM to the current resident size (Linux >= 4.0)
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace minimllm
