// One GEMM interface for the whole code: vendor BLAS where the memory is host-accessible, cuBLAS on the
// CUDA backend, a portable Kokkos kernel everywhere (and as a reference to benchmark against), each in
// fp32 or with bfloat16 inputs.
#pragma once

#include <string>

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
// The same on the default backend.
void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmPrecision precision);

// Limits BLAS to the cores this rank owns (ranks must not fight over cores).
void set_blas_threads(int threads);

}  // namespace minimllm
