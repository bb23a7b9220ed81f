// Attention's host kernels (AttentionKernels::host). On host execution spaces with operands of unit column
// stride (the usual case), every block product is a BLAS GEMM on the operands in place (forward_blas,
// backward_blas below). Otherwise (these kernels run on a GPU for the tests, or a stride is not 1): one
// thread per (query tile, head) in forward, per (segment, head) in backward. Q, K, V are first repacked per
// head (rows and transposed) so every inner loop reads contiguous memory, and a thread's accumulators are
// arrays of compile-time size that the compiler keeps in vector registers (the head dimension is a
// template parameter for that reason).
#include <cblas.h>
#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "attention_internal.hpp"
#include "exp_vectorizable.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm::attention_detail {
namespace {

using kernels_detail::exp_vectorizable;
using kernels_detail::kLanes;

constexpr int kRows = 4;  // query rows register-blocked together
static_assert(kTileK % kLanes == 0, "a key tile is whole vectors of lanes");

// A float's bits as an int that orders like the float (NaN aside): the max of the scores is taken on these,
// as GCC vectorises an integer max reduction but not a float one (unless told NaNs cannot occur).
KOKKOS_INLINE_FUNCTION int ordered_bits(float x) {
  union {
    float f;
    int i;
  } u;
  u.f = x;
  return u.i ^ ((u.i >> 31) & 0x7fffffff);  // negative floats: magnitude bits reversed
}
KOKKOS_INLINE_FUNCTION float from_ordered_bits(int key) {
  union {
    float f;
    int i;
  } u;
  u.i = key ^ ((key >> 31) & 0x7fffffff);
  return u.f;
}

// One row of a score block in the online softmax: of its n scores (whole vectors of kLanes) the first nj
// are visible. They become exp(score - new max), the rest 0, and the running max and sum are updated;
// returns the factor that rescales what the row accumulated from earlier key blocks. The sum in kLanes
// independent partial sums (one running sum is one dependent chain) and the exp of every score then a
// select (a conditional call does not vectorise): loops the compiler vectorises.
KOKKOS_INLINE_FUNCTION float softmax_block_row(float* row, int n, int nj, float& max, float& sum) {
  if (nj <= 0) {  // this row sees nothing here: no contribution, state unchanged
    for (int j = 0; j < n; ++j) row[j] = 0.0f;
    return 1.0f;
  }
  int key = ordered_bits(max);
  for (int j = 0; j < nj; ++j) {
    const int kj = ordered_bits(row[j]);
    key = kj > key ? kj : key;
  }
  const float m = from_ordered_bits(key);
  float lanes[kLanes];
  const float correction = expf(max - m);
  for (int l = 0; l < kLanes; ++l) lanes[l] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_vectorizable(row[j0 + l] - m);
      row[j0 + l] = j0 + l < nj ? e : 0.0f;
      lanes[l] += row[j0 + l];
    }
  float total = 0.0f;
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  sum = sum * correction + total;
  max = m;
  return correction;
}

// Backward's softmax for one row of n (whole vectors) scores with the first nj visible: P = exp(score -
// lse) and dS = P (dP - delta), both 0 past nj. p may alias score and ds may alias dp.
KOKKOS_INLINE_FUNCTION void softmax_grad_row(const float* score, const float* dp, int n, int nj, float lse,
                                             float delta, float* p, float* ds) {
  for (int j = 0; j < n; ++j) {
    const float pij = j < nj ? exp_vectorizable(score[j] - lse) : 0.0f;
    ds[j] = pij * (dp[j] - delta);
    p[j] = pij;
  }
}

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
          correction[r] = softmax_block_row(score[r], kTileK, nj, row_max[i], row_sum[i]);
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
            softmax_grad_row(score[r], &dp[r * kTileK], kTileK, seen < nk ? seen : nk, row_lse, row_delta,
                             p[i], ds[i]);
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

