// The distributed optimizer's partition (ZeRO-1, as Megatron-LM's): the model's one flat parameter buffer
// cut into one contiguous shard per rank, in rank order. Each rank keeps AdamW's moments and the summed
// gradient for its own shard only. The shards span the world, the whole domain the planners regroup, so a
// step's new data- and context-parallel groups never move a shard (FlexSP's choice).
#pragma once

#include <cstddef>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/layout/memory_model.hpp"  // training_state_bytes

namespace minimllm {

// Elements [offset, offset + count) of the parameter (and gradient) buffer.
struct ShardRange {
  std::size_t offset = 0, count = 0;
};

// How many of elements [0, end) of the whole buffer fall in `shard`: they lead it. With end = the model's
// decayed_count, the shard's own decay boundary (before, inside or after it).
std::size_t leading_in(ShardRange shard, std::size_t end);

class ParameterShards {
 public:
  // `total` elements over `parts` ranks, balanced: the first total % parts shards one element longer.
  ParameterShards(std::size_t total, int parts);

  int parts() const { return static_cast<int>(counts_.size()); }
  std::size_t total() const { return total_; }
  // Elements per shard in rank order: the counts of Communicator::reduce_scatterv and allgatherv.
  const std::vector<std::size_t>& counts() const { return counts_; }
  std::size_t largest() const { return counts_.front(); }
  ShardRange shard(int part) const;

 private:
  std::size_t total_ = 0;
  std::vector<std::size_t> counts_;
};

// Device memory NCCL's collectives keep for the distributed optimizer: NCCL has equal-count all-gather
// and reduce-scatter only, so the uneven shards are staged through two scratch buffers of shards x the
// largest shard each, kept for reuse (nccl_communicator.cpp): about 8 bytes per parameter, more than the
// moments save. 0 with MPI (which reads and writes the buffers in place) or one shard. A padded parameter
// buffer with equal shards would let NCCL work in place (not done: no GPU to test it on).
double collective_staging_bytes(std::size_t parameters, int optimizer_shards, bool nccl);

// The shards of a run on `ranks` ranks: every rank with parallel.distributed_optimizer, else 1.
int optimizer_shards(const ParallelConfig& parallel, int ranks);

}  // namespace minimllm
