// One GEMM interface for the whole code: vendor BLAS where the memory is host-accessible, cuBLAS on the
// CUDA backend, a portable Kokkos kernel everywhere (and as a reference to benchmark against).
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

enum class Trans { no, yes };
enum class GemmBackend { blas, portable, cublas };

// Backend used when none is named: cuBLAS when ExecSpace is CUDA, BLAS when MemSpace is host-accessible,
// else portable.
GemmBackend default_gemm_backend();
const char* to_string(GemmBackend backend);

// C = alpha * op(A) * op(B) + beta * C, all row-major (LayoutRight, row stride may exceed cols).
// beta == 0 overwrites C without reading it (NaNs in C do not propagate).
void gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b, float beta,
          const t_mat& c, GemmBackend backend = default_gemm_backend());

// Limits BLAS to the cores this rank owns (ranks must not fight over cores).
void set_blas_threads(int threads);

}  // namespace minimllm
