// Variable-length attention, FlashAttention-style: each work item streams key tiles and keeps a running
// max and sum per query row (online softmax), so memory is linear in tokens. Two sets of kernels
// (AttentionKernels): for the host, a thread per block whose products are BLAS GEMMs (attention_host.cpp);
// for GPUs, a team per tile and a thread per row, tiles staged in shared memory
// (attention_team.cpp). Here: validation, the segment tables, the packed per-head layouts both read, and
// the choice between them.
#include "minimllm/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "attention_internal.hpp"
#include "minimllm/kernels/activation.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm {
namespace attention_detail {

// Host backends: one work item per row (pack_rows, unpack_rows: rows of unit column stride, read through
// pointers) or per block of kPackRows rows (pack_transposed), with plain contiguous loops; GPUs (and other
// strides): one index per element (coalesced on a GPU).
constexpr int kPackRows = 16;

t_heads pack_rows(const t_mat_strided_const& src, int heads, int head_dim, float scale, const char* label) {
  const int rows = static_cast<int>(src.extent(0));
  const t_heads dst = scratch_view<t_heads>(label, heads, rows, head_dim);
  if (kernels_detail::kHostExec && src.stride(1) == 1) {
    Kokkos::parallel_for(
        "minimllm::attention::pack_rows", Kokkos::RangePolicy<ExecSpace>(0, rows),
        KOKKOS_LAMBDA(const int r) {
          for (int h = 0; h < heads; ++h) {
            const float* s = &src(r, h * head_dim);
            float* d = &dst(h, r, 0);
            for (int i = 0; i < head_dim; ++i) d[i] = s[i] * scale;
          }
        });
    return dst;
  }
  Kokkos::parallel_for(
      "minimllm::attention::pack_rows",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {heads, rows, head_dim}),
      KOKKOS_LAMBDA(const int h, const int r, const int d) {
        dst(h, r, d) = src(r, h * head_dim + d) * scale;
      });
  return dst;
}

t_heads pack_transposed(const t_mat_strided_const& src, int heads, int head_dim, const char* label) {
  const int rows = static_cast<int>(src.extent(0));
  const t_heads dst = scratch_view<t_heads>(label, heads, head_dim, rows + kTileK);
  // Only the padding needs zeros; the rows are all written below.
  Kokkos::deep_copy(Kokkos::subview(dst, Kokkos::ALL(), Kokkos::ALL(), std::make_pair(rows, rows + kTileK)),
                    0.0f);
  if (kernels_detail::kHostExec) {
    // A block of kPackRows rows of one head: read row by row (contiguous), written kPackRows at a time.
    const int blocks = (rows + kPackRows - 1) / kPackRows;
    Kokkos::parallel_for(
        "minimllm::attention::pack_transposed", Kokkos::RangePolicy<ExecSpace>(0, heads * blocks),
        KOKKOS_LAMBDA(const int w) {
          const int h = w / blocks, r0 = (w % blocks) * kPackRows;
          const int nr = rows - r0 < kPackRows ? rows - r0 : kPackRows;
          for (int d = 0; d < head_dim; ++d) {
            float* out = &dst(h, d, r0);
            for (int r = 0; r < nr; ++r) out[r] = src(r0 + r, h * head_dim + d);
          }
        });
    return dst;
  }
  Kokkos::parallel_for(
      "minimllm::attention::pack_transposed",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {heads, head_dim, rows}),
      KOKKOS_LAMBDA(const int h, const int d, const int r) { dst(h, d, r) = src(r, h * head_dim + d); });
  return dst;
}

void unpack_rows(const t_heads& src, const t_mat_strided& dst) {
  const int heads = static_cast<int>(src.extent(0)), rows = static_cast<int>(src.extent(1));
  const int head_dim = static_cast<int>(src.extent(2));
  if (kernels_detail::kHostExec && dst.stride(1) == 1) {
    Kokkos::parallel_for(
        "minimllm::attention::unpack_rows", Kokkos::RangePolicy<ExecSpace>(0, rows),
        KOKKOS_LAMBDA(const int r) {
          for (int h = 0; h < heads; ++h) {
            const float* s = &src(h, r, 0);
            float* d = &dst(r, h * head_dim);
            for (int i = 0; i < head_dim; ++i) d[i] = s[i];
          }
        });
    return;
  }
  Kokkos::parallel_for(
      "minimllm::attention::unpack_rows",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {rows, heads, head_dim}),
      KOKKOS_LAMBDA(const int r, const int h, const int d) { dst(r, h * head_dim + d) = src(h, r, d); });
}

}  // namespace attention_detail

using namespace attention_detail;

