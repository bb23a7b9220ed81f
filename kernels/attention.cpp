// Variable-length attention, FlashAttention-style: each work item streams key tiles and keeps a running
// max and sum per query row (online softmax), so memory is linear in tokens. Two sets of kernels
// (AttentionKernels): for the host, Q, K, V are first repacked per head (rows and transposed) so every
// inner loop reads contiguous memory, and a thread's accumulators are arrays of compile-time size that
// the compiler keeps in vector registers (the head dimension is a template parameter for that reason);
// for GPUs, a team per tile and a thread per row, tiles staged in shared memory (below).
#include "minimllm/kernels/attention.hpp"

#include <math.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "minimllm/kernels/attention_limits.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

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
  const t_heads dst = scratch_view<t_heads>(label, heads, rows, head_dim);
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
  const t_heads dst = scratch_view<t_heads>(label, heads, head_dim, rows + kTileK);
  Kokkos::deep_copy(dst, 0.0f);  // the padding
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

// ------------------------------------------------------------------------------------------------
// Team kernels (AttentionKernels::teams, the GPU path). A team owns one tile of rows of one head; on a
// GPU each thread owns one row (Rows = 1), on a host backend the team's single thread owns them all
// (Rows = 32). What every row of the team reads (K and V in forward and dQ, Q and dO in dK/dV) is staged
// in team scratch a step at a time: the same address for all threads, a broadcast. A thread's own rows
// (Q and dO in dQ, K and V in dK/dV) sit in scratch too, padded by one float per row so that threads
// reading their own rows hit distinct banks. Loops run to the compile-time DMax over zero-padded data,
// so per-row arrays stay in registers (D = 128 spills some: its steps are shorter to fit 48 KiB).

using kernels_detail::kHostExec;
using ScratchFloats = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
using TeamMember = Kokkos::TeamPolicy<ExecSpace>::member_type;

constexpr int kTeamRows = kHostExec ? kTileQ : 1;  // rows per thread (kTileQ == kTileK)
static_assert(kTileQ == kTileK, "team kernels give one row per thread for query and key tiles alike");
constexpr int kTeamThreads = kTileQ / kTeamRows;
constexpr int kTeamScratchLevel = kHostExec ? 1 : 0;  // level 0 is capped at 32 KiB on host backends

// Rows staged per step: keys in forward and dQ, queries in dK/dV.
template <int DMax>
constexpr int team_step() {
  return DMax <= 64 ? 32 : 8;
}

KOKKOS_INLINE_FUNCTION int min_int(int a, int b) { return a < b ? a : b; }

// tile[j * Stride + d] = src(h, row0 + j, d) for j < rows and d < D, zero elsewhere (Rows x DMax).
template <int Rows, int DMax, int Stride>
KOKKOS_INLINE_FUNCTION void stage(const TeamMember& team, float* tile, const t_heads& src, int h, int row0,
                                  int rows, int D) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Rows * DMax), [&](int idx) {
    const int j = idx / DMax, d = idx % DMax;
    tile[j * Stride + d] = j < rows && d < D ? src(h, row0 + j, d) : 0.0f;
  });
}

template <int DMax>
struct TeamForward {
  static constexpr int kStep = team_step<DMax>();
  t_heads q, k, v;  // rows [h][row][d]; q pre-scaled
  t_mat_strided out;
  t_mat lse;
  SegmentView segs;
  t_ivec_const tile_segment, tile_first;
  int heads, D;
  bool causal;

  KOKKOS_INLINE_FUNCTION static constexpr int scratch_floats() { return 2 * kStep * DMax; }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const int tile = team.league_rank() / heads, h = team.league_rank() % heads;
    const int s = tile_segment(tile), q_first = tile_first(tile);
    const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
    const int q0 = segs.q_start(s) + q_first, k0 = segs.k_start(s);
    const int nq = min_int(q_len - q_first, kTileQ);
    const int k_end = visible_keys(causal, q_first + nq - 1, offset, k_len);
    const int scratch_level = kTeamScratchLevel;
    ScratchFloats scratch(team.team_scratch(scratch_level), scratch_floats());
    float* const ks = scratch.data();
    float* const vs = ks + kStep * DMax;
    const int t = team.team_rank(), threads = team.team_size();

