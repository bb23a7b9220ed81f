// Pipeline parallelism as Megatron-LM's: the LLM's layers split into consecutive stages on different
// ranks, the first stage also holding the token embedding (and the encoder, which runs before the LLM's
// first layer), the last the final norm and the LM head. A micro-batch's activations go forward from stage
// to stage and their gradients back, point to point (step/pipeline_schedule.hpp runs them 1F1B).
#pragma once

#include <vector>

#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

// This rank's stage of its unit's pipeline. stages 1: the whole LLM, no communication.
struct PipelineStage {
  int stage = 0, stages = 1;
  int first_layer = 0, layers = -1;  // this stage's LLM layers [first_layer, first_layer + layers); -1: all
  std::vector<int> stage_layers;     // every stage's layer count (empty: one stage)
  Communicator* comm = nullptr;      // the unit's stages, group rank = stage (non-null when stages > 1)
  bool first() const { return stage == 0; }
  bool last() const { return stage + 1 == stages; }
  int layer_count(int all_layers) const { return layers < 0 ? all_layers : layers; }
};

// Layers of each of `stages` stages: `listed` (parallel.pp_layers) when not empty, else an even split of
// `layers` (the later stages one more where it does not divide: the first stage also runs the encoder and
// the embedding). The caller has checked the list (config/run_config.cpp).
std::vector<int> stage_layer_counts(int layers, int stages, const std::vector<int>& listed);

// Stage `stage` of `stages` over the LLM's layers as stage_layer_counts splits them (comm left null).
PipelineStage pipeline_stage(int layers, int stage, int stages, const std::vector<int>& listed);

}  // namespace minimllm