namespace {

void check_shapes(const t_mat_strided_const& q, const t_mat_strided_const& k, const t_mat_strided_const& v,
                  AttentionShape shape) {
  const size_t width = static_cast<size_t>(shape.heads) * shape.head_dim;
  if (shape.heads < 1 || shape.head_dim < 1 || shape.head_dim > kMaxHeadDim)
    throw std::invalid_argument("attention: head_dim " + std::to_string(shape.head_dim) + " with " +
                                std::to_string(shape.heads) +
                                " heads; valid: heads >= 1, 1 <= head_dim <= " + std::to_string(kMaxHeadDim));
  if (q.extent(1) != width || k.extent(1) != width || v.extent(1) != width || k.extent(0) != v.extent(0))
    throw std::invalid_argument("attention: q/k/v widths must equal heads*head_dim = " +
                                std::to_string(width));
}

bool use_teams(AttentionKernels kernels) {
  return kernels == AttentionKernels::teams ||
         (kernels == AttentionKernels::automatic && !kernels_detail::kHostExec);
}

// delta(row, h) = sum_d dout(row, h*D+d) * out(row, h*D+d): the softmax backward's row term.
t_mat attention_delta(const t_mat_strided_const& dout, const t_mat_strided_const& out, AttentionShape shape) {
  const t_mat delta = scratch_view<t_mat>("attention::delta", out.extent(0), shape.heads);
  const int D = shape.head_dim;
  Kokkos::parallel_for(
      "minimllm::attention::delta",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0},
                                                        {static_cast<int>(out.extent(0)), shape.heads}),
      KOKKOS_LAMBDA(const int row, const int h) {
        float sum = 0.0f;
        for (int d = 0; d < D; ++d) sum += dout(row, h * D + d) * out(row, h * D + d);
        delta(row, h) = sum;
      });
  return delta;
}

}  // namespace

AttentionSegments make_segments(const SegmentTable& table, bool causal) {
  AttentionSegments segs;
  segs.causal = causal;
  segs.q_start = to_device(table.q_start, "attention::q_start");
  segs.q_len = to_device(table.q_len, "attention::q_len");
  segs.k_start = to_device(table.k_start, "attention::k_start");
  segs.k_len = to_device(table.k_len, "attention::k_len");
  segs.causal_offset = to_device(table.causal_offset, "attention::causal_offset");
  std::vector<int> tile_segment, tile_first;
  for (std::size_t s = 0; s < table.q_len.size(); ++s)
    for (int first = 0; first < table.q_len[s]; first += kTileQ) {
      tile_segment.push_back(static_cast<int>(s));
      tile_first.push_back(first);
    }
  segs.tiles = static_cast<int>(tile_segment.size());
  segs.tile_segment = to_device(tile_segment, "attention::tile_segment");
  segs.tile_first = to_device(tile_first, "attention::tile_first");
  std::vector<int> key_tile_segment, key_tile_first;
  for (std::size_t s = 0; s < table.k_len.size(); ++s)
    for (int first = 0; first < table.k_len[s]; first += kTileK) {
      key_tile_segment.push_back(static_cast<int>(s));
      key_tile_first.push_back(first);
    }
  segs.key_tiles = static_cast<int>(key_tile_segment.size());
  segs.key_tile_segment = to_device(key_tile_segment, "attention::key_tile_segment");
  segs.key_tile_first = to_device(key_tile_first, "attention::key_tile_first");
  // Segments in order of their first key, each to the first pass whose keys so far end before it.
  std::vector<int> order(table.k_start.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = static_cast<int>(s);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return table.k_start[a] < table.k_start[b]; });
  std::vector<SegmentTable> passes;
  std::vector<int> pass_end;
  for (int s : order) {
    std::size_t p = 0;
    while (p < passes.size() && table.k_len[s] > 0 && pass_end[p] > table.k_start[s]) ++p;
    if (p == passes.size()) passes.emplace_back(), pass_end.push_back(0);
    passes[p].add(table.q_start[s], table.q_len[s], table.k_start[s], table.k_len[s], table.causal_offset[s]);
    pass_end[p] = std::max(pass_end[p], table.k_start[s] + table.k_len[s]);
  }
  if (passes.size() > 1)
    for (const SegmentTable& pass : passes) segs.backward_passes.push_back(make_segments(pass, causal));
  return segs;
}

AttentionSegments make_self_segments(const std::vector<int>& lengths, bool causal) {
  SegmentTable table;
  int row = 0;
  for (int n : lengths) {
    table.add(row, n, row, n, 0);
    row += n;
  }
  return make_segments(table, causal);
}