    float qr[kTeamRows][DMax], acc[kTeamRows][DMax], row_max[kTeamRows], row_sum[kTeamRows];
    int seen[kTeamRows];
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      seen[r] = i < nq ? visible_keys(causal, q_first + i, offset, k_len) : 0;
      for (int d = 0; d < DMax; ++d) {
        qr[r][d] = i < nq && d < D ? q(h, q0 + i, d) : 0.0f;
        acc[r][d] = 0.0f;
      }
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
    for (int kb = 0; kb < k_end; kb += kStep) {
      const int nk = min_int(k_end - kb, kStep);
      team.team_barrier();  // the previous step's tiles are no longer read
      stage<kStep, DMax, DMax>(team, ks, k, h, k0 + kb, nk, D);
      stage<kStep, DMax, DMax>(team, vs, v, h, k0 + kb, nk, D);
      team.team_barrier();
      for (int r = 0; r < kTeamRows; ++r) {
        const int nj = min_int(seen[r] - kb, nk);
        if (nj <= 0) continue;  // sees nothing here: state unchanged
        float p[kStep];
        float m = row_max[r];
        for (int j = 0; j < kStep; ++j) {
          float score = 0.0f;
          for (int d = 0; d < DMax; ++d) score += qr[r][d] * ks[j * DMax + d];
          p[j] = score;
          m = j < nj && score > m ? score : m;
        }
        const float correction = expf(row_max[r] - m);
        float sum = 0.0f;
        for (int j = 0; j < kStep; ++j) {
          p[j] = j < nj ? expf(p[j] - m) : 0.0f;
          sum += p[j];
        }
        row_sum[r] = row_sum[r] * correction + sum;
        row_max[r] = m;
        for (int d = 0; d < DMax; ++d) {
          float o = acc[r][d] * correction;
          for (int j = 0; j < kStep; ++j) o += p[j] * vs[j * DMax + d];
          acc[r][d] = o;
        }
      }
    }
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      if (i >= nq) continue;
      const bool any = row_sum[r] > 0.0f;
      const float inv = any ? 1.0f / row_sum[r] : 0.0f;
      for (int d = 0; d < DMax; ++d)
        if (d < D) out(q0 + i, h * D + d) = acc[r][d] * inv;
      lse(q0 + i, h) = any ? row_max[r] + logf(row_sum[r]) : INFINITY;
    }
  }
};

// dK and dV: a team per (key tile, head), one thread per key row, query rows staged a step at a time.
template <int DMax>
struct TeamBackwardKeys {
  static constexpr int kStep = team_step<DMax>();
  static constexpr int kOwn = DMax + 1;  // padded stride of the team's own K and V rows
  t_heads q, dout, k, v;                 // rows [h][row][d]; q pre-scaled
  t_mat_const lse, delta;
  t_mat_strided dk, dv;
  SegmentView segs;
  t_ivec_const key_tile_segment, key_tile_first;
  int heads, D;
  bool causal;

