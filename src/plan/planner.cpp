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
                          const BatchCosts& costs, int first, int count,
                          std::vector<int> encoder_ranks) const {
    const std::vector<RankRange> groups = planning::place_groups({}, first, count, cost_.ranks_per_node);
    std::vector<std::vector<int>> samples(groups.size());
    std::vector<double> loads(groups.size(), 0.0);
    planning::assign_samples(costs, costs.by_llm, groups, cost_, samples, loads);
    return planning::assemble_plan(policy, placement, groups, std::move(samples), std::move(encoder_ranks),
                                   batch, costs, cost_, options_.locality_tolerance);
  }

  // The dynamic colocated policies keep the static data-parallel layout (groups of one rank, samples in
  // order, images on their sample's rank) when it predicts a faster step and fits memory, the way FlexSP
  // warm-starts from the homogeneous layout: no policy is predicted slower than that baseline.
  StepPlan at_least_static(StepPlan plan, const GlobalBatch& batch, const BatchCosts& costs,
                           int world_size) const {
    if (costs.max_tokens > cost_.token_capacity(1)) return plan;  // the baseline would not fit memory
    StepPlan baseline = make_static_plan(batch, world_size, 1);
    for (LlmGroup& group : baseline.llm_groups) planning::fit_micro_batches(group, costs, cost_);
    if (predict(baseline, batch, cost_, world_size).makespan >=
        predict(plan, batch, cost_, world_size).makespan)
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
        lpt_singletons("orch", Placement::colocated, batch, costs, 0, world_size, iota_ranks(0, world_size)),
        batch, costs, world_size);
  }
};

