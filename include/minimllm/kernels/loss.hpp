// Softmax cross-entropy fused with its gradient (the LM head's logits are the largest activation).
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

// For each row r with targets(r) >= 0: losses(r) = logsumexp(logits(r,:)) - logits(r, targets(r)),
// dlogits(r,:) = (softmax(logits(r,:)) - onehot(targets(r))) * grad_scale.
// Rows with targets(r) < 0 carry no loss: losses(r) = 0 and dlogits(r,:) = 0.
// dlogits may be the same view as logits (computed in place).
void softmax_xent_forward_backward(const t_mat_const& logits, const t_ivec_const& targets, float grad_scale,
                                   const t_vec& losses, const t_mat& dlogits);

// Sum of a vector (deterministic).
double sum(const t_vec_const& v);

}  // namespace minimllm
