// Context parallelism as a ring (parallel.cp_comm: p2p), the way TransformerEngine runs Megatron-LM's
// default `--cp-comm-type p2p`. Member r of a group of g holds its chunk of every sample's rows (Q, K, V
// of its own rows only). The forward takes g steps: at step t it attends its queries against the K|V
// block of member (r - t) mod g while that block is already travelling on to member r + 1 and the next
// one arriving from r - 1 (nonblocking sends and receives posted before the attention, waited after
// it); each block's partial result is merged by its log-sum-exp (attention_merge), so the result is the
// one-pass attention up to rounding. Blocks whose keys all lie after the queries (causal) are passed on
// without work. The backward walks the ring again: K|V blocks as in the forward, and with each its dK|dV
// accumulator, one step behind, which every member adds its queries' share to and which arrives back
// at its owner after g steps. Nothing of another member's K|V outlives a call: memory holds two blocks
// in flight (and, backward, two accumulators and one arriving), not the group's K|V.
#pragma once

#include <memory>
#include <vector>

#include "minimllm/core/phase.hpp"
#include "minimllm/parallel/context_attention.hpp"

namespace minimllm {

class RingAttention : public ContextAttention {
 public:
  RingAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb, int attention_width);

  Kept kept_shape() const override { return {}; }
  // segs and kv_full are not used: the ring builds its segments against each member's rows itself.
  void forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
               const t_mat& attn, const t_mat& lse) override;
  void recompute(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
                 const t_mat& attn, const t_mat& lse) override {
    forward(qkv, kv_full, segs, shape, attn, lse);
  }
  void backward(const t_mat& d_attn, const t_mat& qkv, const t_mat& kv_full, const t_mat& attn,
                const t_mat& lse, const AttentionSegments& segs, AttentionShape shape, const t_mat& d_qkv,
                const t_mat& d_kv_full) override;
  double seconds() const override { return times_[Phase::kv_exchange]; }

 private:
  // The member whose block this rank attends at ring step `step`.
  int owner_at(int step) const { return (rank_ - step + size_) % size_; }
  t_mat block_of(const t_mat& buffer, int member) const;  // the leading rows member's block fills

  std::shared_ptr<Communicator> group_;
  int rank_, size_, attention_width_, local_rows_, max_rows_;
  std::vector<int> member_rows_;
  std::vector<AttentionSegments> segments_;
  PhaseTimes times_;
};

}  // namespace minimllm