// DHP and FlexSP: group sizes chosen per batch by the target-driven search (planner_common.hpp): FlexSP
// searches power-of-two sizes; DHP any integer sizes, and the power-of-two layouts as well (they are
// DHP layouts too, and the search is a heuristic); images balanced like orch.
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
                                iota_ranks(0, world_size), batch, costs, cost_, options_.locality_tolerance),
        batch, costs, world_size);
  }

 private:
  const char* name_;
  std::vector<planning::SizeRule> rules_;
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
    const BatchCosts costs = planning::batch_costs(batch, cost_);
    // One rank cannot be split into encoder and LLM sides: the colocated plan is the only one.
    if (world_size == 1) return lpt_singletons("disagg", Placement::colocated, batch, costs, 0, 1, {0});
    const int e =
        options_.encoder_ranks > 0 ? options_.encoder_ranks : choose_encoder_ranks(batch, costs, world_size);
    if (e < 1 || e >= world_size)
      throw InputError(fmt::format("disagg planner: {} encoder ranks on {} ranks; valid: 1..{} (0 = choose)",
                                   e, world_size, world_size - 1));
    return lpt_singletons("disagg", Placement::disaggregated, batch, costs, e, world_size - e,
                          iota_ranks(0, e));
  }

 private:
  int choose_encoder_ranks(const GlobalBatch& batch, const BatchCosts& costs, int world_size) const {
    double encoder = 0.0, largest_image = 0.0, patches = 0.0;
    for (const SampleMeta& sample : batch.samples)
      for (const ImageMeta& image : sample.images) {
        const double t = cost_.encoder_time(image.patches);
        encoder += t, largest_image = std::max(largest_image, t), patches += image.patches;
      }
    const double llm = costs.total_llm,
                 largest_sample = costs.by_llm.empty() ? 0.0 : costs.llm[costs.by_llm[0]];
    const double bandwidth = cost_.link(world_size > cost_.ranks_per_node).bandwidth;
    int best = 1;
    double best_time = 0.0;
    for (int e = 1; e < world_size; ++e) {
      const double boundary =
          patches * cost_.boundary_bytes_per_patch / std::min(e, world_size - e) / bandwidth;
      const double time =
          std::max(std::max(encoder / e, largest_image), std::max(llm / (world_size - e), largest_sample)) +
          boundary;
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
  using planning::SizeRule;
  if (policy == "dhp")
    return std::make_unique<TargetPlanner>("dhp", std::vector{SizeRule::any, SizeRule::power_of_two}, cost,
                                           options);
  if (policy == "flexsp")
    return std::make_unique<TargetPlanner>("flexsp", std::vector{SizeRule::power_of_two}, cost, options);
  if (policy == "disagg") return std::make_unique<DisaggPlanner>(cost, options);
  throw InputError(fmt::format("unknown planner '{}'; valid: {}", policy, fmt::join(planner_names(), ", ")));
}

// ---------------------------------------------------------------------------------------------------
// Prediction

namespace {

// What predict() needs of each LLM group.
struct GroupShape {
  int size = 1;
  bool spans = false;
  std::vector<int> nodes, members;  // the nodes the group's ranks are on (increasing), members on each
};

// Boundary exchange: each image's rows go from its encoder rank to the members of its sample's group
// (rows / g each; the owner keeps its own share), paid per row at the link to each receiver's node. A
// group's receive time is shared evenly by its members. Returns the sender's time (= the group's).
double image_route_time(const CostModel& cost, const LlmGroup& group, const GroupShape& shape,
                        const std::vector<int>& node_of_rank, int owner, double patches) {
  const auto it = std::lower_bound(shape.nodes.begin(), shape.nodes.end(), node_of_rank[owner]);
  const double on_node =
      it != shape.nodes.end() && *it == node_of_rank[owner] ? shape.members[it - shape.nodes.begin()] : 0;
  const bool owner_in_group =
      on_node > 0 && std::binary_search(group.ranks.begin(), group.ranks.end(), owner);
  const double local = on_node - owner_in_group, remote = shape.size - on_node;
  return patches / shape.size * cost.boundary_bytes_per_patch *
         (local / cost.intra_node.bandwidth + remote / cost.inter_node.bandwidth);
}

}  // namespace

PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                       int world_size) {
  const int n_groups = static_cast<int>(plan.llm_groups.size());
  std::vector<int> node_of_rank(world_size), group_of_sample(batch.samples.size(), 0);
  for (int r = 0; r < world_size; ++r) node_of_rank[r] = cost.node_of(r);
  std::vector<GroupShape> shapes(n_groups);
  for (int k = 0; k < n_groups; ++k) {
    const LlmGroup& group = plan.llm_groups[k];
    GroupShape& shape = shapes[k];
    shape.size = static_cast<int>(group.ranks.size());
    shape.spans = node_of_rank[group.ranks.front()] != node_of_rank[group.ranks.back()];
    for (int r : group.ranks) {  // sorted ranks: a node's members are adjacent
      if (shape.nodes.empty() || shape.nodes.back() != node_of_rank[r])
        shape.nodes.push_back(node_of_rank[r]), shape.members.push_back(0);
      ++shape.members.back();
    }
    for (int s : group.samples) group_of_sample[s] = k;
  }

  // Samples in index order (their metadata lies in that order): per-rank encoder and send times,
  // per-group LLM compute, communication and receive times.
  std::vector<double> encoder(world_size, 0.0), send(world_size, 0.0);
  std::vector<double> group_compute(n_groups, 0.0), group_comm(n_groups, 0.0), group_receive(n_groups, 0.0);
  double llm_total = 0.0, largest_tokens = 0.0, encoder_total = 0.0, largest_image = 0.0;  // lower bound
  int image = 0;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int k = group_of_sample[s];
    double tokens = sample.text_len;
    for (const ImageMeta& im : sample.images) {
      const int owner = plan.image_owner[image++];
      const double time = cost.encoder_time(im.patches);
      encoder[owner] += time;
      encoder_total += time, largest_image = std::max(largest_image, time);
      const double route =
          image_route_time(cost, plan.llm_groups[k], shapes[k], node_of_rank, owner, im.patches);
      send[owner] += route, group_receive[k] += route;
      tokens += im.patches;
    }
    const double one_rank = cost.llm(tokens);
    group_compute[k] += one_rank / shapes[k].size;
    group_comm[k] += cost.llm_comm(tokens, shapes[k].size, shapes[k].spans);
    llm_total += one_rank, largest_tokens = std::max(largest_tokens, tokens);
  }
  std::vector<double> llm(world_size, 0.0), llm_comm(world_size, 0.0), boundary = send;
  for (int k = 0; k < n_groups; ++k)
    for (int r : plan.llm_groups[k].ranks) {
      llm[r] = group_compute[k] + group_comm[k], llm_comm[r] = group_comm[k];
      boundary[r] = std::max(boundary[r], group_receive[k] / shapes[k].size);
    }

  PlanPrediction p;
  p.encoder = *std::max_element(encoder.begin(), encoder.end());
  p.boundary = *std::max_element(boundary.begin(), boundary.end());
  const auto slowest_llm = std::max_element(llm.begin(), llm.end());
  p.llm = *slowest_llm;
  p.makespan = p.encoder + p.boundary + p.llm;
  double busy = 0.0;
  for (int r = 0; r < world_size; ++r) busy += encoder[r] + boundary[r] + llm[r];
  if (p.makespan > 0.0) {
    p.idle_fraction = 1.0 - busy / world_size / p.makespan;
    p.comm_fraction = (p.boundary + llm_comm[slowest_llm - llm.begin()]) / p.makespan;
  }
  p.lower_bound =
      std::max(encoder_total / world_size, largest_image) +
      (batch.samples.empty() ? 0.0 : planning::llm_lower_bound(llm_total, largest_tokens, cost, world_size));
  return p;
}

}  // namespace minimllm
