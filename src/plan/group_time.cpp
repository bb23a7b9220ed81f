#include "group_time.hpp"

#include <algorithm>
#include <cmath>

#include "load_tree.hpp"

namespace minimllm::planning {

GroupTimes::GroupTimes(const CostModel& cost, int ranks)
    : cost_(&cost), latency_(std::max(ranks, 1) + 1, 0.0), per_token_(std::max(ranks, 1) + 1, 0.0) {
  for (int g = 2; g <= ranks; ++g) {
    const bool spans = g > cost.ranks_per_node;
    latency_[g] = cost.llm_comm(0.0, g, spans);
    per_token_[g] = cost.llm_comm(1.0, g, spans) - latency_[g];
  }
}

double GroupTimes::operator()(double work, double tokens, double count, int g) const {
  if (g <= 1) return work;
  if (static_cast<size_t>(g) < latency_.size())
    return work / g + count * latency_[g] + per_token_[g] * tokens;
  return group_time(*cost_, work, tokens, count, g);
}

double group_time(const CostModel& cost, double work, double tokens, double count, int g) {
  if (g <= 1) return work;
  const bool spans = g > cost.ranks_per_node;
  const double latency = cost.llm_comm(0.0, g, spans);
  return work / g + count * latency + (cost.llm_comm(1.0, g, spans) - latency) * tokens;
}

int ranks_for_target(const GroupTimes& times, double work, double tokens, double count, double target,
                     int min_g, int max_g) {
  if (min_g <= 1 && work <= target) return 1;
  const auto time = [&](int g) { return times(work, tokens, count, g); };
  const auto bisect = [&](int lo, int hi) {
    int a = lo, b = hi;
    while (a < b) {
      const int mid = a + (b - a) / 2;
      if (time(mid + 1) >= time(mid)) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    if (time(a) > target) return -1;
    for (int first = lo; first < a;) {  // the time falls on [lo, a]
      const int mid = first + (a - first) / 2;
      if (time(mid) <= target) {
        a = mid;
      } else {
        first = mid + 1;
      }
    }
    return a;
  };
  const auto solve = [&](int lo, int hi) {
    if (lo > hi) return -1;
    const double floor = time(lo) - work / lo;  // the collectives at the smallest size: a lower bound
    if (floor >= target) return -1;
    int g = static_cast<int>(std::max<double>(lo, std::ceil(work / (target - floor) - 1e-9)));
    for (int tries = 0; g <= hi && tries < 4; ++g, ++tries) {
      const double t = time(g);
      if (t <= target) return g;
      if (g < hi && time(g + 1) >= t) return -1;  // past the fastest size
    }
    return g <= hi ? bisect(g, hi) : -1;
  };
  const int lo = std::max(2, min_g);
  const int local = solve(lo, std::min(times.ranks_per_node(), max_g));
  if (local > 0) return local;
  const int spanning = solve(std::max(lo, times.ranks_per_node() + 1), max_g);
  return spanning > 0 ? spanning : max_g + 1;
}

CapacityTable::CapacityTable(const CostModel& cost, int max_g, double tokens_per_rank)
    : unlimited_(!cost.bounded() && tokens_per_rank <= 0.0) {
  if (unlimited_) return;
  best_up_to_.resize(std::max(max_g, 1) + 1, 0.0);
  for (int g = 1; g <= max_g; ++g) {
    const double budget = tokens_per_rank > 0.0 ? g * tokens_per_rank : kInf;
    best_up_to_[g] = std::max(best_up_to_[g - 1], std::min(cost.token_capacity(g), budget));
  }
}

double CapacityTable::capacity(int g) const {
  if (unlimited_) return kInf;
  return best_up_to_[std::min<size_t>(static_cast<size_t>(std::max(g, 0)), best_up_to_.size() - 1)];
}

int CapacityTable::smallest_group(double tokens) const {
  if (unlimited_) return 1;
  const auto it = std::lower_bound(best_up_to_.begin() + 1, best_up_to_.end(), tokens);
  return it == best_up_to_.end() ? static_cast<int>(best_up_to_.size()) - 1
                                 : static_cast<int>(it - best_up_to_.begin());
}

}  // namespace minimllm::planning
