// Token embedding and row routing (splicing image embeddings into packed sequences).
#pragma once

#include "minimllm/core/types.hpp"

namespace minimllm {

// out(rows(i), :) = table(ids(i), :)
void embedding_forward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& table,
                       const t_mat& out);
// dtable(ids(i), :) += dout(rows(i), :). Deterministic (no atomics): independent of thread count.
void embedding_backward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& dout,
                        const t_mat& dtable);

// Vocabulary-parallel: `table` holds ids [first_id, first_id + table rows) of the vocabulary (this rank's
// slice). out(rows(i), :) = table(ids(i) - first_id, :) for an id in the slice, 0 for any other (the
// tensor-parallel group's sum then holds every row's embedding); dtable accumulates the slice's ids only.
void embedding_slice_forward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& table,
                             int first_id, const t_mat& out);
void embedding_slice_backward(const t_ivec_const& ids, const t_ivec_const& rows, const t_mat_const& dout,
                              int first_id, const t_mat& dtable);

// dst(dst_rows(i), :) = src(src_rows(i), :) for every i; rows of dst named at most once.
void copy_rows(const t_mat_strided_const& src, const t_ivec_const& src_rows, const t_mat_strided& dst,
               const t_ivec_const& dst_rows);

// Heads sharded over `members` (DeepSpeed-Ulysses' layout change; parallel/ulysses_attention.hpp).
// local [rows, parts x members x shard] holds `parts` column blocks (Q | K | V, or one), each of `members`
// head shards of `shard` columns; by_member [members x rows, parts x shard] holds, in its row block j, shard
// j of every part. split_heads writes by_member from local, join_heads the inverse.
void split_heads(const t_mat_strided_const& local, int parts, int members, const t_mat_strided& by_member);
void join_heads(const t_mat_strided_const& by_member, int parts, int members, const t_mat_strided& local);

}  // namespace minimllm
