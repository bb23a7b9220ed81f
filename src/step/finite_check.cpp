#include "minimllm/step/finite_check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

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

}  // namespace

double gradient_norm(const Model& model) { return std::sqrt(sum_of_squares(model.grads())); }

void check_finite_step(const Model& model, int step, double loss, double grad_norm) {
  const bool loss_ok = std::isfinite(loss), grad_ok = std::isfinite(grad_norm);
  if (loss_ok && grad_ok) return;
  std::string message = fmt::format("step {}: non-finite ", step);
  if (!loss_ok) message += fmt::format("loss ({})", loss);
  if (!grad_ok) {
    // The failure path only: a second pass finds the first non-finite element, then its tensor.
    const std::int64_t first = first_non_finite(model.grads());
    message +=
        fmt::format("{}gradient: first non-finite gradient in {}", loss_ok ? "" : " and ",
                    first >= 0 ? tensor_of(model, first) : std::string("(none found on the second pass)"));
  }
  throw NonFiniteError(step, message);
}

}  // namespace minimllm
