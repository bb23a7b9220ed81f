// The LLM time of a run of samples on one group, as the target-driven planners size groups (internal):
// DHP's and FlexSP's searches (target_search.hpp) and DHP's packs (dhp_packing.hpp).
#pragma once

#include <vector>

#include "minimllm/plan/cost_model.hpp"

namespace minimllm::planning {

// Time of samples with summed one-rank compute `work`, tokens and count on one group of g ranks that
// spans nodes iff g > ranks_per_node: work / g + their context-parallel collectives (llm_comm is linear in
// tokens for a fixed group: a latency per sample and a bandwidth term per token), tabulated per g for
// g <= ranks (larger groups are computed on the fly).
class GroupTimes {
 public:
  GroupTimes(const CostModel& cost, int ranks);
  double operator()(double work, double tokens, double count, int g) const;
  int ranks_per_node() const { return cost_->ranks_per_node; }

 private:
  const CostModel* cost_;
  std::vector<double> latency_, per_token_;
};

// The same for one group, without a table.
double group_time(const CostModel& cost, double work, double tokens, double count, int g);

// Smallest g in [min_g, max_g] whose group time meets `target`; max_g + 1 if none. Within the node-local
// sizes, then the spanning ones, the time first falls with g (compute / g) and then rises (the collectives'
// latency and bandwidth terms grow with g). Their values at the range's smallest size bound them below,
// which bounds the answer below in O(1); a few sizes up from there usually meet the target, else bisection
// (on the slope for the fastest size, then before it for the smallest that meets the target) decides in
// O(log max_g).
int ranks_for_target(const GroupTimes& times, double work, double tokens, double count, double target,
                     int min_g, int max_g);

// Tokens a group of g ranks holds in one micro-batch: CostModel::token_capacity(g) (memory), and at most
// g x tokens_per_rank when a per-rank token budget is given (> 0); smallest_group(tokens) is the smallest
// g <= max_g whose capacity (the best of the sizes up to g) holds them, max_g if none.
class CapacityTable {
 public:
  CapacityTable(const CostModel& cost, int max_g, double tokens_per_rank = 0.0);
  double capacity(int g) const;
  int smallest_group(double tokens) const;

 private:
  bool unlimited_;
  std::vector<double> best_up_to_;  // best_up_to_[g] = max over g' <= g of capacity(g')
};

}  // namespace minimllm::planning
