// Internal to kernels/: the portable GEMM kernel, for gemm.cpp's dispatch.
#pragma once

#include "minimllm/kernels/gemm.hpp"

namespace minimllm::kernels_detail {

// C = alpha op(A) op(B) + beta C with shapes already checked; k is the shared dimension.
void portable_gemm(Trans trans_a, Trans trans_b, float alpha, const t_mat_const& a, const t_mat_const& b,
                   float beta, const t_mat& c, int k);

}  // namespace minimllm::kernels_detail
