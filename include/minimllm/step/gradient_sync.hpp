// The data-parallel end of a step's backward pass: every rank's gradient summed into model.grads() and
// the loss summed over ranks, both through the world communicator. Afterwards model.grads() and
// outcome.loss_sum are identical on every rank, and outcome.grad_norm is the gradient's L2 norm.
#pragma once

#include "minimllm/model/model.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "minimllm/step/step_executor.hpp"

namespace minimllm {

// Times itself as Phase::grad_sync in outcome.seconds.
void synchronize_gradients(Model& model, Communicator& world, StepOutcome& outcome);

}  // namespace minimllm
