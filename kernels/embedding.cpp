#include "minimllm/kernels/embedding.hpp"

#include <stdexcept>

namespace minimllm {
namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;

// embedding_backward gives each team this many features and walks all tokens in order, so repeated ids
// accumulate in a fixed order without atomics.
constexpr int kFeaturesPerTeam = 64;

}  // namespace

void embedding_forward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& table,
                       const t_mat& out) {
  copy_rows(table, ids, out, rows);
}

void embedding_backward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& dout,
                        const t_mat& dtable) {
  embedding_slice_backward(ids, rows, dout, 0, dtable);
}

void embedding_slice_forward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& table,
                             int first_id, const t_mat& out) {
  if (ids.extent(0) != rows.extent(0) || table.extent(1) != out.extent(1))
    throw std::invalid_argument("embedding_slice_forward: ids, rows, table and out do not conform");
  const int cols = static_cast<int>(out.extent(1)), slice = static_cast<int>(table.extent(0));
  Kokkos::parallel_for(
      "minimllm::embedding::slice_forward", TeamPolicy(static_cast<int>(ids.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int id = ids(team.league_rank()) - first_id, row = rows(team.league_rank());
        const bool here = id >= 0 && id < slice;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                             [&](int j) { out(row, j) = here ? table(id, j) : 0.0f; });
      });
}

void embedding_slice_backward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& dout,
                              int first_id, const t_mat& dtable) {
  if (ids.extent(0) != rows.extent(0) || dout.extent(1) != dtable.extent(1))
    throw std::invalid_argument("embedding_backward: ids, rows, dout and dtable do not conform");
  const int tokens = static_cast<int>(ids.extent(0));
  const int cols = static_cast<int>(dtable.extent(1)), slice = static_cast<int>(dtable.extent(0));
  const int blocks = (cols + kFeaturesPerTeam - 1) / kFeaturesPerTeam;
  Kokkos::parallel_for(
      "minimllm::embedding::backward", TeamPolicy(blocks, Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int col_begin = team.league_rank() * kFeaturesPerTeam;
        const int col_end = col_begin + kFeaturesPerTeam < cols ? col_begin + kFeaturesPerTeam : cols;
        // A column stays with one thread across tokens, so no two threads touch the same element.
        for (int i = 0; i < tokens; ++i) {
          const int id = ids(i) - first_id;
          if (id < 0 || id >= slice) continue;
          const int row = rows(i);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, col_begin, col_end),
                               [&](int j) { dtable(id, j) += dout(row, j); });
        }
      });
}

void copy_rows(const t_mat_const& src, const t_ivec_const& src_rows, const t_mat& dst,
               const t_ivec_const& dst_rows) {
  if (src_rows.extent(0) != dst_rows.extent(0) || src.extent(1) != dst.extent(1))
    throw std::invalid_argument("copy_rows: src, dst and row lists do not conform");
  const int cols = static_cast<int>(dst.extent(1));
  Kokkos::parallel_for(
      "minimllm::embedding::copy_rows", TeamPolicy(static_cast<int>(src_rows.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int from = src_rows(team.league_rank());
        const int to = dst_rows(team.league_rank());
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) { dst(to, j) = src(from, j); });
      });
}

}  // namespace minimllm
