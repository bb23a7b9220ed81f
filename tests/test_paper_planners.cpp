// The planners as their papers describe them, against brute force on instances small enough to
// enumerate: FlexSP's MILP (bucketing, the solver's optimum, the heuristic as start and fallback), DHP's
// best-fit-decreasing packing and its rank-allocating dynamic programme, and OrchMLLM's node-wise
// rearrangement; the traffic a plan moves and the bytes of a plan broadcast from one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "baselines.hpp"
#include "dhp_packing.hpp"
#include "flexsp_milp.hpp"
#include "load_tree.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_prediction.hpp"
#include "node_locality.hpp"
#include "placement.hpp"
#include "planner_inputs.hpp"
#include "target_search.hpp"

namespace minimllm {
namespace {

using testing_support::batch_of_lengths;

constexpr double kGflops = 100.0;

using testing_support::deck;  // the decks in inputs/, with the batch size and seed of a case

CostModel text_cost(int ranks_per_node) {
  return default_cost_model(deck("text_longtail", 8, 1), kGflops, ranks_per_node);
}

// Lengths drawn from `distinct` values (so that every value gets its own bucket: the MILP is exact).
std::vector<int> random_lengths(std::mt19937& rng, int n, int distinct) {
  std::vector<int> values(distinct);
  std::uniform_int_distribution<int> length(16, 2048);
  for (int& v : values) v = length(rng);
  std::uniform_int_distribution<int> pick(0, distinct - 1);
  std::vector<int> lengths(n);
  for (int& l : lengths) l = values[pick(rng)];
  return lengths;
}

// ---------------------------------------------------------------------------------------------------
// FlexSP

// The bucketing DP against every way of cutting a short sorted list into at most B ranges.
TEST(FlexspMilp, BucketsMinimisePaddingAndAreExactWhenFew) {
  const std::vector<double> values = {1, 2, 2, 3, 7, 8, 8, 20, 21, 50};
  const auto padding = [&](const std::vector<int>& ends) {
    double sum = 0.0;
    for (size_t b = 0, begin = 0; b < ends.size(); begin = ends[b++])
      for (int i = static_cast<int>(begin); i < ends[b]; ++i) sum += values[ends[b] - 1] - values[i];
    return sum;
  };
  for (int buckets = 1; buckets <= 4; ++buckets) {
    SCOPED_TRACE(buckets);
    const std::vector<int> ends = planning::bucket_ends(values, buckets);
    ASSERT_FALSE(ends.empty());
    EXPECT_EQ(ends.back(), static_cast<int>(values.size()));
    EXPECT_LE(static_cast<int>(ends.size()), buckets);
    double best = std::numeric_limits<double>::infinity();
    const int n = static_cast<int>(values.size());
    for (int mask = 0; mask < (1 << (n - 1)); ++mask) {  // cut after position i when bit i is set
      if (__builtin_popcount(mask) + 1 > buckets) continue;
      std::vector<int> cut;
      for (int i = 0; i < n - 1; ++i)
        if (mask & (1 << i)) cut.push_back(i + 1);
      cut.push_back(n);
      best = std::min(best, padding(cut));
    }
    EXPECT_DOUBLE_EQ(padding(ends), best);
  }
  // Eight distinct values, eight buckets: each value its own bucket, no padding.
  const std::vector<int> exact = planning::bucket_ends(values, 8);
  EXPECT_EQ(exact, (std::vector<int>{1, 3, 4, 5, 7, 8, 9, 10}));
}

// Every (multiset of power-of-two group sizes within the ranks, assignment of samples to them): the least
// makespan of the LLM phase, each sample taking llm_time_spanning on its group.
double brute_force_flexsp(const std::vector<int>& lengths, const CostModel& cost, int ranks) {
  const int n = static_cast<int>(lengths.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> sizes;
  std::function<void(int, int)> groups = [&](int largest, int left) {
    if (!sizes.empty()) {
      const int g = static_cast<int>(sizes.size());
      std::vector<int> of(n, 0);
      for (long long code = 0, total = static_cast<long long>(std::pow(g, n)); code < total; ++code) {
        long long c = code;
        for (int s = 0; s < n; ++s) of[s] = static_cast<int>(c % g), c /= g;
        std::vector<double> load(g, 0.0);
        for (int s = 0; s < n; ++s)
          load[of[s]] += cost.llm_time_spanning(lengths[s], sizes[of[s]], sizes[of[s]] > cost.ranks_per_node);
        best = std::min(best, *std::max_element(load.begin(), load.end()));
      }
    }
    for (int d = largest; d >= 1; d /= 2)
      if (d <= left) {
        sizes.push_back(d);
        groups(d, left - d);
        sizes.pop_back();
      }
  };
  int top = 1;
  while (2 * top <= ranks) top *= 2;
  groups(top, ranks);
  return best;
}

planning::FlexspMilpResult solve_exactly(const std::vector<int>& lengths, const CostModel& cost, int ranks,
                                         planning::LayoutChoice* heuristic = nullptr) {
  const GlobalBatch batch = batch_of_lengths(lengths);
  const planning::BatchCosts costs = planning::batch_costs(batch, cost);
  const planning::LayoutChoice start =
      planning::best_target_layout({planning::SizeRule::power_of_two}, ranks, costs, cost);
  if (heuristic) *heuristic = start;
  planning::FlexspMilpOptions options;
  options.time_limit = 20.0;  // small enough to be solved to optimality well within it
  return planning::solve_flexsp_milp(costs, cost, ranks, start, options);
}

// Tiny instances (up to 5 samples on up to 4 ranks, nodes of 2 so groups of 4 span nodes): the solver's
// optimum is the brute-force optimum, and the layout it gives finishes then.
TEST(FlexspMilp, MatchesBruteForceOnTinyInstances) {
  if (!planning::milp_solver_available()) GTEST_SKIP() << "built without COIN-OR CBC";
  std::mt19937 rng(7);
  const CostModel cost = text_cost(2);
  for (int trial = 0; trial < 12; ++trial) {
    const int ranks = 2 + trial % 3;  // 2, 3, 4
    const std::vector<int> lengths = random_lengths(rng, 3 + trial % 3, 4);
    SCOPED_TRACE("trial " + std::to_string(trial) + " ranks " + std::to_string(ranks));
    const planning::FlexspMilpResult r = solve_exactly(lengths, cost, ranks);
    ASSERT_EQ(r.status, planning::MilpStatus::optimal);
    const double optimum = brute_force_flexsp(lengths, cost, ranks);
    EXPECT_NEAR(r.objective, optimum, 1e-6 * optimum);
    EXPECT_NEAR(r.choice.llm_makespan, optimum, 1e-6 * optimum);
    EXPECT_EQ(r.gap, 0.0);
  }
}

// Small instances solved to optimality: the MILP's layout is never slower than the heuristic it starts
// from, and on some it is faster.
TEST(FlexspMilp, BeatsOrEqualsTheHeuristicOnSmallInstances) {
  if (!planning::milp_solver_available()) GTEST_SKIP() << "built without COIN-OR CBC";
  std::mt19937 rng(11);
  const CostModel cost = text_cost(4);
  int strictly_better = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const int ranks = std::vector<int>{2, 4, 8}[trial % 3];
    const std::vector<int> lengths = random_lengths(rng, 6 + trial % 7, 8);
    SCOPED_TRACE("trial " + std::to_string(trial) + " ranks " + std::to_string(ranks));
    planning::LayoutChoice heuristic;
    const planning::FlexspMilpResult r = solve_exactly(lengths, cost, ranks, &heuristic);
    ASSERT_EQ(r.status, planning::MilpStatus::optimal);
    EXPECT_LE(r.choice.llm_makespan, heuristic.llm_makespan * (1.0 + 1e-9));
    EXPECT_EQ(r.better, r.choice.llm_makespan < heuristic.llm_makespan * (1.0 - 1e-12));
    strictly_better += r.better;
  }
  EXPECT_GT(strictly_better, 0) << "the heuristic was optimal everywhere: the test shows nothing";
}

// flexsp says which algorithm made each plan: the MILP's when it is faster, else the heuristic's, which is
// also what a time-out without a better solution, a model too large for the limit, or a limit of 0 give.
TEST(FlexspMilp, TimeOutFallsBackToTheHeuristicAndSaysSo) {
  const RunConfig config = deck("text_longtail", 512, 3);
  const CostModel cost = default_cost_model(config, kGflops, 8);
  const GlobalBatch batch = Sampler(config).batch(0);
  PlannerOptions heuristic_only;
  heuristic_only.flexsp_time_limit = 0.0;
  const auto heuristic = make_planner("flexsp", cost, heuristic_only);
  EXPECT_TRUE(heuristic->deterministic());
  const StepPlan reference = heuristic->plan(batch, 64);
  EXPECT_EQ(reference.origin.solver_status, "not_run");
  EXPECT_NE(reference.origin.source, "milp");

  // 64 ranks: too many columns for 10 ms; not attempted.
  PlannerOptions short_limit;
  short_limit.flexsp_time_limit = 0.01;
  const auto limited = make_planner("flexsp", cost, short_limit);
  EXPECT_EQ(limited->deterministic(), !planning::milp_solver_available());
  const StepPlan skipped = limited->plan(batch, 64);
  EXPECT_EQ(skipped.origin.solver_status, planning::milp_solver_available() ? "too_large" : "unavailable");
  EXPECT_EQ(skipped.origin.source, reference.origin.source);
  EXPECT_EQ(skipped.llm_groups.size(), reference.llm_groups.size());
  if (!planning::milp_solver_available()) return;

  // 2 and 4 ranks, 512 samples, 10 ms: attempted, and stopped by the limit (or, on a fast machine,
  // solved); the plan names its source, and is the heuristic's when the MILP's was not faster.
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    const planning::BatchCosts costs = planning::batch_costs(batch, cost);
    const planning::LayoutChoice start =
        planning::best_target_layout({planning::SizeRule::power_of_two}, world, costs, cost);
    planning::FlexspMilpOptions options;
    options.time_limit = 0.01;
    const planning::FlexspMilpResult r = planning::solve_flexsp_milp(costs, cost, world, start, options);
    ASSERT_NE(r.status, planning::MilpStatus::too_large) << r.columns << " columns";
    EXPECT_LT(r.seconds, 1.0);
    if (r.status == planning::MilpStatus::time_limit) {
      EXPECT_GE(r.objective, r.bound);
    }
    const StepPlan plan = limited->plan(batch, world);
    EXPECT_NE(plan.origin.solver_status, "not_run");
    EXPECT_GE(plan.origin.solver_seconds, 0.0);
    const StepPlan fallback = heuristic->plan(batch, world);
    if (plan.origin.source != "milp") {
      ASSERT_EQ(plan.llm_groups.size(), fallback.llm_groups.size());
      for (size_t k = 0; k < plan.llm_groups.size(); ++k)
        EXPECT_EQ(plan.llm_groups[k].samples, fallback.llm_groups[k].samples);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// DHP

// Best-fit decreasing never overfills a pack: every pack holds at most what its group's memory and
// budget allow, every sample is in one pack, and a pack's need is the smallest group that holds its
// longest sample.
TEST(DhpPacking, BestFitDecreasingNeverExceedsTheBudget) {
  for (int budget : {100, 300, 1000, 5000}) {
    for (int seed : {1, 2, 3}) {
      SCOPED_TRACE("budget " + std::to_string(budget) + " seed " + std::to_string(seed));
      const RunConfig config = deck("text_longtail", 200, seed);
      CostModel cost = default_cost_model(config, kGflops, 4);
      if (seed == 3) {  // memory binds: 700 tokens on one rank
        cost.memory.per_row = 1000.0, cost.memory.per_key_row = 200.0;
        cost.capacity_bytes = 700.0 * cost.memory.per_row;
      }
      const GlobalBatch batch = Sampler(config).batch(0);
      const planning::BatchCosts costs = planning::batch_costs(batch, cost);
      const int ranks = 64;
      const planning::CapacityTable capacity(cost, ranks, budget);
      const std::vector<planning::DhpPack> packs = planning::pack_best_fit_decreasing(costs, capacity);
      std::vector<int> seen(batch.samples.size(), 0);
      for (const planning::DhpPack& p : packs) {
        ASSERT_FALSE(p.samples.empty());
        double tokens = 0.0;
        for (int s : p.samples) tokens += costs.tokens[s], ++seen[s];
        EXPECT_DOUBLE_EQ(tokens, p.tokens);
        EXPECT_LE(p.tokens, capacity.capacity(p.need) * (1 + 1e-12));
        EXPECT_LE(p.tokens, static_cast<double>(p.need) * budget * (1 + 1e-12));
        EXPECT_EQ(p.need, capacity.smallest_group(costs.tokens[p.samples.front()]));
      }
      for (int count : seen) EXPECT_EQ(count, 1);
      // The planner: every micro-batch (a pack) within what its group holds.
      PlannerOptions options;
      options.tokens_per_rank = budget;
      const StepPlan plan = make_planner("dhp", cost, options)->plan(batch, ranks);
      ASSERT_NO_THROW(validate_plan(plan, batch, ranks));
      if (plan.origin.source == "static_layout") continue;
      for (const LlmGroup& g : plan.llm_groups) {
        const int size = static_cast<int>(g.ranks.size());
        for (size_t m = 0, begin = 0; m < g.micro_batch_ends.size(); begin = g.micro_batch_ends[m++]) {
          double tokens = 0.0;
          for (int i = static_cast<int>(begin); i < g.micro_batch_ends[m]; ++i)
            tokens += costs.tokens[g.samples[i]];
          EXPECT_LE(tokens, capacity.capacity(size) * (1 + 1e-12));
        }
      }
    }
  }
}

// The allocation against every composition of the work-ordered packs into runs and every rank count per
// run (the dynamic programme's own search space): the same least makespan.
TEST(DhpPacking, RankAllocationIsOptimalOnSmallCases) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const CostModel cost = text_cost(trial % 2 ? 2 : 8);
    const int n = 1 + trial % 5, ranks = 1 + trial % 6;
    std::uniform_real_distribution<double> tokens(50.0, 3000.0);
    std::uniform_int_distribution<int> count(1, 6), need(1, 2);
    std::vector<planning::DhpPack> packs(n);
    for (planning::DhpPack& p : packs) {
      p.samples.assign(count(rng), 0);
      p.tokens = tokens(rng);
      p.work = cost.llm(p.tokens / p.samples.size()) * p.samples.size();
      p.need = std::min(ranks, need(rng));
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(n) + " packs, " +
                 std::to_string(ranks) + " ranks");
    const planning::DhpAllocation a = planning::allocate_ranks(packs, cost, ranks);
    // Brute force, packs in the allocation's order (decreasing work, stable).
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return packs[x].work > packs[y].work; });
    double best = std::numeric_limits<double>::infinity();
    std::function<void(int, int, double)> runs = [&](int first, int left, double worst) {
      if (first == n) {
        best = std::min(best, worst);
        return;
      }
      double work = 0.0, tok = 0.0, micro_batches = 0.0;  // a pack is one micro-batch
      int most = 1;
      for (int end = first + 1; end <= n; ++end) {
        const planning::DhpPack& p = packs[order[end - 1]];
        work += p.work, tok += p.tokens, micro_batches += 1.0, most = std::max(most, p.need);
        for (int g = most; g <= left; ++g)
          runs(end, left - g, std::max(worst, planning::group_time(cost, work, tok, micro_batches, g)));
      }
    };
    runs(0, ranks, 0.0);
    ASSERT_EQ(a.feasible, std::isfinite(best));
    if (!a.feasible) continue;
    EXPECT_NEAR(a.makespan, best, 2e-4 * best);  // the bisection's tolerance
    int used = 0;
    for (size_t k = 0; k < a.runs.size(); ++k) {
      used += a.sizes[k];
      for (int p : a.runs[k]) EXPECT_GE(a.sizes[k], packs[p].need);
    }
    EXPECT_LE(used, ranks);
  }
}

