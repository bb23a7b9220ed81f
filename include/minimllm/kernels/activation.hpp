// GELU (tanh approximation) and element-wise helpers on activations.
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

void gelu_forward(const t_mat_const& x, const t_mat& y);
// dx = dy * gelu'(x) (overwrites dx; dx may alias dy).
void gelu_backward(const t_mat_const& dy, const t_mat_const& x, const t_mat& dx);

// y += x
void add_inplace(const t_mat& y, const t_mat_const& x);
// every element of v times factor
void scale_inplace(const t_vec& v, float factor);

}  // namespace minimllm
