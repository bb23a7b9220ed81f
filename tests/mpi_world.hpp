// Rank and size of MPI_COMM_WORLD, for tests that adapt to the rank count they run at.
#pragma once

#include <mpi.h>

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

}  // namespace minimllm::testing_support
