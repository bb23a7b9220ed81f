// GoogleTest main for every test program: MPI and Kokkos live for the whole run.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "minimllm/core/device.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  minimllm::initialize_kokkos(MPI_COMM_WORLD, argc, argv);  // one GPU per rank, as the program does
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // One rank reports; the others still fail the run through their exit code.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int result = RUN_ALL_TESTS();
  Kokkos::finalize();
  int any_failed = 0;
  MPI_Allreduce(&result, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
