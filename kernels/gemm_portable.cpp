// The portable GEMM kernel (GemmBackend::portable): Kokkos teams over tiles of C, panels of A and B staged
// in team scratch. It runs on every backend, and is the reference the vendor libraries are benchmarked
// against. Host backends run a GotoBLAS-style blocked kernel (packed micro-panels, MR x NR register block);
// device backends PortableGemmKernel's shared-memory tiles.
#include "gemm_portable.hpp"

#include <cstdint>

#include "team_policy.hpp"

namespace minimllm::kernels_detail {
namespace {

// Device tiles (host backends run host::gemm below): 16x16 threads, each owning a 4x4 block of a 64x64
// tile. Every size is a power of two so that index splitting compiles to shifts.
struct Tiles {
  static constexpr int m = 64, n = 64, k = 16, reg_m = 4, reg_n = 4;
  static constexpr int scratch_level = 0;  // shared memory
};
constexpr int kBlocksM = Tiles::m / Tiles::reg_m;
constexpr int kBlocksN = Tiles::n / Tiles::reg_n;
constexpr int kTeamSize = kBlocksM * kBlocksN;

KOKKOS_INLINE_FUNCTION int clamp_extent(int available, int limit) {
  return available < 0 ? 0 : (available < limit ? available : limit);
}

// panel[r][c] = src(row0 + r, col0 + c) for a Rows x Cols block, zero past the edges of src. Threads take
// consecutive elements (coalesced).
template <int Rows, int Cols>
KOKKOS_INLINE_FUNCTION void copy_block(const TeamMember& team, const t_mat_const& src, int row0, int col0,
                                       float* panel) {
  const int rows = clamp_extent(static_cast<int>(src.extent(0)) - row0, Rows);
  const int cols = clamp_extent(static_cast<int>(src.extent(1)) - col0, Cols);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Rows * Cols), [&](int idx) {
    const int r = idx / Cols;
    const int c = idx % Cols;
    panel[idx] = r < rows && c < cols ? src(row0 + r, col0 + c) : 0.0f;
  });
}

// panel[c][r] = src(row0 + r, col0 + c): as copy_block, but stored transposed.
template <int Rows, int Cols>
KOKKOS_INLINE_FUNCTION void copy_block_transposed(const TeamMember& team, const t_mat_const& src, int row0,
                                                  int col0, float* panel) {
  const int rows = clamp_extent(static_cast<int>(src.extent(0)) - row0, Rows);
  const int cols = clamp_extent(static_cast<int>(src.extent(1)) - col0, Cols);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Rows * Cols), [&](int idx) {
    const int r = idx / Cols;
    const int c = idx % Cols;
    panel[c * Rows + r] = r < rows && c < cols ? src(row0 + r, col0 + c) : 0.0f;
  });
}

// acc(reg block at bi, bj) += op(A) block * op(B) block over k_len steps. op(A)(i, kk) sits at
// a_panel[i * AStrideI + kk * AStrideK]; b_panel is [k][n] so each step loads reg_n contiguous floats.
template <int AStrideI, int AStrideK>
KOKKOS_INLINE_FUNCTION void accumulate_block(const float* a_panel, const float* b_panel, float* c_tile,
                                             int bi, int bj, int k_len) {
  float acc[Tiles::reg_m][Tiles::reg_n];
  float* const c_block = c_tile + bi * Tiles::reg_m * Tiles::n + bj * Tiles::reg_n;
  for (int i = 0; i < Tiles::reg_m; ++i)
    for (int j = 0; j < Tiles::reg_n; ++j) acc[i][j] = c_block[i * Tiles::n + j];
  const float* a_step = a_panel + bi * Tiles::reg_m * AStrideI;
  const float* b_step = b_panel + bj * Tiles::reg_n;
  for (int kk = 0; kk < k_len; ++kk, a_step += AStrideK, b_step += Tiles::n)
    for (int i = 0; i < Tiles::reg_m; ++i)
      for (int j = 0; j < Tiles::reg_n; ++j) acc[i][j] += a_step[i * AStrideI] * b_step[j];
  for (int i = 0; i < Tiles::reg_m; ++i)
    for (int j = 0; j < Tiles::reg_n; ++j) c_block[i * Tiles::n + j] = acc[i][j];
}

// One team computes one Tiles::m x Tiles::n tile of C, walking K in chunks of Tiles::k. Each chunk of A is
// copied to scratch in A's own orientation ([m][k], or [k][m] when transposed), so that copy is contiguous;
// op(B) always lands as [k][n], transposing when B is, because the inner loop loads vectors along n.
struct PortableGemmKernel {
  t_mat_const a, b;
  t_mat c;
  bool trans_a, trans_b;
  float alpha, beta;
  int m, n, k, tiles_n;

