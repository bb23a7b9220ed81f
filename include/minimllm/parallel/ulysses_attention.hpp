// Context parallelism by all-to-all (parallel.cp_comm: a2a), DeepSpeed-Ulysses' mechanism: member r of a
// group of g holds its chunks of every sample's rows for all of its heads. An all-to-all of Q | K | V
// gives each member the group's rows (whole samples) for its g-th of the heads, which it attends as one
// rank would; a second all-to-all returns the output (and lse) to the rows' owners. The backward runs the
// same two exchanges the other way (dO to the head shards, dQ | dK | dV back). The exchanged volume per
// member is its rows' width, independent of g; the heads per rank must be a multiple of g
// (cp_comm_for_group). Each block keeps its head shard of the group's Q | K | V, output and lse (about as
// many floats as 4 x its own rows' Q, with g rows per own row at 1/g of the width).
#pragma once

#include <memory>
#include <vector>

#include "minimllm/core/phase.hpp"
#include "minimllm/parallel/context_attention.hpp"

namespace minimllm {

class UlyssesAttention : public ContextAttention {
 public:
  // shape: this rank's heads (a multiple of the group's size) and head dimension. Throws
  // std::invalid_argument otherwise.
  UlyssesAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb, AttentionShape shape);

  // Per group row, sample-major: Q | K | V | O of this member's heads, then their lse.
  Kept kept_shape() const override { return {full_rows_, 4 * shard_width() + shard_.heads}; }
  // segs is not used: the head shard attends the group's whole samples (segments built here). recompute
  // (selective recomputation) returns the kept output and lse to the rows' owners again: one exchange, no
  // attention.
  void forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
               const t_mat& attn, const t_mat& lse) override;
  void recompute(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs, AttentionShape shape,
                 const t_mat& attn, const t_mat& lse) override;
  void backward(const t_mat& d_attn, const t_mat& qkv, const t_mat& kv_full, const t_mat& attn,
                const t_mat& lse, const AttentionSegments& segs, AttentionShape shape, const t_mat& d_qkv,
                const t_mat& d_kv_full) override;
  double seconds() const override { return times_[Phase::kv_exchange]; }

 private:
  int shard_width() const { return shard_.heads * shard_.head_dim; }
  // group_rows [group rows, parts x shard] (sample-major) = this member's head shard of every member's
  // local rows [rows, parts x heads x head_dim] (parts column blocks: Q | K | V, or one).
  void to_head_shards(const t_mat_strided_const& local, int parts, const t_mat_strided& group_rows);
  // [members x rows, cols]: every member's head shard of this rank's rows, member by member, from
  // group_rows [group rows, cols] (sample-major); join_heads makes them local rows again. In the caller's
  // workspace scope.
  t_mat to_row_owners(const t_mat_strided_const& group_rows);
  // One all-to-all: send blocks of send_rows[m] rows to member m, receive blocks of recv_rows[m].
  void exchange(const t_mat& send, const std::vector<int>& send_rows, const t_mat& recv,
                const std::vector<int>& recv_rows);

  std::shared_ptr<Communicator> group_;
  int members_, local_rows_, full_rows_;
  AttentionShape shard_;                     // this member's heads of the group's rows
  std::vector<int> member_rows_, own_rows_;  // every member's local rows; this rank's, once per member
  t_ivec kv_order_, identity_;               // sample-major row -> rank-major row, and 0..full_rows-1
  AttentionSegments segments_;               // the group's rows, causal within each sample
  PhaseTimes times_;
};

}  // namespace minimllm
