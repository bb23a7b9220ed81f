// Samples to LLM groups (internal): the per-sample costs every planner needs, earliest-finish-time list
// scheduling (LPT over groups of different sizes), the local search that refines it, and the LLM phase's
// lower bound.
#pragma once

#include <vector>

#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// One LLM group as a range of consecutive ranks.
struct RankRange {
  int first = 0, size = 1;
};

// Per-sample quantities every planner needs, computed once per batch.
struct BatchCosts {
  std::vector<double> tokens;  // fused LLM sequence length
  int max_tokens = 0;
  std::vector<double> llm;      // LLM compute on one rank (the key planners sort by)
  std::vector<double> encoder;  // encoder time (the sum over its items)
  std::vector<int> by_llm;      // samples by decreasing LLM cost (= decreasing tokens)
  double total_llm = 0.0;
};
BatchCosts batch_costs(const GlobalBatch& batch, const CostModel& cost);

// Lower bound of the LLM phase on `ranks` ranks: max(total one-rank compute / ranks, the largest
// sample's best time on any group of at most `ranks` ranks; memory ignored, so it bounds every plan).
double llm_lower_bound(double total_llm, double largest_tokens, const CostModel& cost, int ranks);

// Earliest-finish-time list scheduling (LPT generalised to groups of different sizes): samples in the
// given order (largest first) each go to the group where they would finish first among the groups that
// can hold them (memory; if none can, the one that holds the most). Groups of equal size and node span
// are interchangeable, so each such class keeps a LoadTree and only its least-loaded member is a
// candidate: O(samples x classes x log groups). `samples` and `loads` (per group, predicted LLM time)
// come in with whatever is already pinned and go out with the new samples appended. Returns how many
// samples went to a group too small to hold them.
int assign_samples(const BatchCosts& costs, const std::vector<int>& order,
                   const std::vector<RankRange>& groups, const CostModel& cost,
                   std::vector<std::vector<int>>& samples, std::vector<double>& loads);

// Local search after assign_samples: while a movable sample (movable[sample] != 0) of the slowest group
// can move to the least-loaded group of some class (that can hold it), or swap with a shorter movable
// sample of that group, so that both finish before the current slowest, the best such step is taken. At
// most max_moves steps, each O(samples of the two groups x classes + log groups). Returns the steps.
int refine_assignment(const BatchCosts& costs, const std::vector<RankRange>& groups, const CostModel& cost,
                      const std::vector<char>& movable, std::vector<std::vector<int>>& samples,
                      std::vector<double>& loads, int max_moves);

}  // namespace minimllm::planning