  static constexpr int kPanelA = Tiles::k * Tiles::m;
  static constexpr int kPanelB = Tiles::k * Tiles::n;
  static constexpr int kScratchFloats = kPanelA + kPanelB + Tiles::m * Tiles::n;

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const int row0 = (team.league_rank() / tiles_n) * Tiles::m;
    const int col0 = (team.league_rank() % tiles_n) * Tiles::n;
    float* const a_panel = team_floats(team, Tiles::scratch_level, kScratchFloats);
    float* const b_panel = a_panel + kPanelA;
    float* const c_tile = b_panel + kPanelB;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tiles::m * Tiles::n),
                         [&](int idx) { c_tile[idx] = 0.0f; });
    for (int k0 = 0; k0 < k; k0 += Tiles::k) {
      team.team_barrier();  // the previous chunk's panels are no longer read
      if (trans_a) {
        copy_block<Tiles::k, Tiles::m>(team, a, k0, row0, a_panel);
      } else {
        copy_block<Tiles::m, Tiles::k>(team, a, row0, k0, a_panel);
      }
      if (trans_b) {
        copy_block_transposed<Tiles::n, Tiles::k>(team, b, col0, k0, b_panel);
      } else {
        copy_block<Tiles::k, Tiles::n>(team, b, k0, col0, b_panel);
      }
      team.team_barrier();
      const int k_len = k - k0 < Tiles::k ? k - k0 : Tiles::k;
      // bi fastest: neighbouring threads read the same B strip (one bj).
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlocksM * kBlocksN), [&](int block) {
        const int bi = block % kBlocksM;
        const int bj = block / kBlocksM;
        if (trans_a) {
          accumulate_block<1, Tiles::m>(a_panel, b_panel, c_tile, bi, bj, k_len);
        } else {
          accumulate_block<Tiles::k, 1>(a_panel, b_panel, c_tile, bi, bj, k_len);
        }
      });
    }
    team.team_barrier();
    store_tile(team, row0, col0, c_tile);
  }

  KOKKOS_INLINE_FUNCTION void store_tile(const TeamMember& team, int row0, int col0,
                                         const float* c_tile) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tiles::m * Tiles::n), [&](int idx) {
      const int row = row0 + idx / Tiles::n;
      const int col = col0 + idx % Tiles::n;
      if (row >= m || col >= n) return;
      // beta == 0 must not read C: it may hold NaN or garbage.
      c(row, col) = beta == 0.0f ? alpha * c_tile[idx] : alpha * c_tile[idx] + beta * c(row, col);
    });
  }
};

// ---- Host: packed micro-panels (GotoBLAS/BLIS layout) ----
// C is cut into kMC x kNC tiles, one per single-thread team; each walks K in kKC chunks in order, so a C
// element's summation order never depends on the thread count. Per chunk the team packs op(A) into kMR-row
// micro-panels and op(B) into kNR-column micro-panels ([k][kNR], the order the micro-kernel reads them),
// whatever the transposes, so every case runs the same inner loop. A transposed B is packed once per call
// for all tiles (its transpose is the costly copy); a plain one per tile, a contiguous copy.
namespace host {

// 12 x 32 floats: 24 zmm accumulators + 2 B vectors + 1 broadcast of the 32 AVX-512 registers.
constexpr int kMR = 12, kNR = 32;
// A micro-panel (12 x 256) + B micro-panel (256 x 32) in L1; A block, B panel and the C tile in L2.
constexpr int kKC = 256, kMC = 16 * kMR, kNC = 8 * kNR;
constexpr int kAlignFloats = 16;
constexpr int kPrefetchRows = 8;  // 64-byte cache lines: B rows never straddle two

using HostSpace = Kokkos::DefaultHostExecutionSpace;
using HostPolicy = Kokkos::TeamPolicy<HostSpace>;
using HostScratch = Kokkos::View<float*, HostSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

inline float* align_up(float* p) {
  const auto bytes = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t mask = kAlignFloats * sizeof(float) - 1;
  return reinterpret_cast<float*>((bytes + mask) & ~mask);
}

// c[i][j] (+)= sum over kk < k_len of a(i, kk) * b[kk][j], a(i, kk) at a[i * AStrideI + kk * AStrideK].
// The accumulators stay in registers for the whole chunk; `first` starts them at zero instead of C.
template <int AStrideI, int AStrideK>
inline void micro_kernel(const float* __restrict a, const float* __restrict b, float* __restrict c, int ldc,
                         int k_len, bool first) {
  float acc[kMR][kNR];
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = first ? 0.0f : c[i * ldc + j];
  for (int kk = 0; kk < k_len; ++kk, a += AStrideK, b += kNR)
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) acc[i][j] += a[i * AStrideI] * b[j];
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j) c[i * ldc + j] = acc[i][j];
}

