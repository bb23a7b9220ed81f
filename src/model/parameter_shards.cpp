#include "minimllm/model/parameter_shards.hpp"

#include <algorithm>
#include <stdexcept>

namespace minimllm {

std::size_t leading_in(ShardRange shard, std::size_t end) {
  return std::min(shard.count, end > shard.offset ? end - shard.offset : 0);
}

ParameterShards::ParameterShards(std::size_t total, int parts) : total_(total) {
  if (parts < 1) throw std::invalid_argument("ParameterShards: parts must be >= 1");
  const std::size_t n = static_cast<std::size_t>(parts);
  counts_.assign(n, total / n);
  for (std::size_t r = 0; r < total % n; ++r) ++counts_[r];
}

ShardRange ParameterShards::shard(int part) const {
  ShardRange range;
  for (int r = 0; r < part; ++r) range.offset += counts_.at(r);
  range.count = counts_.at(part);
  return range;
}

double collective_staging_bytes(std::size_t parameters, int optimizer_shards, bool nccl) {
  if (!nccl || optimizer_shards <= 1) return 0.0;
  const double padded =
      static_cast<double>(ParameterShards(parameters, optimizer_shards).largest()) * optimizer_shards;
  return 2.0 * sizeof(float) * padded;
}

int optimizer_shards(const ParallelConfig& parallel, int ranks) {
  return parallel.distributed_optimizer ? ranks : 1;
}

}  // namespace minimllm
