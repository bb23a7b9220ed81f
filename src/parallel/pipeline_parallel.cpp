#include "minimllm/parallel/pipeline_parallel.hpp"

namespace minimllm {

PipelineStage pipeline_stage(int layers, int stage, int stages, const std::vector<int>& listed) {
  PipelineStage p;
  p.stage = stage, p.stages = stages;
  p.stage_layers = stage_layer_counts(layers, stages, listed);
  p.layers = p.stage_layers[stage];
  for (int s = 0; s < stage; ++s) p.first_layer += p.stage_layers[s];
  return p;
}

PipelineStage unit_stage(int layers, int index, int stages, bool encoder_stage,
                         const std::vector<int>& listed) {
  if (!encoder_stage) return pipeline_stage(layers, index, stages, listed);
  PipelineStage p;
  if (index > 0) {
    p = pipeline_stage(layers, index - 1, stages, listed);
  } else {
    p.stage = -1, p.stages = stages, p.layers = 0;
    p.stage_layers = stage_layer_counts(layers, stages, listed);
  }
  p.encoder_stage = true;
  return p;
}

}  // namespace minimllm
