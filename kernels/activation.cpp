#include "minimllm/kernels/activation.hpp"

#include <stdexcept>
#include <string>

namespace minimllm {
namespace {

void check_same_shape(const t_mat_const& a, const t_mat_const& b, const char* what) {
  if (a.extent(0) != b.extent(0) || a.extent(1) != b.extent(1))
    throw std::invalid_argument(std::string(what) + ": operands differ in shape");
}

template <class Body>
void for_each_element(const char* name, const t_mat_const& shape, const Body& body) {
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
  Kokkos::parallel_for(
      name, Policy({0, 0}, {static_cast<int64_t>(shape.extent(0)), static_cast<int64_t>(shape.extent(1))}),
      body);
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
KOKKOS_INLINE_FUNCTION float gelu_tanh_arg(float x) { return 0.7978845608f * (x + 0.044715f * x * x * x); }

}  // namespace

void gelu_forward(const t_mat_const& x, const t_mat& y) {
  check_same_shape(x, y, "gelu_forward");
  for_each_element(
      "minimllm::activation::gelu_forward", x, KOKKOS_LAMBDA(int r, int c) {
        const float v = x(r, c);
        y(r, c) = 0.5f * v * (1.0f + tanhf(gelu_tanh_arg(v)));
      });
}

void gelu_backward(const t_mat_const& dy, const t_mat_const& x, const t_mat& dx) {
  check_same_shape(x, dy, "gelu_backward");
  check_same_shape(x, dx, "gelu_backward");
  for_each_element(
      "minimllm::activation::gelu_backward", x, KOKKOS_LAMBDA(int r, int c) {
        const float v = x(r, c);
        const float t = tanhf(gelu_tanh_arg(v));
        const float du_dx = 0.7978845608f * (1.0f + 3.0f * 0.044715f * v * v);
        dx(r, c) = dy(r, c) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dx);
      });
}

void add_inplace(const t_mat& y, const t_mat_const& x) {
  check_same_shape(y, x, "add_inplace");
  for_each_element(
      "minimllm::activation::add_inplace", x, KOKKOS_LAMBDA(int r, int c) { y(r, c) += x(r, c); });
}

void scale_inplace(const t_vec& v, float factor) {
  Kokkos::parallel_for(
      "minimllm::activation::scale_inplace",
      Kokkos::RangePolicy<ExecSpace>(0, static_cast<int64_t>(v.extent(0))),
      KOKKOS_LAMBDA(int64_t i) { v(i) *= factor; });
}

}  // namespace minimllm
