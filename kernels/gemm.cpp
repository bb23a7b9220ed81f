#include "minimllm/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace minimllm {
namespace {

constexpr bool kHostExec = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

// Host: one thread per team walks the whole C tile, keeping a 4x32 block in (vector) registers while the
// A and B panels stay in L1/L2. Device: 16x16 threads, each owning a 4x4 block of a 64x64 tile.
// Every size is a power of two so that index splitting compiles to shifts.
struct HostTiles {
  static constexpr int m = 64, n = 64, k = 128, reg_m = 4, reg_n = 32;
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

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using ScratchFloats = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

// One team computes one Tiles::m x Tiles::n tile of C. K is walked in chunks of Tiles::k: op(A) and op(B)
// are copied (transposed as needed, zero-padded past the matrix edges) into scratch panels so that the
// inner loop reads both contiguously whatever the transposes are.
struct PortableGemmKernel {
  t_mat_const a, b;
  t_mat c;
  bool trans_a, trans_b;
  float alpha, beta;
  int m, n, k, tiles_n;

  // a_panel [k][m] holds op(A)^T, b_panel [k][n] op(B), c_tile [m][n] the running sum.
  static constexpr int kPanelA = Tiles::k * Tiles::m;
  static constexpr int kPanelB = Tiles::k * Tiles::n;
  static constexpr int kScratchFloats = kPanelA + kPanelB + Tiles::m * Tiles::n;

  KOKKOS_INLINE_FUNCTION float op_a(int row, int col) const { return trans_a ? a(col, row) : a(row, col); }
  KOKKOS_INLINE_FUNCTION float op_b(int row, int col) const { return trans_b ? b(col, row) : b(row, col); }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamPolicy::member_type& team) const {
    const int row0 = (team.league_rank() / tiles_n) * Tiles::m;
    const int col0 = (team.league_rank() % tiles_n) * Tiles::n;
    ScratchFloats scratch(team.team_scratch(Tiles::scratch_level), kScratchFloats);
    float* const a_panel = scratch.data();
    float* const b_panel = a_panel + kPanelA;
    float* const c_tile = b_panel + kPanelB;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tiles::m * Tiles::n),
                         [&](int idx) { c_tile[idx] = 0.0f; });
    for (int k0 = 0; k0 < k; k0 += Tiles::k) {
      team.team_barrier();  // the previous chunk's panels are no longer read
      load_panels(team, row0, col0, k0, a_panel, b_panel);
      team.team_barrier();
      const int k_len = k - k0 < Tiles::k ? k - k0 : Tiles::k;
      // bi fastest: on the host the B strip of one bj stays in L1 across all bi.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlocksM * kBlocksN), [&](int block) {
        accumulate_block(a_panel, b_panel, c_tile, block % kBlocksM, block / kBlocksM, k_len);
      });
    }
    team.team_barrier();
    store_tile(team, row0, col0, c_tile);
  }

  // Adjacent indices read adjacent elements of the source matrix (coalesced loads on GPUs).
  KOKKOS_INLINE_FUNCTION void load_panels(const TeamPolicy::member_type& team, int row0, int col0, int k0,
                                          float* a_panel, float* b_panel) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kPanelA), [&](int idx) {
      const int i = trans_a ? idx % Tiles::m : idx / Tiles::k;
      const int kk = trans_a ? idx / Tiles::m : idx % Tiles::k;
      const int row = row0 + i;
      const int col = k0 + kk;
      a_panel[kk * Tiles::m + i] = row < m && col < k ? op_a(row, col) : 0.0f;
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kPanelB), [&](int idx) {
      const int kk = trans_b ? idx % Tiles::k : idx / Tiles::n;
      const int j = trans_b ? idx / Tiles::k : idx % Tiles::n;
      const int row = k0 + kk;
      const int col = col0 + j;
      b_panel[kk * Tiles::n + j] = row < k && col < n ? op_b(row, col) : 0.0f;
    });
  }

  KOKKOS_INLINE_FUNCTION static void accumulate_block(const float* a_panel, const float* b_panel,
                                                      float* c_tile, int bi, int bj, int k_len) {
    float acc[Tiles::reg_m][Tiles::reg_n];
    float* const c_block = c_tile + bi * Tiles::reg_m * Tiles::n + bj * Tiles::reg_n;
    for (int i = 0; i < Tiles::reg_m; ++i)
      for (int j = 0; j < Tiles::reg_n; ++j) acc[i][j] = c_block[i * Tiles::n + j];
    const float* a_col = a_panel + bi * Tiles::reg_m;
    const float* b_row = b_panel + bj * Tiles::reg_n;
    for (int kk = 0; kk < k_len; ++kk, a_col += Tiles::m, b_row += Tiles::n)
      for (int i = 0; i < Tiles::reg_m; ++i)
        for (int j = 0; j < Tiles::reg_n; ++j) acc[i][j] += a_col[i] * b_row[j];
    for (int i = 0; i < Tiles::reg_m; ++i)
      for (int j = 0; j < Tiles::reg_n; ++j) c_block[i * Tiles::n + j] = acc[i][j];
  }

  KOKKOS_INLINE_FUNCTION void store_tile(const TeamPolicy::member_type& team, int row0, int col0,
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

void check_shapes(Trans trans_a, Trans trans_b, const t_mat_const& a, const t_mat_const& b, const t_mat& c) {
  const auto op_rows = [](const t_mat_const& x, Trans t) { return x.extent(t == Trans::yes ? 1 : 0); };
  const auto op_cols = [](const t_mat_const& x, Trans t) { return x.extent(t == Trans::yes ? 0 : 1); };
  if (op_rows(a, trans_a) == c.extent(0) && op_cols(b, trans_b) == c.extent(1) &&
      op_cols(a, trans_a) == op_rows(b, trans_b))
    return;
  const auto describe = [](const char* name, std::size_t rows, std::size_t cols, bool trans) {
    return std::string(name) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
           (trans ? " (transposed)" : "");
  };
  throw std::invalid_argument(
      "gemm: shapes do not conform: " + describe("A", a.extent(0), a.extent(1), trans_a == Trans::yes) +
      ", " + describe("B", b.extent(0), b.extent(1), trans_b == Trans::yes) + ", " +
      describe("C", c.extent(0), c.extent(1), false));
}

// BLAS wants the leading dimension >= max(1, cols) even for empty matrices.
int leading_dim(std::size_t stride, std::size_t cols) {
  return static_cast<int>(std::max<std::size_t>({stride, cols, 1}));
}

void blas_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
               float beta, const t_mat& c, int k) {
  if constexpr (!kMemSpaceIsHostAccessible) {
    throw std::invalid_argument(std::string("gemm: GemmBackend::blas needs host-accessible memory, but the "
                                            "Kokkos backend is ") +
                                ExecSpace::name() + "; use GemmBackend::portable");
  }
  // Earlier kernels on ExecSpace may still be writing A, B or C.
  ExecSpace().fence();
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<int>(c.extent(0)),
              static_cast<int>(c.extent(1)), k, alpha, a.data(), leading_dim(a.stride(0), a.extent(1)),
              b.data(), leading_dim(b.stride(0), b.extent(1)), beta, c.data(),
              leading_dim(c.stride(0), c.extent(1)));
}

