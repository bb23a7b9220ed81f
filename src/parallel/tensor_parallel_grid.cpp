#include "minimllm/parallel/tensor_parallel_grid.hpp"

namespace minimllm {
namespace {

// This rank's place in the block of `size` consecutive ranks holding it, and the block's communicator.
TensorParallel group_of(const World& world, int size, const CommunicatorFactory& factory,
                        std::unique_ptr<Communicator>& owner) {
  TensorParallel group{world.rank % size, size, nullptr};
  if (size > 1) {
    owner = factory(world.comm, consecutive_ranks(world.rank - group.rank, size));
    group.comm = owner.get();
  }
  return group;
}

}  // namespace

TensorParallelGrid::TensorParallelGrid(const World& world, int tp, int encoder_tp,
                                       const CommunicatorFactory& factory)
    : data_(world) {
  sharding_.llm = group_of(world, tp, factory, llm_group_);
  sharding_.encoder = group_of(world, encoder_tp, factory, encoder_group_);
  if (tp > 1) {
    MPI_Comm data_comm = MPI_COMM_NULL;
    MPI_Comm_split(world.comm, world.rank % tp, world.rank, &data_comm);
    data_ = World::of(data_comm);
  }
}

TensorParallelGrid::~TensorParallelGrid() {
  if (sharding_.llm.size > 1) MPI_Comm_free(&data_.comm);
}

}  // namespace minimllm
