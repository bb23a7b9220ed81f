// The seven planning policies and their registry. Their building blocks live beside this file: Megatron-LM's
// layouts (baselines.hpp), per-sample costs and sample assignment (assignment.hpp), group and item
// placement (placement.hpp), micro-batches (micro_batches.hpp), the disaggregated pipeline's stages
// (pipeline_stages.hpp) and the target-driven layout search (target_search.hpp); plans are compared by
// predict() (step_prediction.hpp).
#include "minimllm/planning/planner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "assignment.hpp"
#include "baselines.hpp"
#include "dhp_packing.hpp"
#include "flexsp_milp.hpp"
#include "micro_batches.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/planning/memory_fit.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/planning/step_prediction.hpp"
#include "node_locality.hpp"
#include "pipeline_stages.hpp"
#include "placement.hpp"
#include "target_search.hpp"

namespace minimllm {
namespace {

using planning::BatchCosts;
using planning::RankRange;

class PolicyBase : public Planner {
 public:
  PolicyBase(const CostModel& cost, const PlannerOptions& options) : cost_(cost), options_(options) {}

 protected:
  // Groups of one rank over [first, first + count), samples balanced by LPT on LLM time (quadratic term
  // included) refined by moves and swaps off the slowest rank, items by LPT over encoder_ranks,
  // preferring the node of each sample's LLM rank.
  StepPlan lpt_singletons(const std::string& policy, Placement placement, const GlobalBatch& batch,
                          const BatchCosts& costs, int first, int count,
                          std::vector<int> encoder_ranks) const {
    const std::vector<RankRange> groups = planning::place_groups({}, first, count, cost_.ranks_per_node);
    std::vector<std::vector<int>> samples(groups.size());
    std::vector<double> loads(groups.size(), 0.0);
    planning::assign_samples(costs, costs.by_llm, groups, cost_, samples, loads);
    planning::refine_assignment(costs, groups, cost_, std::vector<char>(costs.tokens.size(), 1), samples,
                                loads, static_cast<int>(groups.size()));
    return planning::assemble_plan(policy, placement, groups, std::move(samples), std::move(encoder_ranks),
                                   batch, costs, cost_, options_.locality_tolerance);
  }

  // Whether a step's group of `ranks` (sorted) is in the pool whatever came before: a rank alone (no
  // communicator), one of static's replicas (cp consecutive ranks from a multiple of cp: created at its first
  // step and used every step) or an aligned power-of-two block the pool created at start-up
  // (power_of_two_blocks: sizes 2, 4, ... up to capacity - 1 of them).
  bool pooled(const std::vector<int>& ranks) const {
    const int n = static_cast<int>(ranks.size()), first = ranks.front();
    if (n == 1) return true;
    if (ranks.back() - first + 1 != n) return false;  // not consecutive ranks
    if (n == options_.cp && first % n == 0) return true;
    if (!options_.precreated_powers_of_two || (n & (n - 1)) != 0 || first % n != 0) return false;
    int sizes_below = 0;  // precreated sizes smaller than n
    for (int size = 2; size < n; size *= 2) ++sizes_below;
    return sizes_below < options_.pool_capacity - 1;
  }

  // What creating the plan's groups adds to its step, as simulate charges it: one creation's time (the
  // step's groups are disjoint, each created on its members at once) when any group is not pooled. Counted
  // for every step a group outside the pool appears in (a planner holds no pool state: plans stay a
  // function of the batch, on every rank and after a restart), so it errs towards the pooled layout.
  double creation_seconds(const StepPlan& plan) const {
    for (const LlmGroup& group : plan.llm_groups)
      if (!pooled(group.ranks)) return cost_.step.comm_creation;
    return 0.0;
  }

