// Everything one rank uploads for a step, before any compute: the encoder's packed images, the LLM's
// packed micro-batches, and the exchanges' row lists (boundary exchange, context-parallel K/V). From
// here to the end of the step nothing but documented scalars crosses between host and device.
#pragma once

#include <memory>
#include <vector>

#include "minimllm/core/transfer.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/model/model_inputs.hpp"
#include "minimllm/parallel/boundary_exchange.hpp"
#include "minimllm/parallel/context_attention.hpp"
#include "minimllm/parallel/tensor_parallel.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/step_comms.hpp"

namespace minimllm {

struct StepInputs {
  float grad_scale = 1.0f;  // 1 / loss targets of the global batch: the per-token normalisation
  // Colocated plans: one encoder input (this rank's images) and its exchange. Disaggregated plans: one
  // of each per pipeline stage (RankWork::stages), the exchange tagged with its stage.
  // Under shared encoder groups (RankGrid::encoder_groups) each encoder input holds this group's
  // run of the images only, and encoder_group_rows[i] every group's rows of encoder input i's images (the
  // all-gather that rebuilds them in image order); empty with one group.
  std::vector<EncoderInput> encoder;
  std::vector<std::vector<std::size_t>> encoder_group_rows;
  std::vector<std::unique_ptr<BoundaryExchange>> boundary;
  std::vector<LlmInput> llm;                          // one per micro-batch of this rank's LLM group
  std::vector<std::unique_ptr<ContextAttention>> kv;  // per micro-batch under context parallelism, else null
  TransferCounts transfers;                           // host -> device copies made building these
  // The step's sample movement (sample_movement.hpp): bytes this rank received from other ranks' loaders
  // and its seconds (generating its shard's inputs and the all-to-all).
  std::int64_t movement_bytes = 0;
  double movement_seconds = 0.0;
};

// Collective over the world (the boundary exchanges check their routes together). width: LLM width (the
// image embeddings' rows); attention: this rank's LLM heads and their dimension (Model::attention_shape);
// cp_comm: the context-parallel mechanism of its groups.
StepInputs upload_step_inputs(const Sampler& sampler, const PlannedStep& planned, const StepComms& comms,
                              int width, AttentionShape attention, CpComm cp_comm,
                              const TensorParallel& encoder_groups = {});

}  // namespace minimllm
