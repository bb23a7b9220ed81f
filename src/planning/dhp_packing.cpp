#include "dhp_packing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "load_tree.hpp"

namespace minimllm::planning {

std::vector<DhpPack> pack_best_fit_decreasing(const BatchCosts& costs, const CapacityTable& capacity) {
  std::vector<DhpPack> packs;
  std::set<std::pair<double, int>> room;  // (room left, pack): best fit = the least room that holds it
  for (int s : costs.by_llm) {
    const double tokens = costs.tokens[s];
    auto it = room.lower_bound({tokens, -1});
    int p;
    if (it == room.end()) {
      p = static_cast<int>(packs.size());
      DhpPack pack;
      pack.need = capacity.smallest_group(tokens);
      pack.capacity = capacity.capacity(pack.need);
      packs.push_back(std::move(pack));
    } else {
      p = it->second;
      room.erase(it);
    }
    DhpPack& pack = packs[p];
    pack.samples.push_back(s);
    pack.tokens += tokens;
    pack.work += costs.llm[s];
    const double left = pack.capacity - pack.tokens;
    if (left > 0.0) room.emplace(left, p);
  }
  return packs;
}

namespace {

constexpr double kTolerance = 1e-4;  // of the makespan's bisection, relative

// Runs of packs a group may take: every length up to 16, then 1.5x apart (the whole prefix is added by
// the caller).
std::vector<int> run_lengths(int packs) {
  std::vector<int> lengths;
  for (int l = 1; l <= packs; l = l < 16 ? l + 1 : (3 * l + 1) / 2) lengths.push_back(l);
  return lengths;
}

}  // namespace

DhpAllocation allocate_ranks(const std::vector<DhpPack>& packs, const CostModel& cost, int ranks,
                             bool shortcuts) {
  DhpAllocation out;
  const int n = static_cast<int>(packs.size());
  if (n == 0) {
    out.feasible = true;
    return out;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return packs[a].work > packs[b].work; });
  std::vector<double> work(n + 1, 0.0), tokens(n + 1, 0.0), count(n + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    const DhpPack& p = packs[order[i]];
    work[i + 1] = work[i] + p.work;
    tokens[i + 1] = tokens[i] + p.tokens;
    count[i + 1] = count[i] + 1.0;  // one micro-batch: the K/V exchange's latency once (step_prediction)
  }
  const std::vector<int> lengths = run_lengths(n);
  const GroupTimes times(cost, ranks);
  const long long too_many = static_cast<long long>(ranks) + 1;
  // The least collectives per micro-batch and per token of any group of two ranks or more.
  const double least_latency = ranks >= 2 ? times.least_latency_from(2) : 0.0;
  const double least_per_token = ranks >= 2 ? times.least_per_token_from(2) : 0.0;

  // The candidate runs ending at each i: [i - l, i) for each run length l <= i, then the whole prefix when
  // no length reaches it; with the largest `need` among their packs (a range maximum over a sparse table),
  // independent of the target: once.
  std::vector<std::vector<int>> need_max(1, std::vector<int>(n));
  for (int i = 0; i < n; ++i) need_max[0][i] = packs[order[i]].need;
  for (int span = 1; 2 * span <= n; span *= 2) {
    const std::vector<int>& half = need_max.back();
    std::vector<int> level(n - 2 * span + 1);
    for (size_t i = 0; i < level.size(); ++i) level[i] = std::max(half[i], half[i + span]);
    need_max.push_back(std::move(level));
  }
  const auto largest_need = [&](int begin, int end) {  // over packs [begin, end), end > begin
    int k = 0;
    while ((2 << k) <= end - begin) ++k;
    return std::max(need_max[k][begin], need_max[k][end - (1 << k)]);
  };
  // A run's sizes at earlier probes of the bisection bound its size at this one (ranks_for_target is
  // exact, so monotone in the target): the size at a target at least this one from below, the size at a
  // target at most this one from above. Kept: the last size computed, and the nearest from each side before
  // it (the bisection's later probes lie on the side of each earlier one that the current probe does).
  struct Known {
    double target = std::numeric_limits<double>::quiet_NaN();  // none yet: no comparison holds
    int g = 0;
  };
  struct Run {
    int from, need;
    Known last, tighter, looser;
  };
  std::vector<std::vector<Run>> runs_ending(n + 1);
  for (int i = 1; i <= n; ++i) {
    int previous = 0;
    runs_ending[i].reserve(std::min<size_t>(i, lengths.size() + 1));
    for (int l : lengths) {
      if (l > i) break;
      runs_ending[i].push_back({i - l, largest_need(i - l, i), {}, {}, {}});
      previous = l;
    }
    if (previous < i)
      runs_ending[i].push_back({0, largest_need(0, i), {}, {}, {}});  // all packs in one group
  }