// The shortcuts (runs ruled out by bounds of their size, sizes reused between the bisection's probes) give
// the allocation of the plain DP, every run sized from scratch, on the benchmark's decks and scales
// (bench_planners: 1,024 ranks x 4,096 samples, 8 ranks per node) and on smaller ones with other nodes,
// the ring and the tree.
TEST(DhpPacking, ShortcutsKeepTheAllocation) {
  struct Case {
    const char* deck;
    int samples, ranks, ranks_per_node;
    CollectiveAlgorithm algorithm;
  };
  for (const Case& c : {Case{"text_longtail", 4096, 1024, 8, CollectiveAlgorithm::ring},
                        Case{"modality_incoherent", 4096, 1024, 8, CollectiveAlgorithm::ring},
                        Case{"many_images", 4096, 1024, 8, CollectiveAlgorithm::ring},
                        Case{"long_context", 4096, 1024, 8, CollectiveAlgorithm::ring},
                        Case{"long_context", 1024, 256, 4, CollectiveAlgorithm::tree},
                        Case{"text_longtail", 512, 96, 3, CollectiveAlgorithm::tree}}) {
    SCOPED_TRACE(std::string(c.deck) + " " + std::to_string(c.ranks) + " x " + std::to_string(c.samples));
    const RunConfig config = deck(c.deck, c.samples, 1);
    CostModel cost = default_cost_model(config, kGflops, c.ranks_per_node);
    cost.algorithm = c.algorithm;
    const GlobalBatch batch = Sampler(config).batch(0);
    const planning::BatchCosts costs = planning::batch_costs(batch, cost);
    const planning::CapacityTable capacity(cost, c.ranks,
                                           planning::token_budget(0, 1, costs.max_tokens, cost));
    const std::vector<planning::DhpPack> packs = planning::pack_best_fit_decreasing(costs, capacity);
    const planning::DhpAllocation reused = planning::allocate_ranks(packs, cost, c.ranks, true);
    const planning::DhpAllocation fresh = planning::allocate_ranks(packs, cost, c.ranks, false);
    ASSERT_TRUE(fresh.feasible);
    EXPECT_EQ(reused.feasible, fresh.feasible);
    EXPECT_EQ(reused.sizes, fresh.sizes);
    EXPECT_EQ(reused.runs, fresh.runs);
    EXPECT_EQ(reused.makespan, fresh.makespan);
  }
}

