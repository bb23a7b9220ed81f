#include "minimllm/kernels/optimizer.hpp"

#include <cfloat>
#include <cmath>
#include <stdexcept>

namespace minimllm {

namespace {

// Elements per work item on host backends: a contiguous span the compiler vectorises (one thread walks
// it with restrict pointers), large enough to amortise the scheduling, small enough to balance threads.
constexpr std::int64_t kAdamWBlock = 4096;

struct AdamWScalars {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_bias2;
};

// Same arithmetic order as torch.optim.AdamW: decay first, then the bias-corrected Adam step. decay is
// exactly 1.0f for undecayed elements, so p * decay == p there.
KOKKOS_INLINE_FUNCTION void adamw_span(float* __restrict__ p, const float* __restrict__ g,
                                       float* __restrict__ m, float* __restrict__ v, std::int64_t begin,
                                       std::int64_t end, float decay, const AdamWScalars& s) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float m_new = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    const float v_new = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    m[i] = m_new;
    v[i] = v_new;
    p[i] = p[i] * decay - s.step_size * m_new / (sqrtf(v_new) * s.inv_sqrt_bias2 + s.eps);
  }
}

}  // namespace

void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step, std::size_t decayed) {
  const std::size_t n = params.extent(0);
  if (grads.extent(0) != n || m.extent(0) != n || v.extent(0) != n)
    throw std::invalid_argument("adamw_update: params, grads, m and v differ in length");
  if (step < 1) throw std::invalid_argument("adamw_update: step counts from 1");
  if (decayed > n) throw std::invalid_argument("adamw_update: more decayed elements than parameters");
  // Raw pointers of contiguous MemSpace views: one fused pass over the four arrays.
  if (params.span() != n || grads.span() != n || m.span() != n || v.span() != n)
    throw std::invalid_argument("adamw_update: params, grads, m and v must be contiguous");
  AdamWScalars s;
  s.beta1 = hyper.beta1;
  s.beta2 = hyper.beta2;
  s.eps = hyper.eps;
  s.decay = 1.0f - hyper.lr * hyper.weight_decay;
  s.step_size = hyper.lr / static_cast<float>(1.0 - std::pow(double(hyper.beta1), step));
  s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double(hyper.beta2), step)));
  float* const p = params.data();
  const float* const g = grads.data();
  float* const mp = m.data();
  float* const vp = v.data();
  const std::int64_t total = static_cast<std::int64_t>(n), nd = static_cast<std::int64_t>(decayed);
  if (kMemSpaceIsHostAccessible) {
    // Host: one block of contiguous elements per work item; the block is split at the decay boundary.
    Kokkos::parallel_for(
        "minimllm::optimizer::adamw_update",
        Kokkos::RangePolicy<ExecSpace>(0, (total + kAdamWBlock - 1) / kAdamWBlock), KOKKOS_LAMBDA(int64_t b) {
          const std::int64_t begin = b * kAdamWBlock;
          const std::int64_t end = begin + kAdamWBlock < total ? begin + kAdamWBlock : total;
          const std::int64_t split = nd < begin ? begin : (nd > end ? end : nd);
          adamw_span(p, g, mp, vp, begin, split, s.decay, s);
          adamw_span(p, g, mp, vp, split, end, 1.0f, s);
        });
  } else {
    // GPU: one element per thread (coalesced).
    Kokkos::parallel_for(
        "minimllm::optimizer::adamw_update", Kokkos::RangePolicy<ExecSpace>(0, total),
        KOKKOS_LAMBDA(int64_t i) { adamw_span(p, g, mp, vp, i, i + 1, i < nd ? s.decay : 1.0f, s); });
  }
}

void adamw_update(const t_vec& params, const t_vec_const& grads, const t_vec& m, const t_vec& v,
                  const AdamWHyper& hyper, int step) {
  adamw_update(params, grads, m, v, hyper, step, params.extent(0));
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
