#include "minimllm/parallel/gathered_attention.hpp"

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/embedding.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
GatheredAttention::GatheredAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb,
                                     int attention_width)
    : group_(std::move(group)),
      width_(2 * attention_width),
      full_rows_(mb.sample_offsets.empty() ? 0 : mb.sample_offsets.back()),
      local_rows_(mb.member_rows.at(group_->rank())) {
  for (int rows : mb.member_rows) member_floats_.push_back(static_cast<std::size_t>(rows) * width_);
  kv_order_ = to_device(key_order(mb), "kv::order");
  identity_ = row_numbers(full_rows_, "kv::identity");
}

GatheredAttention::Staging GatheredAttention::staging() const {
  return {scratch_view<t_mat>("kv::local", local_rows_, width_),
          scratch_view<t_mat>("kv::rank_major", full_rows_, width_)};
}

void GatheredAttention::gather(const t_mat_strided_const& kv_local, const t_mat& kv_full) {
  const PhaseClock clock(times_, Phase::kv_exchange);
  const WorkspaceScope scope;  // the staging lives for this call (the collective is synchronous)
  const Staging s = staging();
  Kokkos::deep_copy(s.local, kv_local);
  step_fence();  // the communicator reads raw pointers
  group_->allgatherv(s.local.data(), s.local.size(), s.rank_major.data(), member_floats_);
  copy_rows(s.rank_major, kv_order_, kv_full, identity_);
}

void GatheredAttention::reduce(const t_mat_const& d_kv_full, const t_mat_strided& kv_local_grad) {
  const PhaseClock clock(times_, Phase::kv_exchange);
  const WorkspaceScope scope;
  const Staging s = staging();
  copy_rows(d_kv_full, identity_, s.rank_major, kv_order_);
  step_fence();
  group_->reduce_scatterv(s.rank_major.data(), s.local.data(), member_floats_);
  Kokkos::deep_copy(kv_local_grad, s.local);
}

void GatheredAttention::forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs,
                                AttentionShape shape, const t_mat& attn, const t_mat& lse) {
  gather(columns(qkv, width_ / 2, width_), kv_full);
  recompute(qkv, kv_full, segs, shape, attn, lse);
}

void GatheredAttention::recompute(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs,
                                  AttentionShape shape, const t_mat& attn, const t_mat& lse) {
  const int w = width_ / 2;
  attention_forward(columns(qkv, 0, w), columns(kv_full, 0, w), columns(kv_full, w, w), segs, shape, attn,
                    lse);
}

void GatheredAttention::backward(const t_mat& d_attn, const t_mat& qkv, const t_mat& kv_full,
                                 const t_mat& attn, const t_mat& lse, const AttentionSegments& segs,
                                 AttentionShape shape, const t_mat& d_qkv, const t_mat& d_kv_full) {
  const int w = width_ / 2;
  // dK|dV come out for the group's rows and are reduced to their owners.
  attention_backward(d_attn, columns(qkv, 0, w), columns(kv_full, 0, w), columns(kv_full, w, w), attn, lse,
                     segs, shape, columns(d_qkv, 0, w), columns(d_kv_full, 0, w), columns(d_kv_full, w, w));
  reduce(d_kv_full, columns(d_qkv, w, width_));
}

}  // namespace minimllm
