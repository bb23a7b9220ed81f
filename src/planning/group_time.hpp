// The LLM time of a run of samples on one group, as the target-driven planners size groups (internal):
// DHP's and FlexSP's searches (target_search.hpp) and DHP's packs (dhp_packing.hpp).
#pragma once

#include <vector>

#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Time of samples with summed one-rank compute `work`, tokens and count on one group of g ranks that
// spans nodes iff g > ranks_per_node: work / g + their context-parallel collectives (llm_comm is linear in
// tokens for a fixed group: a latency per sample and a bandwidth term per token), tabulated per g for
// g <= ranks (larger groups are computed on the fly). The table's sizes fall into runs of consecutive
// sizes with the same collectives (a spanning group's depend only on its nodes; within a node each size
// is a run of its own): along a run the time never rises. The collectives themselves need not grow with g
// (the ring's per-token term falls with g when its transfers are partly hidden): every size from g on is
// bounded from below by the least latency and the least per-token term of the sizes from g (lower_bound).
class GroupTimes {
 public:
  GroupTimes(const CostModel& cost, int ranks);
  double operator()(double work, double tokens, double count, int g) const;
  int ranks_per_node() const { return cost_->ranks_per_node; }

  // The largest tabulated size, and for 2 <= g <= that, the last size of g's run.
  int tabulated() const { return static_cast<int>(latency_.size()) - 1; }
  int run_end(int g) const { return run_end_[g]; }
  // A tabulated size's collectives: seconds per micro-batch (latency) and per token (bandwidth).
  double latency(int g) const { return latency_[g]; }
  double per_token(int g) const { return per_token_[g]; }
  // The least of each over the tabulated sizes from g (2 <= g <= tabulated()).
  double least_latency_from(int g) const { return least_latency_from_[g]; }
  double least_per_token_from(int g) const { return least_per_token_from_[g]; }
  // A lower bound of the time of every tabulated size h' >= from, evaluated at h (from <= h): work / h
  // plus the least collectives from `from`, never above the time of h (the same expression as
  // with_collectives_of with smaller terms; for work, tokens, count >= 0). It falls as h grows.
  // The time of g ranks with the collectives of `like` ranks (2 <= like <= tabulated()): the time of g
  // when both are in one run, else (collectives nondecreasing, g > like) a lower bound of it. Every time
  // is this one expression, compiled once without contraction into fused multiply-adds (src/CMakeLists.txt):
  // a size's time is the same number wherever it is computed, which exact comparisons with a target need.
  double with_collectives_of(int like, double work, double tokens, double count, int g) const;
  double lower_bound(int from, double work, double tokens, double count, int h) const;
  // The least time over the sizes in [max(min_g, 1), max_g] (+inf if none): each run's last size only,
  // and none past a size from which the least collectives alone exceed the least time so far.
  double fastest(double work, double tokens, double count, int min_g, int max_g) const;

 private:
  const CostModel* cost_;
  std::vector<double> latency_, per_token_;
  std::vector<double> least_latency_from_, least_per_token_from_;
  std::vector<int> run_end_;
};

// The same for one group, without a table.
double group_time(const CostModel& cost, double work, double tokens, double count, int g);

// Smallest g in [max(min_g, 1), max_g] whose group time meets `target` (GroupTimes' time <= target); max_g
// + 1 if none. Exact, hence monotone in the target (a looser target never needs more ranks), which DHP's
// bisection relies on to reuse sizes between probes (dhp_packing.cpp). On each run of sizes with the same
// collectives the time never rises with g, so the first size meeting the target is found from the closed
// form work / (target - collectives), usually in two evaluations; if the run ends first, the least
// collectives of the sizes after it bound every later size's time from below (GroupTimes::lower_bound),
// which gives the next size worth looking at (in bench_planners' DHP and FlexSP searches, 2-2.5 runs and
// 3-4.5 evaluations a call on average; more than 6 runs in 1-3% of calls, near the fastest size). With
// negative inputs, or sizes past the table, it scans.
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
