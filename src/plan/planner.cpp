// The five planning policies, the registry and the plan predictor. Shared building blocks (LPT, group
// placement, micro-batches, the target-driven layout search) live in planner_common.
#include "minimllm/plan/planner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "planner_common.hpp"

namespace minimllm {
namespace {

using planning::BatchCosts;
using planning::RankRange;

std::vector<int> iota_ranks(int first, int count) {
  std::vector<int> ranks(count);
  std::iota(ranks.begin(), ranks.end(), first);
  return ranks;
}

class PolicyBase : public Planner {
 public:
  PolicyBase(const CostModel& cost, const PlannerOptions& options) : cost_(cost), options_(options) {}

 protected:
  // Groups of one rank over [first, first + count), samples balanced by LPT on LLM time (quadratic term
  // included), images by LPT over encoder_ranks, preferring the node of each sample's LLM rank.
  StepPlan lpt_singletons(const std::string& policy, Placement placement, const GlobalBatch& batch,
                          const BatchCosts& costs, int first, int count, std::vector<int> encoder_ranks) const {
    const std::vector<RankRange> groups = planning::place_groups({}, first, count, cost_.ranks_per_node);
    std::vector<std::vector<int>> samples(groups.size());
    std::vector<double> loads(groups.size(), 0.0);
    planning::assign_samples(costs, costs.by_llm, groups, cost_, samples, loads);
    return planning::assemble_plan(policy, placement, groups, std::move(samples), std::move(encoder_ranks), batch,
                                   costs, cost_, options_.locality_tolerance);
  }

  // The dynamic colocated policies keep the static data-parallel layout (groups of one rank, samples in
  // order, images on their sample's rank) when it predicts a faster step and fits memory, the way FlexSP
  // warm-starts from the homogeneous layout: no policy is predicted slower than that baseline.
  StepPlan at_least_static(StepPlan plan, const GlobalBatch& batch, const BatchCosts& costs, int world_size) const {
    StepPlan baseline = make_static_plan(batch, world_size, 1);
    for (int s = 0; s < static_cast<int>(batch.samples.size()); ++s)
      if (costs.tokens[s] > cost_.token_capacity(1)) return plan;
    for (LlmGroup& group : baseline.llm_groups) planning::fit_micro_batches(group, costs, cost_);
    if (predict(baseline, batch, cost_, world_size).makespan >= predict(plan, batch, cost_, world_size).makespan)
      return plan;
    baseline.policy = plan.policy;
    return baseline;
  }

  CostModel cost_;
  PlannerOptions options_;
};

// Megatron-like baseline: fixed groups of static_group_size consecutive ranks, samples dealt in order in
// equal blocks, a sample's images on its group's ranks.
class StaticPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "static"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    StepPlan plan = make_static_plan(batch, world_size, options_.static_group_size);
    if (cost_.capacity_bytes > 0.0) {
      const BatchCosts costs = planning::batch_costs(batch, cost_);
      for (LlmGroup& group : plan.llm_groups) planning::fit_micro_batches(group, costs, cost_);
    }
    return plan;
  }
};

// OrchMLLM batch post-balancing: data parallel (groups of one rank); the LLM phase and the encoder phase
// are balanced separately (LPT on each phase's own cost), so the two layouts differ; an image stays on
// its sample's node when that costs at most the locality tolerance.
class OrchPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "orch"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    return at_least_static(
        lpt_singletons("orch", Placement::colocated, batch, costs, 0, world_size, iota_ranks(0, world_size)), batch,
        costs, world_size);
  }
};

// DHP and FlexSP: group sizes chosen per batch by the target-driven search (planner_common.hpp), any
// integer for DHP, powers of two for FlexSP; images balanced like orch.
class TargetPlanner : public PolicyBase {
 public:
  TargetPlanner(const char* name, planning::SizeRule rule, const CostModel& cost, const PlannerOptions& options)
      : PolicyBase(cost, options), name_(name), rule_(rule) {}
  const char* name() const override { return name_; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    planning::LayoutChoice choice = planning::best_target_layout(rule_, world_size, costs, cost_);
    return at_least_static(
        planning::assemble_plan(name_, Placement::colocated, choice.groups, std::move(choice.samples),
                                iota_ranks(0, world_size), batch, costs, cost_, options_.locality_tolerance),
        batch, costs, world_size);
  }

