#include "minimllm/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "minimllm/kernels/bf16.hpp"
#include "team_policy.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cublas_v2.h>
#endif

namespace minimllm {
namespace {

using kernels_detail::kHostExec;

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

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;
using ScratchFloats = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

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
    // A local copy: team_scratch takes a const reference, which device code cannot bind to a static member.
    const int scratch_level = Tiles::scratch_level;
    ScratchFloats scratch(team.team_scratch(scratch_level), kScratchFloats);
    float* const a_panel = scratch.data();
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
  if (!kMemSpaceIsHostAccessible) {
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

#ifdef KOKKOS_ENABLE_CUDA
constexpr bool kCudaExec = std::is_same<ExecSpace, Kokkos::Cuda>::value;

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusString(status));
}

// One handle per process, created on first use on Kokkos's CUDA stream (so cuBLAS calls are ordered
// with Kokkos kernels without fences), destroyed before Kokkos::finalize tears the CUDA context down.
cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = nullptr;
  if (!handle) {
    check_cublas(cublasCreate(&handle), "cublasCreate");
    check_cublas(cublasSetStream(handle, Kokkos::Cuda().cuda_stream()), "cublasSetStream");
    Kokkos::push_finalize_hook([] {
      cublasDestroy(handle);
      handle = nullptr;
    });
  }
  return handle;
}
#else
constexpr bool kCudaExec = false;
#endif

#ifdef KOKKOS_ENABLE_CUDA
// bf16 on tensor cores: the operands arrive already rounded, as bfloat16 bit patterns (contiguous,
// leading dimension = columns); accumulation and C in fp32. Same operand swap as cublas_gemm below.
void cublas_gemm_bf16(Trans trans_a, Trans trans_b, float alpha, const std::uint16_t* a, int a_cols,
                      const std::uint16_t* b, int b_cols, float beta, const t_mat& c, int k) {
  const auto op = [](Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  check_cublas(cublasGemmEx(cublas_handle(), op(trans_b), op(trans_a), static_cast<int>(c.extent(1)),
                            static_cast<int>(c.extent(0)), k, &alpha, b, CUDA_R_16BF, std::max(b_cols, 1), a,
                            CUDA_R_16BF, std::max(a_cols, 1), &beta, c.data(), CUDA_R_32F,
                            leading_dim(c.stride(0), c.extent(1)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (bf16)");
}
#endif

// cuBLAS is column-major, and a row-major X is the column-major X^T with the same leading dimension; so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: operands swapped, m and n swapped. The default
// math mode keeps full fp32 (no TF32), like the other backends. beta == 0 does not read C.
void cublas_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
                 float beta, const t_mat& c, int k) {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (kCudaExec) {
    const auto op = [](Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    check_cublas(
        cublasSgemm(cublas_handle(), op(trans_b), op(trans_a), static_cast<int>(c.extent(1)),
                    static_cast<int>(c.extent(0)), k, &alpha, b.data(), leading_dim(b.stride(0), b.extent(1)),
                    a.data(), leading_dim(a.stride(0), a.extent(1)), &beta, c.data(),
                    leading_dim(c.stride(0), c.extent(1))),
        "cublasSgemm");
    return;
  }
#endif
  (void)trans_a, (void)trans_b, (void)alpha, (void)a, (void)b, (void)beta, (void)c, (void)k;
  throw std::invalid_argument(
      std::string("gemm: GemmBackend::cublas needs the CUDA Kokkos backend, but it is ") + ExecSpace::name() +
      "; use GemmBackend::blas or GemmBackend::portable");
}

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
  Kokkos::parallel_for("minimllm::gemm_portable",
                       TeamPolicy(tiles_m * tiles_n, kTeamSize)
                           .set_scratch_size(Tiles::scratch_level, Kokkos::PerTeam(scratch_bytes)),
                       kernel);
}

// Grow-only buffers for the rounded operands, in MemSpace, shared by every call (calls run one after
// another on one execution space instance, so a buffer is free again once the next call's kernels run).
// Freed before Kokkos::finalize.
struct RoundedOperands {
  Kokkos::View<float*, MemSpace> a, b;              // blas and portable: rounded values as floats
  Kokkos::View<std::uint16_t*, MemSpace> a16, b16;  // cublas: bfloat16 bit patterns
};

RoundedOperands& rounded_operands() {
  static RoundedOperands buffers;
  static bool hook = false;
  if (!hook) {
    Kokkos::push_finalize_hook([] {
      buffers = RoundedOperands{};
      hook = false;
    });
    hook = true;
  }
  return buffers;
}

template <class View>
View grown(View& v, std::size_t n, const char* label) {
  if (v.extent(0) < n) {
    v = View();  // release before allocating the larger buffer
    v = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n);
  }
  return v;
}

// dst[i * cols + j] = round(src(i, j)) for the whole of src: a contiguous rounded copy.
template <class T, class Round>
void round_into(const t_mat_const& src, T* dst, Round round) {
  const int rows = static_cast<int>(src.extent(0)), cols = static_cast<int>(src.extent(1));
  if (rows == 0 || cols == 0) return;
  Kokkos::parallel_for(
      "minimllm::gemm_round_bf16", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const int i, const int j) {
        dst[static_cast<std::size_t>(i) * cols + j] = round(src(i, j));
      });
}

struct RoundToFloat {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return bf16_round(x); }
};
struct RoundToBits {
  KOKKOS_INLINE_FUNCTION std::uint16_t operator()(float x) const { return bf16_bits(x); }
};

