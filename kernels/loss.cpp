#include "minimllm/kernels/loss.hpp"

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <utility>

#include "exp_vectorizable.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "team_policy.hpp"

namespace minimllm {
namespace {

using kernels_detail::kLanes;
using kernels_detail::TeamMember;
using kernels_detail::TeamPolicy;

// Elements per partial sum in sum(); fixed so the summation order is independent of the thread count.
constexpr int kSumChunk = 4096;

// Logits kept alive at once by the fused LM head (fp32 elements: 32 MiB), and the fewest rows per chunk.
constexpr std::int64_t kLogitsChunkFloats = std::int64_t(1) << 23;
constexpr int kMinChunkRows = 256;

// Host backends: one row per work item, three contiguous passes over it that the compiler vectorises
// (lane-wise max; exp_vectorizable and lane-wise sum; scale and subtract the one-hot).
void softmax_xent_host(const t_mat_const& logits, const t_ivec_const& targets, float grad_scale,
                       const t_vec& losses, const t_mat& dlogits) {
  const int rows = static_cast<int>(logits.extent(0)), cols = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "minimllm::loss::softmax_xent_forward_backward", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(const int row) {
        const float* x = &logits(row, 0);
        float* d = &dlogits(row, 0);  // may be x itself: every element is read before it is written
        const int target = targets(row);
        if (target < 0) {
          for (int j = 0; j < cols; ++j) d[j] = 0.0f;
          losses(row) = 0.0f;
          return;
        }
        const float target_logit = x[target];
        const int whole = cols - cols % kLanes;
        float lanes[kLanes];
        for (int l = 0; l < kLanes; ++l) lanes[l] = x[0];
        for (int j0 = 0; j0 < whole; j0 += kLanes)
          for (int l = 0; l < kLanes; ++l) lanes[l] = x[j0 + l] > lanes[l] ? x[j0 + l] : lanes[l];
        float row_max = lanes[0];
        for (int l = 1; l < kLanes; ++l) row_max = lanes[l] > row_max ? lanes[l] : row_max;
        for (int j = whole; j < cols; ++j) row_max = x[j] > row_max ? x[j] : row_max;
        // d holds exp(logit - max) between the passes, saving a second exp per element.
        for (int l = 0; l < kLanes; ++l) lanes[l] = 0.0f;
        for (int j0 = 0; j0 < whole; j0 += kLanes)
          for (int l = 0; l < kLanes; ++l) {
            const float e = kernels_detail::exp_vectorizable(x[j0 + l] - row_max);
            d[j0 + l] = e;
            lanes[l] += e;
          }
        float sum_exp = 0.0f;
        for (int l = 0; l < kLanes; ++l) sum_exp += lanes[l];
        for (int j = whole; j < cols; ++j) {
          const float e = kernels_detail::exp_vectorizable(x[j] - row_max);
          d[j] = e;
          sum_exp += e;
        }
        const float prob_scale = grad_scale / sum_exp;
        for (int j = 0; j < cols; ++j) d[j] = d[j] * prob_scale - (j == target ? grad_scale : 0.0f);
        losses(row) = row_max + logf(sum_exp) - target_logit;
      });
}

}  // namespace

