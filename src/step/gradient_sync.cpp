#include "minimllm/step/gradient_sync.hpp"

#include "minimllm/step/finite_check.hpp"

namespace minimllm {

void synchronize_gradients(Model& model, Communicator& world, StepOutcome& outcome) {
  PhaseClock clock(outcome.seconds, Phase::grad_sync);
  world.allreduce_sum(model.grads().data(), model.grads().extent(0));
  outcome.loss_sum = world.allreduce_sum(outcome.loss_sum);  // a host scalar
  // Of the identical synchronised gradient, so identical (in finiteness at least) on every rank.
  outcome.grad_norm = gradient_norm(model);
}

}  // namespace minimllm