  // The dynamic colocated policies keep the static layout (parallel.cp, packed bins, its groups pooled)
  // when it predicts a faster step, the plan's new communicators' creation included, and fits memory, the
  // way FlexSP warm-starts from the homogeneous layout: no policy is predicted slower than that baseline,
  // and none regroups for less than the regrouping costs.
  StepPlan at_least_static(StepPlan plan, const GlobalBatch& batch, const BatchCosts& costs,
                           int world_size) const {
    const int cp = options_.cp;
    if (world_size % cp != 0) return plan;
    const double bin = static_cast<double>(cp) *
                       planning::token_budget(options_.tokens_per_rank, cp, costs.max_tokens, cost_);
    if (costs.max_tokens > std::min(bin, cost_.token_capacity(cp))) return plan;  // static would not fit
    std::vector<LlmGroup> groups =
        planning::megatron_static_groups(batch, costs, cost_, world_size, cp, options_.tokens_per_rank);
    // Most steps end here: the plan beats even a lower bound of static's step, so static's items need not
    // be placed nor its step predicted (planning time on item-heavy batches); and mostly its upper bound
    // already does, so that it need not be predicted exactly either.
    constexpr double kRounding = 1.0 - 1e-9;  // the bound's sums associate differently from predict's
    const double static_bound =
        kRounding * planning::static_makespan_lower_bound(groups, costs, costs.encoder);
    const double creation = creation_seconds(plan);
    if (predict_upper_bound(plan, batch, cost_, world_size).makespan + creation <= static_bound) return plan;
    const double planned = predict(plan, batch, cost_, world_size).makespan + creation;
    if (planned <= static_bound) return plan;
    StepPlan baseline = planning::static_plan_of(std::move(groups), batch, world_size);
    if (predict(baseline, batch, cost_, world_size).makespan >= planned) return plan;
    baseline.policy = plan.policy;
    baseline.origin.solver_status = plan.origin.solver_status;  // what the solver did, if any
    baseline.origin.solver_gap = plan.origin.solver_gap;
    baseline.origin.solver_seconds = plan.origin.solver_seconds;
    return baseline;
  }

  CostModel cost_;
  PlannerOptions options_;
};

// Megatron-LM as users run it: world / cp data-parallel replicas of cp consecutive ranks (parallel.cp),
// the batch packed in order into bins of cp x parallel.tokens_per_rank tokens, bins dealt over the
// replicas balanced by count, items on their sample's replica (baselines.hpp).
class StaticPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "static"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    return planning::megatron_static_plan(batch, planning::batch_costs(batch, cost_), cost_, world_size,
                                          options_.cp, options_.tokens_per_rank);
  }
};

// In-order dealing (the former `static`, never the reference): groups of cp consecutive ranks, samples
// dealt in order in equal blocks, a sample's items on its group's ranks; micro-batches fitted to memory.
class NaivePlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "naive"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    planning::require_cp_divides("naive", options_.cp, world_size);
    StepPlan plan = make_in_order_plan(batch, world_size, options_.cp);
    if (cost_.capacity_bytes > 0.0) {
      const BatchCosts costs = planning::batch_costs(batch, cost_);
      for (LlmGroup& group : plan.llm_groups) planning::fit_micro_batches(group, costs, cost_);
    }
    return plan;
  }
};

// Megatron-LM's dynamic (hybrid) context parallelism: power-of-two groups sized by each sample's length
// over the per-rank token budget (baselines.hpp; where it differs from Megatron-LM: docs/PARALLELISM.md).
class MegatronDcpPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "megatron_dcp"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    return planning::megatron_dcp_plan(
        batch, costs, cost_, world_size,
        planning::token_budget(options_.tokens_per_rank, options_.cp, costs.max_tokens, cost_));
  }
};

// OrchMLLM batch post-balancing on the baseline's layout: the samples balanced over the data-parallel
// replicas of static's DP x CP groups (parallel.cp consecutive ranks each; groups of one rank where cp does
// not divide the ranks), so orch holds whatever static holds; the LLM phase and the encoder phase are
// balanced separately (LPT on each phase's own cost), so the two layouts differ; both node-wise
// (node_locality.hpp): over the nodes first, keeping samples on their loaders' nodes and items on their
// samples' LLM nodes as far as balance allows, then over each node's groups or ranks (a sample's items
// together where balance allows).
class OrchPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "orch"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    const bool on_static_layout = world_size % options_.cp == 0;
    planning::NodeWiseLayout layout =
        planning::node_wise_balance(batch, costs, cost_, world_size, on_static_layout ? options_.cp : 1);
    // The micro-batches are static's bins (cp x the token budget; memory permitting), refilled: as many as
    // static runs, so a pipeline's bubble is static's; off static's layout, the fewest that fit memory.
    std::vector<std::vector<int>> micro_batch_ends;
    if (on_static_layout) {
      const int cp = options_.cp;
      const double bin =
          std::min(static_cast<double>(cp) *
                       planning::token_budget(options_.tokens_per_rank, cp, costs.max_tokens, cost_),
                   cost_.token_capacity(cp));
      for (const std::vector<int>& samples : layout.samples)
        micro_batch_ends.push_back(samples.empty() ? std::vector<int>{}
                                                   : planning::pack_in_order(samples, costs.tokens, bin));
    }
    StepPlan plan = planning::assemble_groups("orch", Placement::colocated, layout.groups,
                                              std::move(layout.samples), costs, cost_, micro_batch_ends);
    plan.encoder_ranks = consecutive_ranks(0, world_size);
    plan.item_owner = std::move(layout.item_owner);
    return at_least_static(std::move(plan), batch, costs, world_size);
  }
};

