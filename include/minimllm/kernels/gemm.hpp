// One GEMM interface for the whole code: vendor BLAS where the memory is host-accessible, cuBLAS on the
// CUDA backend, a portable Kokkos kernel everywhere (and as a reference to benchmark against), each in
// fp32 or with bfloat16 inputs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "minimllm/core/types.hpp"

namespace minimllm {

enum class Trans { no, yes };
enum class GemmBackend { blas, portable, cublas };

// fp32: full fp32 everywhere (no TF32). bf16: A and B are rounded to bfloat16 (nearest even) and the
// products accumulate in fp32; C, alpha and beta stay fp32. cuBLAS runs it on tensor cores
// (cublasGemmEx, CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F); BLAS and the portable kernel multiply the
// rounded values in fp32, which is exact for the products (8 x 8 significand bits fit in 24), so they
// differ from the tensor cores only in the order and rounding of the fp32 accumulation.
enum class GemmPrecision { fp32, bf16 };
const char* to_string(GemmPrecision precision);
// "fp32" or "bf16" (as runtime.precision writes them); throws std::invalid_argument otherwise.
GemmPrecision gemm_precision_from_string(const std::string& name);

// Backend used when none is named: cuBLAS when ExecSpace is CUDA, BLAS when MemSpace is host-accessible,
// else portable.
GemmBackend default_gemm_backend();
const char* to_string(GemmBackend backend);

// C = alpha * op(A) * op(B) + beta * C, all row-major (LayoutRight, row stride may exceed cols).
// beta == 0 overwrites C without reading it (NaNs in C do not propagate).
void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmBackend backend = default_gemm_backend(),
          GemmPrecision precision = GemmPrecision::fp32);
// The same on the backend selected for its shape class (GemmSelectionScope), else the default.
void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmPrecision precision);

// A linear layer's GEMM, by which of its three products it is (forward X W: no/no; data gradient dY W^T:
// no/yes; weight gradient X^T dY: yes/no) and its weight's rows x cols. The token rows vary step by step;
// the weight's shape does not, so a backend chosen per class holds for the whole run.
struct GemmShapeClass {
  Trans trans_a = Trans::no, trans_b = Trans::no;
  int rows = 0, cols = 0;  // of the weight: B for no/no and no/yes, C for yes/no
  bool operator==(const GemmShapeClass& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && rows == o.rows && cols == o.cols;
  }
};
GemmShapeClass gemm_shape_class(Trans trans_a, Trans trans_b, const t_mat_const& b, const t_mat& c);
std::string to_string(const GemmShapeClass& shape);  // e.g. "fwd 64x192", "dgrad 64x192", "wgrad 64x192"

// The backend of each class for the gemm() overload that names none (classes not listed: the default).
using GemmSelection = std::vector<std::pair<GemmShapeClass, GemmBackend>>;
GemmBackend selected_gemm_backend(const GemmShapeClass& shape);
// Installs a selection process-wide for its lifetime (set up before the steps; read-only while they run),
// restoring the previous one after.
class GemmSelectionScope {
 public:
  explicit GemmSelectionScope(GemmSelection selection);
  ~GemmSelectionScope();
  GemmSelectionScope(const GemmSelectionScope&) = delete;
  GemmSelectionScope& operator=(const GemmSelectionScope&) = delete;

 private:
  GemmSelection previous_;
};

// The OpenBLAS core this process runs (openblas_get_corename()) and its version and build line
// (openblas_get_config()); empty when the BLAS is not OpenBLAS.
std::string blas_core_name();
std::string blas_config();
// True for OpenBLAS's cores without AVX2 kernels (Prescott, Nehalem, ...): what it falls back to on a CPU
// it does not recognise, several times slower than a tuned kernel there. `core`: blas_core_name().
bool openblas_core_is_generic(const std::string& core);
// Whether kernels other than the linear layers (attention's block products) should call BLAS: a host
// backend, a BLAS not running a generic core, and runtime.gemm not keeping every class on the portable
// kernel (an installed selection without any BLAS class).
bool blas_for_other_products();
// True when the BLAS runs its threads in a pool of its own (OpenBLAS built with pthreads): they inherit
// the CPU affinity of the thread that creates them, not one OpenMP place each.
bool blas_has_own_thread_pool();

// Limits BLAS to the cores this rank owns (ranks must not fight over cores).
void set_blas_threads(int threads);

}  // namespace minimllm