// The BLAS path (host execution spaces, operands of unit column stride, and a BLAS worth calling:
// blas_for_other_products, i.e. not OpenBLAS's generic core, which the kernels below outrun, nor
// runtime.gemm keeping every GEMM on the portable kernel): each block product is one
// single-threaded cblas_sgemm on the operands in place (head h's columns, leading dimension the row
// stride), with the softmax between the products. A work item owns its output rows (forward: a block of
// query rows of one head; backward: a segment's dQ, dK, dV columns of one head), so results do not
// depend on the thread count. The causal mask wastes the upper half of diagonal blocks of kDiagRows only:
// a fraction kDiagRows over the sequence length of the products.
constexpr int kFwdRows = 128;   // forward: query rows per item
constexpr int kFwdKeys = 512;   // forward: keys per score block (bounds the scratch, online softmax across)
constexpr int kBwdRows = 256;   // backward: query rows per score block
constexpr int kBwdKeys = 128;   // backward: keys per block
constexpr int kDiagRows = 64;   // query rows per product where the causal mask cuts the keys
constexpr int kScratchFloats =  // per thread: forward's scores and row state or backward's P and dS, in
    (std::max(kFwdRows * kFwdKeys + 2 * kFwdRows, 2 * kBwdRows * kBwdKeys) + 63) / 64 * 64;  // 256-byte lines
static_assert(kFwdKeys % kLanes == 0 && kBwdKeys % kLanes == 0, "score rows are whole vectors");

using HostExec = Kokkos::DefaultHostExecutionSpace;

