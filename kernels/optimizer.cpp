#include "minimllm/kernels/optimizer.hpp"

#include <cfloat>
#include <cmath>
#include <stdexcept>

namespace minimllm {

// Same arithmetic order as torch.optim.AdamW: decay first, then the bias-corrected Adam step.
void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step) {
  const std::size_t n = params.extent(0);
  if (grads.extent(0) != n || m.extent(0) != n || v.extent(0) != n)
    throw std::invalid_argument("adamw_update: params, grads, m and v differ in length");
  if (step < 1) throw std::invalid_argument("adamw_update: step counts from 1");
  const float beta1 = hyper.beta1;
  const float beta2 = hyper.beta2;
  const float eps = hyper.eps;
  const float decay = 1.0f - hyper.lr * hyper.weight_decay;
  const float step_size = hyper.lr / static_cast<float>(1.0 - std::pow(double(beta1), step));
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double(beta2), step)));
  Kokkos::parallel_for(
      "minimllm::optimizer::adamw_update", Kokkos::RangePolicy<ExecSpace>(0, static_cast<int64_t>(n)),
      KOKKOS_LAMBDA(int64_t i) {
        const float g = grads(i);
        const float m_new = beta1 * m(i) + (1.0f - beta1) * g;
        const float v_new = beta2 * v(i) + (1.0f - beta2) * g * g;
        m(i) = m_new;
        v(i) = v_new;
        params(i) = params(i) * decay - step_size * m_new / (sqrtf(v_new) * inv_sqrt_bias2 + eps);
      });
}

double sum_of_squares(const t_vec_const& x) {
  // Blocks of 64 elements, each summed in 8 independent lanes: a plain running sum is one dependent
  // chain of additions (about 1 ms per million parameters on a host core); lanes vectorise.
  constexpr std::int64_t kBlock = 64, kLanes = 8;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  double sum = 0.0;
  Kokkos::parallel_reduce(
      "minimllm::optimizer::sum_of_squares", Kokkos::RangePolicy<ExecSpace>(0, (n + kBlock - 1) / kBlock),
      KOKKOS_LAMBDA(std::int64_t b, double& s) {
        const std::int64_t begin = b * kBlock, end = begin + kBlock < n ? begin + kBlock : n;
        double lane[kLanes] = {};
        std::int64_t i = begin;
        for (; i + kLanes <= end; i += kLanes)
          for (std::int64_t l = 0; l < kLanes; ++l) {
            const double v = x(i + l);
            lane[l] += v * v;
          }
        for (; i < end; ++i) {
          const double v = x(i);
          lane[0] += v * v;
        }
        double block = 0.0;
        for (std::int64_t l = 0; l < kLanes; ++l) block += lane[l];
        s += block;
      },
      sum);
  return sum;
}

std::int64_t first_non_finite(const t_vec_const& x) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  std::int64_t first = n;
  Kokkos::parallel_reduce(
      "minimllm::optimizer::first_non_finite", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(int64_t i, std::int64_t & f) {
        const float v = x(i);
        // False for NaN (every comparison is) and for +-inf; no std::isfinite in device code.
        const bool finite = v <= FLT_MAX && v >= -FLT_MAX;
        if (!finite && i < f) f = i;
      },
      Kokkos::Min<std::int64_t>(first));
  return first < n ? first : -1;
}

}  // namespace minimllm