// ---------------------------------------------------------------------------------------------------
// Group sizes for a target (group_time.hpp)

// A cost model with random links, collective algorithm and nodes.
CostModel random_cost(std::mt19937& rng, int ranks_per_node) {
  CostModel cost = text_cost(ranks_per_node);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto log_uniform = [&](double lo, double hi) { return lo * std::pow(hi / lo, unit(rng)); };
  cost.algorithm = unit(rng) < 0.5 ? CollectiveAlgorithm::ring : CollectiveAlgorithm::tree;
  cost.intra_node = {log_uniform(1e-7, 1e-4), log_uniform(1e9, 1e12)};
  cost.inter_node = {log_uniform(1e-7, 1e-3), log_uniform(1e8, 1e11)};
  cost.kv_row_bytes = log_uniform(1e2, 1e5);
  cost.cp_layers = 1 + static_cast<int>(unit(rng) * 32);
  // Every mechanism; the ring's transfers partly hidden, so that its per-token term falls with the size.
  const double mode = unit(rng);
  cost.cp_comm = mode < 0.5 ? CpComm::p2p : mode < 0.75 ? CpComm::a2a : CpComm::all_gather;
  cost.cp_overlap = unit(rng) < 0.3 ? 0.0 : unit(rng);
  cost.cp_heads = std::vector<int>{0, 4, 12, 32}[static_cast<int>(unit(rng) * 4)];
  return cost;
}

