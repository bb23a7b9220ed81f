#include "target_search.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "group_time.hpp"
#include "placement.hpp"

namespace minimllm::planning {
namespace {

int round_to_rule(SizeRule rule, int g, const GroupTimes& times, double work, double tokens, double count,
                  double target, int max_g) {
  if (rule == SizeRule::any || g > max_g) return g;
  // Next power of two that still meets the target (a larger one may cross a node and lose bandwidth).
  int p = 1;
  while (p < g) p *= 2;
  for (; p <= max_g; p *= 2)
    if (times(work, tokens, count, p) <= target * (1.0 + 1e-12)) return p;
  return max_g + 1;
}

struct Demand {
  long long ranks = 0;
  int long_samples = 0;                   // the prefix of by_llm that the runs cover
  std::vector<int> sizes;                 // one group per run
  std::vector<std::pair<int, int>> runs;  // [begin, end) positions in by_llm
};

class TargetSearch {
 public:
  TargetSearch(SizeRule rule, int ranks, const BatchCosts& costs, const CostModel& cost)
      : rule_(rule),
        ranks_(ranks),
        costs_(costs),
        cost_(cost),
        capacity_(cost, ranks),
        group_time_(cost, ranks) {
    // Run lengths the DP tries: every length up to 8, then 1.5x apart (plus the whole prefix, below).
    for (int l = 1; l <= static_cast<int>(costs.by_llm.size()); l = l < 8 ? l + 1 : (3 * l + 1) / 2)
      run_lengths_.push_back(l);
    const size_t n = costs.by_llm.size();
    work_.assign(n + 1, 0.0);
    tokens_.assign(n + 1, 0.0);
    for (size_t i = 0; i < n; ++i) {
      work_[i + 1] = work_[i] + costs.llm[costs.by_llm[i]];
      tokens_[i + 1] = tokens_[i] + costs.tokens[costs.by_llm[i]];
    }
  }

  Demand demand(double target) const { return cut_runs(target, long_prefix(target)); }

  // Smallest target (to a relative 1e-3) whose demand fits the ranks, by bisection from the lower bound
  // (the target is usually within ~10% of it, hence the first bracket).
  double smallest_target() const {
    if (costs_.by_llm.empty()) return 0.0;
    double lo = llm_lower_bound(costs_.total_llm, costs_.max_tokens, cost_, ranks_);
    if (demand(lo).ranks <= ranks_) return lo;
    double hi = 1.125 * lo;
    for (int i = 0; i < 64 && demand(hi).ranks > ranks_; ++i) lo = hi, hi *= 2.0;
    for (int i = 0; i < 40 && hi - lo > 1e-3 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (demand(mid).ranks <= ranks_ ? hi : lo) = mid;
    }
    return hi;
  }

