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

// The first query row of a segment that sees its key row `key` (row 0 when not causal).
KOKKOS_INLINE_FUNCTION int first_query_seeing(bool causal, int key, int offset) {
  const int q_begin = causal ? key - offset : 0;
  return q_begin < 0 ? 0 : q_begin;
}

// Work item `item` of a query-tile work list (tile item / heads, head item % heads): where its rows are.
struct QueryTile {
  int h;
  int q_first;        // the tile's first query row in its segment
  int k_len, offset;  // the segment's keys and causal offset
  int q0, k0;         // the tile's first query row, the segment's first key row
  int nq;             // query rows in the tile
  int k_end;          // keys visible to its last row
};

KOKKOS_INLINE_FUNCTION QueryTile query_tile(int item, int heads, const SegmentView& segs,
                                            const t_ivec_const& tile_segment, const t_ivec_const& tile_first,
                                            bool causal) {
  const int tile = item / heads, h = item % heads;
  const int s = tile_segment(tile), q_first = tile_first(tile);
  const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
  const int nq = q_len - q_first < kTileQ ? q_len - q_first : kTileQ;
  return {h,
          q_first,
          k_len,
          offset,
          segs.q_start(s) + q_first,
          segs.k_start(s),
          nq,
          visible_keys(causal, q_first + nq - 1, offset, k_len)};
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

// One call's operands: q, k, v, dout [rows, heads * head_dim]; lse and delta [q rows, heads], delta(row, h)
// = sum_d dout * out.
struct ForwardOperands {
  t_mat_strided_const q, k, v;
  t_mat_strided out;
  t_mat lse;
};
struct BackwardOperands {
  t_mat_strided_const dout, q, k, v;
  t_mat_const lse, delta;
  t_mat_strided dq, dk, dv;  // dk and dv arrive zeroed
};

// The two kernel sets, called with validated shapes inside the caller's workspace scope.
void forward_host(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape);
void forward_teams(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape);
void backward_host(const BackwardOperands& x, const AttentionSegments& segs, AttentionShape shape);
void backward_teams(const BackwardOperands& x, const AttentionSegments& segs, AttentionShape shape);

}  // namespace minimllm::attention_detail