  KOKKOS_INLINE_FUNCTION static constexpr int scratch_floats() {
    return 2 * kTileK * kOwn + 2 * kStep * DMax + 2 * kStep;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const int tile = team.league_rank() / heads, h = team.league_rank() % heads;
    const int s = key_tile_segment(tile), kb = key_tile_first(tile);
    const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
    const int q0 = segs.q_start(s), k0 = segs.k_start(s);
    const int nk = min_int(k_len - kb, kTileK);
    const int scratch_level = kTeamScratchLevel;
    ScratchFloats scratch(team.team_scratch(scratch_level), scratch_floats());
    float* const ks = scratch.data();
    float* const vs = ks + kTileK * kOwn;
    float* const qs = vs + kTileK * kOwn;
    float* const dos = qs + kStep * DMax;
    float* const lse_s = dos + kStep * DMax;
    float* const delta_s = lse_s + kStep;
    const int t = team.team_rank(), threads = team.team_size();

    stage<kTileK, DMax, kOwn>(team, ks, k, h, k0 + kb, nk, D);
    stage<kTileK, DMax, kOwn>(team, vs, v, h, k0 + kb, nk, D);
    float dk_acc[kTeamRows][DMax], dv_acc[kTeamRows][DMax];
    for (int r = 0; r < kTeamRows; ++r)
      for (int d = 0; d < DMax; ++d) dk_acc[r][d] = dv_acc[r][d] = 0.0f;
    // Only queries at or after this tile's first key (shifted by the causal offset) see it.
    int q_begin = causal ? kb - offset : 0;
    q_begin = q_begin < 0 ? 0 : q_begin;
    for (int qb = q_begin; qb < q_len; qb += kStep) {
      const int nq = min_int(q_len - qb, kStep);
      team.team_barrier();
      stage<kStep, DMax, DMax>(team, qs, q, h, q0 + qb, nq, D);
      stage<kStep, DMax, DMax>(team, dos, dout, h, q0 + qb, nq, D);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kStep), [&](int i) {
        lse_s[i] = i < nq ? lse(q0 + qb + i, h) : INFINITY;  // INFINITY: P = 0
        delta_s[i] = i < nq ? delta(q0 + qb + i, h) : 0.0f;
      });
      team.team_barrier();
      for (int r = 0; r < kTeamRows; ++r) {
        const int j = t + r * threads;
        if (j >= nk) continue;
        const float* k_row = ks + j * kOwn;
        const float* v_row = vs + j * kOwn;
        for (int i = 0; i < nq; ++i) {
          if (causal && kb + j > qb + i + offset) continue;  // key after the query
          float score = 0.0f, dp = 0.0f;
          for (int d = 0; d < DMax; ++d) {
            score += qs[i * DMax + d] * k_row[d];
            dp += dos[i * DMax + d] * v_row[d];
          }
          const float p = expf(score - lse_s[i]);
          const float ds = p * (dp - delta_s[i]);
          for (int d = 0; d < DMax; ++d) {
            dv_acc[r][d] += p * dos[i * DMax + d];
            dk_acc[r][d] += ds * qs[i * DMax + d];
          }
        }
      }
    }
    // q was pre-scaled, so dk already carries the softmax scale.
    for (int r = 0; r < kTeamRows; ++r) {
      const int j = t + r * threads;
      if (j >= nk) continue;
      for (int d = 0; d < DMax; ++d)
        if (d < D) {
          dk(k0 + kb + j, h * D + d) = dk_acc[r][d];
          dv(k0 + kb + j, h * D + d) = dv_acc[r][d];
        }
    }
  }
};

// dQ: a team per (query tile, head), one thread per query row, key rows staged a step at a time.
template <int DMax>
struct TeamBackwardQueries {
  static constexpr int kStep = team_step<DMax>();
  static constexpr int kOwn = DMax + 1;
  t_heads q, dout, k, v;  // rows [h][row][d]; q pre-scaled
  t_mat_const lse, delta;
  t_heads dq;  // [h][row][d]
  SegmentView segs;
  t_ivec_const tile_segment, tile_first;
  int heads, D;
  float scale;
  bool causal;

