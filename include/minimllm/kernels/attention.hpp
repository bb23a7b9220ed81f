// Variable-length multi-head attention over packed sequences, forward and backward, with memory
// linear in tokens: online-softmax tiling keeps only O and the row log-sum-exp, never tokens x tokens.
#pragma once

#include <vector>

#include "minimllm/core/types.hpp"
#include "minimllm/kernels/attention_limits.hpp"  // kMaxHeadDim

namespace minimllm {

// Columns [first, first + count) of m, as the kernels take Q, K and V out of one Q|K|V matrix.
inline t_mat_strided columns(const t_mat& m, int first, int count) {
  return Kokkos::subview(m, Kokkos::ALL, Kokkos::make_pair(first, first + count));
}

// Segment s lets query rows [q_start, q_start+q_len) attend to key rows [k_start, k_start+k_len).
// With causal masking, query i (0-based in its segment) sees keys j <= i + causal_offset; the offset
// places a query chunk inside a longer key sequence (context parallelism); 0 for a plain packed batch.
// The forward's work list (one entry per tile of query rows of a segment) is built with the segments, on
// the host, so the kernels themselves never read segment metadata back from the device.
struct AttentionSegments {
  t_ivec q_start, q_len, k_start, k_len, causal_offset;
  t_ivec tile_segment, tile_first;          // per query tile: its segment and first query row in it
  t_ivec key_tile_segment, key_tile_first;  // per key tile (the GPU backward's dK/dV work list)
  int tiles = 0, key_tiles = 0;             // query and key tiles over all segments
  bool causal = true;
  // When segments share key rows (two query chunks of one sequence under context parallelism), subsets
  // whose key rows are disjoint, which the backward runs one after another and sums: its kernels give each
  // segment's key rows to one work item. Empty when no key row is shared. Query rows are never shared.
  std::vector<AttentionSegments> backward_passes;
  int count() const { return static_cast<int>(q_start.extent(0)); }
};

// Segment arrays as host vectors (one entry per segment), copied to MemSpace.
struct SegmentTable {
  std::vector<int> q_start, q_len, k_start, k_len, causal_offset;
  void add(int qs, int ql, int ks, int kl, int offset) {
    q_start.push_back(qs), q_len.push_back(ql), k_start.push_back(ks), k_len.push_back(kl);
    causal_offset.push_back(offset);
  }
};
AttentionSegments make_segments(const SegmentTable& table, bool causal);

// Builds segments from host lengths for the common case: queries and keys are the same rows.
AttentionSegments make_self_segments(const std::vector<int>& lengths, bool causal);

struct AttentionShape {
  int heads = 1;
  int head_dim = 1;
};

// Two implementations of the same math. host: one thread per (query tile, head) keeps a 32-row tile
// of scores and accumulators in its registers (vectorised along the head dimension; what CPUs want).
// teams: one team per (query tile, head) in forward and dQ, per (key tile, head) in dK/dV, one thread per
// row, the rows every thread reads (K|V, or Q|dO) staged tile by tile in team scratch (GPU shared
// memory); per-row state in registers. automatic: host on host execution spaces, teams on GPUs. Both
// run everywhere (on a host backend a team is one thread walking the tile's rows), so the tests check
// both on Serial and OpenMP.
enum class AttentionKernels { automatic, host, teams };

// q, k, v: [rows, heads*head_dim]; out: [q rows, heads*head_dim]; lse: [q rows, heads].
void attention_forward(const t_mat_strided_const& q, const t_mat_strided_const& k,
                       const t_mat_strided_const& v, const AttentionSegments& segs, AttentionShape shape,
                       const t_mat_strided& out, const t_mat& lse,
                       AttentionKernels kernels = AttentionKernels::automatic);

// Overwrites dq, dk, dv (keys named by no segment get zero gradient). Deterministic (no atomics).
void attention_backward(const t_mat_strided_const& dout, const t_mat_strided_const& q,
                        const t_mat_strided_const& k, const t_mat_strided_const& v,
                        const t_mat_strided_const& out, const t_mat_const& lse, const AttentionSegments& segs,
                        AttentionShape shape, const t_mat_strided& dq, const t_mat_strided& dk,
                        const t_mat_strided& dv, AttentionKernels kernels = AttentionKernels::automatic);

// Folds a partial attention of the same query rows over other keys (out_part, lse_part) into (out, lse),
// as one pass over both key sets would give up to rounding: each weighted by exp(its lse - the joint
// lse). A row's lse of +inf means it saw no key: the other side's values stand. Context parallelism's
// ring merges each member's block this way (parallel/ring_attention.hpp).
void attention_merge(const t_mat_strided& out, const t_mat& lse, const t_mat_strided_const& out_part,
                     const t_mat_const& lse_part, AttentionShape shape);

// Model FLOPs of one forward (2 GEMM-like products per visible query-key pair); backward counts 2x this.
double attention_forward_flops(const std::vector<int>& lengths, bool causal, AttentionShape shape);

}  // namespace minimllm