  // The run's size at the target, or none where it is known to be at least `useful_below` (the sizes that
  // would improve on the prefix's best so far lie below it): then nothing is computed nor kept.
  const auto run_size = [&](Run& run, int i, double target, long long useful_below) {
    const int j = run.from;
    const auto size = [&](int min_g, int max_g) {
      return ranks_for_target(times, work[i] - work[j], tokens[i] - tokens[j], count[i] - count[j], target,
                              min_g, max_g);
    };
    if (!shortcuts) return size(run.need, ranks);
    const int none = ranks + 1;
    int at_least = run.need, at_most = none;  // at_most: a size known to meet the target
    for (const Known& k : {run.last, run.tighter, run.looser}) {
      if (k.target >= target) at_least = std::max(at_least, k.g);
      if (k.target <= target && k.g <= ranks) at_most = std::min(at_most, k.g);
    }
    if (at_least >= useful_below) return none;
    const int g = at_least > ranks      ? none
                  : at_least >= at_most ? at_most
                                        : size(at_least, std::min(at_most, ranks));
    if (run.last.target > target && !(run.tighter.target <= run.last.target)) run.tighter = run.last;
    if (run.last.target < target && !(run.looser.target >= run.last.target)) run.looser = run.last;
    run.last = {target, g};
    return g;
  };

  // The decision DP for target T: fewest ranks for packs [0, i), and each prefix's last run.
  std::vector<long long> best(n + 1);
  std::vector<int> from(n + 1), size(n + 1);
  const auto fewest_ranks = [&](double target) {
    std::fill(best.begin(), best.end(), too_many);
    best[0] = 0;
    for (int i = 1; i <= n; ++i) {
      for (Run& run : runs_ending[i]) {
        const int j = run.from;
        // time(g) >= work / g, so g >= need and g > work / target - 1e-9: a run that needs as many ranks as
        // best[i] - best[j] cannot improve on best[i] (nor can any from a prefix that cannot be done, whose
        // best[j] is too_many). Multiplied, not divided: this test is most of the programme's time.
        const long long over = best[i] - best[j];
        const double run_work = work[i] - work[j], enough = static_cast<double>(over) - 1.0 + 1e-9;
        if (shortcuts && (run.need >= over || run_work > enough * target)) continue;
        // More than one rank's work: g >= 2, and every size's collectives are at least the least of any size
        // from two, so g > work / (target - those): most long runs stop here, before their size.
        // (The target raised by 1e-12 of itself: above the rounding of the collectives' sum.)
        if (shortcuts && run_work > target && ranks >= 2) {
          const double room = target * (1.0 + 1e-12) - (count[i] - count[j]) * least_latency -
                              (tokens[i] - tokens[j]) * least_per_token;
          if (room <= 0.0 || run_work > enough * room) continue;
        }
        const int g = run_size(run, i, target, over);
        if (g <= ranks && best[j] + g < best[i]) best[i] = best[j] + g, from[i] = j, size[i] = g;
      }
      if (best[i] >= too_many) return too_many;  // a longer prefix needs at least as many ranks
    }
    return best[n];
  };

  // The makespan of the last feasible DP's allocation (at most its target).
  const auto makespan = [&] {
    double worst = 0.0;
    for (int i = n; i > 0; i = from[i])
      worst = std::max(worst, times(work[i] - work[from[i]], tokens[i] - tokens[from[i]],
                                    count[i] - count[from[i]], size[i]));
    return worst;
  };
  // Bisection on the makespan, from a lower bound: the mean load, and each pack alone on its fastest
  // group among those that hold it.
  const double mean = work[n] / ranks;
  double lo = mean;
  for (const DhpPack& p : packs) {
    if (p.need > ranks) return out;             // no group can hold it
    if (p.need == 1 && p.work <= lo) continue;  // its fastest is at most its time on one rank
    lo = std::max(lo, times.fastest(p.work, p.tokens, 1.0, p.need, ranks));
  }
  // Often one pack bounds the makespan and the bound is met at once (the mean load alone, only by a perfect
  // packing: not tried); else upwards in steps from 1/8 above it, each twice the last (the optimum is
  // mostly within 1/8 of the bound: fewer probes than doubling).
  double hi = std::max(lo, 1e-12) * (1.0 + kTolerance);
  const bool try_bound = lo > mean;
  if (!try_bound || fewest_ranks(hi) > ranks) {
    double step = 0.125;
    if (try_bound) lo = hi;
    hi = std::max(lo, 1e-12) * (1.0 + step);
    // One group of all ranks per pack fits eventually.
    while (fewest_ranks(hi) > ranks) lo = hi, step *= 2.0, hi = lo * (1.0 + step);
  }
  // hi is always the makespan of the last feasible probe's allocation, which is kept (not probed again).
  hi = makespan();
  std::vector<int> kept_from = from, kept_size = size;
  for (int i = 0; i < 200 && hi - lo > kTolerance * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (fewest_ranks(mid) <= ranks) {
      hi = makespan();
      kept_from = from, kept_size = size;
    } else {
      lo = mid;
    }
  }
  from = std::move(kept_from), size = std::move(kept_size);
  out.feasible = true;
  for (int i = n; i > 0; i = from[i]) {
    std::vector<int> run;
    for (int j = from[i]; j < i; ++j) run.push_back(order[j]);
    out.runs.push_back(std::move(run));
    out.sizes.push_back(size[i]);
    out.makespan = std::max(out.makespan, times(work[i] - work[from[i]], tokens[i] - tokens[from[i]],
                                                count[i] - count[from[i]], size[i]));
  }
  std::reverse(out.runs.begin(), out.runs.end());
  std::reverse(out.sizes.begin(), out.sizes.end());
  return out;
}

}  // namespace minimllm::planning