  KOKKOS_INLINE_FUNCTION static constexpr int scratch_floats() {
    return 2 * kTileQ * kOwn + 2 * kStep * DMax;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const int tile = team.league_rank() / heads, h = team.league_rank() % heads;
    const int s = tile_segment(tile), q_first = tile_first(tile);
    const int q_len = segs.q_len(s), k_len = segs.k_len(s), offset = segs.causal_offset(s);
    const int q0 = segs.q_start(s) + q_first, k0 = segs.k_start(s);
    const int nq = min_int(q_len - q_first, kTileQ);
    const int k_end = visible_keys(causal, q_first + nq - 1, offset, k_len);
    const int scratch_level = kTeamScratchLevel;
    ScratchFloats scratch(team.team_scratch(scratch_level), scratch_floats());
    float* const qs = scratch.data();
    float* const dos = qs + kTileQ * kOwn;
    float* const ks = dos + kTileQ * kOwn;
    float* const vs = ks + kStep * DMax;
    const int t = team.team_rank(), threads = team.team_size();

    stage<kTileQ, DMax, kOwn>(team, qs, q, h, q0, nq, D);
    stage<kTileQ, DMax, kOwn>(team, dos, dout, h, q0, nq, D);
    float dq_acc[kTeamRows][DMax], row_lse[kTeamRows], row_delta[kTeamRows];
    int seen[kTeamRows];
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      seen[r] = i < nq ? visible_keys(causal, q_first + i, offset, k_len) : 0;
      row_lse[r] = i < nq ? lse(q0 + i, h) : INFINITY;
      row_delta[r] = i < nq ? delta(q0 + i, h) : 0.0f;
      for (int d = 0; d < DMax; ++d) dq_acc[r][d] = 0.0f;
    }
    for (int kb = 0; kb < k_end; kb += kStep) {
      const int nk = min_int(k_end - kb, kStep);
      team.team_barrier();  // also orders the own-row staging above before the first read
      stage<kStep, DMax, DMax>(team, ks, k, h, k0 + kb, nk, D);
      stage<kStep, DMax, DMax>(team, vs, v, h, k0 + kb, nk, D);
      team.team_barrier();
      for (int r = 0; r < kTeamRows; ++r) {
        const int i = t + r * threads;
        const int nj = min_int(seen[r] - kb, nk);
        const float* q_row = qs + i * kOwn;
        const float* do_row = dos + i * kOwn;
        for (int j = 0; j < nj; ++j) {
          float score = 0.0f, dp = 0.0f;
          for (int d = 0; d < DMax; ++d) {
            score += q_row[d] * ks[j * DMax + d];
            dp += do_row[d] * vs[j * DMax + d];
          }
          const float ds = expf(score - row_lse[r]) * (dp - row_delta[r]);
          for (int d = 0; d < DMax; ++d) dq_acc[r][d] += ds * ks[j * DMax + d];
        }
      }
    }
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      if (i >= nq) continue;
      for (int d = 0; d < DMax; ++d)
        if (d < D) dq(h, q0 + i, d) = scale * dq_acc[r][d];
    }
  }
};

// The team policy of a team kernel; nothing runs for an empty league.
template <class Functor>
void run_teams(const char* name, int league, const Functor& functor) {
  if (league <= 0) return;
  const std::size_t bytes = ScratchFloats::shmem_size(Functor::scratch_floats());
  Kokkos::parallel_for(name,
                       Kokkos::TeamPolicy<ExecSpace>(league, kTeamThreads)
                           .set_scratch_size(kTeamScratchLevel, Kokkos::PerTeam(bytes)),
                       functor);
}

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
  std::vector<int> key_tile_segment, key_tile_first;
  for (std::size_t s = 0; s < table.k_len.size(); ++s)
    for (int first = 0; first < table.k_len[s]; first += kTileK) {
      key_tile_segment.push_back(static_cast<int>(s));
      key_tile_first.push_back(first);
    }
  segs.key_tiles = static_cast<int>(key_tile_segment.size());
  segs.key_tile_segment = to_device(key_tile_segment, "attention::key_tile_segment");
  segs.key_tile_first = to_device(key_tile_first, "attention::key_tile_first");
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

namespace {
bool use_teams(AttentionKernels kernels) {
  return kernels == AttentionKernels::teams || (kernels == AttentionKernels::automatic && !kHostExec);
}
}  // namespace

