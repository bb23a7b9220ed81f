#include "minimllm/layout/memory_model.hpp"

#include <algorithm>

namespace minimllm {

double training_state_bytes(std::size_t parameters, int optimizer_shards) {
  const std::size_t shards = static_cast<std::size_t>(std::max(1, optimizer_shards));
  const double shard = static_cast<double>((parameters + shards - 1) / shards);
  const double reduce_scatter_buffer = shards > 1 ? sizeof(float) * shard : 0.0;
  return 2.0 * sizeof(float) * parameters + 2.0 * sizeof(float) * shard + reduce_scatter_buffer;
}

}  // namespace minimllm
