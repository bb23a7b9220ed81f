// Attention's host kernels (AttentionKernels::host): one thread per (query tile, head) in forward, per
// (segment, head) in backward. Q, K, V are first repacked per head (rows and transposed) so every inner
// loop reads contiguous memory, and a thread's accumulators are arrays of compile-time size that the
// compiler keeps in vector registers (the head dimension is a template parameter for that reason).
#include <math.h>

#include <cmath>

#include "attention_internal.hpp"
#include "exp_vectorizable.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm::attention_detail {
namespace {

using kernels_detail::exp_vectorizable;

constexpr int kRows = 4;    // query rows register-blocked together
constexpr int kLanes = 16;  // independent partial maxima and sums over a tile's keys (one vector)
static_assert(kTileK % kLanes == 0, "a key tile is whole vectors of lanes");

// D is the head dimension the loops run to; when kExact it equals DMax and is known at compile time.
template <int DMax, bool kExact>
struct HeadDim {
  KOKKOS_INLINE_FUNCTION HeadDim(int d) : runtime(d) {}  // implicit: functors are listed with a plain int
  int runtime;
  KOKKOS_INLINE_FUNCTION int get() const { return kExact ? DMax : runtime; }
};

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
    const QueryTile tile = query_tile(w, heads, segs, tile_segment, tile_first, causal);
    const int ldk = static_cast<int>(kt.extent(2));
    const float* kt_head = &kt(tile.h, 0, 0);

    float acc[kTileQ][DMax], row_max[kTileQ], row_sum[kTileQ];
    for (int i = 0; i < kTileQ; ++i) {
      for (int d = 0; d < D; ++d) acc[i][d] = 0.0f;
      row_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
    }
    for (int kb = 0; kb < tile.k_end; kb += kTileK) {
      const int nk = tile.k_end - kb < kTileK ? tile.k_end - kb : kTileK;
      const float* kt_tile = kt_head + tile.k0 + kb;
      // kRows query rows at a time: each key and value row loaded feeds kRows FMAs.
      for (int i0 = 0; i0 < tile.nq; i0 += kRows) {
        const float* q_rows[kRows];
        float score[kRows][kTileK], correction[kRows];
        for (int r = 0; r < kRows; ++r) {
          q_rows[r] = &q(tile.h, tile.q0 + (i0 + r < tile.nq ? i0 + r : i0),
                         0);  // rows past the tile repeat a valid one
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
          const int seen =
              i < tile.nq ? visible_keys(causal, tile.q_first + i, tile.offset, tile.k_len) - kb : 0;
          const int nj = seen < nk ? seen : nk;
          if (nj <= 0) {  // this row sees nothing here: no contribution, state unchanged
            for (int j = 0; j < kTileK; ++j) score[r][j] = 0.0f;
            correction[r] = 1.0f;
            continue;
          }
          // Fixed-length loops over the whole tile (masked past nj) with kLanes independent partial
          // results: the compiler vectorises them (a running max or sum is one dependent chain).
          float lanes[kLanes];
          for (int l = 0; l < kLanes; ++l) lanes[l] = row_max[i];
          for (int j0 = 0; j0 < kTileK; j0 += kLanes)
            for (int l = 0; l < kLanes; ++l) {
              const float sc = j0 + l < nj ? score[r][j0 + l] : -INFINITY;
              lanes[l] = sc > lanes[l] ? sc : lanes[l];
            }
          float m = lanes[0];
          for (int l = 1; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
          correction[r] = expf(row_max[i] - m);
          // exp of every score, then the mask: a select the compiler vectorises (a conditional call not).
          for (int j = 0; j < kTileK; ++j) {
            const float e = exp_vectorizable(score[r][j] - m);
            score[r][j] = j < nj ? e : 0.0f;
          }
          for (int l = 0; l < kLanes; ++l) lanes[l] = 0.0f;
          for (int j0 = 0; j0 < kTileK; j0 += kLanes)
            for (int l = 0; l < kLanes; ++l) lanes[l] += score[r][j0 + l];
          float sum = 0.0f;
          for (int l = 0; l < kLanes; ++l) sum += lanes[l];
          row_sum[i] = row_sum[i] * correction[r] + sum;
          row_max[i] = m;
        }
        float o[kRows][DMax];
        for (int r = 0; r < kRows; ++r)
          for (int d = 0; d < D; ++d) o[r][d] = i0 + r < tile.nq ? acc[i0 + r][d] * correction[r] : 0.0f;
        for (int j = 0; j < nk; ++j) {
          const float* v_row = &v(tile.h, tile.k0 + kb + j, 0);
          for (int d = 0; d < D; ++d) {
            const float vd = v_row[d];
            for (int r = 0; r < kRows; ++r) o[r][d] += score[r][j] * vd;
          }
        }
        for (int r = 0; r < kRows && i0 + r < tile.nq; ++r)
          for (int d = 0; d < D; ++d) acc[i0 + r][d] = o[r][d];
      }
    }
    for (int i = 0; i < tile.nq; ++i) {
      const bool any = row_sum[i] > 0.0f;
      const float inv = any ? 1.0f / row_sum[i] : 0.0f;
      for (int d = 0; d < D; ++d) out(tile.q0 + i, tile.h * D + d) = acc[i][d] * inv;
      // A row that sees no key gets zero output and a log-sum-exp that makes every P zero in backward.
      lse(tile.q0 + i, tile.h) = any ? row_max[i] + logf(row_sum[i]) : INFINITY;
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
      for (int qb = first_query_seeing(causal, kb, offset); qb < q_len; qb += kTileQ) {
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

// One thread per work item, items handed out dynamically (their costs differ with causal masking).
template <class Functor>
void run_items(const char* name, int items, const Functor& functor) {
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(0, items),
                       functor);
}

}  // namespace

void forward_host(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  // One work item per (query tile, head); the tiles were listed with the segments.
  const int items = segs.tiles * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(x.q, H, D, scale, "attention::q"),
                kth = pack_transposed(x.k, H, D, "attention::kt");
  const t_heads vh = pack_rows(x.v, H, D, 1.0f, "attention::v");
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = ForwardTile<decltype(dmax)::value, decltype(exact)::value>;
    run_items("minimllm::attention::forward_host", items,
              Functor{qh, kth, vh, x.out, x.lse, view_of(segs), segs.tile_segment, segs.tile_first,
                      shape.heads, shape.head_dim, segs.causal});
  });
}

void backward_host(const BackwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  // One item per (segment, head): it owns that segment's dk/dv/dq columns, so no atomics are needed.
  const int items = segs.count() * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(x.q, H, D, scale, "attention::q"),
                doh = pack_rows(x.dout, H, D, 1.0f, "attention::do");
  const t_heads kh = pack_rows(x.k, H, D, 1.0f, "attention::k"),
                kth = pack_transposed(x.k, H, D, "attention::kt");
  const t_heads vth = pack_transposed(x.v, H, D, "attention::vt");
  const t_heads dqh = scratch_view<t_heads>("attention::dq", H, x.q.extent(0), D);
  Kokkos::deep_copy(dqh, 0.0f);
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = BackwardSegment<decltype(dmax)::value, decltype(exact)::value>;
    run_items("minimllm::attention::backward_host", items,
              Functor{qh, doh, kh, kth, vth, x.lse, x.delta, dqh, x.dk, x.dv, view_of(segs), shape.heads,
                      shape.head_dim, scale, segs.causal});
  });
  unpack_rows(dqh, x.dq);
}

}  // namespace minimllm::attention_detail
