#include "minimllm/step/finite_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "minimllm/kernels/optimizer.hpp"

namespace minimllm {
namespace {

// The tensor holding gradient element `index`: Model::tensor_ranges cover the one gradient buffer.
std::string tensor_of(const Model& model, std::int64_t index) {
  for (const TensorRange& t : model.tensor_ranges())
    if (static_cast<std::size_t>(index) >= t.offset && static_cast<std::size_t>(index) < t.offset + t.count)
      return t.name;
  return fmt::format("element {} of the gradient buffer", index);
}

t_vec_const synchronised_part(const Model& model, const SynchronisedGradient& gradient) {
  const ShardRange r = gradient.range;
  return Kokkos::subview(model.grads(), std::make_pair(r.offset, r.offset + r.count));
}

// The index in the whole gradient buffer of the synchronised gradient's first non-finite element, -1
// when none is.
std::int64_t first_non_finite_gradient(const Model& model, const SynchronisedGradient& gradient) {
  const std::int64_t local = first_non_finite(synchronised_part(model, gradient));
  if (!gradient.shards) return local;
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::int64_t first = gradient.shards->allreduce_min(
      local >= 0 ? local + static_cast<std::int64_t>(gradient.range.offset) : none);
  return first == none ? -1 : first;
}

}  // namespace

// Under tensor parallelism: the sum of squares of this rank's part of the gradient with each element
// divided by its replicas in the LLM's tensor-parallel group, so that the group's sum counts every element
// of the whole model once.
double tensor_parallel_share(const Model& model, const SynchronisedGradient& gradient) {
  const ShardRange r = gradient.range;
  double own = 0.0;
  for (const TensorRange& t : model.tensor_ranges()) {
    const std::size_t begin = std::max(t.offset, r.offset),
                      end = std::min(t.offset + t.count, r.offset + r.count);
    if (begin < end)
      own += sum_of_squares(Kokkos::subview(model.grads(), std::make_pair(begin, end))) / t.replicas;
  }
  return own;
}

double gradient_norm(const Model& model, const SynchronisedGradient& gradient) {
  const TensorParallel& tp = model.sharding().llm;
  double own = tp.size > 1 ? tensor_parallel_share(model, gradient)
                           : sum_of_squares(synchronised_part(model, gradient));
  if (gradient.shards) own = gradient.shards->allreduce_sum(own);
  if (tp.size > 1) own = tp.comm->allreduce_sum(own);
  // Pipeline stages (the encoder's own too) hold disjoint tensors: their sum is the whole model's.
  const PipelineStage& stage = model.sharding().pipeline;
  return std::sqrt(stage.comm ? stage.comm->allreduce_sum(own) : own);
}

void check_finite_step(const Model& model, int step, double loss, double grad_norm,
                       const SynchronisedGradient& gradient) {
  const bool loss_ok = std::isfinite(loss), grad_ok = std::isfinite(grad_norm);
  if (loss_ok && grad_ok) return;
  std::string message = fmt::format("step {}: non-finite ", step);
  if (!loss_ok) message += fmt::format("loss ({})", loss);
  if (!grad_ok) {
    // The failure path only: a second pass finds the first non-finite element, then its tensor.
    const std::int64_t first = first_non_finite_gradient(model, gradient);
    message +=
        fmt::format("{}gradient: first non-finite gradient in {}", loss_ok ? "" : " and ",
                    first >= 0 ? tensor_of(model, first) : std::string("(none found on the second pass)"));
  }
  throw NonFiniteError(step, message);
}

}  // namespace minimllm
