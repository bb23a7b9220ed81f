#include "minimllm/kernels/activation.hpp"

#include <stdexcept>
#include <string>

#include "exp_vectorizable.hpp"
#include "team_policy.hpp"

namespace minimllm {
namespace {

using kernels_detail::kLanes;

void check_same_shape(const t_mat_const& a, const t_mat_const& b, const char* what) {
  if (a.extent(0) != b.extent(0) || a.extent(1) != b.extent(1))
    throw std::invalid_argument(std::string(what) + ": operands differ in shape");
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written with 1 + tanh(u) =
// 2 sigmoid(2u): no cancellation near u = 0, and an exp the compiler vectorises (libm's tanhf is a scalar
// call, which made GELU a sixth of a host training step).
KOKKOS_INLINE_FUNCTION float gelu_tanh_arg(float x) { return 0.7978845608f * (x + 0.044715f * x * x * x); }
KOKKOS_INLINE_FUNCTION float sigmoid_of_twice(float u) {
  return 1.0f / (1.0f + kernels_detail::exp_vectorizable(-2.0f * u));
}
KOKKOS_INLINE_FUNCTION float gelu_value(float x) { return x * sigmoid_of_twice(gelu_tanh_arg(x)); }
// d gelu / dx = s + 2 x s (1 - s) du/dx with s = sigmoid(2u) (from 1 - tanh(u)^2 = 4 s (1 - s)).
KOKKOS_INLINE_FUNCTION float gelu_slope(float x) {
  const float s = sigmoid_of_twice(gelu_tanh_arg(x));
  const float du_dx = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

// out(r, c) = op(a(r, c), b(r, c)) for every element; out may alias a or b. Host: a row per work item, in
// blocks of kLanes computed into registers before they are stored (so aliasing cannot stop the compiler
// vectorising); device: an element per thread.
template <class Op>
void map_elements(const char* name, const t_mat_const& a, const t_mat_const& b, const t_mat& out,
                  const Op& op) {
  const int rows = static_cast<int>(out.extent(0)), cols = static_cast<int>(out.extent(1));
  if (kernels_detail::kHostExec) {
    Kokkos::parallel_for(
        name, Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const int r) {
          const float* pa = &a(r, 0);
          const float* pb = &b(r, 0);
          float* po = &out(r, 0);
          int c0 = 0;
          for (; c0 + kLanes <= cols; c0 += kLanes) {
            float block[kLanes];
            for (int l = 0; l < kLanes; ++l) block[l] = op(pa[c0 + l], pb[c0 + l]);
            for (int l = 0; l < kLanes; ++l) po[c0 + l] = block[l];
          }
          for (; c0 < cols; ++c0) po[c0] = op(pa[c0], pb[c0]);
        });
    return;
  }
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
  Kokkos::parallel_for(
      name, Policy({0, 0}, {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}),
      KOKKOS_LAMBDA(int r, int c) { out(r, c) = op(a(r, c), b(r, c)); });
}

// Stateless element-wise operations (functors rather than lambdas so that host and device share them).
struct GeluForward {
  KOKKOS_INLINE_FUNCTION float operator()(float x, float) const { return gelu_value(x); }
};
struct GeluBackward {
  KOKKOS_INLINE_FUNCTION float operator()(float x, float dy) const { return dy * gelu_slope(x); }
};
struct Sum {
  KOKKOS_INLINE_FUNCTION float operator()(float y, float x) const { return y + x; }
};

}  // namespace

void gelu_forward(const t_mat_const& x, const t_mat& y) {
  check_same_shape(x, y, "gelu_forward");
  map_elements("minimllm::activation::gelu_forward", x, x, y, GeluForward{});
}

void gelu_backward(const t_mat_const& dy, const t_mat_const& x, const t_mat& dx) {
  check_same_shape(x, dy, "gelu_backward");
  check_same_shape(x, dx, "gelu_backward");
  map_elements("minimllm::activation::gelu_backward", x, dy, dx, GeluBackward{});
}

void add_inplace(const t_mat& y, const t_mat_const& x) {
  check_same_shape(y, x, "add_inplace");
  map_elements("minimllm::activation::add_inplace", y, x, y, Sum{});
}

void scale_inplace(const t_vec& v, float factor) {
  Kokkos::parallel_for(
      "minimllm::activation::scale_inplace",
      Kokkos::RangePolicy<ExecSpace>(0, static_cast<int64_t>(v.extent(0))),
      KOKKOS_LAMBDA(int64_t i) { v(i) *= factor; });
}

}  // namespace minimllm