int lanes_up(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Head h's columns of a [rows, heads * D] matrix of unit column stride, as BLAS reads them in place.
template <class T>
struct HeadCols {
  T* data;
  int ld;
  T* row(int r) const { return data + static_cast<std::ptrdiff_t>(r) * ld; }
};
template <class View>
HeadCols<typename View::value_type> head_cols(const View& m, int h, int D) {
  const std::size_t ld = m.stride(0) > m.extent(1) ? m.stride(0) : m.extent(1);
  return {m.data() + static_cast<std::ptrdiff_t>(h) * D, static_cast<int>(ld > 1 ? ld : 1)};
}

template <class... Views>
bool unit_column_stride(const Views&... m) {
  return ((m.stride(1) == 1 || m.extent(1) <= 1) && ...);
}

// C = alpha op(A) op(B) + beta C, row-major.
void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

// The work items run on every host thread already: BLAS single-threaded inside them, as configured after.
class SingleThreadedBlas {
 public:
#ifdef OPENBLAS_VERSION
  SingleThreadedBlas() : previous_(openblas_get_num_threads()) {
    if (previous_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (previous_ != 1) openblas_set_num_threads(previous_);
  }

 private:
  int previous_;
#else
  SingleThreadedBlas() {}  // other BLAS libraries take their thread count from the environment
#endif
};

// Runs f(item, scratch) for items 0 .. items-1, the largest (listed last) first, each thread with its own
// kScratchFloats of workspace.
template <class F>
void run_blas_items(const char* name, int items, const F& f) {
  ExecSpace().fence();  // earlier kernels may still be writing the operands
  const SingleThreadedBlas single;
  const Kokkos::Experimental::UniqueToken<HostExec> token;
  const t_vec scratch = scratch_view<t_vec>("attention::blas_scratch", token.size() * kScratchFloats);
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<HostExec, Kokkos::Schedule<Kokkos::Dynamic>>(0, items), [=](const int w) {
        const int slot = token.acquire();
        f(items - 1 - w, scratch.data() + static_cast<std::ptrdiff_t>(slot) * kScratchFloats);
        token.release(slot);
      });
  HostExec().fence();
}

void forward_blas(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  const int H = shape.heads, D = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const SegmentView sv = view_of(segs);
  const bool causal = segs.causal;
  std::vector<int> block_segment, block_first;  // the query blocks, in order of the keys they see
  for (int s = 0; s < segs.count(); ++s)
    for (int first = 0; first < sv.q_len(s); first += kFwdRows) {
      block_segment.push_back(s);
      block_first.push_back(first);
    }
  const int* const seg_of = block_segment.data();
  const int* const first_of = block_first.data();
  const ForwardOperands op = x;
  run_blas_items("minimllm::attention::forward_blas", static_cast<int>(block_segment.size()) * H,
                 [=](const int w, float* scratch) {
                   const int s = seg_of[w / H], q_first = first_of[w / H], h = w % H;
                   const int q_len = sv.q_len(s), k_len = sv.k_len(s), offset = sv.causal_offset(s);
                   const int nq = q_len - q_first < kFwdRows ? q_len - q_first : kFwdRows;
                   const int q0 = sv.q_start(s) + q_first, k0 = sv.k_start(s);
                   const int k_end = visible_keys(causal, q_first + nq - 1, offset, k_len);
                   const auto q = head_cols(op.q, h, D), k = head_cols(op.k, h, D), v = head_cols(op.v, h, D);
                   const auto out = head_cols(op.out, h, D);
                   float *const score = scratch, *const row_max = scratch + kFwdRows * kFwdKeys,
                                *const row_sum = row_max + kFwdRows;
                   for (int i = 0; i < nq; ++i) {
                     row_max[i] = -INFINITY;
                     row_sum[i] = 0.0f;
                     for (int d = 0; d < D; ++d) out.row(q0 + i)[d] = 0.0f;
                   }
                   // The products over keys [kb, kb + nk) in parts f(first row, rows, first key, keys): all
                   // rows for the keys the block's first row sees, then the diagonal kDiagRows rows at a
                   // time, each with the keys its last row sees (the masked products stay kDiagRows^2 / 2 per
                   // kDiagRows rows).
                   const int k_full = visible_keys(causal, q_first, offset, k_len);
                   const auto parts = [&](const int kb, const int nk, const auto& f) {
                     if (k_full > kb) f(0, nq, kb, std::min(k_full, kb + nk) - kb);
                     const int j0 = std::max(k_full, kb);
                     for (int i0 = 0; i0 < nq; i0 += kDiagRows) {
                       const int rows = std::min(kDiagRows, nq - i0);
                       const int end =
                           std::min(visible_keys(causal, q_first + i0 + rows - 1, offset, k_len), kb + nk);
                       if (end > j0) f(i0, rows, j0, end - j0);
                     }
                   };
                   for (int kb = 0; kb < k_end; kb += kFwdKeys) {
                     const int nk = k_end - kb < kFwdKeys ? k_end - kb : kFwdKeys, ld = lanes_up(nk);
                     parts(kb, nk, [&](const int i0, const int rows, const int j0, const int cols) {
                       sgemm(false, true, rows, cols, D, scale, q.row(q0 + i0), q.ld, k.row(k0 + j0), k.ld,
                             0.0f, score + i0 * ld + j0 - kb, ld);
                     });
                     for (int i = 0; i < nq; ++i) {
                       const int seen = visible_keys(causal, q_first + i, offset, k_len) - kb;
                       const float correction = softmax_block_row(score + i * ld, ld, seen < nk ? seen : nk,
                                                                  row_max[i], row_sum[i]);
                       if (correction != 1.0f)
                         for (int d = 0; d < D; ++d) out.row(q0 + i)[d] *= correction;
                     }
                     parts(kb, nk, [&](const int i0, const int rows, const int j0, const int cols) {
                       sgemm(false, false, rows, D, cols, 1.0f, score + i0 * ld + j0 - kb, ld, v.row(k0 + j0),
                             v.ld, 1.0f, out.row(q0 + i0), out.ld);
                     });
                   }
                   for (int i = 0; i < nq; ++i) {
                     const bool any = row_sum[i] > 0.0f;
                     const float inv = any ? 1.0f / row_sum[i] : 0.0f;
                     for (int d = 0; d < D; ++d) out.row(q0 + i)[d] *= inv;
                     op.lse(q0 + i, h) = any ? row_max[i] + logf(row_sum[i]) : INFINITY;
                   }
                 });
}

void backward_blas(const BackwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  const int H = shape.heads, D = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const SegmentView sv = view_of(segs);
  const bool causal = segs.causal;
  const BackwardOperands op = x;
  Kokkos::deep_copy(x.dq, 0.0f);  // accumulated in place, like dk and dv
  run_blas_items("minimllm::attention::backward_blas", segs.count() * H, [=](const int w, float* scratch) {
    const int s = w / H, h = w % H;
    const int q_len = sv.q_len(s), k_len = sv.k_len(s), offset = sv.causal_offset(s);
    const int q0 = sv.q_start(s), k0 = sv.k_start(s);
    const auto q = head_cols(op.q, h, D), k = head_cols(op.k, h, D), v = head_cols(op.v, h, D);
    const auto dout = head_cols(op.dout, h, D);
    const auto dq = head_cols(op.dq, h, D), dk = head_cols(op.dk, h, D), dv = head_cols(op.dv, h, D);
    float *const p = scratch, *const ds = scratch + kBwdRows * kBwdKeys;
    for (int kb = 0; kb < k_len; kb += kBwdKeys) {
      const int nk = k_len - kb < kBwdKeys ? k_len - kb : kBwdKeys;
      // Only queries at or after this block's first key (shifted by the causal offset) see it. Those that
      // see part of it (the diagonal) go kDiagRows at a time with the keys their last row sees, so the
      // masked products stay kDiagRows^2 / 2 per kDiagRows keys whatever kBwdKeys is.
      for (int qb = first_query_seeing(causal, kb, offset), nq = 0; qb < q_len; qb += nq) {
        const bool diagonal = visible_keys(causal, qb, offset, k_len) - kb < nk;
        nq = std::min(diagonal ? kDiagRows : kBwdRows, q_len - qb);
        const int nkq = std::min(nk, visible_keys(causal, qb + nq - 1, offset, k_len) - kb),
                  ld = lanes_up(nkq);
        const int r0 = q0 + qb;
        sgemm(false, true, nq, nkq, D, scale, q.row(r0), q.ld, k.row(k0 + kb), k.ld, 0.0f, p, ld);
        sgemm(false, true, nq, nkq, D, 1.0f, dout.row(r0), dout.ld, v.row(k0 + kb), v.ld, 0.0f, ds, ld);
        for (int i = 0; i < nq; ++i) {
          const int seen = visible_keys(causal, qb + i, offset, k_len) - kb;
          softmax_grad_row(p + i * ld, ds + i * ld, ld, seen < nkq ? seen : nkq, op.lse(r0 + i, h),
                           op.delta(r0 + i, h), p + i * ld, ds + i * ld);
        }
        // dV += P^T dO, dK += dS^T Q scale, dQ += dS K scale (the scores were Q K^T scale).
        sgemm(true, false, nkq, D, nq, 1.0f, p, ld, dout.row(r0), dout.ld, 1.0f, dv.row(k0 + kb), dv.ld);
        sgemm(true, false, nkq, D, nq, scale, ds, ld, q.row(r0), q.ld, 1.0f, dk.row(k0 + kb), dk.ld);
        sgemm(false, false, nq, D, nkq, scale, ds, ld, k.row(k0 + kb), k.ld, 1.0f, dq.row(r0), dq.ld);
      }
    }
  });
}

}  // namespace

void forward_host(const ForwardOperands& x, const AttentionSegments& segs, AttentionShape shape) {
  if (kernels_detail::kHostExec && unit_column_stride(x.q, x.k, x.v, x.out) && blas_for_other_products())
    return forward_blas(x, segs, shape);
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
  if (kernels_detail::kHostExec && unit_column_stride(x.dout, x.q, x.k, x.v, x.dq, x.dk, x.dv) &&
      blas_for_other_products())
    return backward_blas(x, segs, shape);
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
