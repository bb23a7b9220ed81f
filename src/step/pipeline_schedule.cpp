#include "minimllm/step/pipeline_schedule.hpp"

#include <algorithm>

namespace minimllm {

std::vector<PipelineOp> one_f_one_b(int stage, int stages, int micro_batches) {
  const int warm_up = std::min(stages - stage - 1, micro_batches);
  std::vector<PipelineOp> ops;
  for (int m = 0; m < warm_up; ++m) ops.push_back({true, m});
  for (int m = 0; m < micro_batches; ++m) {
    if (m + warm_up < micro_batches) ops.push_back({true, m + warm_up});
    ops.push_back({false, m});
  }
  return ops;
}

double ideal_bubble(int stages, int micro_batches) {
  if (micro_batches <= 0) return 0.0;
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

}  // namespace minimllm
