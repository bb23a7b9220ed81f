// AdamW over the model's one parameter buffer, owning its moment estimates (m, v): decoupled weight
// decay on the matrices, none on the norm weights, and a linear learning-rate warm-up (optimizer.*).
//
// Replicated (the default): every rank holds both moments for every parameter and updates every parameter
// from the all-reduced gradient. Distributed (parallel.distributed_optimizer, ZeRO-1 as Megatron-LM's):
// each rank holds the moments of its own shard (model/parameter_shards.hpp) only, updates that shard from
// its reduce-scattered gradient (GradientSync) and all-gathers the updated shards, so that every rank again
// holds every parameter. Same element-wise update, so the same parameters either way.
#pragma once

#include <memory>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/types.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

class AdamW {
 public:
  // Replicated.
  AdamW(const Model& model, const OptimizerConfig& config);
  // Distributed over `shards` (every rank of it): moments for shards' shard rank() only.
  AdamW(const Model& model, const OptimizerConfig& config, std::shared_ptr<Communicator> shards);

  // Updates model.params() from model.grads() (synchronised, on this rank's shard at least); step counts
  // from 0. Distributed: collective over the shards' communicator (the all-gather).
  void step(Model& model, int step);

  bool distributed() const { return shards_comm_ != nullptr; }
  const ParameterShards& shards() const { return shards_; }  // one part when replicated
  ShardRange shard() const { return shard_; }                // the parameters the moments are of
  double state_bytes() const { return 2.0 * sizeof(float) * m_.extent(0); }
  // The moment estimates of shard(): saved and restored by checkpoints (driver/checkpoint.hpp), which
  // gather and slice them, so that a checkpoint holds every parameter's whichever way it was written.
  const t_vec& first_moment() const { return m_; }
  const t_vec& second_moment() const { return v_; }

 private:
  OptimizerConfig config_;
  std::shared_ptr<Communicator> shards_comm_;
  ParameterShards shards_;
  ShardRange shard_;
  t_vec m_, v_;
};

}  // namespace minimllm
