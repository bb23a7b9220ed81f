#include "minimllm/parallel/rank_grid.hpp"

#include <stdexcept>
#include <vector>

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

RankGrid::RankGrid(const World& world, const ModelParallel& grid, int llm_layers,
                   const CommunicatorFactory& factory)
    : data_(world) {
  const int tp = grid.tp, encoder_tp = grid.encoder_tp, stages = grid.unit_stages();
  const int stage_ranks = world.size / stages;  // tp x units
  const int stage = world.rank / stage_ranks, in_stage = world.rank % stage_ranks;
  sharding_.llm = group_of(world, tp, factory, llm_group_);
  sharding_.encoder = group_of(world, encoder_tp, factory, encoder_group_);
  encoder_groups_ = {sharding_.llm.rank / encoder_tp, tp / encoder_tp, nullptr};
  if (encoder_groups_.size > 1) {
    std::vector<int> peers;
    const int unit_first = world.rank - sharding_.llm.rank;
    for (int g = 0; g < encoder_groups_.size; ++g)
      peers.push_back(unit_first + g * encoder_tp + sharding_.encoder.rank);
    encoder_peers_ = factory(world.comm, peers);
    encoder_groups_.comm = encoder_peers_.get();
  }
  sharding_.pipeline = unit_stage(llm_layers, stage, grid.pp, grid.encoder_stage, grid.pp_layers);
  if (stages > 1) {
    std::vector<int> members;
    for (int s = 0; s < stages; ++s) members.push_back(s * stage_ranks + in_stage);
    pipeline_ = factory(world.comm, members);
    sharding_.pipeline.comm = pipeline_.get();
  }
  if (tp * stages > 1) {
    MPI_Comm data_comm = MPI_COMM_NULL;
    MPI_Comm_split(world.comm, stage * tp + sharding_.llm.rank, world.rank, &data_comm);
    data_ = World::of(data_comm);
  }
}

RankGrid::~RankGrid() {
  if (ranks_per_unit() > 1) MPI_Comm_free(&data_.comm);
}

Communicator* RankGrid::group(const std::string& dimension) const {
  if (dimension == "tp") return sharding_.llm.comm;
  if (dimension == "encoder_tp") return sharding_.encoder.comm;
  if (dimension == "encoder_groups") return encoder_groups_.comm;
  if (dimension == "pp") return sharding_.pipeline.comm;
  throw std::invalid_argument("RankGrid::group: no dimension '" + dimension +
                              "' (valid: tp, encoder_tp, encoder_groups, pp; data and context parallelism "
                              "regroup every step, from the pool over data())");
}

}  // namespace minimllm