void softmax_xent_forward_backward(const t_mat_const& logits, const t_ivec_const& targets, float grad_scale,
                                   const t_vec& losses, const t_mat& dlogits) {
  const std::size_t rows = logits.extent(0);
  if (targets.extent(0) != rows || losses.extent(0) != rows || dlogits.extent(0) != rows ||
      dlogits.extent(1) != logits.extent(1))
    throw std::invalid_argument(
        "softmax_xent_forward_backward: logits, targets, losses and dlogits do not conform");
  if (kernels_detail::kHostExec && logits.stride(1) == 1 && dlogits.stride(1) == 1) {
    softmax_xent_host(logits, targets, grad_scale, losses, dlogits);
    return;
  }
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

int lm_head_chunk_rows(int vocab) {
  if (vocab < 1) throw std::invalid_argument("lm_head_chunk_rows: vocab must be positive");
  return static_cast<int>(std::max<std::int64_t>(kMinChunkRows, kLogitsChunkFloats / vocab));
}

namespace {

// Turns one chunk's logits into their gradient in place and writes the chunk's rows' losses; rows: the
// chunk's rows of the pass.
using ChunkLoss = std::function<void(const t_mat& logits, std::pair<int, int> rows)>;

// The fused LM head's loop (lm_head_xent_forward_backward): per chunk of rows, logits = normed * lm_head,
// `loss` on them, then d_lm_head += normed^T dlogits and d_normed = dlogits lm_head^T.
void lm_head_in_chunks(const char* what, const t_mat_const& normed, const t_mat_const& lm_head,
                       const t_ivec_const& targets, const t_vec& losses, const t_mat& d_lm_head,
                       const t_mat& d_normed, GemmPrecision precision, int chunk_rows,
                       const ChunkLoss& loss) {
  const int rows = static_cast<int>(normed.extent(0)), vocab = static_cast<int>(lm_head.extent(1));
  if (lm_head.extent(0) != normed.extent(1) || d_normed.extent(0) != normed.extent(0) ||
      d_normed.extent(1) != normed.extent(1) || d_lm_head.extent(0) != lm_head.extent(0) ||
      d_lm_head.extent(1) != lm_head.extent(1) || targets.extent(0) != normed.extent(0) ||
      losses.extent(0) != normed.extent(0))
    throw std::invalid_argument(std::string(what) +
                                ": normed, lm_head, targets, losses and gradients do not conform");
  if (chunk_rows < 1) throw std::invalid_argument(std::string(what) + ": chunk_rows must be >= 1");
  if (rows == 0) return;
  // Equal chunks (no small remainder): ceil(rows / chunks) rows each.
  const int chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int per_chunk = (rows + chunks - 1) / chunks;
  const WorkspaceScope scope;
  const t_mat buffer = scratch_view<t_mat>("minimllm::lm_head_logits", std::min(per_chunk, rows), vocab);
  for (int first = 0; first < rows; first += per_chunk) {
    const std::pair<int, int> r(first, std::min(rows, first + per_chunk));
    const int n = r.second - r.first;
    const t_mat logits = Kokkos::subview(buffer, std::make_pair(0, n), Kokkos::ALL());
    const t_mat_const x = Kokkos::subview(normed, r, Kokkos::ALL());
    gemm(Trans::no, Trans::no, 1.0f, x, lm_head, 0.0f, logits, precision);
    loss(logits, r);  // logits become dlogits
    gemm(Trans::yes, Trans::no, 1.0f, x, logits, 1.0f, d_lm_head, precision);
    gemm(Trans::no, Trans::yes, 1.0f, logits, lm_head, 0.0f, Kokkos::subview(d_normed, r, Kokkos::ALL()),
         precision);
  }
}

}  // namespace

void lm_head_xent_forward_backward(const t_mat_const& normed, const t_mat_const& lm_head,
                                   const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                                   const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision,
                                   int chunk_rows) {
  lm_head_in_chunks("lm_head_xent_forward_backward", normed, lm_head, targets, losses, d_lm_head, d_normed,
                    precision, chunk_rows, [&](const t_mat& logits, std::pair<int, int> r) {
                      softmax_xent_forward_backward(logits, Kokkos::subview(targets, r), grad_scale,
                                                    Kokkos::subview(losses, r), logits);
                    });
}

void lm_head_xent_forward_backward(const t_mat_const& normed, const t_mat_const& lm_head,
                                   const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                                   const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision) {
  lm_head_xent_forward_backward(normed, lm_head, targets, grad_scale, losses, d_lm_head, d_normed, precision,
                                lm_head_chunk_rows(static_cast<int>(lm_head.extent(1))));
}

namespace {

// stats(r, :) = this slice's (max logit, sum of exp(logit - max), target logit or 0) of each row.
void slice_softmax_stats(const t_mat_const& logits, const t_ivec_const& targets, int first_col,
                         const t_mat& stats) {
  const int cols = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "minimllm::loss::slice_softmax_stats", kernels_detail::row_teams(static_cast<int>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int row = team.league_rank();
        float row_max = -FLT_MAX;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols),
            [&](int j, float& acc) { acc = logits(row, j) > acc ? logits(row, j) : acc; },
            Kokkos::Max<float>(row_max));
        team.team_barrier();  // kokkos#5475, as in softmax_xent_forward_backward
        float sum_exp = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols),
            [&](int j, float& acc) { acc += expf(logits(row, j) - row_max); }, sum_exp);
        const int target = targets(row) - first_col;
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          stats(row, 0) = row_max;
          stats(row, 1) = sum_exp;
          stats(row, 2) = target >= 0 && target < cols ? logits(row, target) : 0.0f;
        });
      });
}

