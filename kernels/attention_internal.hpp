// Internal to kernels/: what attention.cpp (validation, segments, dispatch), attention_host.cpp (the host
// kernels) and attention_team.cpp (the team kernels) share: tile sizes, the per-head packed layouts and
// the head-dimension dispatch.
#pragma once

#include <type_traits>

#include "minimllm/kernels/attention.hpp"

namespace minimllm::attention_detail {

constexpr int kTileQ = 32;  // query rows per tile
constexpr int kTileK = 32;  // key rows per tile

struct SegmentView {
  t_ivec_const q_start, q_len, k_start, k_len, causal_offset;
};

inline SegmentView view_of(const AttentionSegments& s) {
  return {s.q_start, s.q_len, s.k_start, s.k_len, s.causal_offset};
}

// Number of keys (from the segment's first key) visible to query row q_row of the segment.
KOKKOS_INLINE_FUNCTION int visible_keys(bool causal, int q_row, int offset, int k_len) {
  if (!causal) return k_len;
  const int n = q_row + offset + 1;
  return n < 0 ? 0 : (n < k_len ? n : k_len);
}

using t_heads = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;

// Per-head copies in the layouts the inner loops read contiguously, from the active workspace: rows
// [head][row][d] (times scale) and transposed [head][d][row + kTileK] (zero padding lets a key tile run
// its full, compile-time trip count); unpack_rows writes rows back to [row][head * head_dim + d].
t_heads pack_rows(const t_mat_strided_const& src, int heads, int head_dim, float scale, const char* label);
t_heads pack_transposed(const t_mat_strided_const& src, int heads, int head_dim, const char* label);
void unpack_rows(const t_heads& src, const t_mat_strided& dst);

// Calls f(std::integral_constant<int, DMax>, std::bool_constant<exact>) for the head dimension.
template <class F>
void dispatch_head_dim(int head_dim, F&& f) {
  static_assert(kMaxHeadDim == 128, "the largest case below is kMaxHeadDim");
  switch (head_dim) {
    case 16:
      return f(std::integral_constant<int, 16>(), std::true_type());
    case 32:
      return f(std::integral_constant<int, 32>(), std::true_type());
    case 64:
      return f(std::integral_constant<int, 64>(), std::true_type());
    case 128:
      return f(std::integral_constant<int, 128>(), std::true_type());
    default:
      if (head_dim < 32) return f(std::integral_constant<int, 32>(), std::false_type());
      if (head_dim < 64) return f(std::integral_constant<int, 64>(), std::false_type());
      return f(std::integral_constant<int, 128>(), std::false_type());
  }
}

// The two kernel sets, called with validated shapes inside the caller's workspace scope. delta(row, h) =
// sum_d dout * out; dk and dv arrive zeroed.
void forward_host(const t_mat_strided_const& q, const t_mat_strided_const& k, const t_mat_strided_const& v,
                  const AttentionSegments& segs, AttentionShape shape, const t_mat_strided& out,
                  const t_mat& lse);
void backward_host(const t_mat_strided_const& dout, const t_mat_strided_const& q,
                   const t_mat_strided_const& k, const t_mat_strided_const& v, const t_mat_const& lse,
                   const t_mat_const& delta, const AttentionSegments& segs, AttentionShape shape,
                   const t_mat_strided& dq, const t_mat_strided& dk, const t_mat_strided& dv);
void forward_teams(const t_mat_strided_const& q, const t_mat_strided_const& k, const t_mat_strided_const& v,
                   const AttentionSegments& segs, AttentionShape shape, const t_mat_strided& out,
                   const t_mat& lse);
void backward_teams(const t_mat_strided_const& dout, const t_mat_strided_const& q,
                    const t_mat_strided_const& k, const t_mat_strided_const& v, const t_mat_const& lse,
                    const t_mat_const& delta, const AttentionSegments& segs, AttentionShape shape,
                    const t_mat_strided& dq, const t_mat_strided& dk, const t_mat_strided& dv);

}  // namespace minimllm::attention_detail
