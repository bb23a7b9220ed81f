// Context parallelism by all-gather (parallel.cp_comm: all_gather): each member holds a chunk of every
// sample's rows; attention stays exact by all-gathering K and V of the whole samples (then each member
// attends its own queries against them) and reduce-scattering their gradients back to the owners.
#pragma once

#include <memory>

#include "minimllm/core/phase.hpp"
#include "minimllm/parallel/context_attention.hpp"

namespace minimllm {

class GatheredAttention : public ContextAttention {
 public:
  // Uploads the row order to MemSpace here; the staging buffers of each call come from the active
  // Workspace (the model's LLM pass), in a scope of that call.
  GatheredAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb, int attention_width);

  Kept kept_shape() const override { return {full_rows_, width_}; }
  void forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
               const t_mat& attn, const t_mat& lse) override;
  void recompute(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
                 const t_mat& attn, const t_mat& lse) override;
  void backward(const t_mat& d_attn, const t_mat& qkv, const t_mat& kv_full, const t_mat& attn,
                const t_mat& lse, const AttentionSegments& segs, AttentionShape shape, const t_mat& d_qkv,
                const t_mat& d_kv_full) override;
  double seconds() const override { return times_[Phase::kv_exchange]; }

 private:
  struct Staging {
    t_mat local, rank_major;  // this rank's rows; every member's rows in rank order
  };
  Staging staging() const;  // from the active workspace's innermost scope
  // kv_full [full rows, 2w] (sample-major) = all members' kv_local rows.
  void gather(const t_mat_strided_const& kv_local, const t_mat& kv_full);
  // kv_local_grad (overwritten) = sum over members of their d_kv_full rows that belong to this rank.
  void reduce(const t_mat_const& d_kv_full, const t_mat_strided& kv_local_grad);

  std::shared_ptr<Communicator> group_;
  int width_, full_rows_, local_rows_;  // width_: floats per K|V row
  std::vector<std::size_t> member_floats_;
  t_ivec kv_order_, identity_;  // sample-major row -> rank-major row, and 0..full_rows-1
  PhaseTimes times_;
};

}  // namespace minimllm
