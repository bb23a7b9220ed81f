// StepExecutor: carries out one StepPlan — encoder on the encoder layout, boundary exchange, LLM (context
// parallel inside each group, micro-batch by micro-batch) on the LLM layout, boundary exchange back,
// encoder backward, and the gradient all-reduce. Colocated plans run these as phases on every rank;
// disaggregated plans as a pipeline over micro-batches between the encoder ranks and the LLM ranks.
// Leaves the synced gradients in the model.
#pragma once

#include <cstdint>
#include <memory>

#include "minimllm/core/world.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/plan/rank_work.hpp"
#include "minimllm/plan/step_plan.hpp"

namespace minimllm {

struct StepOutcome {
  double loss_sum = 0.0;  // sum of per-target losses over the world
  double flops = 0.0;     // model FLOPs of this rank
  // Phase times of this rank (seconds, fenced)
  // (pipelines: boundary_seconds includes waiting for rows or gradients to arrive)
  double data_seconds = 0.0, encoder_seconds = 0.0, boundary_seconds = 0.0, llm_seconds = 0.0,
         grad_sync_seconds = 0.0;
  double kv_exchange_seconds = 0.0;  // context-parallel K/V all-gather + reduce-scatter (inside llm_seconds)
  std::int64_t boundary_bytes = 0;   // sent by this rank, both directions
  std::int64_t llm_rows = 0, encoder_rows = 0;  // work assigned to this rank
  // Host<->device copies of this rank (none on host backends). input_transfers: packing the step's
  // inputs (pixels, token ids, index lists, built on the host) up to the device, before any compute.
  // transfers: everything after that, compute and communication; zero on the device path with NCCL
  // collectives for colocated plans, and the MPI backend's host staging otherwise (disaggregated
  // pipelines send their rows point to point through MPI, staged through host memory on a device), besides
  // each micro-batch's loss sum: one counted 8-byte copy back to the host.
  TransferCounts input_transfers;
  TransferCounts transfers;
};

class StepExecutor {
 public:
  // Collective over world: creates the world communicator (gradient all-reduce, boundary exchange) with
  // the pool's factory, so every collective of a step uses the backend chosen at start-up.
  StepExecutor(const Sampler& sampler, Model& model, const World& world, CommPool& pool);

  const Communicator& world_communicator() const { return *world_comm_; }

  // Computes the gradient of the global mean loss (normalised per text target of the whole batch)
  // into model.grads(), identical on every rank. The plan must be valid and identical on every rank.
  StepOutcome run(const GlobalBatch& batch, const StepPlan& plan);

 private:
  void run_phases(const GlobalBatch& batch, const RankWork& work, const std::vector<LlmInput>& llm_inputs,
                  const std::shared_ptr<Communicator>& group_comm, float grad_scale,
                  const TransferCounts& transfers_before, StepOutcome& out);
  void run_pipeline(const GlobalBatch& batch, const RankWork& work, const std::vector<LlmInput>& llm_inputs,
                    const std::shared_ptr<Communicator>& group_comm, float grad_scale,
                    const TransferCounts& transfers_before, StepOutcome& out);

  const Sampler& sampler_;
  Model& model_;
  World world_;
  CommPool& pool_;
  std::shared_ptr<Communicator> world_comm_;
};

}  // namespace minimllm
