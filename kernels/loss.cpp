#include "minimllm/kernels/loss.hpp"

#include <stdexcept>

#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm {
namespace {

using kernels_detail::TeamMember;
using kernels_detail::TeamPolicy;

// Elements per partial sum in sum(); fixed so the summation order is independent of the thread count.
constexpr int kSumChunk = 4096;

}  // namespace

void softmax_xent_forward_backward(const t_mat_const& logits, const t_ivec_const& targets, float grad_scale,
                                   const t_vec& losses, const t_mat& dlogits) {
  const std::size_t rows = logits.extent(0);
  if (targets.extent(0) != rows || losses.extent(0) != rows || dlogits.extent(0) != rows ||
      dlogits.extent(1) != logits.extent(1))
    throw std::invalid_argument(
        "softmax_xent_forward_backward: logits, targets, losses and dlogits do not conform");
  const int cols = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "minimllm::loss::softmax_xent_forward_backward", kernels_detail::row_teams(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int row = team.league_rank();
        const int target = targets(row);
        if (target < 0) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) { dlogits(row, j) = 0.0f; });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(row) = 0.0f; });
          return;
        }
        // Read before any thread overwrites it when dlogits aliases logits.
        const float target_logit = logits(row, target);
        float row_max = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols),
            [&](int j, float& acc) { acc = logits(row, j) > acc ? logits(row, j) : acc; },
            Kokkos::Max<float>(row_max));
        // Kokkos < 3.7 on CUDA: back-to-back team reductions share a scratch word without a barrier
        // (kokkos#5475), so a fast warp could overwrite row_max before a slow one has read it.
        team.team_barrier();
        // dlogits holds exp(logit - max) between the two passes, saving a second exp per element.
        float sum_exp = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols),
            [&](int j, float& acc) {
              const float e = expf(logits(row, j) - row_max);
              dlogits(row, j) = e;
              acc += e;
            },
            sum_exp);
        const float prob_scale = grad_scale / sum_exp;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          dlogits(row, j) = dlogits(row, j) * prob_scale - (j == target ? grad_scale : 0.0f);
        });
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { losses(row) = row_max + logf(sum_exp) - target_logit; });
      });
}

double sum(const t_vec_const& v) {
  const int n = static_cast<int>(v.extent(0));
  const int chunks = (n + kSumChunk - 1) / kSumChunk;
  using Doubles = Kokkos::View<double*, MemSpace>;
  const WorkspaceScope scope;
  const Doubles partial = scratch_view<Doubles>("minimllm::sum_partial", chunks);
  Kokkos::parallel_for(
      "minimllm::loss::sum_chunks", Kokkos::RangePolicy<ExecSpace>(0, chunks), KOKKOS_LAMBDA(int chunk) {
        const int end = (chunk + 1) * kSumChunk < n ? (chunk + 1) * kSumChunk : n;
        double acc = 0.0;
        for (int i = chunk * kSumChunk; i < end; ++i) acc += v(i);
        partial(chunk) = acc;
      });
  // The partial sums are added in order on the device too, so only the result comes back: one 8-byte
  // device -> host copy (the documented per-micro-batch scalar of StepOutcome::transfers).
  const Doubles total = scratch_view<Doubles>("minimllm::sum_total", 1);
  Kokkos::parallel_for(
      "minimllm::loss::sum_total", Kokkos::RangePolicy<ExecSpace>(0, 1), KOKKOS_LAMBDA(int) {
        double acc = 0.0;
        for (int chunk = 0; chunk < chunks; ++chunk) acc += partial(chunk);
        total(0) = acc;
      });
  Kokkos::fence();
  return copy_to_host(total)(0);
}

}  // namespace minimllm