void attention_forward(const t_mat_strided_const& q, const t_mat_strided_const& k,
                       const t_mat_strided_const& v, const AttentionSegments& segs, AttentionShape shape,
                       const t_mat_strided& out, const t_mat& lse, AttentionKernels kernels) {
  const WorkspaceScope scope;  // the packed copies below are released on return
  check_shapes(q, k, v, shape);
  if (use_teams(kernels)) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    const int H = shape.heads, D = shape.head_dim;
    const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                  kh = pack_rows(k, H, D, 1.0f, "attention::k");
    const t_heads vh = pack_rows(v, H, D, 1.0f, "attention::v");
    dispatch_head_dim(D, [&](auto dmax, auto) {
      using Functor = TeamForward<decltype(dmax)::value>;
      run_teams("minimllm::attention_forward_teams", segs.tiles * H,
                Functor{qh, kh, vh, out, lse, view_of(segs), segs.tile_segment, segs.tile_first, H, D,
                        segs.causal});
    });
    return;
  }
  // One work item per (query tile, head); the tiles were listed with the segments.
  const int items = segs.tiles * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                kth = pack_transposed(k, H, D, "attention::kt");
  const t_heads vh = pack_rows(v, H, D, 1.0f, "attention::v");
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = ForwardTile<decltype(dmax)::value, decltype(exact)::value>;
    Functor f{qh,
              kth,
              vh,
              out,
              lse,
              view_of(segs),
              segs.tile_segment,
              segs.tile_first,
              shape.heads,
              {shape.head_dim},
              segs.causal};
    Kokkos::parallel_for("minimllm::attention_forward",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(0, items), f);
  });
}

namespace {
// delta(row, h) = sum_d dout(row, h*D+d) * out(row, h*D+d): the softmax backward's row term.
t_mat attention_delta(const t_mat_strided_const& dout, const t_mat_strided_const& out, AttentionShape shape) {
  const t_mat delta = scratch_view<t_mat>("attention::delta", out.extent(0), shape.heads);
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
                        const t_mat_strided& dv, AttentionKernels kernels) {
  const WorkspaceScope scope;  // the packed copies below are released on return
  check_shapes(q, k, v, shape);
  const t_mat delta = attention_delta(dout, out, shape);
  Kokkos::deep_copy(dk, 0.0f);
  Kokkos::deep_copy(dv, 0.0f);
  if (use_teams(kernels)) {
    // Two passes, each owning what it writes (no atomics): dK|dV per key tile, then dQ per query tile.
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    const int H = shape.heads, D = shape.head_dim;
    const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                  doh = pack_rows(dout, H, D, 1.0f, "attention::do");
    const t_heads kh = pack_rows(k, H, D, 1.0f, "attention::k"),
                  vh = pack_rows(v, H, D, 1.0f, "attention::v");
    const t_heads dqh = scratch_view<t_heads>("attention::dq", H, q.extent(0), D);
    Kokkos::deep_copy(dqh, 0.0f);
    dispatch_head_dim(D, [&](auto dmax, auto) {
      constexpr int DMax = decltype(dmax)::value;
      run_teams("minimllm::attention_backward_keys_teams", segs.key_tiles * H,
                TeamBackwardKeys<DMax>{qh, doh, kh, vh, lse, delta, dk, dv, view_of(segs),
                                       segs.key_tile_segment, segs.key_tile_first, H, D, segs.causal});
      run_teams("minimllm::attention_backward_queries_teams", segs.tiles * H,
                TeamBackwardQueries<DMax>{qh, doh, kh, vh, lse, delta, dqh, view_of(segs), segs.tile_segment,
                                          segs.tile_first, H, D, scale, segs.causal});
    });
    unpack_rows(dqh, dq);
    return;
  }
  // One item per (segment, head): it owns that segment's dk/dv/dq columns, so no atomics are needed.
  const int items = segs.count() * shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(q, H, D, scale, "attention::q"),
                doh = pack_rows(dout, H, D, 1.0f, "attention::do");
  const t_heads kh = pack_rows(k, H, D, 1.0f, "attention::k"),
                kth = pack_transposed(k, H, D, "attention::kt");
  const t_heads vth = pack_transposed(v, H, D, "attention::vt");
  const t_heads dqh = scratch_view<t_heads>("attention::dq", H, q.extent(0), D);
  Kokkos::deep_copy(dqh, 0.0f);
  dispatch_head_dim(shape.head_dim, [&](auto dmax, auto exact) {
    using Functor = BackwardSegment<decltype(dmax)::value, decltype(exact)::value>;
    Functor f{qh,
              doh,
              kh,
              kth,
              vth,
              lse,
              delta,
              dqh,
              dk,
              dv,
              view_of(segs),
              shape.heads,
              {shape.head_dim},
              scale,
              segs.causal};
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