 private:
  const char* name_;
  planning::SizeRule rule_;
};

// DistTrain disaggregation: the first E ranks encode, the other N - E run the LLM as groups of one rank
// (LPT). E minimises DistTrain's pipelined estimate max(encoder phase on E ranks, LLM phase on N - E) +
// the boundary transfer (the slower side moves all image rows through min(E, N - E) ranks). Inter-micro-
// batch reordering (filling pipeline bubbles) is not modelled: the executor runs the phases back to back.
class DisaggPlanner : public PolicyBase {
 public:
  using PolicyBase::PolicyBase;
  const char* name() const override { return "disagg"; }
  StepPlan plan(const GlobalBatch& batch, int world_size) const override {
    // One rank cannot be split into encoder and LLM sides: the colocated plan is the only one.
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    if (world_size == 1) return lpt_singletons("disagg", Placement::colocated, batch, costs, 0, 1, {0});
    const int e = options_.encoder_ranks > 0 ? options_.encoder_ranks : choose_encoder_ranks(batch, world_size);
    if (e < 1 || e >= world_size)
      throw InputError(fmt::format("disagg planner: {} encoder ranks on {} ranks; valid: 1..{} (0 = choose)", e,
                                   world_size, world_size - 1));
    return lpt_singletons("disagg", Placement::disaggregated, batch, costs, e, world_size - e, iota_ranks(0, e));
  }

 private:
  int choose_encoder_ranks(const GlobalBatch& batch, int world_size) const {
    double encoder = 0.0, largest_image = 0.0, patches = 0.0, llm = 0.0, largest_sample = 0.0;
    for (const SampleMeta& sample : batch.samples) {
      for (const ImageMeta& image : sample.images) {
        const double t = cost_.encoder_time(image.patches);
        encoder += t, largest_image = std::max(largest_image, t), patches += image.patches;
      }
      const double t = cost_.llm(sample.tokens());
      llm += t, largest_sample = std::max(largest_sample, t);
    }
    const double bandwidth = cost_.link(world_size > cost_.ranks_per_node).bandwidth;
    int best = 1;
    double best_time = 0.0;
    for (int e = 1; e < world_size; ++e) {
      const double boundary = patches * cost_.boundary_bytes_per_patch / std::min(e, world_size - e) / bandwidth;
      const double time =
          std::max(std::max(encoder / e, largest_image), std::max(llm / (world_size - e), largest_sample)) + boundary;
      if (e == 1 || time < best_time) best = e, best_time = time;
    }
    return best;
  }
};

}  // namespace

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"static", "orch", "dhp", "flexsp", "disagg"};
  return names;
}

std::unique_ptr<Planner> make_planner(const std::string& policy, const CostModel& cost,
                                      const PlannerOptions& options) {
  if (policy == "static") return std::make_unique<StaticPlanner>(cost, options);
  if (policy == "orch") return std::make_unique<OrchPlanner>(cost, options);
  if (policy == "dhp") return std::make_unique<TargetPlanner>("dhp", planning::SizeRule::any, cost, options);
  if (policy == "flexsp")
    return std::make_unique<TargetPlanner>("flexsp", planning::SizeRule::power_of_two, cost, options);
  if (policy == "disagg") return std::make_unique<DisaggPlanner>(cost, options);
  throw InputError(fmt::format("unknown planner '{}'; valid: {}", policy, fmt::join(planner_names(), ", ")));
}

// ---------------------------------------------------------------------------------------------------
// Prediction