// The smallest size meeting the target, by trying every size.
int smallest_meeting(const planning::GroupTimes& times, double work, double tokens, double count,
                     double target, int min_g, int max_g) {
  for (int g = std::max(min_g, 1); g <= max_g; ++g)
    if (times(work, tokens, count, g) <= target) return g;
  return max_g + 1;
}

// ranks_for_target against every size, on random cost models (ring and tree, nodes of 1 to 16 ranks,
// sizes past the table) and targets about the fastest time, equal to some size's time, or far off.
TEST(RanksForTarget, IsTheSmallestSizeMeetingTheTarget) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int checked = 0, spanning = 0;
  for (int model = 0; model < 200; ++model) {
    const int ranks_per_node = std::vector<int>{1, 2, 3, 4, 8, 16}[model % 6];
    const CostModel cost = random_cost(rng, ranks_per_node);
    const int ranks = 1 + static_cast<int>(unit(rng) * 300);
    const planning::GroupTimes times(cost, ranks);
    for (int query = 0; query < 200; ++query) {
      const double tokens = unit(rng) < 0.05 ? 0.0 : 1e5 * std::pow(unit(rng), 3.0);
      const double count = unit(rng) < 0.05 ? 0.0 : 1 + static_cast<int>(unit(rng) * 64);
      const double work =
          unit(rng) < 0.05 ? 0.0 : cost.llm(tokens / std::max(count, 1.0)) * count * (0.5 + unit(rng));
      const int min_g = static_cast<int>(unit(rng) * unit(rng) * ranks);  // 0 at times
      const int max_g = unit(rng) < 0.1 ? ranks + static_cast<int>(unit(rng) * 40) : std::max(min_g, ranks);
      double fastest = work;
      for (int g = std::max(min_g, 1); g <= max_g; ++g)
        fastest = std::min(fastest, times(work, tokens, count, g));
      const double pick = unit(rng);
      const double target =
          pick < 0.3
              ? times(work, tokens, count,
                      std::max(min_g, 1) + static_cast<int>(unit(rng) * (max_g - std::max(min_g, 1) + 1)))
          : pick < 0.9  ? fastest * (0.98 + 0.5 * unit(rng) * unit(rng))
          : pick < 0.95 ? work * unit(rng)
                        : fastest * 0.5;
      SCOPED_TRACE("model " + std::to_string(model) + " query " + std::to_string(query));
      const int expected = smallest_meeting(times, work, tokens, count, target, min_g, max_g);
      ASSERT_EQ(planning::ranks_for_target(times, work, tokens, count, target, min_g, max_g), expected)
          << "work " << work << " tokens " << tokens << " count " << count << " target " << target << " in ["
          << min_g << ", " << max_g << "], " << ranks << " ranks, " << ranks_per_node << " per node";
      ++checked;
      spanning += expected > ranks_per_node && expected <= max_g;
    }
  }
  EXPECT_GT(spanning, checked / 10);  // the cases cross nodes
}

// The least time over a range of sizes, from each run's last size, against every size.
TEST(GroupTimes, FastestIsTheLeastTimeOverTheSizes) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int model = 0; model < 100; ++model) {
    const CostModel cost = random_cost(rng, std::vector<int>{1, 2, 4, 8, 16}[model % 5]);
    const int ranks = 1 + static_cast<int>(unit(rng) * 300);
    const planning::GroupTimes times(cost, ranks);
    for (int query = 0; query < 100; ++query) {
      const double tokens = 1e5 * std::pow(unit(rng), 3.0), count = 1 + static_cast<int>(unit(rng) * 16);
      const double work = cost.llm(tokens / count) * count * (0.5 + unit(rng));
      const int min_g = static_cast<int>(unit(rng) * unit(rng) * ranks);
      const int max_g = unit(rng) < 0.1 ? ranks + static_cast<int>(unit(rng) * 40) : ranks;
      double least = std::numeric_limits<double>::infinity();
      for (int g = std::max(min_g, 1); g <= max_g; ++g)
        least = std::min(least, times(work, tokens, count, g));
      ASSERT_EQ(times.fastest(work, tokens, count, min_g, max_g), least)
          << "model " << model << ", query " << query << ": [" << min_g << ", " << max_g << "]";
    }
  }
}

