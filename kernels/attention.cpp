// Variable-length attention, FlashAttention-style on the host: each work item streams key tiles and
// keeps a running max and sum per query row (online softmax), so memory is linear in tokens.
// Q, K, V are first repacked per head (rows and transposed) so every inner loop reads contiguous
// memory; accumulators are per-thread arrays of compile-time size, which lets the compiler keep them
// in vector registers (the head dimension is a template parameter for the same reason).
#include "minimllm/kernels/attention.hpp"

#include <math.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "minimllm/config/run_config.hpp"

namespace minimllm {
namespace {

constexpr int kTileQ = 32;  // query rows per tile
constexpr int kTileK = 32;  // key rows per tile
constexpr int kRows = 4;    // query rows register-blocked together

struct SegmentView {
  t_ivec_const q_start, q_len, k_start, k_len, causal_offset;
};

SegmentView view_of(const AttentionSegments& s) {
  return {s.q_start, s.q_len, s.k_start, s.k_len, s.causal_offset};
}

// exp(x) for x <= ~88 in a form the compiler vectorises (libm's expf is a scalar call): Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor polynomial (relative error < 2e-7).
KOKKOS_INLINE_FUNCTION float exp_vectorizable(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = floorf(x * 1.44269504f + 0.5f);
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    int i;
    float f;
  } two_to_n;
  two_to_n.i = (static_cast<int>(n) + 127) << 23;
  return p * two_to_n.f;
}

// Number of keys (from the segment's first key) visible to query row q_row of the segment.
KOKKOS_INLINE_FUNCTION int visible_keys(bool causal, int q_row, int offset, int k_len) {
  if (!causal) return k_len;
  const int n = q_row + offset + 1;
  return n < 0 ? 0 : (n < k_len ? n : k_len);
}

// D is the head dimension the loops run to; when kExact it equals DMax and is known at compile time.
template <int DMax, bool kExact>
struct HeadDim {
  int runtime;
  KOKKOS_INLINE_FUNCTION int get() const { return kExact ? DMax : runtime; }
};

using t_heads = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;

// Per-head copies in the layouts the inner loops read contiguously: rows [head][row][d] and transposed
// [head][d][row + kTileK] (zero padding lets a key tile run its full, compile-time trip count).
t_heads pack_rows(const t_mat_strided_const& src, int heads, int head_dim, float scale, const char* label) {
  const int rows = static_cast<int>(src.extent(0));
  t_heads dst(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), heads, rows, head_dim);
  Kokkos::parallel_for(
      "minimllm::attention_pack_rows",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {heads, rows, head_dim}),
      KOKKOS_LAMBDA(const int h, const int r, const int d) {
        dst(h, r, d) = src(r, h * head_dim + d) * scale;
      });
  return dst;
}

t_heads pack_transposed(const t_mat_strided_const& src, int heads, int head_dim, const char* label) {
  const int rows = static_cast<int>(src.extent(0));
  t_heads dst(std::string(label), heads, head_dim, rows + kTileK);
  Kokkos::parallel_for(
      "minimllm::attention_pack_transposed",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {heads, head_dim, rows}),
      KOKKOS_LAMBDA(const int h, const int d, const int r) { dst(h, d, r) = src(r, h * head_dim + d); });
  return dst;
}

void unpack_rows(const t_heads& src, const t_mat_strided& dst) {
  const int heads = static_cast<int>(src.extent(0)), rows = static_cast<int>(src.extent(1));
  const int head_dim = static_cast<int>(src.extent(2));
  Kokkos::parallel_for(
      "minimllm::attention_unpack_rows",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {rows, heads, head_dim}),
      KOKKOS_LAMBDA(const int r, const int h, const int d) { dst(r, h * head_dim + d) = src(h, r, d); });
}

template <int DMax, bool kExact>
struct ForwardTile {
  t_heads q, kt, v;  // q pre-scaled [h][row][d]; kt [h][d][row]; v [h][row][d]
  t_mat_strided out;
  t_mat lse;
  SegmentView segs;
  t_ivec_const tile_segment, tile_first;  // the work list: item w is tile w / heads, head w % heads
  int heads;
  HeadDim<DMax, kExact> dim;
  bool causal;

