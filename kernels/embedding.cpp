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

void copy_rows(const t_mat_strided_const& src, const t_ivec_const& src_rows, const t_mat_strided& dst,
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

namespace {

// The column of `local` that row block j, column c of by_member holds (embedding.hpp, split_heads).
struct HeadShards {
  int parts, members, shard;
  KOKKOS_INLINE_FUNCTION int local_column(int member, int c) const {
    return (c / shard) * members * shard + member * shard + c % shard;
  }
};

HeadShards head_shards(int local_rows, int local_cols, int parts, int members, int by_member_rows,
                       int by_member_cols) {
  if (parts < 1 || members < 1 || local_cols % (parts * members) != 0 ||
      by_member_cols * members != local_cols || by_member_rows != members * local_rows)
    throw std::invalid_argument("split_heads/join_heads: shapes do not conform");
  return {parts, members, local_cols / (parts * members)};
}

}  // namespace

namespace {

// by_member(i, c) <-> local(i % rows, its column), in the direction asked.
void move_head_shards(const char* label, const t_mat_strided_const& from, const t_mat_strided& to, int parts,
                      int members, bool to_members) {
  const t_mat_strided_const local = to_members ? from : t_mat_strided_const(to);
  const int rows = static_cast<int>(local.extent(0));
  const int cols = static_cast<int>((to_members ? to : from).extent(1));
  const int by_member_rows = static_cast<int>((to_members ? to : from).extent(0));
  const HeadShards h =
      head_shards(rows, static_cast<int>(local.extent(1)), parts, members, by_member_rows, cols);
  Kokkos::parallel_for(
      label, Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {members * rows, cols}),
      KOKKOS_LAMBDA(int i, int c) {
        const int r = i % rows, column = h.local_column(i / rows, c);
        if (to_members)
          to(i, c) = from(r, column);
        else
          to(r, column) = from(i, c);
      });
}

}  // namespace

void split_heads(const t_mat_strided_const& local, int parts, int members, const t_mat_strided& by_member) {
  move_head_shards("minimllm::embedding::split_heads", local, by_member, parts, members, true);
}

void join_heads(const t_mat_strided_const& by_member, int parts, int members, const t_mat_strided& local) {
  move_head_shards("minimllm::embedding::join_heads", by_member, local, parts, members, false);
}

}  // namespace minimllm