// A looser target never needs more ranks: the size over a fine sweep of targets, and over every size's own
// time as the target, never grows.
TEST(RanksForTarget, NeverNeedsMoreRanksForALooserTarget) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int model = 0; model < 60; ++model) {
    const int ranks_per_node = std::vector<int>{2, 4, 8}[model % 3];
    const CostModel cost = random_cost(rng, ranks_per_node);
    const int ranks = 256;
    const planning::GroupTimes times(cost, ranks);
    for (int query = 0; query < 20; ++query) {
      const double tokens = 1e5 * std::pow(unit(rng), 2.0), count = 1 + static_cast<int>(unit(rng) * 16);
      const double work = cost.llm(tokens / count) * count;
      const int min_g = 1 + static_cast<int>(unit(rng) * 4);
      std::vector<double> targets;
      for (int g = min_g; g <= ranks; ++g) targets.push_back(times(work, tokens, count, g));
      const double fastest = *std::min_element(targets.begin(), targets.end());
      for (int k = 0; k <= 400; ++k) targets.push_back(fastest * (0.99 + k * 0.0025));
      std::sort(targets.begin(), targets.end());
      int previous = ranks + 1;
      for (double target : targets) {
        const int g = planning::ranks_for_target(times, work, tokens, count, target, min_g, ranks);
        ASSERT_LE(g, previous) << "target " << target << ", model " << model << ", query " << query;
        previous = g;
      }
      EXPECT_LE(previous, ranks);  // the loosest targets are met
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// OrchMLLM's node-wise rearrangement and the traffic a plan moves

// NodeLoads answers what one LoadTree over all slots answers (ties to the lowest slot), on node layouts
// with empty nodes and nodes of more than one block, under adds of repeated sizes (ties happen).
TEST(NodeLoads, AnswersAsOneLoadTreeOverAllSlots) {
  std::mt19937 rng(7);
  for (const std::vector<int>& sizes :
       {std::vector<int>{8, 8, 8, 8}, {1, 0, 3, 40, 0, 16, 17, 2}, {64}, {5, 0, 0, 1}}) {
    std::vector<int> node_begin{0};
    for (int s : sizes) node_begin.push_back(node_begin.back() + s);
    const int slots = node_begin.back();
    planning::NodeLoads loads(node_begin);
    planning::LoadTree reference(slots);
    std::uniform_int_distribution<int> pick_node(0, static_cast<int>(sizes.size()) - 1), size(1, 4);
    for (int step = 0; step < 3000; ++step) {
      const int global = loads.argmin();
      ASSERT_EQ(global, reference.argmin()) << "step " << step;
      ASSERT_LE(loads.min_lower_bound(), loads.load(global));
      const int node = pick_node(rng);
      int slot = global;
      if (loads.has_slots(node) && step % 3 != 0) {
        slot = loads.argmin_in(node);
        ASSERT_EQ(slot, reference.argmin(node_begin[node], node_begin[node + 1])) << "step " << step;
      }
      const double amount = 0.25 * size(rng);
      loads.add(slot, amount);
      reference.add(slot, amount);
      ASSERT_EQ(loads.load(slot), reference.load(slot));
    }
  }
}

// balance_items as its contract reads, written plainly, stage by stage: first whole samples, largest
// first (ties in index order), each on the least-loaded encoder rank of its LLM node (ties to the lowest
// position) if that rank stays within the stage's mean load; then the other samples' images one by one,
// largest first (ties in image order), each on the least-loaded encoder rank of its sample's LLM node
// unless that is more than tolerance x the mean load above the least loaded of all. A sample's encoder
// time is its images' summed in image order, the stage's total its samples' summed in index order.
std::vector<int> plain_image_placement(const GlobalBatch& batch, const CostModel& cost,
                                       const std::vector<int>& encoder_ranks,
                                       const std::vector<int>& preferred, double tolerance,
                                       const std::vector<int>& stage_of_sample) {
  const int e = static_cast<int>(encoder_ranks.size()), n = static_cast<int>(batch.samples.size());
  struct Image {
    int sample, patches, index;
    double time;
  };
  std::vector<Image> images;
  std::vector<double> bundle(n, 0.0);
  int stages = 1;
  for (int s = 0; s < n; ++s) {
    for (const EncoderItem& im : batch.samples[s].items) {
      images.push_back({s, im.rows, static_cast<int>(images.size()), cost.encoder_time(im)});
      bundle[s] += images.back().time;
    }
    stages = std::max(stages, stage_of_sample[s] + 1);
  }
  // The least-loaded position on a node (-1: none there, or no node).
  const auto least_on = [&](const std::vector<double>& load, int node) {
    int pos = -1;
    for (int p = 0; p < e; ++p)
      if (node >= 0 && cost.node_of(encoder_ranks[p]) == node && (pos < 0 || load[p] < load[pos])) pos = p;
    return pos;
  };
  const auto node_of = [&](int s) { return preferred[s] >= 0 ? cost.node_of(preferred[s]) : -1; };
  std::vector<int> owner(images.size(), -1);
  for (int m = 0; m < stages; ++m) {
    double total = 0.0;
    std::vector<int> samples;
    for (int s = 0; s < n; ++s)
      if (stage_of_sample[s] == m) total += bundle[s], samples.push_back(s);
    const double mean = total / e, slack = tolerance * mean;
    std::vector<double> load(e, 0.0);
    std::stable_sort(samples.begin(), samples.end(), [&](int a, int b) { return bundle[a] > bundle[b]; });
    std::vector<char> whole(n, 0);
    for (int s : samples) {
      const int pos = least_on(load, node_of(s));
      if (batch.samples[s].items.empty() || pos < 0 || load[pos] + bundle[s] > mean) continue;
      whole[s] = 1;
      load[pos] += bundle[s];
      for (const Image& im : images)
        if (im.sample == s) owner[im.index] = encoder_ranks[pos];
    }
    std::vector<Image> order;
    for (const Image& im : images)
      if (stage_of_sample[im.sample] == m && !whole[im.sample]) order.push_back(im);
    std::stable_sort(order.begin(), order.end(),
                     [](const Image& a, const Image& b) { return a.patches > b.patches; });
    for (const Image& im : order) {
      const int least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      int pos = least_on(load, node_of(im.sample));
      if (pos < 0 || load[pos] > load[least] + slack) pos = least;
      load[pos] += im.time;
      owner[im.index] = encoder_ranks[pos];
    }
  }
  return owner;
}

// The same placements whichever sort orders the images: counting by (stage, patches), or comparing where
// one image's patches make the counting range too wide; with and without pipeline stages, with encoder
// ranks on some nodes only and samples whose node has none or that have no LLM rank.
TEST(ImagePlacement, AnswersAsThePlainPlacement) {
  std::mt19937 rng(3);
  CostModel cost;
  cost.ranks_per_node = 4;
  cost.encoders = {EncoderCost{{1e-9, 1e-6, 1e-5}}};
  const std::vector<int> encoder_ranks = {0, 1, 2, 3, 5, 6, 13, 14, 15};  // nodes 0, 1, 3; none on node 2
  for (const bool huge_image : {false, true})
    for (const int stages : {1, 3}) {
      SCOPED_TRACE(std::string(huge_image ? "comparison sort" : "counting sort") + ", " +
                   std::to_string(stages) + " stages");
      GlobalBatch batch = batch_of_lengths(std::vector<int>(40, 16));
      std::vector<int> preferred(batch.samples.size()), stage_of_sample(batch.samples.size());
      for (size_t s = 0; s < batch.samples.size(); ++s) {
        for (int i = static_cast<int>(rng() % 6); i > 0; --i) {
          EncoderItem im;
          im.rows = 1 + static_cast<int>(rng() % 8) * 4;  // repeated sizes: ties in the order
          batch.samples[s].items.push_back(im);
        }
        preferred[s] = static_cast<int>(rng() % 17) - 1;  // -1: no LLM rank
        stage_of_sample[s] = static_cast<int>(rng() % stages);
      }
      if (huge_image) {
        EncoderItem im;
        im.rows = 100000;
        batch.samples[7].items.push_back(im);
      }
      for (const double tolerance : {0.0, 0.02, 0.5}) {
        const std::vector<int> placed =
            planning::balance_items(batch, cost, encoder_ranks, preferred, tolerance, stage_of_sample);
        EXPECT_EQ(placed,
                  plain_image_placement(batch, cost, encoder_ranks, preferred, tolerance, stage_of_sample))
            << "tolerance " << tolerance;
      }
    }
}

// A sample's images stay together on a rank of its node while that rank stays within the mean load (the
// bound included); a sample that would pass it is placed image by image. Two encoder ranks on one node,
// one second per patch.
TEST(ImagePlacement, WholeSamplesUpToTheMeanLoad) {
  CostModel cost;
  cost.ranks_per_node = 4;
  cost.encoders = {EncoderCost{{0.0, 1.0, 0.0}}};
  const auto place = [&](const std::vector<std::vector<int>>& patches) {
    GlobalBatch batch = batch_of_lengths(std::vector<int>(patches.size(), 16));
    for (size_t s = 0; s < patches.size(); ++s)
      for (int p : patches[s]) {
        EncoderItem im;
        im.rows = p;
        batch.samples[s].items.push_back(im);
      }
    return planning::balance_items(batch, cost, {0, 1}, std::vector<int>(patches.size(), 0), 0.0);
  };
  // Mean 100: each sample exactly fills a rank.
  EXPECT_EQ(place({{50, 50}, {50, 50}}), (std::vector<int>{0, 0, 1, 1}));
  // Mean 100: the first sample (101) passes it and is split: its 51 and 50 go to the empty rank 1 after
  // the second sample (99) went whole to rank 0.
  EXPECT_EQ(place({{50, 51}, {49, 50}}), (std::vector<int>{1, 1, 0, 0}));
}

TEST(PlanTraffic, LoadersHoldContiguousShards) {
  std::vector<int> of;
  for (int s = 0; s < 10; ++s) of.push_back(sample_loader_rank(s, 10, 4));
  EXPECT_EQ(of, (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(sample_loader_rank(0, 2, 4), 1);  // fewer samples than ranks: ranks 0 and 2 load none
  EXPECT_EQ(sample_loader_rank(1, 2, 4), 3);
}

// Two nodes of two ranks; four samples (loaders 0, 1, 2, 3). Sample 0 runs on a group {0, 1}, sample 1 on
// rank 3, samples 2 and 3 on rank 2; one image of sample 1, encoded on rank 0.
TEST(PlanTraffic, CountsBytesByWhereTheyGo) {
  CostModel cost;
  cost.ranks_per_node = 2;
  cost.input_bytes_per_token = 1.0;
  cost.encoders = {EncoderCost{}};
  cost.encoders[0].input_bytes_per_row = 10.0;
  cost.boundary_bytes_per_row = 100.0;
  GlobalBatch batch = batch_of_lengths({8, 6, 4, 2});
  EncoderItem image;
  image.rows = 3;
  batch.samples[1].items.push_back(image);
  StepPlan plan;
  plan.llm_groups = {{{0, 1}, {0}, 1, {}}, {{2}, {2, 3}, 1, {}}, {{3}, {1}, 1, {}}};
  plan.encoder_ranks = {0, 1, 2, 3};
  plan.item_owner = {0};
  const PlanTraffic t = plan_traffic(plan, batch, cost, 4);
  // Sample 0 (loader 0): its 8 bytes to rank 1 (intra; every member gets all its token ids). Sample 1 (loader
  // 1): 6 bytes to rank 3 (inter); its pixels, 30 bytes, to rank 0 (intra); its embeddings, 300 bytes, from
  // rank 0 to rank 3 (inter). Sample 2 (loader 2) stays; sample 3 (loader 3): 2 bytes to rank 2 (intra).
  EXPECT_DOUBLE_EQ(t.intra_node_bytes, 8.0 + 30.0 + 2.0);
  EXPECT_DOUBLE_EQ(t.inter_node_bytes, 6.0 + 300.0);
}

// Bundles whose samples are all loaded on one rank each go to that rank.
TEST(NodeLocality, BundlesGoWhereTheirSamplesAreLoaded) {
  // Samples 0..7, two per rank's loader: loader[s] = s / 2 on ranks 4..7 (first_rank 4, nodes of 2).
  const std::vector<int> loader = {7, 7, 4, 4, 6, 6, 5, 5};
  const std::vector<double> bytes(8, 1.0);
  std::vector<std::vector<int>> bundles = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};  // for ranks 4, 5, 6, 7
  planning::place_bundles_near_loaders(bundles, 4, loader, bytes, 2);
  EXPECT_EQ(bundles, (std::vector<std::vector<int>>{{2, 3}, {6, 7}, {4, 5}, {0, 1}}));
  // A bundle split over two nodes goes to the node holding more of its bytes.
  std::vector<std::vector<int>> split = {{0, 2, 3}, {1, 4, 5, 6, 7}};  // ranks 0, 1 (nodes of 1)
  planning::place_bundles_near_loaders(split, 0, {1, 1, 0, 0, 0, 0, 0, 0}, {5, 5, 1, 1, 1, 1, 1, 1}, 1);
  EXPECT_EQ(split, (std::vector<std::vector<int>>{{1, 4, 5, 6, 7}, {0, 2, 3}}));
}

// A deck's first batch of 256 samples and orch's plan of it over `world` ranks in nodes of `per_node`.
struct OrchCase {
  CostModel cost;
  GlobalBatch batch;
  StepPlan plan;
};
OrchCase orch_case(const std::string& name, int seed, int per_node, int world) {
  const RunConfig config = deck(name, 256, seed);
  OrchCase c{default_cost_model(config, kGflops, per_node), Sampler(config).batch(0), {}};
  c.plan = make_planner("orch", c.cost, {})->plan(c.batch, world);
  return c;
}

// orch on a modality-incoherent batch over 32 ranks in nodes of 4: most samples run on their loader's
// node, and it moves far fewer bytes between nodes than the same balanced bundles (LLM and encoder)
// shifted by a node, with the same phases. (Images still cross nodes where the encoder's balance needs it:
// image-heavy samples are not spread evenly over the loaders.)
TEST(NodeLocality, OrchPrefersMovesInsideANode) {
  const int world = 32;
  const OrchCase c = orch_case("modality_incoherent", 9, 4, world);
  ASSERT_EQ(c.plan.origin.source, "heuristic");
  ASSERT_EQ(c.plan.llm_groups.size(), static_cast<size_t>(world));
  StepPlan shifted = c.plan;
  for (int r = 0; r < world; ++r) shifted.llm_groups[(r + 4) % world].samples = c.plan.llm_groups[r].samples;
  for (int& owner : shifted.item_owner) owner = (owner + 4) % world;
  const PlanTraffic near = plan_traffic(c.plan, c.batch, c.cost, world);
  const PlanTraffic far = plan_traffic(shifted, c.batch, c.cost, world);
  EXPECT_LT(near.inter_node_bytes, 0.6 * far.inter_node_bytes);
  int at_home = 0;
  for (const LlmGroup& g : c.plan.llm_groups)
    for (int s : g.samples)
      at_home += c.cost.node_of(g.ranks.front()) == c.cost.node_of(sample_loader_rank(s, 256, world));
  EXPECT_GE(at_home, 0.75 * 256);
  EXPECT_GT(near.intra_node_bytes, far.intra_node_bytes);
  const PlanPrediction p = predict(c.plan, c.batch, c.cost, world),
                       q = predict(shifted, c.batch, c.cost, world);
  EXPECT_NEAR(p.llm, q.llm, 1e-12);
  EXPECT_NEAR(p.encoder, q.encoder, 1e-12);
}

// orch on an image-heavy batch (25 images per sample on average) over 32 ranks in nodes of 8: most
// samples' images are encoded together on one rank (96%; 0 when each image was placed on its own), a
// quarter or more on their sample's own rank (32%; 14% image by image), and the encoder stays balanced: its
// slowest rank within 3% of the mean (0.1%).
TEST(NodeLocality, OrchEncodesMostSamplesImagesTogether) {
  const int world = 32;
  const OrchCase c = orch_case("many_images", 5, 8, world);
  const std::vector<int> first_item = first_item_of_samples(c.batch);
  std::vector<double> encoder_load(world, 0.0);
  int together = 0, with_their_sample = 0;
  std::vector<int> llm_rank(c.batch.samples.size());
  for (const LlmGroup& g : c.plan.llm_groups)
    for (int s : g.samples) llm_rank[s] = g.ranks.front();
  for (size_t s = 0; s < c.batch.samples.size(); ++s) {
    const int first = first_item[s], end = first_item[s + 1];
    for (int i = first; i < end; ++i) {
      encoder_load[c.plan.item_owner[i]] += c.cost.encoder_time(c.batch.samples[s].items[i - first]);
      with_their_sample += c.plan.item_owner[i] == llm_rank[s];
    }
    if (std::all_of(c.plan.item_owner.begin() + first, c.plan.item_owner.begin() + end,
                    [&](int owner) { return owner == c.plan.item_owner[first]; }))
      together += end - first;
  }
  const int images = first_item.back();
  const double mean = std::accumulate(encoder_load.begin(), encoder_load.end(), 0.0) / world;
  EXPECT_GE(together, 0.7 * images);
  EXPECT_GE(with_their_sample, 0.25 * images);
  EXPECT_LE(*std::max_element(encoder_load.begin(), encoder_load.end()), 1.03 * mean);
}

// orch on static's DP x CP layout: on batches (long-tailed text; modality-incoherent, with images; two seeds
// each) whose longest samples fit only a group of cp = 4 ranks (not 2), orch balances the samples over
// static's replicas (the same groups of 4 consecutive ranks) in micro-batches no larger than static's bins,
// so it plans its own layout every step, within memory, and no slower than static. (On groups of one rank
// such a batch does not fit: it fell back to static's layout.)
void orch_balances_static_replicas_within_memory(const RunConfig& config) {
  const int world = 64, cp = 4;
  CostModel cost = default_cost_model(config, kGflops, 8);
  cost.memory = memory_model(config.model, GemmPrecision::fp32);
  const Sampler sampler(config);
  std::vector<GlobalBatch> batches;
  int longest = 0;
  double patches = 0.0, largest = 0.0;  // the most of a step, and the largest image
  for (int step = 0; step < 4; ++step) {
    batches.push_back(sampler.batch(step));
    longest = std::max(longest, planning::batch_costs(batches.back(), cost).max_tokens);
    double step_patches = 0.0;
    for (const SampleMeta& s : batches.back().samples)
      for (const EncoderItem& im : s.items)
        step_patches += im.rows, largest = std::max<double>(largest, im.rows);
    patches = std::max(patches, step_patches);
  }
  // Twice a rank's share of the step's images beside the LLM's rows (the encoder's activations are held
  // for the whole step), and a third of the longest sample's rows.
  cost.encoder_reserve_bytes = 2.0 * cost.memory.per_encoder_row.at(0) * (patches / world + largest);
  cost.capacity_bytes = cost.memory.state + cost.memory.fixed + cost.encoder_reserve_bytes +
                        longest / 3.0 * cost.memory.per_row;
  ASSERT_LT(cost.token_capacity(2), longest);
  ASSERT_GE(cost.token_capacity(cp), longest);
  PlannerOptions options;
  options.cp = cp;
  const auto orch = make_planner("orch", cost, options);
  const auto baseline = make_planner("static", cost, options);
  for (const GlobalBatch& batch : batches) {
    SCOPED_TRACE("step " + std::to_string(batch.step));
    const StepPlan plan = orch->plan(batch, world);
    EXPECT_EQ(plan.origin.source, "heuristic");
    ASSERT_EQ(plan.llm_groups.size(), static_cast<size_t>(world / cp));
    const std::vector<double> tokens = planning::batch_costs(batch, cost).tokens;
    for (size_t k = 0; k < plan.llm_groups.size(); ++k) {
      const LlmGroup& group = plan.llm_groups[k];
      EXPECT_EQ(group.ranks, consecutive_ranks(static_cast<int>(k) * cp, cp));
      for (int m = 0; m < group.micro_batches; ++m) {
        double sum = 0.0;
        for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i)
          sum += tokens[group.samples[i]];
        EXPECT_LE(sum, cost.token_capacity(cp)) << "group " << k << " micro-batch " << m;
      }
    }
    EXPECT_LE(predict(plan, batch, cost, world).makespan,
              predict(baseline->plan(batch, world), batch, cost, world).makespan * (1 + 1e-12));
  }
}

TEST(NodeLocality, OrchBalancesStaticReplicasWithinMemory) {
  for (const std::string name : {"text_longtail", "modality_incoherent"})
    for (std::uint64_t seed : {3, 17}) {
      SCOPED_TRACE(name + " seed " + std::to_string(seed));
      orch_balances_static_replicas_within_memory(deck(name, 512, seed));
    }
}

// ---------------------------------------------------------------------------------------------------
// The static baseline's lower bound (at_least_static skips static's plan when a plan beats the bound)

// Never above static's predicted step, on image-heavy and text decks, one and several nodes, cp 1 and 2;
// and where groups are single ranks on one node the bound is that step (no K/V exchange, images encoded
// where their sample runs, so no boundary either).
TEST(Baselines, StaticLowerBoundNeverExceedsStaticsPredictedStep) {
  for (const std::string name : {"many_images", "modality_incoherent", "text_longtail"}) {
    for (const int world : {4, 16}) {
      for (const int cp : {1, 2}) {
        SCOPED_TRACE(name + " on " + std::to_string(world) + " ranks, cp " + std::to_string(cp));
        const RunConfig config = deck(name, 64, 3);
        const CostModel cost = default_cost_model(config, kGflops, 8);
        const GlobalBatch batch = Sampler(config).batch(0);
        const planning::BatchCosts costs = planning::batch_costs(batch, cost);
        std::vector<LlmGroup> groups = planning::megatron_static_groups(batch, costs, cost, world, cp, 0);
        const double bound = planning::static_makespan_lower_bound(groups, costs, costs.encoder);
        const double step =
            predict(planning::static_plan_of(std::move(groups), batch, world), batch, cost, world).makespan;
        EXPECT_LE(bound, step * (1.0 + 1e-12));
        if (cp == 1 && world <= 8) {
          EXPECT_NEAR(bound, step, 1e-9 * step);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// A plan as bytes (the broadcast of a plan made on rank 0)

TEST(PlanBytes, RoundTripAndRejectTruncation) {
  StepPlan plan;
  plan.policy = "flexsp";
  plan.origin = {"milp", "time_limit", 0.125, 0.09};
  plan.placement = Placement::colocated;
  plan.llm_groups = {{{0, 1}, {3, 1}, 2, {1, 2}}, {{2}, {0, 2}, 1, {}}};
  plan.encoder_ranks = {0, 1, 2};
  plan.item_owner = {2, 0, 1, 1};
  const std::string bytes = serialize_plan(plan);
  const StepPlan back = deserialize_plan(bytes);
  EXPECT_EQ(serialize_plan(back), bytes);
  EXPECT_EQ(back.policy, "flexsp");
  EXPECT_EQ(back.origin.source, "milp");
  EXPECT_EQ(back.origin.solver_status, "time_limit");
  EXPECT_EQ(back.origin.solver_gap, 0.125);
  EXPECT_EQ(back.llm_groups[0].micro_batch_ends, (std::vector<int>{1, 2}));
  EXPECT_EQ(back.item_owner, plan.item_owner);
  EXPECT_THROW(deserialize_plan(bytes.substr(0, bytes.size() - 3)), std::invalid_argument);
  EXPECT_THROW(deserialize_plan(bytes + "x"), std::invalid_argument);
}

}  // namespace
}  // namespace minimllm