// k_len rows of src (row stride ld), `width` floats each, into micro-panels of W columns: panel p row kk at
// out[p * W * kKC + kk * W], columns past width zero. Row by row, so the source is read sequentially.
template <int W>
inline void pack_rows(const float* src, std::int64_t ld, int width, int k_len, float* out) {
  const int full = width / W, rest = width % W;
  for (int kk = 0; kk < k_len; ++kk, src += ld) {
#if defined(__GNUC__)
    // Strided rows defeat the hardware prefetcher's page-bound streams: ask for a row kPrefetchRows ahead.
    if (kk + kPrefetchRows < k_len)
      for (int j = 0; j < width; j += 16) __builtin_prefetch(src + kPrefetchRows * ld + j);
#endif
    for (int p = 0; p < full; ++p) {
      float* dst = out + p * W * kKC + kk * W;
      for (int j = 0; j < W; ++j) dst[j] = src[p * W + j];
    }
    if (rest > 0) {
      float* dst = out + full * W * kKC + kk * W;
      for (int j = 0; j < W; ++j) dst[j] = j < rest ? src[full * W + j] : 0.0f;
    }
  }
}

// op(A) rows [row0, row0 + rows) x k [k0, k0 + k_len) into ceil(rows / kMR) micro-panels of kMR x kKC
// floats, padded rows zero. Stored in A's own orientation ([i][kk], or [kk][i] when transposed) so that
// the copy is contiguous; the micro-kernel's broadcasts read either.
inline void pack_a(const float* a, int lda, bool trans, int row0, int rows, int k0, int k_len, float* out) {
  if (trans) {
    pack_rows<kMR>(a + static_cast<std::int64_t>(k0) * lda + row0, lda, rows, k_len, out);
    return;
  }
  for (int p = 0; p * kMR < rows; ++p, out += kMR * kKC) {
    const int valid = rows - p * kMR < kMR ? rows - p * kMR : kMR;
    for (int i = 0; i < kMR; ++i) {
      float* dst = out + i * kKC;
      if (i < valid) {
        const float* src = a + static_cast<std::int64_t>(row0 + p * kMR + i) * lda + k0;
        for (int kk = 0; kk < k_len; ++kk) dst[kk] = src[kk];
      } else {
        for (int kk = 0; kk < k_len; ++kk) dst[kk] = 0.0f;
      }
    }
  }
}

// B (k x n, not transposed): columns [col0, col0 + cols) x k [k0, k0 + k_len) into micro-panels of
// kKC x kNR floats, padded columns zero.
inline void pack_b_plain(const float* b, int ldb, int col0, int cols, int k0, int k_len, float* out) {
  pack_rows<kNR>(b + static_cast<std::int64_t>(k0) * ldb + col0, ldb, cols, k_len, out);
}

// B stored n x k (transposed): micro-panel p of op(B) as [kk][kNR] over the whole k, at out + p * k * kNR.
// Each thread takes whole panels; k is walked in kKC blocks so the written lines stay in L1.
inline void pack_b_transposed(const float* b, int ldb, int n, int k, int p, float* out) {
  out += static_cast<std::int64_t>(p) * k * kNR;
  const int valid = n - p * kNR < kNR ? n - p * kNR : kNR;
  for (int k0 = 0; k0 < k; k0 += kKC) {
    const int k_len = k - k0 < kKC ? k - k0 : kKC;
    for (int j = 0; j < kNR; ++j) {
      float* dst = out + static_cast<std::int64_t>(k0) * kNR + j;
      if (j < valid) {
        const float* src = b + static_cast<std::int64_t>(p * kNR + j) * ldb + k0;
        for (int kk = 0; kk < k_len; ++kk) dst[kk * kNR] = src[kk];
      } else {
        for (int kk = 0; kk < k_len; ++kk) dst[kk * kNR] = 0.0f;
      }
    }
  }
}

struct BlockedGemm {
  const float* a;
  const float* b;
  float* c;
  const float* b_packed;  // whole op(B) packed when B is transposed, else null
  int lda, ldb, ldc;
  bool trans_a;
  float alpha, beta;
  int m, n, k, tiles_n;

  static constexpr int kPackA = kMC * kKC, kPackB = kKC * kNC, kTile = kMC * kNC;
  static constexpr int kScratchFloats = kPackA + kPackB + kTile + kAlignFloats;