// DHP as its paper describes it (dhp_packing.hpp): the batch packed best-fit-decreasing into packs of what
// their groups' memory holds (at most the per-rank token budget, parallel.tokens_per_rank, or derived as
// static's: the longest sample / parallel.cp), then a dynamic programme giving any integer number of ranks
// to runs of packs, each pack one micro-batch; items by balance_items (placement.hpp).
class DhpPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "dhp"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    const planning::CapacityTable capacity(
        cost_, world_size,
        planning::token_budget(options_.tokens_per_rank, options_.cp, costs.max_tokens, cost_));
    const std::vector<planning::DhpPack> packs = planning::pack_best_fit_decreasing(costs, capacity);
    const planning::DhpAllocation allocation = planning::allocate_ranks(packs, cost_, world_size);
    if (!allocation.feasible)
      throw InputError(fmt::format(
          "dhp: step {}: a sample of {} tokens needs more than the {} ranks at the per-rank token budget "
          "(parallel.tokens_per_rank, or if 0 the longest sample / parallel.cp) and memory",
          batch.step, costs.max_tokens, world_size));
    const std::vector<RankRange> groups =
        planning::place_groups(allocation.sizes, 0, world_size, cost_.ranks_per_node);
    std::vector<std::vector<int>> samples(groups.size()), ends(groups.size());
    for (size_t k = 0; k < allocation.runs.size(); ++k)
      for (int p : allocation.runs[k]) {
        samples[k].insert(samples[k].end(), packs[p].samples.begin(), packs[p].samples.end());
        ends[k].push_back(static_cast<int>(samples[k].size()));
      }
    return at_least_static(planning::assemble_plan("dhp", Placement::colocated, groups, std::move(samples),
                                                   consecutive_ranks(0, world_size), batch, costs, cost_,
                                                   options_.locality_tolerance, ends),
                           batch, costs, world_size);
  }
};

// dhp_search: group sizes chosen per batch by the target-driven search (target_search.hpp) over any
// integer sizes and over powers of two (FlexSP's heuristic, below, is the power-of-two half): long samples
// cut into groups by a dynamic programme, short ones balanced by LPT over the rest; items by
// balance_items (placement.hpp). Kept beside the paper's dhp, which it often beats (docs/PARALLELISM.md).
class TargetPlanner : public PolicyBase {
 public:
  TargetPlanner(const char* name, std::vector<planning::SizeRule> rules, const CostModel& cost,
                const PlannerOptions& options)
      : PolicyBase(cost, options), name_(name), rules_(std::move(rules)) {}
  const char* name() const override { return name_; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    planning::LayoutChoice choice = planning::best_target_layout(rules_, world_size, costs, cost_);
    return at_least_static(
        planning::assemble_plan(name_, Placement::colocated, choice.groups, std::move(choice.samples),
                                consecutive_ranks(0, world_size), batch, costs, cost_,
                                options_.locality_tolerance),
        batch, costs, world_size);
  }

 private:
  const char* name_;
  std::vector<planning::SizeRule> rules_;
};