 private:
  // Long samples are a prefix of by_llm (time and tokens both fall along it): those that miss the
  // target on one rank or do not fit its memory.
  int long_prefix(double target) const {
    const auto is_short = [&](int i) {
      const int s = costs_.by_llm[i];
      return costs_.llm[s] <= target && capacity_.smallest_group(costs_.tokens[s]) == 1;
    };
    int lo = 0, hi = static_cast<int>(costs_.by_llm.size());
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (is_short(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  // The DP over run cuttings of the long prefix, minimising the ranks of its groups; then the short
  // samples fill the groups' spare time, g (T - time), and ranks of their own.
  Demand cut_runs(double target, int long_samples) const {
    Demand d;
    d.long_samples = long_samples;
    const int n = static_cast<int>(costs_.by_llm.size());
    const long long too_many = static_cast<long long>(ranks_) + 1;
    std::vector<long long> best(long_samples + 1, too_many);
    std::vector<int> from(long_samples + 1, -1), size(long_samples + 1, 0);
    best[0] = 0;
    for (int i = 1; i <= long_samples; ++i) {
      const auto try_run = [&](int j) {
        if (best[j] >= too_many) return true;
        const int g = run_ranks(j, i, target);
        if (g > ranks_) return false;  // a longer run needs at least as many ranks
        if (best[j] + g < best[i]) best[i] = best[j] + g, from[i] = j, size[i] = g;
        return true;
      };
      bool whole_prefix_tried = false;
      for (int l : run_lengths_) {
        if (l > i || !try_run(i - l)) break;
        whole_prefix_tried = l == i;
      }
      if (!whole_prefix_tried) try_run(0);  // all long samples in one group
    }
    if (best[long_samples] >= too_many) {
      d.ranks = too_many;
      return d;
    }
    double spare = 0.0;
    for (int i = long_samples; i > 0; i = from[i]) {
      d.runs.emplace_back(from[i], i);
      d.sizes.push_back(size[i]);
      spare += size[i] * (target - run_time(from[i], i, size[i]));
    }
    std::reverse(d.runs.begin(), d.runs.end());
    std::reverse(d.sizes.begin(), d.sizes.end());
    const double short_work = std::max(0.0, work_[n] - work_[long_samples] - spare);
    d.ranks = best[long_samples] + static_cast<long long>(std::ceil(short_work / target));
    return d;
  }

  double run_time(int begin, int end, int g) const {
    return group_time_(work_[end] - work_[begin], tokens_[end] - tokens_[begin], end - begin, g);
  }

  int run_ranks(int begin, int end, double target) const {
    const double work = work_[end] - work_[begin], tokens = tokens_[end] - tokens_[begin],
                 count = end - begin;
    const int min_g = capacity_.smallest_group(costs_.tokens[costs_.by_llm[begin]]);  // the run's largest
    const int g = ranks_for_target(group_time_, work, tokens, count, target, min_g, ranks_);
    return round_to_rule(rule_, g, group_time_, work, tokens, count, target, ranks_);
  }

  SizeRule rule_;
  int ranks_;
  std::vector<int> run_lengths_;
  const BatchCosts& costs_;
  const CostModel& cost_;
  CapacityTable capacity_;
  GroupTimes group_time_;
  std::vector<double> work_, tokens_;  // prefix sums along by_llm
};

// Long runs pinned to their groups, short samples by earliest finish.
LayoutChoice layout_for(const Demand& d, int ranks, const BatchCosts& costs, const CostModel& cost) {
  LayoutChoice choice;
  choice.groups = place_groups(d.sizes, 0, ranks, cost.ranks_per_node);
  choice.samples.resize(choice.groups.size());
  choice.pinned.assign(costs.tokens.size(), 0);
  std::vector<double> loads(choice.groups.size(), 0.0);
  for (size_t k = 0; k < d.runs.size(); ++k)
    for (int i = d.runs[k].first; i < d.runs[k].second; ++i) {
      const int s = costs.by_llm[i];
      choice.pinned[s] = 1;
      choice.samples[k].push_back(s);
      loads[k] += cost.llm_time(costs.tokens[s], choice.groups[k].size, choice.groups[k].first);
    }
  const std::vector<int> rest(costs.by_llm.begin() + d.long_samples, costs.by_llm.end());
  choice.overflowing = assign_samples(costs, rest, choice.groups, cost, choice.samples, loads);
  choice.llm_makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
  return choice;
}

}  // namespace

LayoutChoice best_target_layout(const std::vector<SizeRule>& rules, int ranks, const BatchCosts& costs,
                                const CostModel& cost) {
  LayoutChoice best;
  bool found = false;
  const auto consider = [&](LayoutChoice choice) {
    if (!found ||
        std::tie(choice.overflowing, choice.llm_makespan) < std::tie(best.overflowing, best.llm_makespan))
      best = std::move(choice), found = true;
  };
  const auto good_enough = [&](double makespan) {
    return found && best.overflowing == 0 && best.llm_makespan <= makespan;
  };
  std::set<std::vector<int>> tried;  // group sizes already evaluated (rules often agree)
  for (SizeRule rule : rules) {
    const TargetSearch search(rule, ranks, costs, cost);
    const double target = search.smallest_target();
    // A looser target (fewer, smaller groups) only while the best layout is slower than that target: a
    // layout planned for T rarely finishes much before T.
    for (double looser : {1.0, 1.05, 1.1, 1.2, 1.4}) {
      if (target <= 0.0 || good_enough(looser * target)) break;
      const Demand d = search.demand(target * looser);
      if (d.ranks > ranks || d.sizes.empty() || !tried.insert(d.sizes).second) continue;
      LayoutChoice choice = layout_for(d, ranks, costs, cost);
      choice.target = target * looser;
      consider(std::move(choice));
    }
  }
  // The all-singleton layout (plain LPT), unless it cannot win: it is never faster than the largest
  // sample on one rank.
  if (costs.by_llm.empty() || !good_enough(costs.llm[costs.by_llm.front()]))
    consider(layout_for(Demand{}, ranks, costs, cost));
  // Local search on the winner's short samples (the long runs stay on the groups cut for them).
  std::vector<double> loads(best.groups.size(), 0.0);
  for (size_t k = 0; k < best.groups.size(); ++k)
    for (int s : best.samples[k])
      loads[k] += cost.llm_time(costs.tokens[s], best.groups[k].size, best.groups[k].first);
  std::vector<char> movable(best.pinned.size());
  for (size_t s = 0; s < movable.size(); ++s) movable[s] = !best.pinned[s];
  refine_assignment(costs, best.groups, cost, movable, best.samples, loads,
                    static_cast<int>(best.groups.size()));
  best.llm_makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
  return best;
}

}  // namespace minimllm::planning
