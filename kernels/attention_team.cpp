// Attention's team kernels (AttentionKernels::teams, the GPU path). A team owns one tile of rows of one
// head; on a GPU each thread owns one row (Rows = 1), on a host backend the team's single thread owns them
// all (Rows = 32). What every row of the team reads (K and V in forward and dQ, Q and dO in dK/dV) is
// staged in team scratch a step at a time: the same address for all threads, a broadcast. A thread's own
// rows (Q and dO in dQ, K and V in dK/dV) sit in scratch too, padded by one float per row so that threads
// reading their own rows hit distinct banks. Loops run to the compile-time DMax over zero-padded data,
// so per-row arrays stay in registers (D = 128 spills some: its steps are shorter to fit 48 KiB).
#include <math.h>

#include <cmath>

#include "attention_internal.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm::attention_detail {
namespace {

using kernels_detail::kHostExec;
using kernels_detail::ScratchFloats;
using kernels_detail::team_floats;
using kernels_detail::TeamMember;

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
    const QueryTile tile = query_tile(team.league_rank(), heads, segs, tile_segment, tile_first, causal);
    float* const ks = team_floats(team, kTeamScratchLevel, scratch_floats());
    float* const vs = ks + kStep * DMax;
    const int t = team.team_rank(), threads = team.team_size();

    float qr[kTeamRows][DMax], acc[kTeamRows][DMax], row_max[kTeamRows], row_sum[kTeamRows];
    int seen[kTeamRows];
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      seen[r] = i < tile.nq ? visible_keys(causal, tile.q_first + i, tile.offset, tile.k_len) : 0;
      for (int d = 0; d < DMax; ++d) {
        qr[r][d] = i < tile.nq && d < D ? q(tile.h, tile.q0 + i, d) : 0.0f;
        acc[r][d] = 0.0f;
      }
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
    for (int kb = 0; kb < tile.k_end; kb += kStep) {
      const int nk = min_int(tile.k_end - kb, kStep);
      team.team_barrier();  // the previous step's tiles are no longer read
      stage<kStep, DMax, DMax>(team, ks, k, tile.h, tile.k0 + kb, nk, D);
      stage<kStep, DMax, DMax>(team, vs, v, tile.h, tile.k0 + kb, nk, D);
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
      if (i >= tile.nq) continue;
      const bool any = row_sum[r] > 0.0f;
      const float inv = any ? 1.0f / row_sum[r] : 0.0f;
      for (int d = 0; d < DMax; ++d)
        if (d < D) out(tile.q0 + i, tile.h * D + d) = acc[r][d] * inv;
      lse(tile.q0 + i, tile.h) = any ? row_max[r] + logf(row_sum[r]) : INFINITY;
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
    float* const ks = team_floats(team, kTeamScratchLevel, scratch_floats());
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
    for (int qb = first_query_seeing(causal, kb, offset); qb < q_len; qb += kStep) {
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
    const QueryTile tile = query_tile(team.league_rank(), heads, segs, tile_segment, tile_first, causal);
    float* const qs = team_floats(team, kTeamScratchLevel, scratch_floats());
    float* const dos = qs + kTileQ * kOwn;
    float* const ks = dos + kTileQ * kOwn;
    float* const vs = ks + kStep * DMax;
    const int t = team.team_rank(), threads = team.team_size();

    stage<kTileQ, DMax, kOwn>(team, qs, q, tile.h, tile.q0, tile.nq, D);
    stage<kTileQ, DMax, kOwn>(team, dos, dout, tile.h, tile.q0, tile.nq, D);
    float dq_acc[kTeamRows][DMax], row_lse[kTeamRows], row_delta[kTeamRows];
    int seen[kTeamRows];
    for (int r = 0; r < kTeamRows; ++r) {
      const int i = t + r * threads;
      seen[r] = i < tile.nq ? visible_keys(causal, tile.q_first + i, tile.offset, tile.k_len) : 0;
      row_lse[r] = i < tile.nq ? lse(tile.q0 + i, tile.h) : INFINITY;
      row_delta[r] = i < tile.nq ? delta(tile.q0 + i, tile.h) : 0.0f;
      for (int d = 0; d < DMax; ++d) dq_acc[r][d] = 0.0f;
    }
    for (int kb = 0; kb < tile.k_end; kb += kStep) {
      const int nk = min_int(tile.k_end - kb, kStep);
      team.team_barrier();  // also orders the own-row staging above before the first read
      stage<kStep, DMax, DMax>(team, ks, k, tile.h, tile.k0 + kb, nk, D);
      stage<kStep, DMax, DMax>(team, vs, v, tile.h, tile.k0 + kb, nk, D);
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
      if (i >= tile.nq) continue;
      for (int d = 0; d < DMax; ++d)
        if (d < D) dq(tile.h, tile.q0 + i, d) = scale * dq_acc[r][d];
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

}  // namespace

void forward_teams(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(x.q, H, D, scale, "attention::q"),
                kh = pack_rows(x.k, H, D, 1.0f, "attention::k");
  const t_heads vh = pack_rows(x.v, H, D, 1.0f, "attention::v");
  dispatch_head_dim(D, [&](auto dmax, auto) {
    using Functor = TeamForward<decltype(dmax)::value>;
    run_teams("minimllm::attention::forward_teams", segs.tiles * H,
              Functor{qh, kh, vh, x.out, x.lse, view_of(segs), segs.tile_segment, segs.tile_first, H, D,
                      segs.causal});
  });
}

void backward_teams(const BackwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  // Two passes, each owning what it writes (no atomics): dK|dV per key tile, then dQ per query tile.
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int H = shape.heads, D = shape.head_dim;
  const t_heads qh = pack_rows(x.q, H, D, scale, "attention::q"),
                doh = pack_rows(x.dout, H, D, 1.0f, "attention::do");
  const t_heads kh = pack_rows(x.k, H, D, 1.0f, "attention::k"),
                vh = pack_rows(x.v, H, D, 1.0f, "attention::v");
  const t_heads dqh = scratch_view<t_heads>("attention::dq", H, x.q.extent(0), D);
  Kokkos::deep_copy(dqh, 0.0f);
  dispatch_head_dim(D, [&](auto dmax, auto) {
    constexpr int DMax = decltype(dmax)::value;
    run_teams("minimllm::attention::backward_keys_teams", segs.key_tiles * H,
              TeamBackwardKeys<DMax>{qh, doh, kh, vh, x.lse, x.delta, x.dk, x.dv, view_of(segs),
                                     segs.key_tile_segment, segs.key_tile_first, H, D, segs.causal});
    run_teams("minimllm::attention::backward_queries_teams", segs.tiles * H,
              TeamBackwardQueries<DMax>{qh, doh, kh, vh, x.lse, x.delta, dqh, view_of(segs),
                                        segs.tile_segment, segs.tile_first, H, D, scale, segs.causal});
  });
  unpack_rows(dqh, x.dq);
}

}  // namespace minimllm::attention_detail