// FlexSP: its MILP (flexsp_milp.hpp) over power-of-two slots, solved by CBC within
// parallel.flexsp_time_limit and started from the heuristic (the target-driven search restricted to
// power-of-two sizes); the MILP's layout is used when it predicts a faster LLM phase than the heuristic's,
// which stays the fallback (time-out without a better solution, no solution, a build without CBC). The
// plan says which produced it and how the solver fared (StepPlan::origin).
class FlexspPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "flexsp"; }
  bool deterministic() const override {
    return options_.flexsp_time_limit <= 0.0 || !planning::milp_solver_available();
  }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    planning::LayoutChoice choice =
        planning::best_target_layout({planning::SizeRule::power_of_two}, world_size, costs, cost_);
    PlanOrigin origin;
    if (options_.flexsp_time_limit > 0.0) {
      planning::FlexspMilpOptions milp;
      milp.time_limit = options_.flexsp_time_limit;
      milp.buckets = options_.flexsp_buckets;
      milp.tokens_per_rank = options_.tokens_per_rank;
      planning::FlexspMilpResult solved = planning::solve_flexsp_milp(costs, cost_, world_size, choice, milp);
      origin.solver_status = planning::to_string(solved.status);
      origin.solver_gap = solved.gap;
      origin.solver_seconds = solved.seconds;
      if (solved.better) {
        choice = std::move(solved.choice);
        origin.source = "milp";
      }
    }
    StepPlan plan = planning::assemble_plan("flexsp", Placement::colocated, choice.groups,
                                            std::move(choice.samples), consecutive_ranks(0, world_size),
                                            batch, costs, cost_, options_.locality_tolerance);
    plan.origin = origin;
    return at_least_static(std::move(plan), batch, costs, world_size);
  }
};