  void operator()(const HostPolicy::member_type& team) const {
    const int row0 = (team.league_rank() / tiles_n) * kMC;
    const int col0 = (team.league_rank() % tiles_n) * kNC;
    const int rows = m - row0 < kMC ? m - row0 : kMC;
    const int cols = n - col0 < kNC ? n - col0 : kNC;
    float* const a_pack = align_up(HostScratch(team.team_scratch(1), kScratchFloats).data());
    float* const b_pack = a_pack + kPackA;
    float* const c_tile = b_pack + kPackB;
    const int panels_m = (rows + kMR - 1) / kMR;
    const int panels_n = (cols + kNR - 1) / kNR;
    if (k == 0)
      for (int i = 0; i < kTile; ++i) c_tile[i] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += kKC) {
      const int k_len = k - k0 < kKC ? k - k0 : kKC;
      pack_a(a, lda, trans_a, row0, rows, k0, k_len, a_pack);
      if (!b_packed) pack_b_plain(b, ldb, col0, cols, k0, k_len, b_pack);
      // The A micro-panel stays in L1 while the B micro-panels of the tile stream from L2.
      for (int pi = 0; pi < panels_m; ++pi) {
        const float* a_panel = a_pack + pi * kMR * kKC;
        for (int pj = 0; pj < panels_n; ++pj) {
          const float* b_panel = b_packed
                                     ? b_packed + (static_cast<std::int64_t>(col0 / kNR + pj) * k + k0) * kNR
                                     : b_pack + pj * kKC * kNR;
          float* c_block = c_tile + pi * kMR * kNC + pj * kNR;
          if (trans_a) {
            micro_kernel<1, kMR>(a_panel, b_panel, c_block, kNC, k_len, k0 == 0);
          } else {
            micro_kernel<kKC, 1>(a_panel, b_panel, c_block, kNC, k_len, k0 == 0);
          }
        }
      }
    }
    for (int i = 0; i < rows; ++i) {
      float* out = c + static_cast<std::int64_t>(row0 + i) * ldc + col0;
      const float* in = c_tile + i * kNC;
      // beta == 0 must not read C: it may hold NaN or garbage.
      if (beta == 0.0f) {
        for (int j = 0; j < cols; ++j) out[j] = alpha * in[j];
      } else {
        for (int j = 0; j < cols; ++j) out[j] = alpha * in[j] + beta * out[j];
      }
    }
  }
};

void gemm(bool ta, bool tb, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, int k) {
  const int m = static_cast<int>(c.extent(0));
  const int n = static_cast<int>(c.extent(1));
  if (m == 0 || n == 0) return;
  const int tiles_m = (m + kMC - 1) / kMC;
  const int tiles_n = (n + kNC - 1) / kNC;
  const int panels_n = (n + kNR - 1) / kNR;
  Kokkos::View<float*, HostSpace> b_packed;
  const auto ldb = static_cast<int>(b.stride(0));
  if (tb && k > 0) {
    b_packed =
        Kokkos::View<float*, HostSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gemm_b_packed"),
                                        static_cast<std::size_t>(panels_n) * k * kNR);
    float* const out = b_packed.data();
    const float* const b_data = b.data();
    Kokkos::parallel_for("minimllm::gemm::portable_pack_b", Kokkos::RangePolicy<HostSpace>(0, panels_n),
                         [=](int p) { pack_b_transposed(b_data, ldb, n, k, p, out); });
  }
  const BlockedGemm kernel{a.data(),
                           b.data(),
                           c.data(),
                           tb && k > 0 ? b_packed.data() : nullptr,
                           static_cast<int>(a.stride(0)),
                           ldb,
                           static_cast<int>(c.stride(0)),
                           ta,
                           alpha,
                           beta,
                           m,
                           n,
                           k,
                           tiles_n};
  const std::size_t scratch_bytes = HostScratch::shmem_size(BlockedGemm::kScratchFloats);
  Kokkos::parallel_for("minimllm::gemm::portable_blocked",
                       HostPolicy(tiles_m * tiles_n, 1).set_scratch_size(1, Kokkos::PerTeam(scratch_bytes)),
                       kernel);
}

}  // namespace host

}  // namespace

void portable_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
                   float beta, const t_mat& c, int k) {
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  if constexpr (kHostExec) {
    host::gemm(ta, tb, alpha, a, b, beta, c, k);
    return;
  }
  const int m = static_cast<int>(c.extent(0));
  const int n = static_cast<int>(c.extent(1));
  const int tiles_m = (m + Tiles::m - 1) / Tiles::m;
  const int tiles_n = (n + Tiles::n - 1) / Tiles::n;
  const PortableGemmKernel kernel{a, b, c, ta, tb, alpha, beta, m, n, k, tiles_n};
  const std::size_t scratch_bytes = ScratchFloats::shmem_size(PortableGemmKernel::kScratchFloats);
  Kokkos::parallel_for("minimllm::gemm::portable_tiles",
                       TeamPolicy(tiles_m * tiles_n, kTeamSize)
                           .set_scratch_size(Tiles::scratch_level, Kokkos::PerTeam(scratch_bytes)),
                       kernel);
}

}  // namespace minimllm::kernels_detail