  KOKKOS_INLINE_FUNCTION void operator()(const int w) const {
    const int D = dim.get();
    const int tile = w / heads, h = w % heads;
    const int s = tile_segment(tile), q_first = tile_first(tile);
    const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
    const int q0 = segs.q_start(s) + q_first, k0 = segs.k_start(s);
    const int nq = q_len - q_first < kTileQ ? q_len - q_first : kTileQ;
    const int k_end = visible_keys(causal, q_first + nq - 1, offset, k_len);
    const int ldk = static_cast<int>(kt.extent(2));
    const float* kt_head = &kt(h, 0, 0);

    float acc[kTileQ][DMax], row_max[kTileQ], row_sum[kTileQ];
    for (int i = 0; i < kTileQ; ++i) {
      for (int d = 0; d < D; ++d) acc[i][d] = 0.0f;
      row_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
    }
    for (int kb = 0; kb < k_end; kb += kTileK) {
      const int nk = k_end - kb < kTileK ? k_end - kb : kTileK;
      const float* kt_tile = kt_head + k0 + kb;
      // kRows query rows at a time: each key and value row loaded feeds kRows FMAs.
      for (int i0 = 0; i0 < nq; i0 += kRows) {
        const float* q_rows[kRows];
        float score[kRows][kTileK], correction[kRows];
        for (int r = 0; r < kRows; ++r) {
          q_rows[r] = &q(h, q0 + (i0 + r < nq ? i0 + r : i0), 0);  // rows past the tile repeat a valid one
          for (int j = 0; j < kTileK; ++j) score[r][j] = 0.0f;
        }
        for (int d = 0; d < D; ++d) {
          const float* kt_d = kt_tile + d * ldk;
          float qd[kRows];
          for (int r = 0; r < kRows; ++r) qd[r] = q_rows[r][d];
          for (int j = 0; j < kTileK; ++j) {
            const float kj = kt_d[j];
            for (int r = 0; r < kRows; ++r) score[r][j] += qd[r] * kj;
          }
        }
        for (int r = 0; r < kRows; ++r) {
          const int i = i0 + r;
          const int seen = i < nq ? visible_keys(causal, q_first + i, offset, k_len) - kb : 0;
          const int nj = seen < nk ? seen : nk;
          if (nj <= 0) {  // this row sees nothing here: no contribution, state unchanged
            for (int j = 0; j < kTileK; ++j) score[r][j] = 0.0f;
            correction[r] = 1.0f;
            continue;
          }
          float m = row_max[i];
          for (int j = 0; j < nj; ++j) m = score[r][j] > m ? score[r][j] : m;
          correction[r] = expf(row_max[i] - m);
          float sum = 0.0f;
          for (int j = 0; j < kTileK; ++j) {
            score[r][j] = j < nj ? exp_vectorizable(score[r][j] - m) : 0.0f;
            sum += score[r][j];
          }
          row_sum[i] = row_sum[i] * correction[r] + sum;
          row_max[i] = m;
        }
        float o[kRows][DMax];
        for (int r = 0; r < kRows; ++r)
          for (int d = 0; d < D; ++d) o[r][d] = i0 + r < nq ? acc[i0 + r][d] * correction[r] : 0.0f;
        for (int j = 0; j < nk; ++j) {
          const float* v_row = &v(h, k0 + kb + j, 0);
          for (int d = 0; d < D; ++d) {
            const float vd = v_row[d];
            for (int r = 0; r < kRows; ++r) o[r][d] += score[r][j] * vd;
          }
        }
        for (int r = 0; r < kRows && i0 + r < nq; ++r)
          for (int d = 0; d < D; ++d) acc[i0 + r][d] = o[r][d];
      }
    }
    for (int i = 0; i < nq; ++i) {
      const bool any = row_sum[i] > 0.0f;
      const float inv = any ? 1.0f / row_sum[i] : 0.0f;
      for (int d = 0; d < D; ++d) out(q0 + i, h * D + d) = acc[i][d] * inv;
      // A row that sees no key gets zero output and a log-sum-exp that makes every P zero in backward.
      lse(q0 + i, h) = any ? row_max[i] + logf(row_sum[i]) : INFINITY;
    }
  }
};