// DistTrain disaggregation: E ranks only encode, the other N - E run the LLM as groups of one rank (LPT),
// and the step runs as a pipeline over micro-batches (step_executor.cpp): every LLM rank runs its
// micro-batches back to back as their encoder rows arrive, every encoder rank encodes stage after stage and
// then runs each stage's backward as its gradients come back. The encoder ranks are spread over the nodes
// so that items can be encoded on their LLM rank's node. Inter-micro-batch reordering
// (reorder_into_stages) starts and ends the pipeline with text-heavy micro-batches. E and the stage count
// are those with the smallest pipeline_estimate plus each stage's route check (route_check_time: the
// executor checks each stage's exchange). E: 1.15x or 1.5x the count that balances the two sides' work
// (the encoder needs slack, as its backward ends the step), and the balance itself where that slack would
// take every rank but one. Stage counts: the largest power of two the groups' sample counts reach, half of
// it, and smaller powers of two while the estimate falls. Under a memory capacity, E is at least the count
// whose memory holds the step's items (encoder_ranks_for_memory). Items are then balanced over the encoder
// ranks stage by stage.
class DisaggPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "disagg"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    // One rank cannot be split into encoder and LLM sides: the colocated plan is the only one.
    if (world_size == 1) return lpt_singletons("disagg", Placement::colocated, batch, costs, 0, 1, {0});
    if (options_.encoder_ranks >= world_size)
      throw InputError(fmt::format("disagg planner: {} encoder ranks on {} ranks; valid: 1..{} (0 = choose)",
                                   options_.encoder_ranks, world_size, world_size - 1));
    const std::vector<double>& encoder_time = costs.encoder;
    double encoder_total = 0.0;
    for (double t : encoder_time) encoder_total += t;
    std::vector<int> candidates;
    if (options_.encoder_ranks > 0) {
      candidates = {options_.encoder_ranks};
    } else {
      const double balance = world_size * encoder_total / std::max(1e-300, encoder_total + costs.total_llm);
      constexpr double kSlacks[] = {1.15, 1.5};
      for (double slack : kSlacks) {
        const int e = std::clamp(static_cast<int>(std::ceil(slack * balance)), 1, world_size - 1);
        if (candidates.empty() || e != candidates.back()) candidates.push_back(e);
      }
      // Where the encoder dominates, the slack can leave the LLM side one rank for all its work: the
      // balance itself then too.
      const int balanced = std::clamp(static_cast<int>(std::ceil(balance)), 1, world_size - 1);
      if (static_cast<int>(std::ceil(kSlacks[0] * balance)) > world_size - 1 && balanced < candidates.front())
        candidates.insert(candidates.begin(), balanced);
    }
    // As many encoder ranks as their memory needs for the step's items, at least.
    const int for_memory = encoder_ranks_for_memory(batch, world_size);
    if (options_.encoder_ranks == 0) {
      for (int& e : candidates) e = std::max(e, for_memory);
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    }
    const double check = route_check_time(cost_, world_size);
    Layout best;
    for (int e : candidates) {
      Layout layout = llm_layout(e, world_size, costs);
      int most_samples = 1;
      for (const LlmGroup& group : layout.groups)
        most_samples = std::max(most_samples, static_cast<int>(group.samples.size()));
      planning::sort_by_encoder_share(layout.groups, costs.llm, encoder_time);
      // More stages shorten the pipeline's fill and drain, but each pays a route check: from the largest
      // power of two that every group's micro-batches can reach, halving while the estimate falls (half of
      // it always tried).
      int top = 1;
      while (2 * top <= most_samples) top *= 2;
      double previous = 0.0;
      for (int stages = top; stages >= 1; stages /= 2) {
        std::vector<LlmGroup> groups = layout.groups;
        planning::reorder_into_stages(groups, stages, costs, costs.llm, cost_);
        const double estimate = planning::pipeline_estimate(groups, costs.llm, encoder_time, e,
                                                            cost_.step.encoder_forward_share) +
                                stages * check;
        if (best.groups.empty() || estimate < best.estimate) {
          best.encoder_ranks = layout.encoder_ranks;
          best.groups = std::move(groups);
          best.estimate = estimate;
        }
        if (stages < top && estimate >= previous) break;
        previous = estimate;
      }
    }
    StepPlan plan;
    plan.policy = "disagg";
    plan.placement = Placement::disaggregated;
    plan.llm_groups = std::move(best.groups);
    std::vector<int> preferred_rank(batch.samples.size(), -1);
    for (const LlmGroup& group : plan.llm_groups)
      for (int s : group.samples) preferred_rank[s] = group.ranks.front();
    plan.item_owner = planning::balance_items(
        batch, cost_, best.encoder_ranks, preferred_rank, options_.locality_tolerance,
        planning::stage_of_samples(plan.llm_groups, static_cast<int>(batch.samples.size())));
    plan.encoder_ranks = std::move(best.encoder_ranks);
    return plan;
  }

 private:
  struct Layout {
    std::vector<int> encoder_ranks;
    std::vector<LlmGroup> groups;
    double estimate = 0.0;
  };

  // The fewest encoder ranks that hold the step's items beside the model state: an even share of the items'
  // bytes each and one largest item more (an item is never split), as memory_fit.cpp checks them; 1
  // without a capacity, world_size - 1 at most (then the plan does not fit, and says so).
  int encoder_ranks_for_memory(const GlobalBatch& batch, int world_size) const {
    if (!cost_.bounded()) return 1;
    double total = 0.0, largest = 0.0;
    for (const SampleMeta& sample : batch.samples)
      for (const EncoderItem& item : sample.items) {
        const double bytes = cost_.memory.item_bytes(item);
        total += bytes, largest = std::max(largest, bytes);
      }
    const double room = cost_.capacity_bytes - cost_.memory.state - cost_.memory.fixed - largest;
    if (total <= 0.0) return 1;
    if (room <= 0.0) return world_size - 1;
    return std::clamp(static_cast<int>(std::ceil(total / room)), 1, world_size - 1);
  }

  // e encoder ranks spread over the nodes; the others one LLM rank each, samples by LPT.
  Layout llm_layout(int e, int world_size, const BatchCosts& costs) const {
    Layout layout;
    layout.encoder_ranks = planning::spread_over_nodes(e, world_size, cost_.ranks_per_node);
    std::vector<RankRange> ranges;
    for (int r = 0, next = 0; r < world_size; ++r) {
      if (next < e && layout.encoder_ranks[next] == r) {
        ++next;
      } else {
        ranges.push_back({r, 1});
      }
    }
    std::vector<std::vector<int>> samples(ranges.size());
    std::vector<double> loads(ranges.size(), 0.0);
    planning::assign_samples(costs, costs.by_llm, ranges, cost_, samples, loads);
    planning::refine_assignment(costs, ranges, cost_, std::vector<char>(costs.tokens.size(), 1), samples,
                                loads, static_cast<int>(ranges.size()));
    layout.groups.resize(ranges.size());
    for (size_t k = 0; k < ranges.size(); ++k) {
      layout.groups[k].ranks = {ranges[k].first};
      layout.groups[k].samples = std::move(samples[k]);
    }
    return layout;
  }
};

// The registry: one row per policy (policy_registry.hpp).
template <class P>
std::unique_ptr<Planner> make(const CostModel& cost, const PlannerOptions& options) {
  return std::make_unique<P>(cost, options);
}

std::unique_ptr<Planner> make_dhp_search(const CostModel& cost, const PlannerOptions& options) {
  using planning::SizeRule;
  return std::make_unique<TargetPlanner>("dhp_search", std::vector{SizeRule::any, SizeRule::power_of_two},
                                         cost, options);
}

}  // namespace

