// Which GPU a rank drives, and which ranks share it: on host backends no rank has a device of its own;
// on CUDA every rank has a PCI bus id, and ranks of a node that drive the same GPU count each other.
#include <gtest/gtest.h>
#include <mpi.h>

#include "minimllm/core/device.hpp"
#include "minimllm/core/types.hpp"

namespace minimllm {
namespace {

TEST(Device, RanksSharingAGpuAreFoundByBusId) {
  const int sharing = ranks_sharing_device(MPI_COMM_WORLD);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  // Every rank of the node that drives this rank's GPU counts the same sharers.
  int min_sharing = 0, max_sharing = 0;
  MPI_Allreduce(&sharing, &min_sharing, 1, MPI_INT, MPI_MIN, node);
  MPI_Allreduce(&sharing, &max_sharing, 1, MPI_INT, MPI_MAX, node);
  MPI_Comm_free(&node);
  if (kMemSpaceIsHostAccessible) {
    EXPECT_EQ(device_name(), "host");
    EXPECT_EQ(device_bus_id(), "");
    EXPECT_EQ(sharing, 1);
  } else {
    EXPECT_FALSE(device_bus_id().empty());
    EXPECT_GE(sharing, 1);
    EXPECT_LE(sharing, node_size);
  }
  EXPECT_GE(min_sharing, 1);
  EXPECT_LE(max_sharing, node_size);
}

TEST(Device, NodeLocalRanksAreDistinct) {
  const int local = node_local_rank(MPI_COMM_WORLD);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_rank = -1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  EXPECT_EQ(local, node_rank);
}

}  // namespace
}  // namespace minimllm
