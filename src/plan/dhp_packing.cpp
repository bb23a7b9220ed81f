#include "dhp_packing.hpp"

#include <algorithm>
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

DhpAllocation allocate_ranks(const std::vector<DhpPack>& packs, const CostModel& cost, int ranks) {
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

  // The decision DP for target T: fewest ranks for packs [0, i), and each prefix's last run.
  std::vector<long long> best(n + 1);
  std::vector<int> from(n + 1), size(n + 1);
  const auto fewest_ranks = [&](double target) {
    std::fill(best.begin(), best.end(), too_many);
    best[0] = 0;
    for (int i = 1; i <= n; ++i) {
      int need = 1;
      const auto try_run = [&](int j) {
        if (best[j] >= too_many) return;
        const int g = ranks_for_target(times, work[i] - work[j], tokens[i] - tokens[j], count[i] - count[j],
                                       target, need, ranks);
        if (g <= ranks && best[j] + g < best[i]) best[i] = best[j] + g, from[i] = j, size[i] = g;
      };
      int previous = 0;
      for (int l : lengths) {
        if (l > i) break;
        for (int j = i - previous - 1; j >= i - l; --j) need = std::max(need, packs[order[j]].need);
        previous = l;
        try_run(i - l);
      }
      if (previous < i) {  // all packs so far in one group
        for (int j = i - previous - 1; j >= 0; --j) need = std::max(need, packs[order[j]].need);
        try_run(0);
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
  // group (the time first falls with g, then the collectives' terms make it rise: every size that holds
  // it is tried, O(1) each from the table).
  double lo = work[n] / ranks;
  for (const DhpPack& p : packs) {
    if (p.need > ranks) return out;  // no group can hold it
    double fastest = times(p.work, p.tokens, 1.0, p.need);
    for (int g = p.need + 1; g <= ranks; ++g) fastest = std::min(fastest, times(p.work, p.tokens, 1.0, g));
    lo = std::max(lo, fastest);
  }
  // Often one pack bounds the makespan and the bound is met at once; else from twice it upwards.
  double hi = std::max(lo, 1e-12) * (1.0 + kTolerance);
  if (fewest_ranks(hi) > ranks) {
    lo = hi, hi = 2.0 * lo;
    while (fewest_ranks(hi) > ranks) lo = hi, hi *= 2.0;  // one group of all ranks per pack fits eventually
  }
  hi = makespan();
  for (int i = 0; i < 200 && hi - lo > kTolerance * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (fewest_ranks(mid) <= ranks) {
      hi = std::min(mid, makespan());
    } else {
      lo = mid;
    }
  }
  fewest_ranks(hi);
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
