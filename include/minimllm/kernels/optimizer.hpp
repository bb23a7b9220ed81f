// AdamW over a flat range of the parameter buffer, and the gradient's health check before it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "minimllm/core/types.hpp"

namespace minimllm {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One decoupled-weight-decay Adam update; step counts from 1 (bias correction). One fused pass over the
// four contiguous arrays ("minimllm::optimizer::adamw_update"): elements [0, decayed) are decayed with
// hyper.weight_decay, the rest not (the model's norm weights sit at the end of its parameter buffer).
void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step, std::size_t decayed);
// The same with every element decayed.
void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step);

// Sum of squares of x, accumulated in double: one fused reduction ("minimllm::optimizer::sum_of_squares").
// A float squared stays far below double's range, so the sum is non-finite exactly when some element of x
// is (NaN or +-inf); the square root is the gradient's L2 norm.
double sum_of_squares(const t_vec_const& x);

// The index of x's first NaN or +-inf element, -1 when every element is finite
// ("minimllm::optimizer::first_non_finite"). For the failure path: it says where sum_of_squares's
// non-finite value came from.
std::int64_t first_non_finite(const t_vec_const& x);

}  // namespace minimllm
