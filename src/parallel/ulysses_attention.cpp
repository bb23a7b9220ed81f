#include "minimllm/parallel/ulysses_attention.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/embedding.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {

UlyssesAttention::UlyssesAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb,
                                   AttentionShape shape)
    : group_(std::move(group)),
      members_(group_->size()),
      local_rows_(mb.member_rows.at(group_->rank())),
      full_rows_(mb.sample_offsets.empty() ? 0 : mb.sample_offsets.back()),
      member_rows_(mb.member_rows),
      own_rows_(members_, local_rows_) {
  if (shape.heads % members_ != 0)
    throw std::invalid_argument(
        fmt::format("context parallelism a2a: {} heads per rank cannot be split over a "
                    "group of {} (the group's size must divide them)",
                    shape.heads, members_));
  shard_ = {shape.heads / members_, shape.head_dim};
  kv_order_ = to_device(key_order(mb), "a2a::order");
  identity_ = row_numbers(full_rows_, "a2a::identity");
  std::vector<int> lengths;
  for (size_t s = 0; s + 1 < mb.sample_offsets.size(); ++s)
    lengths.push_back(mb.sample_offsets[s + 1] - mb.sample_offsets[s]);
  segments_ = make_self_segments(lengths, true);
}

void UlyssesAttention::exchange(const t_mat& send, const std::vector<int>& send_rows, const t_mat& recv,
                                const std::vector<int>& recv_rows) {
  const std::size_t cols = send.extent(1);
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;
  std::size_t send_at = 0, recv_at = 0;
  for (int m = 0; m < members_; ++m) {
    send_counts.push_back(send_rows[m] * cols);
    send_displs.push_back(send_at);
    send_at += send_counts.back();
    recv_counts.push_back(recv_rows[m] * cols);
    recv_displs.push_back(recv_at);
    recv_at += recv_counts.back();
  }
  step_fence();  // the communicator reads raw pointers
  group_->alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs);
}

void UlyssesAttention::to_head_shards(const t_mat_strided_const& local, int parts,
                                      const t_mat_strided& group_rows) {
  const PhaseClock clock(times_, Phase::kv_exchange);
  const WorkspaceScope scope;
  const int cols = parts * shard_width();
  const t_mat by_member = scratch_view<t_mat>("a2a::by_member", members_ * local_rows_, cols);
  const t_mat rank_major = scratch_view<t_mat>("a2a::rank_major", full_rows_, cols);
  split_heads(local, parts, members_, by_member);
  exchange(by_member, own_rows_, rank_major, member_rows_);
  copy_rows(rank_major, kv_order_, group_rows, identity_);
}

t_mat UlyssesAttention::to_row_owners(const t_mat_strided_const& group_rows) {
  const PhaseClock clock(times_, Phase::kv_exchange);
  const int cols = static_cast<int>(group_rows.extent(1));
  const t_mat by_member = scratch_view<t_mat>("a2a::by_member", members_ * local_rows_, cols);
  {
    const WorkspaceScope scope;  // by_member outlives the staging
    const t_mat rank_major = scratch_view<t_mat>("a2a::rank_major", full_rows_, cols);
    copy_rows(group_rows, identity_, rank_major, kv_order_);
    exchange(rank_major, member_rows_, by_member, own_rows_);
  }
  return by_member;
}

void UlyssesAttention::forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments&,
                               AttentionShape, const t_mat& attn, const t_mat& lse) {
  const int w = shard_width();
  to_head_shards(qkv, 3, columns(kv_full, 0, 3 * w));
  {
    const WorkspaceScope scope;
    const t_mat shard_lse = scratch_view<t_mat>("a2a::lse", full_rows_, shard_.heads);
    attention_forward(columns(kv_full, 0, w), columns(kv_full, w, w), columns(kv_full, 2 * w, w), segments_,
                      shard_, columns(kv_full, 3 * w, w), shard_lse);
    Kokkos::deep_copy(columns(kv_full, 4 * w, shard_.heads), shard_lse);
  }
  recompute(qkv, kv_full, {}, {}, attn, lse);
}

void UlyssesAttention::recompute(const t_mat&, const t_mat& kv_full, const AttentionSegments&, AttentionShape,
                                 const t_mat& attn, const t_mat& lse) {
  // The head shard's output and lse are kept: every head's back to the rows' owners, in one exchange.
  const WorkspaceScope scope;
  const int w = shard_width();
  const t_mat back = to_row_owners(columns(kv_full, 3 * w, w + shard_.heads));
  join_heads(columns(back, 0, w), 1, members_, attn);
  join_heads(columns(back, w, shard_.heads), 1, members_, lse);
}

void UlyssesAttention::backward(const t_mat& d_attn, const t_mat&, const t_mat& kv_full, const t_mat&,
                                const t_mat&, const AttentionSegments&, AttentionShape, const t_mat& d_qkv,
                                const t_mat& d_kv_full) {
  const WorkspaceScope scope;
  const int w = shard_width();
  // d_kv_full holds dO of the head shard, then its dQ | dK | dV.
  const t_mat_strided d_out = columns(d_kv_full, 0, w);
  to_head_shards(d_attn, 1, d_out);
  const t_mat shard_lse = scratch_view<t_mat>("a2a::lse", full_rows_, shard_.heads);
  Kokkos::deep_copy(shard_lse, columns(kv_full, 4 * w, shard_.heads));
  attention_backward(d_out, columns(kv_full, 0, w), columns(kv_full, w, w), columns(kv_full, 2 * w, w),
                     columns(kv_full, 3 * w, w), shard_lse, segments_, shard_, columns(d_kv_full, w, w),
                     columns(d_kv_full, 2 * w, w), columns(d_kv_full, 3 * w, w));
  join_heads(to_row_owners(columns(d_kv_full, w, 3 * w)), 3, members_, d_qkv);
}

}  // namespace minimllm
