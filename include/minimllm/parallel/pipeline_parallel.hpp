// Pipeline parallelism as Megatron-LM's: the LLM's layers split into consecutive stages on different
// ranks, the first stage also holding the token embedding (and the encoder, which runs before the LLM's
// first layer), the last the final norm and the LM head. A micro-batch's activations go forward from stage
// to stage and their gradients back, point to point (step/pipeline_schedule.hpp runs them 1F1B).
#pragma once

#include <vector>

#include "minimllm/layout/model_parallel.hpp"  // stage_layer_counts
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

// This rank's stage of its unit's pipeline. stages 1 and no encoder stage: the whole LLM, no communication.
// With the encoder as its own stage (parallel.encoder_stage) the unit has one stage more, before the LLM's
// first: its ranks hold the encoder only (stage -1), the LLM's first stage none of it.
struct PipelineStage {
  int stage = 0, stages = 1;         // this rank's LLM stage (-1: the encoder's), of the LLM's stages
  int first_layer = 0, layers = -1;  // this stage's LLM layers [first_layer, first_layer + layers); -1: all
  std::vector<int> stage_layers;     // every LLM stage's layer count (empty: one stage)
  bool encoder_stage = false;        // the unit's encoder has a stage of its own
  // The unit's stages, the encoder's first (non-null when there is more than one): group rank =
  // group_rank(stage).
  Communicator* comm = nullptr;
  bool first() const { return stage == 0; }  // of the LLM's stages: the token embedding
  bool last() const { return stage + 1 == stages; }
  bool holds_encoder() const { return encoder_stage ? stage < 0 : stage == 0; }
  int unit_stages() const { return stages + (encoder_stage ? 1 : 0); }
  int group_rank(int llm_stage) const { return llm_stage + (encoder_stage ? 1 : 0); }
  int layer_count(int all_layers) const { return layers < 0 ? all_layers : layers; }
};

// LLM stage `stage` of `stages` over the LLM's layers as stage_layer_counts splits them (comm left null).
PipelineStage pipeline_stage(int layers, int stage, int stages, const std::vector<int>& listed);

// A unit's stage `index` in rank order (0 .. stages + encoder_stage - 1: the encoder's first when it has
// one), as pipeline_stage (comm left null).
PipelineStage unit_stage(int layers, int index, int stages, bool encoder_stage,
                         const std::vector<int>& listed);

}  // namespace minimllm
