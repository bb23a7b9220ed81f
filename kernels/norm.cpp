#include "minimllm/kernels/norm.hpp"

#include <stdexcept>
#include <string>

#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm {
namespace {

using kernels_detail::TeamMember;
using kernels_detail::TeamPolicy;

// Rows of a dweight partial sum; fixed so the summation order is independent of the thread count.
constexpr int kRowsPerChunk = 32;

void check_shapes(const t_mat_const& x, const t_vec_const& weight, const t_mat_const& other,
                  const char* what) {
  if (weight.extent(0) != x.extent(1) || other.extent(0) != x.extent(0) || other.extent(1) != x.extent(1))
    throw std::invalid_argument(std::string(what) + ": x, weight and outputs do not conform");
}

}  // namespace

void rmsnorm_forward(const t_mat_const& x, const t_vec_const& weight, const t_mat& y, const t_vec& rstd) {
  check_shapes(x, weight, y, "rmsnorm_forward");
  if (rstd.extent(0) != x.extent(0))
    throw std::invalid_argument("rmsnorm_forward: rstd needs one entry per row");
  const int cols = static_cast<int>(x.extent(1));
  const float eps = kRmsNormEps;
  Kokkos::parallel_for(
      "minimllm::rmsnorm::forward", kernels_detail::row_teams(static_cast<int>(x.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int row = team.league_rank();
        float sum_sq = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols), [&](int j, float& acc) { acc += x(row, j) * x(row, j); },
            sum_sq);
        const float row_rstd = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                             [&](int j) { y(row, j) = x(row, j) * row_rstd * weight(j); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(row) = row_rstd; });
      });
}

// With u = dy * weight and r = rstd(row): dx = r u - (r^3 / cols) sum(u x) x and dweight = sum over rows of
// dy x r. One team per row chunk adds dx and writes the chunk's dweight partial; a second pass sums the
// partials in chunk order.
void rmsnorm_backward(const t_mat_const& dy, const t_mat_const& x, const t_vec_const& weight,
                      const t_vec_const& rstd, const t_mat& dx, const t_vec& dweight) {
  check_shapes(x, weight, dy, "rmsnorm_backward");
  check_shapes(x, weight, dx, "rmsnorm_backward");
  if (rstd.extent(0) != x.extent(0) || dweight.extent(0) != x.extent(1))
    throw std::invalid_argument("rmsnorm_backward: rstd or dweight has the wrong length");
  const int rows = static_cast<int>(x.extent(0));
  const int cols = static_cast<int>(x.extent(1));
  const int chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  const WorkspaceScope scope;
  const t_mat partial = scratch_view<t_mat>("minimllm::rmsnorm_dweight_partial", chunks, cols);
  Kokkos::parallel_for(
      "minimllm::rmsnorm::backward", kernels_detail::row_teams(chunks),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int chunk = team.league_rank();
        const int row_begin = chunk * kRowsPerChunk;
        const int row_end = row_begin + kRowsPerChunk < rows ? row_begin + kRowsPerChunk : rows;
        for (int row = row_begin; row < row_end; ++row) {
          float dot = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, cols),
              [&](int j, float& acc) { acc += dy(row, j) * weight(j) * x(row, j); }, dot);
          team.team_barrier();  // the next row's reduction must not overwrite `dot` unread (kokkos#5475)
          const float r = rstd(row);
          const float x_coeff = r * r * r * dot / static_cast<float>(cols);
          // Each j stays with one thread across rows, so partial(chunk, j) needs no synchronisation.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
            dx(row, j) += r * dy(row, j) * weight(j) - x_coeff * x(row, j);
            const float dw = dy(row, j) * x(row, j) * r;
            partial(chunk, j) = row == row_begin ? dw : partial(chunk, j) + dw;
          });
        }
      });
  Kokkos::parallel_for(
      "minimllm::rmsnorm::backward_dweight", Kokkos::RangePolicy<ExecSpace>(0, cols), KOKKOS_LAMBDA(int j) {
        float total = 0.0f;
        for (int chunk = 0; chunk < chunks; ++chunk) total += partial(chunk, j);
        dweight(j) += total;
      });
}

}  // namespace minimllm
