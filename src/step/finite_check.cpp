#include "minimllm/step/finite_check.hpp"

#include <fmt/format.h>

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

double gradient_norm(const Model& model, const SynchronisedGradient& gradient) {
  const double own = sum_of_squares(synchronised_part(model, gradient));
  return std::sqrt(gradient.shards ? gradient.shards->allreduce_sum(own) : own);
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