// In place: logits become dlogits from the whole vocabulary's stats; losses from them too.
void slice_softmax_xent(const t_mat& logits, const t_ivec_const& targets, int first_col, float grad_scale,
                        const t_mat_const& stats, const t_vec& losses) {
  const int cols = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "minimllm::loss::slice_softmax_xent", kernels_detail::row_teams(static_cast<int>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const int row = team.league_rank();
        const bool counted = targets(row) >= 0;
        const int target = targets(row) - first_col;
        const float row_max = stats(row, 0), prob_scale = grad_scale / stats(row, 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) {
          logits(row, j) =
              counted ? expf(logits(row, j) - row_max) * prob_scale - (j == target ? grad_scale : 0.0f)
                      : 0.0f;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          losses(row) = counted ? row_max + logf(stats(row, 1)) - stats(row, 2) : 0.0f;
        });
      });
}

}  // namespace

void combine_softmax_stats(const t_mat_const& gathered, int slices, const t_mat& stats) {
  const int rows = static_cast<int>(stats.extent(0));
  if (gathered.extent(0) != static_cast<std::size_t>(slices) * rows || gathered.extent(1) != 3 ||
      stats.extent(1) != 3)
    throw std::invalid_argument("combine_softmax_stats: gathered and stats do not conform");
  Kokkos::parallel_for(
      "minimllm::loss::combine_softmax_stats", Kokkos::RangePolicy<ExecSpace>(0, rows),
      KOKKOS_LAMBDA(int row) {
        float row_max = gathered(row, 0);
        for (int s = 1; s < slices; ++s)
          row_max = gathered(s * rows + row, 0) > row_max ? gathered(s * rows + row, 0) : row_max;
        float sum_exp = 0.0f, target = 0.0f;
        for (int s = 0; s < slices; ++s) {
          sum_exp += gathered(s * rows + row, 1) * expf(gathered(s * rows + row, 0) - row_max);
          target += gathered(s * rows + row, 2);
        }
        stats(row, 0) = row_max, stats(row, 1) = sum_exp, stats(row, 2) = target;
      });
}

void lm_head_xent_vocab_slice(const t_mat_const& normed, const t_mat_const& lm_head, int first_col,
                              const t_ivec_const& targets, float grad_scale, const t_vec& losses,
                              const t_mat& d_lm_head, const t_mat& d_normed, GemmPrecision precision,
                              int chunk_rows, const SoftmaxStatsCombine& combine) {
  const WorkspaceScope scope;  // the stats outlive the chunk loop's own scope
  const int stats_rows = std::max(1, std::min(chunk_rows, static_cast<int>(normed.extent(0))));
  const t_mat stats_buffer = scratch_view<t_mat>("minimllm::lm_head_stats", stats_rows, 3);
  lm_head_in_chunks("lm_head_xent_vocab_slice", normed, lm_head, targets, losses, d_lm_head, d_normed,
                    precision, chunk_rows, [&](const t_mat& logits, std::pair<int, int> r) {
                      const t_ivec_const chunk_targets = Kokkos::subview(targets, r);
                      const t_mat stats =
                          Kokkos::subview(stats_buffer, std::make_pair(0, r.second - r.first), Kokkos::ALL());
                      slice_softmax_stats(logits, chunk_targets, first_col, stats);
                      combine(stats);
                      slice_softmax_xent(logits, chunk_targets, first_col, grad_scale, stats,
                                         Kokkos::subview(losses, r));
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
