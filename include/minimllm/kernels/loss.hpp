// Softmax cross-entropy fused with its gradient (the LM head's logits are the largest activation).
#pragma once

#include <functional>

#include "minimllm/core/types.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

// For each row r with targets(r) >= 0: losses(r) = logsumexp(logits(r,:)) - logits(r, targets(r)),
// dlogits(r,:) = (softmax(logits(r,:)) - onehot(targets(r))) * grad_scale.
// Rows with targets(r) < 0 carry no loss: losses(r) = 0 and dlogits(r,:) = 0.
// dlogits may be the same view as logits (computed in place).
void softmax_xent_forward_backward(const t_mat_const& logits, const t_ivec_const& targets, float grad_scale,
                                   const t_vec& losses, const t_mat& dlogits);

// Rows of logits the LM head keeps alive at once for a vocabulary of `vocab`: about 32 MiB of fp32
// logits, at least 256 rows (so the chunk's GEMMs stay efficient). Depends on vocab only, so a row's
// results never depend on how many rows a rank holds.
int lm_head_chunk_rows(int vocab);

// The LM head fused with the loss, in chunks of at most chunk_rows rows: for each chunk, logits =
// normed * lm_head ([chunk, vocab], workspace scratch), softmax_xent_forward_backward in place, then
// d_lm_head += normed^T dlogits and d_normed = dlogits lm_head^T. Only one chunk's logits exist at a time
// (never [rows, vocab]); each row's loss and d_normed are those of the unchunked computation bit for
// bit, d_lm_head's sum over rows is split at chunk boundaries (float reassociation only).
// normed [rows, width], lm_head [width, vocab], targets and losses [rows], d_normed [rows, width]
// (overwritten), d_lm_head [width, vocab] (accumulated).
void lm_head_xent_forward_backward(const t_mat_const& normed, const t_mat_const& lm_head,
                                   const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                                   const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision,
                                   int chunk_rows);
// The same with lm_head_chunk_rows(vocab).
void lm_head_xent_forward_backward(const t_mat_const& normed, const t_mat_const& lm_head,
                                   const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                                   const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision);

// Vocabulary-parallel (Megatron-LM's cross-entropy over a tensor-parallel group): this rank's lm_head holds
// columns [first_col, first_col + lm_head cols) of the vocabulary. Per chunk of rows, after the slice's
// logits, `combine` must replace each row's partial statistics of this slice, stats(r, :) = (max logit,
// sum of exp(logit - that max), the target's logit or 0 where the target is not in the slice), by the
// whole vocabulary's (an all-gather over the group and combine_softmax_stats); then the loss and dlogits
// follow as softmax_xent_forward_backward's, and d_lm_head accumulates this slice's columns. d_normed
// (overwritten) is this slice's part of the gradient: the group's sum is the whole one.
using SoftmaxStatsCombine = std::function<void(const t_mat& stats)>;
void lm_head_xent_vocab_slice(const t_mat_const& normed, const t_mat_const& lm_head, int first_col,
                              const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                              const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision,
                              int chunk_rows, const SoftmaxStatsCombine& combine);
// stats [rows, 3] = the whole vocabulary's statistics from `slices` slices' [slices x rows, 3] (slice-major,
// as an all-gather lays them out): the largest max, the sums rescaled to it and added, the target logits
// added.
void combine_softmax_stats(const t_mat_const& gathered, int slices, const t_mat& stats);

// Sum of a vector (deterministic).
double sum(const t_vec_const& v);

}  // namespace minimllm
