// FlexSP's MILP (internal; Wang et al., ASPLOS'25, section 4): the batch's samples, bucketed by length,
// are dealt to slots — candidate sequence-parallel groups of power-of-two sizes — so that the slowest
// slot finishes first, within the ranks and the memory of each group:
//
//   minimise M
//   sum_p A[k][p] = n_k                                   every sample of bucket k placed
//   T_p = sum_k tau_k(d_p) A[k][p] <= M                   every used slot's LLM time
//   T_p <= U m_p                                          a slot holds samples only when used (m_p binary)
//   sum_k len_k A[k][p] <= K cap(d_p) m_p                 memory: K micro-batches of what d_p ranks hold
//   sum_p d_p m_p <= N                                    ranks
//   sum_p d_p T_p <= N M                                  (valid: no rank is busy longer than M)
//   m_p >= m_p+1, T_p >= T_p+1 within a size              (symmetry: slots of one size are alike)
//
// A[k][p] integer >= 0 exists only where bucket k's longest sample fits cap(d_p). tau_k(d) is the mean
// LLM time of bucket k's samples on d ranks (CostModel::llm_time_spanning, spanning nodes iff
// d > ranks_per_node), so a bucket's total is exact when its samples share a slot; len_k is its longest
// sample. Slots of size d: at most N / d and at most the samples that fit d. U and K come from the
// heuristic's layout (best_target_layout with power-of-two sizes), which is also the solver's starting
// incumbent: its slowest slot's bucketed time and its largest micro-batch count, so the start is feasible
// and the MILP never needs more micro-batches than the heuristic. cap(d) = token_capacity(d), at most
// d x tokens_per_rank when that budget is set.
// Buckets: FlexSP's bucketing DP (bucket_ends) over the samples' one-rank LLM times.
// The solution is turned back into samples: slots become groups (place_groups), each bucket's samples,
// longest first, go to the least-loaded of the slots that still have room for that bucket.
#pragma once

#include <vector>

#include "milp.hpp"
#include "target_search.hpp"

namespace minimllm::planning {

struct FlexspMilpOptions {
  double time_limit = 0.1;       // seconds of wall time for the solver
  int buckets = 16;              // length buckets at least (more while the column budget allows)
  double tokens_per_rank = 0.0;  // per-rank token budget of a slot's memory (0: the memory model only)
};

struct FlexspMilpResult {
  MilpStatus status = MilpStatus::unavailable;
  double gap = -1.0;          // relative optimality gap of the bucketed problem; -1: none
  double seconds = 0.0;       // building and solving the model
  double objective = 0.0;     // the solver's bucketed makespan (0: no solution)
  double bound = 0.0;         // its lower bound
  int columns = 0, rows = 0;  // the model's size
  bool better = false;        // the MILP's layout predicts a faster LLM phase than the heuristic's
  LayoutChoice choice;        // the MILP's layout (when a solution exists)
};

// Models larger than this many columns per second of time limit are not attempted (status too_large): on
// the development machine (docs/PERFORMANCE.md) CBC's root LP of this model takes ~0.08 s at 2,160 columns
// (64 ranks, 16 buckets), 0.43 s at 8,688 (256 ranks) and 4-6 s at 34,800 (1,024 ranks).
inline constexpr double kMilpColumnsPerSecond = 12000.0;

// Each bucket's end in `sorted_values` (ascending), at most `buckets` of them: FlexSP's bucketing DP,
// contiguous ranges minimising the padding sum (largest of the bucket - value), O(buckets x distinct
// values x log) by divide and conquer. Every distinct value is its own bucket when there are at most
// `buckets` of them. flexsp buckets by one-rank LLM time, so the long samples get the narrow buckets.
std::vector<int> bucket_ends(const std::vector<double>& sorted_values, int buckets);

FlexspMilpResult solve_flexsp_milp(const BatchCosts& costs, const CostModel& cost, int ranks,
                                   const LayoutChoice& heuristic, const FlexspMilpOptions& options);

}  // namespace minimllm::planning
