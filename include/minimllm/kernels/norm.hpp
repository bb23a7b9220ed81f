// RMSNorm over the feature dimension of [tokens, features] activations.
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

inline constexpr float kRmsNormEps = 1e-5f;

// y = x * rstd * weight, rstd(row) = 1 / sqrt(mean(x^2) + eps); rstd is saved for backward.
void rmsnorm_forward(const t_mat_const& x, const t_vec_const& weight, const t_mat& y, const t_vec& rstd);

// dx += d/dx, dweight += d/dweight (both accumulate). Deterministic: independent of thread count.
void rmsnorm_backward(const t_mat_const& dy, const t_mat_const& x, const t_vec_const& weight,
                      const t_vec_const& rstd, const t_mat& dx, const t_vec& dweight);

}  // namespace minimllm