const std::vector<PolicyRow>& policy_registry() {
  // clang-format off
  static const std::vector<PolicyRow> rows = {
      {"deck", "the deck's own layout: parallel.group_sizes, rotate_groups, placement, encoder_ranks",
       {"group_sizes", "rotate_groups", "micro_batches", "placement", "encoder_ranks"}, 0},
      {"static", "the baseline, Megatron-LM as run: fixed DP x CP degrees, samples in per-rank token bins",
       {"cp", "tokens_per_rank"}, kPlanner, make<StaticPlanner>},
      {"naive", "samples dealt to ranks in order, cp-rank groups", {"cp"}, kPlanner, make<NaivePlanner>},
      {"megatron_dcp", "Megatron-LM's dynamic context parallelism: each sample's group sized to its length",
       {"cp", "tokens_per_rank"}, kPlanner | kRegroups, make<MegatronDcpPlanner>},
      {"orch", "OrchMLLM: node-wise post-balancing of the batch", {"cp"}, kPlanner | kRegroups,
       make<OrchPlanner>},
      {"dhp", "DHP: packing and a rank-allocating dynamic program, groups of any size", {"cp"},
       kPlanner | kRegroups, make<DhpPlanner>},
      {"dhp_search", "minimllm's own search over group sizes against a target step time", {"cp"},
       kPlanner | kRegroups, make_dhp_search},
      {"flexsp", "FlexSP: sequence-parallel groups from a MILP (COIN-OR CBC), else its heuristic",
       {"cp", "flexsp_time_limit"}, kPlanner | kRegroups | kSolvesMilp, make<FlexspPlanner>},
      {"disagg", "DistTrain-style disaggregation: the encoder on ranks of its own, the LLM on the others",
       {"cp", "encoder_ranks"}, kPlanner | kEncoderRanks | kRegroups, make<DisaggPlanner>},
  };
  // clang-format on
  return rows;
}

namespace {

const PolicyRow* find_policy(const std::string& name) {
  for (const PolicyRow& row : policy_registry())
    if (row.name == name) return &row;
  return nullptr;
}

}  // namespace

const PolicyRow& policy_row(const std::string& name) {
  if (const PolicyRow* row = find_policy(name)) return *row;
  throw InputError(fmt::format("unknown policy '{}'; valid: {}", name, fmt::join(policy_names(), ", ")));
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const PolicyRow& row : policy_registry()) names.push_back(row.name);
  return names;
}

const std::string& baseline_policy() { return policy_row("static").name; }
const std::string& dynamic_baseline_policy() { return policy_row("megatron_dcp").name; }

void check_policy(const RunConfig& config) {
  if (!find_policy(config.parallel.policy))
    throw InputError(fmt::format("{}: parallel.policy = {}: must be one of {}", config.deck_path,
                                 config.parallel.policy, fmt::join(policy_names(), ", ")));
}

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> planners;
    for (const PolicyRow& row : policy_registry())
      if (row.planner()) planners.push_back(row.name);
    return planners;
  }();
  return names;
}

PlannerOptions planner_options_of(const ParallelConfig& parallel) {
  PlannerOptions options;
  options.cp = parallel.cp;
  options.tokens_per_rank = parallel.tokens_per_rank;
  options.flexsp_time_limit = parallel.flexsp_time_limit;
  options.encoder_ranks = parallel.encoder_ranks;
  options.precreated_powers_of_two = parallel.comm_precreate == "powers_of_two";
  options.pool_capacity = parallel.comm_pool_capacity;
  return options;
}

namespace {

std::unique_ptr<Planner> make_policy(const std::string& policy, const CostModel& cost,
                                     const PlannerOptions& options) {
  const PolicyRow& row = policy_row(policy);
  if (!row.make)
    throw InputError(fmt::format("policy '{}' is the deck's own layout, not a planner; planners: {}", policy,
                                 fmt::join(planner_names(), ", ")));
  return row.make(cost, options);
}

}  // namespace

std::unique_ptr<Planner> make_planner(const std::string& policy, const CostModel& cost,
                                      const PlannerOptions& options) {
  make_policy(policy, cost, options);  // an unknown name fails here, whatever the capacity
  return memory_bound(policy, cost,
                      [policy, options](const CostModel& c) { return make_policy(policy, c, options); });
}

}  // namespace minimllm
