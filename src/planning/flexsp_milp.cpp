#include "flexsp_milp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>

#include "group_time.hpp"
#include "load_tree.hpp"
#include "placement.hpp"

namespace minimllm::planning {
namespace {

// One candidate group of the MILP: its size, and its columns.
struct Slot {
  int size = 1;
  int used = -1;            // m_p
  std::vector<int> column;  // A[k][p] per bucket, -1 where bucket k does not fit
  double capacity = 0.0;    // cap(d_p)
};

}  // namespace

std::vector<int> bucket_ends(const std::vector<double>& sorted_values, int buckets) {
  // Distinct lengths, their counts and prefix sums.
  std::vector<double> value;
  std::vector<long long> count_prefix = {0};
  std::vector<double> sum_prefix = {0.0};
  for (double t : sorted_values) {
    if (value.empty() || t != value.back()) {
      value.push_back(t);
      count_prefix.push_back(count_prefix.back());
      sum_prefix.push_back(sum_prefix.back());
    }
    ++count_prefix.back();
    sum_prefix.back() += t;
  }
  const int d = static_cast<int>(value.size());
  std::vector<int> ends;
  if (d == 0) return ends;
  const int b_count = std::max(1, std::min(buckets, d));
  // Padding of distinct lengths [j, i) in one bucket: its longest times its count, minus its sum.
  const auto padding = [&](int j, int i) {
    return value[i - 1] * static_cast<double>(count_prefix[i] - count_prefix[j]) -
           (sum_prefix[i] - sum_prefix[j]);
  };
  std::vector<double> previous(d + 1, kInf), current(d + 1, kInf);
  std::vector<std::vector<int>> cut(b_count + 1, std::vector<int>(d + 1, 0));
  previous[0] = 0.0;
  for (int b = 1; b <= b_count; ++b) {
    std::fill(current.begin(), current.end(), kInf);
    // current[i] = min_{j < i} previous[j] + padding(j, i); the best j does not decrease with i.
    std::function<void(int, int, int, int)> solve = [&](int lo, int hi, int opt_lo, int opt_hi) {
      if (lo > hi) return;
      const int mid = lo + (hi - lo) / 2;
      int best_j = opt_lo;
      double best = kInf;
      for (int j = opt_lo; j <= std::min(mid - 1, opt_hi); ++j) {
        if (previous[j] == kInf) continue;
        const double v = previous[j] + padding(j, mid);
        if (v < best) best = v, best_j = j;
      }
      current[mid] = best;
      cut[b][mid] = best_j;
      solve(lo, mid - 1, opt_lo, best_j);
      solve(mid + 1, hi, best_j, opt_hi);
    };
    solve(1, d, 0, d - 1);
    std::swap(previous, current);
  }
  for (int b = b_count, i = d; b >= 1 && i > 0; i = cut[b][i], --b)
    ends.push_back(static_cast<int>(count_prefix[i]));
  std::reverse(ends.begin(), ends.end());
  return ends;
}

FlexspMilpResult solve_flexsp_milp(const BatchCosts& costs, const CostModel& cost, int ranks,
                                   const LayoutChoice& heuristic, const FlexspMilpOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  FlexspMilpResult result;
  const int n = static_cast<int>(costs.tokens.size());
  if (n == 0 || !milp_solver_available()) return result;

  // Buckets over the samples in ascending length (by_llm reversed), by their one-rank LLM time.
  const std::vector<int> ascending(costs.by_llm.rbegin(), costs.by_llm.rend());
  std::vector<double> sorted_tokens(n), sorted_times(n);
  for (int i = 0; i < n; ++i)
    sorted_tokens[i] = costs.tokens[ascending[i]], sorted_times[i] = costs.llm[ascending[i]];
  // As many buckets as the column budget allows for the slots (exact buckets, one per distinct length, on
  // small batches), at least options.buckets.
  long long slot_count = 0;
  for (int d = 1; d <= ranks; d *= 2) slot_count += std::min(ranks / d, n);
  const int affordable = static_cast<int>(std::min<double>(
      n, kMilpColumnsPerSecond * options.time_limit / static_cast<double>(slot_count) - 1.0));
  const std::vector<int> ends = bucket_ends(sorted_times, std::max(options.buckets, affordable));
  const int buckets = static_cast<int>(ends.size());
  std::vector<int> bucket_of(n);
  std::vector<std::vector<int>> members(buckets);  // samples of each bucket, longest first
  std::vector<double> longest(buckets);
  for (int k = 0, begin = 0; k < buckets; begin = ends[k++]) {
    for (int i = ends[k] - 1; i >= begin; --i) {
      members[k].push_back(ascending[i]);
      bucket_of[ascending[i]] = k;
    }
    longest[k] = sorted_tokens[ends[k] - 1];
  }
  // tau_k(d): the mean LLM time of bucket k's samples on d ranks.
  const CapacityTable capacity(cost, ranks, options.tokens_per_rank);
  std::vector<int> sizes;
  for (int d = 1; d <= ranks; d *= 2) sizes.push_back(d);
  const auto tau = [&](int k, int d) {
    double sum = 0.0;
    for (int s : members[k]) sum += cost.llm_time_spanning(costs.tokens[s], d, d > cost.ranks_per_node);
    return sum / members[k].size();
  };
  std::vector<std::vector<double>> tau_of(buckets, std::vector<double>(sizes.size()));
  for (int k = 0; k < buckets; ++k)
    for (size_t z = 0; z < sizes.size(); ++z) tau_of[k][z] = tau(k, sizes[z]);

  // The heuristic's layout as slots (power-of-two groups only; otherwise no start).
  struct Start {
    int size_index;
    std::vector<int> counts;  // per bucket
    double load = 0.0, tokens = 0.0;
  };
  std::vector<Start> start_groups;
  bool start_ok = !heuristic.groups.empty() && heuristic.overflowing == 0;
  for (size_t g = 0; start_ok && g < heuristic.groups.size(); ++g) {
    if (heuristic.samples[g].empty()) continue;
    const int d = heuristic.groups[g].size;
    const auto z = std::find(sizes.begin(), sizes.end(), d);
    if (z == sizes.end()) {
      start_ok = false;
      break;
    }
    Start st{static_cast<int>(z - sizes.begin()), std::vector<int>(buckets, 0)};
    for (int s : heuristic.samples[g]) {
      const int k = bucket_of[s];
      ++st.counts[k];
      st.load += tau_of[k][st.size_index];
      st.tokens += longest[k];
      if (longest[k] > capacity.capacity(d)) start_ok = false;
    }
    start_groups.push_back(std::move(st));
  }
  double upper = 0.0;     // U: the start's slowest slot, or every sample on its slowest fitting size
  int micro_batches = 1;  // K
  if (start_ok) {
    for (const Start& st : start_groups) {
      upper = std::max(upper, st.load);
      const double cap = capacity.capacity(sizes[st.size_index]);
      if (std::isfinite(cap))
        micro_batches = std::max(micro_batches, static_cast<int>(std::ceil(st.tokens / cap)));
    }
  } else {
    for (int k = 0; k < buckets; ++k) {
      double worst = 0.0;
      for (size_t z = 0; z < sizes.size(); ++z)
        if (longest[k] <= capacity.capacity(sizes[z])) worst = std::max(worst, tau_of[k][z]);
      upper += worst * members[k].size();
    }
    micro_batches = n;
  }
  upper = upper * (1.0 + 1e-9) + 1e-12;

  // Slots: for each size, as many as the ranks allow and samples fit. A model too large for the time limit
  // is not attempted (its root LP alone would overrun it).
  long long estimated_columns = 0;
  for (int d : sizes) {
    int fitting = 0, fitting_buckets = 0;
    for (int k = 0; k < buckets; ++k)
      if (longest[k] <= capacity.capacity(d))
        fitting += static_cast<int>(members[k].size()), ++fitting_buckets;
    estimated_columns += static_cast<long long>(std::min(ranks / d, fitting)) * (fitting_buckets + 1);
  }
  if (estimated_columns > kMilpColumnsPerSecond * options.time_limit) {
    result.status = MilpStatus::too_large;
    result.columns = static_cast<int>(std::min<long long>(estimated_columns, 1LL << 30));
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
  }
  MilpProblem milp;
  const int makespan = milp.add_column(0.0, kMilpInfinity, 1.0, false);
  std::vector<Slot> slots;
  std::vector<int> slot_begin_of_size(sizes.size() + 1, 0);
  for (size_t z = sizes.size(); z-- > 0;) {  // largest first
    const int d = sizes[z];
    const double cap = capacity.capacity(d);
    int fitting = 0;
    for (int k = 0; k < buckets; ++k)
      if (longest[k] <= cap) fitting += static_cast<int>(members[k].size());
    const int count = std::min(ranks / d, fitting);
    slot_begin_of_size[z] = static_cast<int>(slots.size());
    for (int i = 0; i < count; ++i) {
      Slot slot;
      slot.size = d;
      slot.capacity = cap;
      slot.used = milp.add_column(0.0, 1.0, 0.0, true);
      slot.column.assign(buckets, -1);
      for (int k = 0; k < buckets; ++k)
        if (longest[k] <= cap) slot.column[k] = milp.add_column(0.0, members[k].size(), 0.0, true);
      slots.push_back(std::move(slot));
    }
  }
  const auto size_index = [&](int d) {
    return static_cast<int>(std::find(sizes.begin(), sizes.end(), d) - sizes.begin());
  };
  for (int k = 0; k < buckets; ++k) {  // every sample placed
    const double nk = static_cast<double>(members[k].size());
    const int row = milp.add_row(nk, nk);
    for (const Slot& slot : slots)
      if (slot.column[k] >= 0) milp.add_entry(row, slot.column[k], 1.0);
  }
  const int ranks_row = milp.add_row(-kMilpInfinity, ranks);
  const int aggregate_row = milp.add_row(-kMilpInfinity, 0.0);
  milp.add_entry(aggregate_row, makespan, -static_cast<double>(ranks));
  for (size_t p = 0; p < slots.size(); ++p) {
    const Slot& slot = slots[p];
    const int z = size_index(slot.size);
    const int time_row = milp.add_row(-kMilpInfinity, 0.0), link_row = milp.add_row(-kMilpInfinity, 0.0);
    const bool bounded = std::isfinite(slot.capacity);
    const int memory_row = bounded ? milp.add_row(-kMilpInfinity, 0.0) : -1;
    milp.add_entry(time_row, makespan, -1.0);
    milp.add_entry(link_row, slot.used, -upper);
    if (bounded) milp.add_entry(memory_row, slot.used, -micro_batches * slot.capacity);
    milp.add_entry(ranks_row, slot.used, slot.size);
    for (int k = 0; k < buckets; ++k) {
      const int c = slot.column[k];
      if (c < 0) continue;
      milp.add_entry(time_row, c, tau_of[k][z]);
      milp.add_entry(link_row, c, tau_of[k][z]);
      milp.add_entry(aggregate_row, c, slot.size * tau_of[k][z]);
      if (bounded) milp.add_entry(memory_row, c, longest[k]);
    }
    // Symmetry: within a size, used slots first, in decreasing load.
    if (p + 1 < slots.size() && slots[p + 1].size == slot.size) {
      const Slot& next = slots[p + 1];
      const int order_used = milp.add_row(0.0, kMilpInfinity), order_load = milp.add_row(0.0, kMilpInfinity);
      milp.add_entry(order_used, slot.used, 1.0);
      milp.add_entry(order_used, next.used, -1.0);
      for (int k = 0; k < buckets; ++k) {
        if (slot.column[k] < 0) continue;
        milp.add_entry(order_load, slot.column[k], tau_of[k][z]);
        milp.add_entry(order_load, next.column[k], -tau_of[k][z]);
      }
    }
  }
  result.columns = milp.columns();
  result.rows = milp.rows();

  // The heuristic's layout as the starting incumbent: its groups of each size, by decreasing load.
  std::vector<double> start;
  if (start_ok) {
    std::stable_sort(start_groups.begin(), start_groups.end(), [](const Start& a, const Start& b) {
      return a.size_index != b.size_index ? a.size_index > b.size_index : a.load > b.load;
    });
    start.assign(milp.columns(), 0.0);
    std::vector<int> next_slot(slot_begin_of_size);
    for (const Start& st : start_groups) {
      const int z = st.size_index;
      const int p = next_slot[z]++;
      if (p >= static_cast<int>(slots.size()) || slots[p].size != sizes[z]) {
        start.clear();
        break;
      }
      start[slots[p].used] = 1.0;
      for (int k = 0; k < buckets; ++k)
        if (st.counts[k] > 0) start[slots[p].column[k]] = st.counts[k];
      start[makespan] = std::max(start[makespan], st.load);
    }
  }

  const double remaining =
      options.time_limit - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MilpSolution solution = solve_milp(milp, start, std::max(remaining, 1e-3));

  result.status = solution.status;
  if (!solution.x.empty()) {
    result.objective = solution.objective;
    result.bound = solution.bound;
    const double gap = solution.gap();
    result.gap = std::isfinite(gap) ? gap : -1.0;

    // Slots with samples become groups; each bucket's samples, longest first, go to the least-loaded slot
    // with room left for that bucket.
    std::vector<int> used_slots, group_sizes;
    for (size_t p = 0; p < slots.size(); ++p) {
      bool any = false;
      for (int k = 0; k < buckets; ++k)
        if (slots[p].column[k] >= 0 && std::llround(solution.x[slots[p].column[k]]) > 0) any = true;
      if (any) used_slots.push_back(static_cast<int>(p)), group_sizes.push_back(slots[p].size);
    }
    LayoutChoice& choice = result.choice;
    choice.groups = place_groups(group_sizes, 0, ranks, cost.ranks_per_node);
    choice.samples.assign(choice.groups.size(), {});
    choice.pinned.assign(n, 0);
    std::vector<double> loads(choice.groups.size(), 0.0);
    for (int k = buckets; k-- > 0;) {
      std::vector<int> room(used_slots.size());
      LoadTree open(static_cast<int>(used_slots.size()));
      for (size_t g = 0; g < used_slots.size(); ++g) {
        const int c = slots[used_slots[g]].column[k];
        room[g] = c >= 0 ? static_cast<int>(std::llround(solution.x[c])) : 0;
        open.add(static_cast<int>(g), room[g] > 0 ? loads[g] : kInf);
      }
      for (int s : members[k]) {
        int g = open.argmin();
        if (room[g] <= 0)  // rounding left no room: the least-loaded group
          g = static_cast<int>(std::min_element(loads.begin(), loads.begin() + used_slots.size()) -
                               loads.begin());
        const double t = cost.llm_time(costs.tokens[s], choice.groups[g].size, choice.groups[g].first);
        choice.samples[g].push_back(s);
        loads[g] += t;
        if (room[g] > 0) open.add(g, --room[g] > 0 ? t : kInf);
      }
    }
    for (size_t g = 0; g < used_slots.size(); ++g)
      for (int s : choice.samples[g])
        if (costs.tokens[s] > cost.token_capacity(choice.groups[g].size)) ++choice.overflowing;
    choice.llm_makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
    result.better = choice.overflowing <= heuristic.overflowing &&
                    choice.llm_makespan < heuristic.llm_makespan * (1.0 - 1e-12);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace minimllm::planning