template <int DMax, bool kExact>
struct BackwardSegment {
  t_heads q, dout, k, kt, vt;  // q pre-scaled; rows [h][row][d], transposed [h][d][row]
  t_mat_const lse, delta;      // delta(row, head) = sum_d dout * out
  t_heads dq;                  // [h][row][d], accumulated here, unpacked afterwards
  t_mat_strided dk, dv;
  SegmentView segs;
  int heads;  // item w is segment w / heads, head w % heads
  HeadDim<DMax, kExact> dim;
  float scale;
  bool causal;

  KOKKOS_INLINE_FUNCTION void operator()(const int w) const {
    const int D = dim.get();
    const int s = w / heads, h = w % heads;
    const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
    const int q0 = segs.q_start(s), k0 = segs.k_start(s);
    const int ldk = static_cast<int>(kt.extent(2));

    for (int kb = 0; kb < k_len; kb += kTileK) {
      const int nk = k_len - kb < kTileK ? k_len - kb : kTileK;
      const float* kt_tile = &kt(h, 0, k0 + kb);
      const float* vt_tile = &vt(h, 0, k0 + kb);
      float dk_acc[kTileK][DMax], dv_acc[kTileK][DMax];
      for (int j = 0; j < kTileK; ++j)
        for (int d = 0; d < D; ++d) dk_acc[j][d] = dv_acc[j][d] = 0.0f;
      // Only queries at or after this tile's first key (shifted by the causal offset) see it.
      int q_begin = causal ? kb - offset : 0;
      q_begin = q_begin < 0 ? 0 : q_begin;
      for (int qb = q_begin; qb < q_len; qb += kTileQ) {
        const int nq = q_len - qb < kTileQ ? q_len - qb : kTileQ;
        float p[kTileQ][kTileK], ds[kTileQ][kTileK];
        // Scores and dP for kRows query rows at a time (rows past the tile repeat a valid one; their
        // P and dS are zeroed below).
        for (int i0 = 0; i0 < nq; i0 += kRows) {
          const float *q_rows[kRows], *do_rows[kRows];
          float score[kRows][kTileK], dp[kTileK * kRows];
          for (int r = 0; r < kRows; ++r) {
            const int row = q0 + qb + (i0 + r < nq ? i0 + r : i0);
            q_rows[r] = &q(h, row, 0);
            do_rows[r] = &dout(h, row, 0);
            for (int j = 0; j < kTileK; ++j) score[r][j] = dp[r * kTileK + j] = 0.0f;
          }
          for (int d = 0; d < D; ++d) {
            float qd[kRows], gd[kRows];
            for (int r = 0; r < kRows; ++r) qd[r] = q_rows[r][d], gd[r] = do_rows[r][d];
            for (int j = 0; j < kTileK; ++j) {
              const float kj = kt_tile[d * ldk + j], vj = vt_tile[d * ldk + j];
              for (int r = 0; r < kRows; ++r) {
                score[r][j] += qd[r] * kj;
                dp[r * kTileK + j] += gd[r] * vj;
              }
            }
          }
          for (int r = 0; r < kRows && i0 + r < nq; ++r) {
            const int i = i0 + r;
            const int seen = visible_keys(causal, qb + i, offset, k_len) - kb;
            const float row_lse = lse(q0 + qb + i, h), row_delta = delta(q0 + qb + i, h);
            for (int j = 0; j < kTileK; ++j) {
              const float pij = j < seen && j < nk ? exp_vectorizable(score[r][j] - row_lse) : 0.0f;
              p[i][j] = pij;
              ds[i][j] = pij * (dp[r * kTileK + j] - row_delta);
            }
          }
        }
        // dV += P^T dO and dK += dS^T Q.
        for (int j = 0; j < nk; ++j) {
          float gk[DMax], gv[DMax];
          for (int d = 0; d < D; ++d) gk[d] = dk_acc[j][d], gv[d] = dv_acc[j][d];
          for (int i = 0; i < nq; ++i) {
            const float pij = p[i][j], dsij = ds[i][j];
            const float* q_row = &q(h, q0 + qb + i, 0);
            const float* do_row = &dout(h, q0 + qb + i, 0);
            for (int d = 0; d < D; ++d) {
              gv[d] += pij * do_row[d];
              gk[d] += dsij * q_row[d];
            }
          }
          for (int d = 0; d < D; ++d) dk_acc[j][d] = gk[d], dv_acc[j][d] = gv[d];
        }
        // dQ += dS K.
        for (int i = 0; i < nq; ++i) {
          float gq[DMax];
          for (int d = 0; d < D; ++d) gq[d] = 0.0f;
          for (int j = 0; j < nk; ++j) {
            const float dsij = ds[i][j];
            const float* k_row = &k(h, k0 + kb + j, 0);
            for (int d = 0; d < D; ++d) gq[d] += dsij * k_row[d];
          }
          float* dq_row = &dq(h, q0 + qb + i, 0);
          for (int d = 0; d < D; ++d) dq_row[d] += scale * gq[d];
        }
      }
      // q was pre-scaled, so dk_acc already carries the softmax scale.
      for (int j = 0; j < nk; ++j)
        for (int d = 0; d < D; ++d) {
          dk(k0 + kb + j, h * D + d) = dk_acc[j][d];
          dv(k0 + kb + j, h * D + d) = dv_acc[j][d];
        }
    }
  }
};

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