void portable_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
                   float beta, const t_mat& c, int k) {
  const int m = static_cast<int>(c.extent(0));
  const int n = static_cast<int>(c.extent(1));
  const int tiles_m = (m + Tiles::m - 1) / Tiles::m;
  const int tiles_n = (n + Tiles::n - 1) / Tiles::n;
  const PortableGemmKernel kernel{a, b, c,      trans_a == Trans::yes, trans_b == Trans::yes, alpha, beta, m,
                                  n, k, tiles_n};
  const std::size_t scratch_bytes = ScratchFloats::shmem_size(PortableGemmKernel::kScratchFloats);
  Kokkos::parallel_for("minimllm::gemm_portable",
                       TeamPolicy(tiles_m * tiles_n, kTeamSize)
                           .set_scratch_size(Tiles::scratch_level, Kokkos::PerTeam(scratch_bytes)),
                       kernel);
}

}  // namespace

GemmBackend default_gemm_backend() {
  return kMemSpaceIsHostAccessible ? GemmBackend::blas : GemmBackend::portable;
}

const char* to_string(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::blas:
      return "blas";
    case GemmBackend::portable:
      return "portable";
  }
  return "unknown";
}

void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmBackend backend) {
  check_shapes(trans_a, trans_b, a, b, c);
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  const int k = static_cast<int>(a.extent(trans_a == Trans::yes ? 0 : 1));
  if (backend == GemmBackend::blas) {
    blas_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);
  } else {
    portable_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);
  }
}

void set_blas_threads(int threads) {
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(threads);
#else
  (void)threads;  // other BLAS libraries take their thread count from the environment
#endif
}

}  // namespace minimllm