namespace {

// Boundary exchange: each image's rows go from its encoder rank to the members of its sample's group
// (rows / g each; the owner keeps its own share). Senders pay per row at the link to each receiver's
// node; a group's receive time is shared evenly by its members. Both directions of the all-to-all
// overlap, so a rank's boundary time is the larger of its send and receive times.
struct BoundaryTimes {
  std::vector<double> send, receive_of_group;
};

void add_image_route(const CostModel& cost, const std::vector<int>& group_ranks, int group, int owner,
                     double patches, BoundaryTimes& times) {
  const double g = static_cast<double>(group_ranks.size());
  const int node = cost.node_of(owner);
  const auto lo = std::lower_bound(group_ranks.begin(), group_ranks.end(), node * cost.ranks_per_node);
  const auto hi = std::lower_bound(lo, group_ranks.end(), (node + 1) * cost.ranks_per_node);
  const bool owner_in_group = std::binary_search(lo, hi, owner);
  const double local = static_cast<double>(hi - lo) - (owner_in_group ? 1.0 : 0.0);
  const double remote = g - static_cast<double>(hi - lo);
  const double bytes = patches / g * cost.boundary_bytes_per_patch;
  const double time = bytes * (local / cost.intra_node.bandwidth + remote / cost.inter_node.bandwidth);
  times.send[owner] += time;
  times.receive_of_group[group] += time;
}

}  // namespace

PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, int world_size) {
  const int n_groups = static_cast<int>(plan.llm_groups.size());
  std::vector<double> encoder(world_size, 0.0), llm(world_size, 0.0), llm_comm(world_size, 0.0);
  BoundaryTimes boundary{std::vector<double>(world_size, 0.0), std::vector<double>(n_groups, 0.0)};
  const std::vector<int> first_image = first_image_of_samples(batch);

  for (int k = 0; k < n_groups; ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    const int g = static_cast<int>(group.ranks.size());
    const bool spans = cost.node_of(group.ranks.front()) != cost.node_of(group.ranks.back());
    double compute = 0.0, comm = 0.0;
    for (int s : group.samples) {
      const SampleMeta& sample = batch.samples[s];
      compute += cost.llm(sample.tokens()) / g;
      comm += cost.llm_comm(sample.tokens(), g, spans);
      for (size_t i = 0; i < sample.images.size(); ++i) {
        const int owner = plan.image_owner[first_image[s] + i];
        encoder[owner] += cost.encoder_time(sample.images[i].patches);
        add_image_route(cost, group.ranks, k, owner, sample.images[i].patches, boundary);
      }
    }
    for (int r : group.ranks) llm[r] += compute + comm, llm_comm[r] += comm;
  }
  std::vector<double> boundary_time = boundary.send;
  for (int k = 0; k < n_groups; ++k)
    for (int r : plan.llm_groups[k].ranks)
      boundary_time[r] = std::max(boundary_time[r], boundary.receive_of_group[k] / plan.llm_groups[k].ranks.size());

  PlanPrediction p;
  p.encoder = *std::max_element(encoder.begin(), encoder.end());
  p.boundary = *std::max_element(boundary_time.begin(), boundary_time.end());
  const auto slowest_llm = std::max_element(llm.begin(), llm.end());
  p.llm = *slowest_llm;
  p.makespan = p.encoder + p.boundary + p.llm;
  double busy = 0.0, encoder_total = 0.0, largest_image = 0.0;
  for (int r = 0; r < world_size; ++r) busy += encoder[r] + boundary_time[r] + llm[r];
  for (const SampleMeta& sample : batch.samples)
    for (const ImageMeta& image : sample.images) {
      const double t = cost.encoder_time(image.patches);
      encoder_total += t, largest_image = std::max(largest_image, t);
    }
  if (p.makespan > 0.0) {
    p.idle_fraction = 1.0 - busy / world_size / p.makespan;
    p.comm_fraction = (p.boundary + llm_comm[slowest_llm - llm.begin()]) / p.makespan;
  }
  double llm_total = 0.0, largest_tokens = 0.0;
  for (const SampleMeta& sample : batch.samples) {
    llm_total += cost.llm(sample.tokens());
    largest_tokens = std::max<double>(largest_tokens, sample.tokens());
  }
  p.lower_bound = std::max(encoder_total / world_size, largest_image) +
                  (batch.samples.empty() ? 0.0 : planning::llm_lower_bound(llm_total, largest_tokens, cost, world_size));
  return p;
}

}  // namespace minimllm
