#include "minimllm/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "gemm_portable.hpp"
#include "minimllm/kernels/bf16.hpp"
#include "minimllm/kernels/workspace.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include <cublas_v2.h>
#endif

namespace minimllm {
namespace {

using kernels_detail::portable_gemm;

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

// dst[i * cols + j] = round(src(i, j)) for the whole of src: a contiguous rounded copy.
template <class T, class Round>
void round_into(const t_mat_const& src, T* dst, Round round) {
  const int rows = static_cast<int>(src.extent(0)), cols = static_cast<int>(src.extent(1));
  if (rows == 0 || cols == 0) return;
  Kokkos::parallel_for(
      "minimllm::gemm::round_bf16", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {rows, cols}),
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

// C = alpha op(round(A)) op(round(B)) + beta C: rounds both operands into workspace scratch, then
// multiplies. The scratch is released on return; on a GPU the kernels reading it are queued on ExecSpace
// (cuBLAS shares its stream) before any that reuse it.
void gemm_bf16(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
               float beta, const t_mat& c, int k, GemmBackend backend) {
  const WorkspaceScope scope;
  const std::size_t a_size = a.extent(0) * a.extent(1), b_size = b.extent(0) * b.extent(1);
  if (backend == GemmBackend::cublas) {
#ifdef KOKKOS_ENABLE_CUDA
    if constexpr (kCudaExec) {
      using t_bits = Kokkos::View<std::uint16_t*, MemSpace>;  // bfloat16 bit patterns
      const auto a16 = scratch_view<t_bits>("minimllm::gemm::a_bf16", a_size);
      const auto b16 = scratch_view<t_bits>("minimllm::gemm::b_bf16", b_size);
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
  // blas and portable: the rounded values as floats.
  const auto a_rounded = scratch_view<t_vec>("minimllm::gemm::a_bf16", a_size);
  const auto b_rounded = scratch_view<t_vec>("minimllm::gemm::b_bf16", b_size);
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

namespace {
GemmSelection& installed_selection() {
  static GemmSelection selection;
  return selection;
}
}  // namespace

GemmShapeClass gemm_shape_class(Trans trans_a, Trans trans_b, const t_mat_const& b, const t_mat& c) {
  const bool weight_is_c = trans_a == Trans::yes && trans_b == Trans::no;
  return {trans_a, trans_b, static_cast<int>(weight_is_c ? c.extent(0) : b.extent(0)),
          static_cast<int>(weight_is_c ? c.extent(1) : b.extent(1))};
}

std::string to_string(const GemmShapeClass& shape) {
  const char* kind = shape.trans_a == Trans::yes ? (shape.trans_b == Trans::yes ? "tt" : "wgrad")
                                                 : (shape.trans_b == Trans::yes ? "dgrad" : "fwd");
  return std::string(kind) + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols);
}

GemmBackend selected_gemm_backend(const GemmShapeClass& shape) {
  for (const auto& [cls, backend] : installed_selection())
    if (cls == shape) return backend;
  return default_gemm_backend();
}

GemmSelectionScope::GemmSelectionScope(GemmSelection selection)
    : previous_(std::move(installed_selection())) {
  installed_selection() = std::move(selection);
}
GemmSelectionScope::~GemmSelectionScope() { installed_selection() = std::move(previous_); }

bool openblas_core_is_generic(const std::string& core) {
  std::string lower = core;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  return lower == "prescott" || lower == "nehalem" || lower == "core2" || lower == "atom" ||
         lower == "katmai" || lower == "northwood" || lower == "banias" || lower == "penryn" ||
         lower == "dunnington" || lower == "unknown";
}

bool blas_for_other_products() {
  static const bool generic = openblas_core_is_generic(blas_core_name());  // fixed for the process
  if (default_gemm_backend() != GemmBackend::blas || generic) return false;
  const GemmSelection& selection = installed_selection();
  return selection.empty() || std::any_of(selection.begin(), selection.end(), [](const auto& entry) {
           return entry.second == GemmBackend::blas;
         });
}

std::string blas_core_name() {
#ifdef OPENBLAS_VERSION
  const char* name = openblas_get_corename();
  return name ? name : "";
#else
  return "";
#endif
}

std::string blas_config() {
#ifdef OPENBLAS_VERSION
  const char* config = openblas_get_config();
  return config ? config : "";
#else
  return "";
#endif
}

bool blas_has_own_thread_pool() {
#ifdef OPENBLAS_VERSION
  return openblas_get_parallel() == 1;  // 0: sequential, 1: its own pthreads, 2: the OpenMP runtime's
#else
  return false;
#endif
}

void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmPrecision precision) {
  const GemmBackend backend = installed_selection().empty()
                                  ? default_gemm_backend()
                                  : selected_gemm_backend(gemm_shape_class(trans_a, trans_b, b, c));
  gemm(trans_a, trans_b, alpha, a, b, beta, c, backend, precision);
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
