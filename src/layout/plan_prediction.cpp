#include "minimllm/layout/plan_prediction.hpp"

namespace minimllm {

int sample_loader_rank(int sample, int samples, int world_size) {
  // The largest r whose shard starts at or before the sample: floor(r * samples / world_size) <= sample.
  return static_cast<int>(((static_cast<long long>(sample) + 1) * world_size - 1) / samples);
}

}  // namespace minimllm
