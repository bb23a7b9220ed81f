#include "minimllm/layout/memory_model.hpp"

#include <algorithm>

namespace minimllm {

bool MemoryModel::encoder_rows_cost_memory() const {
  return std::any_of(per_encoder_row.begin(), per_encoder_row.end(),
                     [](double bytes) { return bytes > 0.0; });
}

double training_state_bytes(std::size_t parameters, int optimizer_shards) {
  const std::size_t shards = static_cast<std::size_t>(std::max(1, optimizer_shards));
  const double shard = static_cast<double>((parameters + shards - 1) / shards);
  const double reduce_scatter_buffer = shards > 1 ? sizeof(float) * shard : 0.0;
  return 2.0 * sizeof(float) * parameters + 2.0 * sizeof(float) * shard + reduce_scatter_buffer;
}

}  // namespace minimllm