// C = alpha op(round(A)) op(round(B)) + beta C: rounds both operands into scratch, then multiplies.
void gemm_bf16(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
               float beta, const t_mat& c, int k, GemmBackend backend) {
  RoundedOperands& r = rounded_operands();
  const std::size_t a_size = a.extent(0) * a.extent(1), b_size = b.extent(0) * b.extent(1);
  if (backend == GemmBackend::cublas) {
#ifdef KOKKOS_ENABLE_CUDA
    if constexpr (kCudaExec) {
      const auto a16 = grown(r.a16, a_size, "minimllm::gemm::a_bf16");
      const auto b16 = grown(r.b16, b_size, "minimllm::gemm::b_bf16");
      round_into(a, a16.data(), RoundToBits{});
      round_into(b, b16.data(), RoundToBits{});
      cublas_gemm_bf16(trans_a, trans_b, alpha, a16.data(), static_cast<int>(a.extent(1)), b16.data(),
                       static_cast<int>(b.extent(1)), beta, c, k);
      return;
    }
#endif
    cublas_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);  // throws: no CUDA backend
    return;
  }
  const auto a_rounded = grown(r.a, a_size, "minimllm::gemm::a_bf16");
  const auto b_rounded = grown(r.b, b_size, "minimllm::gemm::b_bf16");
  round_into(a, a_rounded.data(), RoundToFloat{});
  round_into(b, b_rounded.data(), RoundToFloat{});
  const t_mat_const a_view(
      Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>(
          a_rounded.data(), a.extent(0), a.extent(1)));
  const t_mat_const b_view(
      Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>(
          b_rounded.data(), b.extent(0), b.extent(1)));
  if (backend == GemmBackend::blas) return blas_gemm(trans_a, trans_b, alpha, a_view, b_view, beta, c, k);
  portable_gemm(trans_a, trans_b, alpha, a_view, b_view, beta, c, k);
}

}  // namespace

const char* to_string(GemmPrecision precision) { return precision == GemmPrecision::bf16 ? "bf16" : "fp32"; }

GemmPrecision gemm_precision_from_string(const std::string& name) {
  if (name == "fp32") return GemmPrecision::fp32;
  if (name == "bf16") return GemmPrecision::bf16;
  throw std::invalid_argument("GEMM precision '" + name + "' is unknown; valid: fp32, bf16");
}

GemmBackend default_gemm_backend() {
  if (kCudaExec) return GemmBackend::cublas;
  return kMemSpaceIsHostAccessible ? GemmBackend::blas : GemmBackend::portable;
}

const char* to_string(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::blas:
      return "blas";
    case GemmBackend::portable:
      return "portable";
    case GemmBackend::cublas:
      return "cublas";
  }
  return "unknown";
}

void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmPrecision precision) {
  gemm(trans_a, trans_b, alpha, a, b, beta, c, default_gemm_backend(), precision);
}

void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmBackend backend, GemmPrecision precision) {
  check_shapes(trans_a, trans_b, a, b, c);
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  const int k = static_cast<int>(a.extent(trans_a == Trans::yes ? 0 : 1));
  if (precision == GemmPrecision::bf16) return gemm_bf16(trans_a, trans_b, alpha, a, b, beta, c, k, backend);
  switch (backend) {
    case GemmBackend::blas:
      return blas_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);
    case GemmBackend::cublas:
      return cublas_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);
    case GemmBackend::portable:
      break;
  }
  portable_gemm(trans_a, trans_b, alpha, a, b, beta, c, k);
}

void set_blas_threads(int threads) {
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(threads);
#else
  (void)threads;  // other BLAS libraries take their thread count from the environment
#endif
}

}  // namespace minimllm
