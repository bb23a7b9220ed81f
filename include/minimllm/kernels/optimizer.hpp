// AdamW over a flat range of the parameter buffer.
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One decoupled-weight-decay Adam update; step counts from 1 (bias correction).
void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step);

}  // namespace minimllm