// Calls f(std::integral_constant<int, DMax>, std::bool_constant<exact>) for the head dimension.
template <class F>
void dispatch_head_dim(int head_dim, F&& f) {
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
                       const t_mat_strided& out, const t_mat& lse) {
  check_shapes(q, k, v, shape);
  // One work item per (query tile, head); the tiles were listed with the segments.
  const int items = segs.tiles * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                kth = pack_transposed(k, H, D, "attention::kt");
  const t_heads vh = pack_rows(v, H, D, 1.0f, "attention::v");
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = ForwardTile<decltype(dmax)::value, decltype(exact)::value>;
    Functor f{qh,          kth,         vh, out, lse, view_of(segs), segs.tile_segment, segs.tile_first,
              shape.heads, {shape.head_dim}, segs.causal};
    Kokkos::parallel_for("minimllm::attention_forward",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(0, items), f);
  });
}

namespace {
// delta(row, h) = sum_d dout(row, h*D+d) * out(row, h*D+d): the softmax backward's row term.
t_mat attention_delta(const t_mat_strided_const& dout, const t_mat_strided_const& out, AttentionShape shape) {
  t_mat delta("attention::delta", out.extent(0), shape.heads);
  const int D = shape.head_dim;
  Kokkos::parallel_for(
      "minimllm::attention_delta",
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

void attention_backward(const t_mat_strided_const& dout, const t_mat_strided_const& q,
                        const t_mat_strided_const& k, const t_mat_strided_const& v,
                        const t_mat_strided_const& out, const t_mat_const& lse, const AttentionSegments& segs,
                        AttentionShape shape, const t_mat_strided& dq, const t_mat_strided& dk,
                        const t_mat_strided& dv) {
  check_shapes(q, k, v, shape);
  const t_mat delta = attention_delta(dout, out, shape);
  Kokkos::deep_copy(dk, 0.0f);
  Kokkos::deep_copy(dv, 0.0f);
  // One item per (segment, head): it owns that segment's dk/dv/dq columns, so no atomics are needed.
  const int items = segs.count() * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                doh = pack_rows(dout, H, D, 1.0f, "attention::do");
  const t_heads kh = pack_rows(k, H, D, 1.0f, "attention::k"),
                kth = pack_transposed(k, H, D, "attention::kt");
  const t_heads vth = pack_transposed(v, H, D, "attention::vt");
  const t_heads dqh("attention::dq", H, q.extent(0), D);
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = BackwardSegment<decltype(dmax)::value, decltype(exact)::value>;
    Functor f{qh,    doh,        kh, kth, vth, lse, delta, dqh, dk, dv, view_of(segs), shape.heads,
              {shape.head_dim}, scale, segs.causal};
    Kokkos::parallel_for("minimllm::attention_backward",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(0, items), f);
  });
  unpack_rows(dqh, dq);
}

double attention_forward_flops(const std::vector<int>& lengths, bool causal, AttentionShape shape) {
  double pairs = 0.0;
  for (int n : lengths) pairs += causal ? 0.5 * n * (n + 1.0) : static_cast<double>(n) * n;
  return 4.0 * pairs * shape.head_dim * shape.heads;
}

}  // namespace minimllm