void attention_forward(const t_mat_strided_const& q, const t_mat_strided_const& k,
                       const t_mat_strided_const& v, const AttentionSegments& segs, AttentionShape shape,
                       const t_mat_strided& out, const t_mat& lse, AttentionKernels kernels) {
  const WorkspaceScope scope;  // the packed copies are released on return
  check_shapes(q, k, v, shape);
  const ForwardOperands x{q, k, v, out, lse};
  if (use_teams(kernels)) return forward_teams(x, segs, shape);
  forward_host(x, segs, shape);
}

void attention_backward(const t_mat_strided_const& dout, const t_mat_strided_const& q,
                        const t_mat_strided_const& k, const t_mat_strided_const& v,
                        const t_mat_strided_const& out, const t_mat_const& lse, const AttentionSegments& segs,
                        AttentionShape shape, const t_mat_strided& dq, const t_mat_strided& dk,
                        const t_mat_strided& dv, AttentionKernels kernels) {
  const WorkspaceScope scope;  // the packed copies are released on return
  check_shapes(q, k, v, shape);
  if (!segs.backward_passes.empty()) {
    // Segments sharing key rows: one backward per pass of disjoint key rows, summed.
    const auto like = [](const t_mat_strided& m, const char* label) {
      return scratch_view<t_mat>(label, m.extent(0), m.extent(1));
    };
    const t_mat dq_sum = like(dq, "attention::dq_sum"), dk_sum = like(dk, "attention::dk_sum"),
                dv_sum = like(dv, "attention::dv_sum");
    for (const t_mat& sum : {dq_sum, dk_sum, dv_sum}) Kokkos::deep_copy(sum, 0.0f);
    // Each pass overwrites its dk and dv (every key row); dq only in its segments' rows.
    const t_mat dq_pass = like(dq, "attention::dq_pass"), dk_pass = like(dk, "attention::dk_pass"),
                dv_pass = like(dv, "attention::dv_pass");
    for (const AttentionSegments& pass : segs.backward_passes) {
      Kokkos::deep_copy(dq_pass, 0.0f);  // rows of no segment of the pass are not written
      attention_backward(dout, q, k, v, out, lse, pass, shape, dq_pass, dk_pass, dv_pass, kernels);
      add_inplace(dq_sum, dq_pass);
      add_inplace(dk_sum, dk_pass);
      add_inplace(dv_sum, dv_pass);
    }
    Kokkos::deep_copy(dq, dq_sum);
    Kokkos::deep_copy(dk, dk_sum);
    Kokkos::deep_copy(dv, dv_sum);
    return;
  }
  const t_mat delta = attention_delta(dout, out, shape);
  Kokkos::deep_copy(dk, 0.0f);
  Kokkos::deep_copy(dv, 0.0f);
  const BackwardOperands x{dout, q, k, v, lse, delta, dq, dk, dv};
  if (use_teams(kernels)) return backward_teams(x, segs, shape);
  backward_host(x, segs, shape);
}

void attention_merge(const t_mat_strided& out, const t_mat& lse, const t_mat_strided_const& out_part,
                     const t_mat_const& lse_part, AttentionShape shape) {
  const int rows = static_cast<int>(out.extent(0)), head_dim = shape.head_dim;
  if (out_part.extent(0) != out.extent(0) || lse_part.extent(0) != lse.extent(0) ||
      lse.extent(0) != out.extent(0) || static_cast<int>(lse.extent(1)) != shape.heads)
    throw std::invalid_argument("attention_merge: the two partial results differ in shape");
  constexpr float kNoKey = 3.0e38f;  // lse at or above: +inf, no visible key
  Kokkos::parallel_for(
      "minimllm::attention::merge",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {rows, shape.heads}),
      KOKKOS_LAMBDA(const int r, const int h) {
        const float mine = lse(r, h), part = lse_part(r, h);
        if (part >= kNoKey) return;
        if (mine >= kNoKey) {  // out holds nothing yet (possibly not even numbers)
          for (int d = 0; d < head_dim; ++d) out(r, h * head_dim + d) = out_part(r, h * head_dim + d);
          lse(r, h) = part;
          return;
        }
        const float top = mine > part ? mine : part;
        const float joint = top + logf(expf(mine - top) + expf(part - top));
        const float w_mine = expf(mine - joint), w_part = expf(part - joint);
        for (int d = 0; d < head_dim; ++d) {
          const int c = h * head_dim + d;
          out(r, c) = w_mine * out(r, c) + w_part * out_part(r, c);
        }
        lse(r, h) = joint;
      });
}

double attention_forward_flops(const std::vector<int>& lengths, bool causal, AttentionShape shape) {
  double pairs = 0.0;
  for (int n : lengths) pairs += causal ? 0.5 * n * (n + 1.0) : static_cast<double>(n) * n;
  return 4.0 * pairs * shape.head_dim * shape.heads;
}

}  // namespace minimllm
