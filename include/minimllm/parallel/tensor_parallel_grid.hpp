// A run's fixed tensor-parallel groups around the planners' dynamic regrouping (issue 15's 4-D layout,
// pipeline parallelism aside): consecutive blocks of parallel.tp ranks, inside a node, are one unit each
// (one model replica split Megatron-style, parallel/tensor_parallel.hpp); the encoder's groups are
// consecutive blocks of parallel.encoder_tp ranks inside them. The units' ranks at one tensor-parallel
// position form a data world: the planners plan over its ranks (the units) exactly as over a world
// without tensor parallelism, and every data world runs the same plan on its own slices of the weights,
// so context-parallel K|V exchanges, the boundary exchange and the gradient all-reduce stay among ranks
// holding the same slices.
#pragma once

#include <memory>

#include "minimllm/core/world.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "minimllm/parallel/tensor_parallel.hpp"

namespace minimllm {

class TensorParallelGrid {
 public:
  // Collective over world. tp divides world.size, encoder_tp divides tp (validate_model_parallel checks
  // both, and that tp divides the ranks per node, before this). The groups' collectives come from
  // `factory` (the run's backend); with tp = 1 the data world is world itself and nothing is created.
  TensorParallelGrid(const World& world, int tp, int encoder_tp, const CommunicatorFactory& factory);
  ~TensorParallelGrid();
  TensorParallelGrid(const TensorParallelGrid&) = delete;
  TensorParallelGrid& operator=(const TensorParallelGrid&) = delete;

  // The ranks at this rank's tensor-parallel position, one per unit in unit order (data rank = unit).
  const World& data() const { return data_; }
  // This rank's place in its LLM and encoder groups, with their communicators (the model's sharding).
  const ModelSharding& sharding() const { return sharding_; }
  // With encoder_tp < tp a unit has tp / encoder_tp encoder groups, which share its images: this rank's
  // group among them (rank: the group's index), with the ranks at its encoder position in every group.
  const TensorParallel& encoder_groups() const { return encoder_groups_; }
  int tp() const { return sharding_.llm.size; }

 private:
  World data_;
  std::unique_ptr<Communicator> llm_group_, encoder_group_, encoder_peers_;
  ModelSharding sharding_;
  TensorParallel encoder_groups_;
};

}  // namespace minimllm
