// One row of the /steps table: what a step did and how long it took (already reduced over ranks).
#pragma once

#include <cstdint>

namespace minimllm {

struct StepRecord {
  int step = 0;
  double loss = 0.0;             // mean cross-entropy per text target over the global batch
  std::int64_t text_tokens = 0;  // text tokens in the global batch
  std::int64_t image_tokens = 0; // image patches (encoder tokens) in the global batch
  std::int64_t loss_targets = 0; // text positions that carry loss (normalisation denominator)
  int samples = 0;
  double step_seconds = 0.0;     // wall time of the step, max over ranks
  double data_seconds = 0.0;     // phase times, max over ranks: batch generation and packing
  double encoder_seconds = 0.0;  // encoder forward + backward
  double llm_seconds = 0.0;      // LLM forward + backward
  double grad_sync_seconds = 0.0;
  double optimizer_seconds = 0.0;
  double tokens_per_second = 0.0;  // (text + image tokens) / step_seconds
  double model_flops = 0.0;        // analytic forward+backward FLOPs of the step
  double mfu = 0.0;                // model_flops / step_seconds / (peak per rank * ranks)
};

}  // namespace minimllm
