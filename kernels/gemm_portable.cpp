// The portable GEMM kernel (GemmBackend::portable): Kokkos teams over tiles of C, panels of A and B staged
// in team scratch. It runs on every backend, and is the reference the vendor libraries are benchmarked
// against.
#include "gemm_portable.hpp"

#include <type_traits>

#include "team_policy.hpp"

namespace minimllm::kernels_detail {
namespace {

// Host: one thread per team walks the whole C tile, keeping an 8x32 block in vector registers while the
// A and B panels stay in L1/L2. Device: 16x16 threads, each owning a 4x4 block of a 64x64 tile.
// Every size is a power of two so that index splitting compiles to shifts.
struct HostTiles {
  static constexpr int m = 64, n = 64, k = 128, reg_m = 8, reg_n = 32;
  static constexpr int scratch_level = 1;  // level 0 is capped at 32 KiB on host backends
};
struct DeviceTiles {
  static constexpr int m = 64, n = 64, k = 16, reg_m = 4, reg_n = 4;
  static constexpr int scratch_level = 0;  // shared memory
};
using Tiles = std::conditional_t<kHostExec, HostTiles, DeviceTiles>;
constexpr int kBlocksM = Tiles::m / Tiles::reg_m;
constexpr int kBlocksN = Tiles::n / Tiles::reg_n;
constexpr int kTeamSize = kHostExec ? 1 : kBlocksM * kBlocksN;

KOKKOS_INLINE_FUNCTION int clamp_extent(int available, int limit) {
  return available < 0 ? 0 : (available < limit ? available : limit);
}

// panel[r][c] = src(row0 + r, col0 + c) for a Rows x Cols block, zero past the edges of src.
// The host runs contiguous (vectorisable) row copies; GPU threads take consecutive elements (coalesced).
template <int Rows, int Cols>
KOKKOS_INLINE_FUNCTION void copy_block(const TeamMember& team, const t_mat_const& src, int row0, int col0,
                                       float* panel) {
  const int rows = clamp_extent(static_cast<int>(src.extent(0)) - row0, Rows);
  const int cols = clamp_extent(static_cast<int>(src.extent(1)) - col0, Cols);
  if constexpr (kHostExec) {
    for (int r = 0; r < Rows; ++r) {
      float* out = panel + r * Cols;
      const int valid = r < rows ? cols : 0;
      if (valid > 0) {
        const float* in = src.data() + (row0 + r) * src.stride(0) + col0;
        for (int c = 0; c < valid; ++c) out[c] = in[c];
      }
      for (int c = valid; c < Cols; ++c) out[c] = 0.0f;
    }
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Rows * Cols), [&](int idx) {
      const int r = idx / Cols;
      const int c = idx % Cols;
      panel[idx] = r < rows && c < cols ? src(row0 + r, col0 + c) : 0.0f;
    });
  }
}

// panel[c][r] = src(row0 + r, col0 + c): as copy_block, but stored transposed.
template <int Rows, int Cols>
KOKKOS_INLINE_FUNCTION void copy_block_transposed(const TeamMember& team, const t_mat_const& src, int row0,
                                                  int col0, float* panel) {
  const int rows = clamp_extent(static_cast<int>(src.extent(0)) - row0, Rows);
  const int cols = clamp_extent(static_cast<int>(src.extent(1)) - col0, Cols);
  if constexpr (kHostExec) {
    for (int r = 0; r < Rows; ++r) {
      const int valid = r < rows ? cols : 0;
      if (valid > 0) {
        const float* in = src.data() + (row0 + r) * src.stride(0) + col0;
        for (int c = 0; c < valid; ++c) panel[c * Rows + r] = in[c];
      }
      for (int c = valid; c < Cols; ++c) panel[c * Rows + r] = 0.0f;
    }
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Rows * Cols), [&](int idx) {
      const int r = idx / Cols;
      const int c = idx % Cols;
      panel[c * Rows + r] = r < rows && c < cols ? src(row0 + r, col0 + c) : 0.0f;
    });
  }
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
      // bi fastest: on the host the B strip of one bj stays in L1 across all bi.
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

}  // namespace

void portable_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
                   float beta, const t_mat& c, int k) {
  const int m = static_cast<int>(c.extent(0));
  const int n = static_cast<int>(c.extent(1));
  const int tiles_m = (m + Tiles::m - 1) / Tiles::m;
  const int tiles_n = (n + Tiles::n - 1) / Tiles::n;
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  const PortableGemmKernel kernel{a, b, c, ta, tb, alpha, beta, m, n, k, tiles_n};
  const std::size_t scratch_bytes = ScratchFloats::shmem_size(PortableGemmKernel::kScratchFloats);
  Kokkos::parallel_for("minimllm::gemm::portable_tiles",
                       TeamPolicy(tiles_m * tiles_n, kTeamSize)
                           .set_scratch_size(Tiles::scratch_level, Kokkos::PerTeam(scratch_bytes)),
                       kernel);
}

}  // namespace minimllm::kernels_detail
