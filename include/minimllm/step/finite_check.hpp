// The step's health check between the gradient synchronisation and the optimizer: a non-finite loss or
// gradient stops the run at that step, before AdamW would spread it into every parameter and moment.
#pragma once

#include <stdexcept>
#include <string>

#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

// The run stopped because step `step` produced a non-finite loss or gradient. what() is one line without
// the program's prefix, e.g. "step 3: non-finite loss (nan) and gradient: first non-finite gradient in
// llm.1.qkv". Thrown on every rank alike (the checked values are the synchronised ones), so every rank
// unwinds together and none waits in a collective; the program exits 1.
class NonFiniteError : public std::runtime_error {
 public:
  NonFiniteError(int step, const std::string& message) : std::runtime_error(message), step_(step) {}
  int step() const { return step_; }

 private:
  int step_;
};

// Where the step's synchronised (summed) gradient is in model.grads(): the whole buffer on every rank
// (replicated), or with the distributed optimizer each rank's own shard, the shards of `shards` together
// covering the buffer.
struct SynchronisedGradient {
  ShardRange range;                // of model.grads()
  Communicator* shards = nullptr;  // the ranks whose ranges cover the buffer; null: replicated
};

// The L2 norm of the synchronised gradient: one fused reduction over its range and, when sharded, the
// sum of squares all-reduced over the shards (a host scalar; collective). Non-finite exactly when some
// gradient element is; sharded, the same value as replicated up to the rounding of the partial sums.
double gradient_norm(const Model& model, const SynchronisedGradient& gradient);

// Throws NonFiniteError when loss or grad_norm (the step's synchronised values: the mean loss, or any
// value non-finite exactly when it is, and gradient_norm of the synchronised gradient) is NaN or +-inf,
// naming the step and, for the gradient, the first tensor (Model::tensor_ranges order) holding a
// non-finite element: the least such element over the shards when sharded (collective then, which every
// rank reaches alike, grad_norm being the same on every rank). Cheap when both are finite: nothing runs
// on the device.
void check_finite_step(const Model& model, int step, double loss, double grad_norm,
                       const SynchronisedGradient& gradient);

}  // namespace minimllm
