#include "group_time.hpp"

#include <algorithm>
#include <cmath>

#include "load_tree.hpp"

namespace minimllm::planning {

RunTime run_time(const CostModel& cost, double work, double tokens, double count, bool spans) {
  const LinkCost& l = cost.link(spans);
  const double bandwidth_term = cost.kv_bytes_per_token * tokens / l.bandwidth;
  return {work - bandwidth_term, count * cost.collectives_per_sample * l.latency + bandwidth_term};
}

double group_time(const CostModel& cost, double work, double tokens, double count, int g) {
  if (g == 1) return work;
  const RunTime t = run_time(cost, work, tokens, count, g > cost.ranks_per_node);
  return t.scaled / g + t.fixed;
}

int ranks_for_target(const CostModel& cost, double work, double tokens, double count, double target,
                     int min_g, int max_g) {
  if (min_g <= 1 && work <= target) return 1;
  const auto solve = [&](bool spans, int lo, int hi) {
    if (lo > hi) return -1;
    const RunTime t = run_time(cost, work, tokens, count, spans);
    const auto meets = [&](int g) { return t.scaled / g + t.fixed <= target; };
    if (t.scaled <= 0.0) return meets(lo) ? lo : -1;  // the time only grows with g
    if (target <= t.fixed) return -1;
    const double g = std::max<double>(lo, std::ceil(t.scaled / (target - t.fixed) - 1e-9));
    if (g > hi) return -1;
    int gi = static_cast<int>(g);
    if (!meets(gi)) ++gi;  // floating-point rounding of the ceiling
    return gi <= hi && meets(gi) ? gi : -1;
  };
  const int lo = std::max(2, min_g);
  const int local = solve(false, lo, std::min(cost.ranks_per_node, max_g));
  if (local > 0) return local;
  const int spanning = solve(true, std::max(lo, cost.ranks_per_node + 1), max_g);
  return spanning > 0 ? spanning : max_g + 1;
}

CapacityTable::CapacityTable(const CostModel& cost, int max_g, double tokens_per_rank)
    : unlimited_(cost.capacity_bytes <= 0.0 && tokens_per_rank <= 0.0) {
  if (unlimited_) return;
  best_up_to_.resize(max_g + 1, 0.0);
  for (int g = 1; g <= max_g; ++g) {
    const double budget = tokens_per_rank > 0.0 ? g * tokens_per_rank : kInf;
    best_up_to_[g] = std::max(best_up_to_[g - 1], std::min(cost.token_capacity(g), budget));
  }
}

double CapacityTable::capacity(int g) const {
  if (unlimited_) return kInf;
  return best_up_to_[std::min<size_t>(g, best_up_to_.size() - 1)];
}

int CapacityTable::smallest_group(double tokens) const {
  if (unlimited_) return 1;
  const auto it = std::lower_bound(best_up_to_.begin() + 1, best_up_to_.end(), tokens);
  return it == best_up_to_.end() ? static_cast<int>(best_up_to_.size()) - 1
                                 : static_cast<int>(it - best_up_to_.begin());
}

}  // namespace minimllm::planning
