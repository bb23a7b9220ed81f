// Rank and size of MPI_COMM_WORLD, for tests that adapt to the rank count they run at, and temporary
// paths every rank agrees on.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace minimllm::testing_support {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// A path every rank agrees on (rank 0's process id), in the temporary directory.
inline std::string shared_temp_path(const std::string& prefix, const std::string& leaf) {
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() / (prefix + std::to_string(pid) + "_" + leaf)).string();
}

// Removes a test's file on rank 0 once every rank is done with it.
struct RemoveAtEnd {
  std::string path;
  ~RemoveAtEnd() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::remove(path.c_str());
  }
};

}  // namespace minimllm::testing_support
