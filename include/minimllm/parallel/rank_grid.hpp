// A run's fixed model-parallel groups around the planners' dynamic regrouping (the 4-D layout), in
// Megatron-LM's order, tensor parallelism innermost and pipeline stages outermost:
//   world rank = stage x (tp x units) + unit x tp + tensor-parallel rank
// A unit is one model replica: parallel.tp consecutive ranks (inside a node) at each of parallel.pp
// stages, and of the encoder's own stage before them with parallel.encoder_stage. The unit's ranks at one
// stage split its blocks Megatron-style (parallel/tensor_parallel.hpp); the encoder's groups are consecutive
// blocks of parallel.encoder_tp ranks inside them. Its ranks at one tensor-parallel position form its
// pipeline (parallel/pipeline_parallel.hpp). The ranks at one stage and tensor-parallel position, one per
// unit, form a data world: the planners plan over its ranks (the units) exactly as over a world without model
// parallelism, and every data world runs the same plan on its own stage's slices of the weights, so
// context-parallel K|V exchanges, the boundary exchange (the stage holding the encoder) and the gradient
// all-reduce stay among ranks holding the same slices.
#pragma once

#include <memory>
#include <string>

#include "minimllm/core/world.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "minimllm/parallel/tensor_parallel.hpp"

namespace minimllm {

class RankGrid {
 public:
  // Collective over world. The grid fits world.size (validate_model_parallel checked it: tp x pp divides
  // the ranks, encoder_tp divides tp, tp divides the ranks per node); llm_layers: the LLM's, split into
  // stages as grid.pp_layers says (or evenly). The groups' collectives come from `factory` (the run's
  // backend); with a trivial grid the data world is world itself and nothing is created.
  RankGrid(const World& world, const ModelParallel& grid, int llm_layers, const CommunicatorFactory& factory);
  ~RankGrid();
  RankGrid(const RankGrid&) = delete;
  RankGrid& operator=(const RankGrid&) = delete;

  // The ranks at this rank's stage and tensor-parallel position, one per unit in unit order (data rank =
  // unit).
  const World& data() const { return data_; }
  // This rank's place in its LLM and encoder groups and its pipeline, with their communicators (the
  // model's sharding).
  const ModelSharding& sharding() const { return sharding_; }
  // With encoder_tp < tp a unit has tp / encoder_tp encoder groups, which share its images: this rank's
  // group among them (rank: the group's index), with the ranks at its encoder position in every group.
  const TensorParallel& encoder_groups() const { return encoder_groups_; }
  int tp() const { return sharding_.llm.size; }
  int ranks_per_unit() const { return tp() * sharding_.pipeline.unit_stages(); }
  // The fixed groups by dimension name, as Megatron-LM's HyperCommGrid looks them up: "tp" (the LLM's
  // tensor-parallel group), "encoder_tp", "encoder_groups" (the unit's shared encoder groups at this
  // rank's encoder position) and "pp" (the unit's stages); null where the dimension has one rank. The
  // data and context dimensions are regrouped every step: their groups come from the pool over data().
  // An unknown name throws std::invalid_argument naming the valid ones.
  Communicator* group(const std::string& dimension) const;

 private:
  World data_;
  std::unique_ptr<Communicator> llm_group_, encoder_group_, encoder_peers_, pipeline_;
  ModelSharding sharding_;
  TensorParallel encoder_groups_;
};

}  // namespace minimllm
