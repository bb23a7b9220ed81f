// The five planning policies, the registry and the plan predictor. Their building blocks live beside
// this file: per-sample costs and sample assignment (assignment.hpp), group and image placement
// (placement.hpp), micro-batches (micro_batches.hpp), the disaggregated pipeline's stages
// (pipeline_stages.hpp) and the target-driven layout search (target_search.hpp).
#include "minimllm/plan/planner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "assignment.hpp"
#include "micro_batches.hpp"
#include "minimllm/plan/rank_work.hpp"
#include "pipeline_stages.hpp"
#include "placement.hpp"
#include "target_search.hpp"

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
  // included) refined by moves and swaps off the slowest rank, images by LPT over encoder_ranks,
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

// DHP and FlexSP: group sizes chosen per batch by the target-driven search (target_search.hpp): FlexSP
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

// DistTrain disaggregation: E ranks only encode, the other N - E run the LLM as groups of one rank (LPT),
// and the step runs as a pipeline over micro-batches (step_executor.cpp): every LLM rank runs its
// micro-batches back to back as their image rows arrive, every encoder rank encodes stage after stage and
// then runs each stage's backward as its gradients come back. The encoder ranks are spread over the nodes
// so that images can be encoded on their LLM rank's node. Inter-micro-batch reordering
// (reorder_into_stages) starts and ends the pipeline with text-heavy micro-batches. E (1.15x or 1.5x the
// count that balances the two sides' work: the encoder needs slack, as its backward ends the step) and
// the stage count (the largest power of two the groups' sample counts reach, or half of it) are those
// with the smallest pipeline_estimate; images are then balanced over the encoder ranks stage by stage.
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
    const std::vector<double> encoder_time = planning::sample_encoder_times(batch, cost_);
    double encoder_total = 0.0;
    for (double t : encoder_time) encoder_total += t;
    std::vector<int> candidates;
    if (options_.encoder_ranks > 0) {
      candidates = {options_.encoder_ranks};
    } else {
      const double balance = world_size * encoder_total / std::max(1e-300, encoder_total + costs.total_llm);
      for (double slack : {1.15, 1.5}) {
        const int e = std::clamp(static_cast<int>(std::ceil(slack * balance)), 1, world_size - 1);
        if (candidates.empty() || e != candidates.back()) candidates.push_back(e);
      }
    }
    Layout best;
    for (int e : candidates) {
      Layout layout = llm_layout(e, world_size, costs);
      int most_samples = 1;
      for (const LlmGroup& group : layout.groups)
        most_samples = std::max(most_samples, static_cast<int>(group.samples.size()));
      planning::sort_by_encoder_share(layout.groups, costs.llm, encoder_time);
      // More stages shorten the pipeline's fill and drain; the largest power of two that every group's
      // micro-batches can reach, and half of it (the estimate rarely prefers fewer).
      int top = 1;
      while (2 * top <= most_samples) top *= 2;
      for (int stages = std::max(1, top / 2); stages <= top; stages *= 2) {
        std::vector<LlmGroup> groups = layout.groups;
        planning::reorder_into_stages(groups, stages, costs, costs.llm, cost_);
        const double estimate = planning::pipeline_estimate(groups, costs.llm, encoder_time, e);
        if (best.groups.empty() || estimate < best.estimate) {
          best.encoder_ranks = layout.encoder_ranks;
          best.groups = std::move(groups);
          best.estimate = estimate;
        }
      }
    }
    StepPlan plan;
    plan.policy = "disagg";
    plan.placement = Placement::disaggregated;
    plan.llm_groups = std::move(best.groups);
    std::vector<int> preferred_rank(batch.samples.size(), -1);
    for (const LlmGroup& group : plan.llm_groups)
      for (int s : group.samples) preferred_rank[s] = group.ranks.front();
    plan.image_owner = planning::balance_images(
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

}  // namespace

const std::vector<std::string>& planner_names() {
  // Every policy but the deck's own layout (policy_names() lists them once).
  static const std::vector<std::string> names = [] {
    std::vector<std::string> planners;
    for (const std::string& policy : policy_names())
      if (policy != "deck") planners.push_back(policy);
    return planners;
  }();
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

// Share of an image's encoder time spent in forward (GEMMs: 2 FLOPs per multiply-add forward, 4 backward).
constexpr double kEncoderForwardShare = 1.0 / 3.0;

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
  const bool pipelined = plan.placement == Placement::disaggregated;
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
  // Pipeline stages (disaggregated plans; pipeline_stage in rank_work.hpp); one stage otherwise.
  int stages = 1;
  const std::vector<int> stage_of_sample =
      pipelined ? planning::stage_of_samples(plan.llm_groups, static_cast<int>(batch.samples.size()), &stages)
                : std::vector<int>(batch.samples.size(), 0);

  // Samples in index order (their metadata lies in that order): per-rank encoder and send times, per-group
  // LLM compute, communication and receive times, each per stage ([stage * ranks + rank], [stage * groups
  // + group]).
  std::vector<double> encoder(stages * world_size, 0.0), send(stages * world_size, 0.0);
  std::vector<double> group_compute(stages * n_groups, 0.0), group_comm(stages * n_groups, 0.0),
      group_receive(stages * n_groups, 0.0);
  double llm_total = 0.0, largest_tokens = 0.0, encoder_total = 0.0, largest_image = 0.0;  // lower bound
  double images_of_largest = 0.0;  // encoder time of the longest sample's largest image
  int image = 0;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const SampleMeta& sample = batch.samples[s];
    const int k = group_of_sample[s], m = stage_of_sample[s];
    double tokens = sample.text_len, largest_own_image = 0.0;
    for (const ImageMeta& im : sample.images) {
      const int owner = plan.image_owner[image++];
      const double time = cost.encoder_time(im.patches);
      encoder[m * world_size + owner] += time;
      encoder_total += time, largest_image = std::max(largest_image, time);
      largest_own_image = std::max(largest_own_image, time);
      const double route =
          image_route_time(cost, plan.llm_groups[k], shapes[k], node_of_rank, owner, im.patches);
      send[m * world_size + owner] += route, group_receive[m * n_groups + k] += route;
      tokens += im.patches;
    }
    const double one_rank = cost.llm(tokens);
    group_compute[m * n_groups + k] += one_rank / shapes[k].size;
    group_comm[m * n_groups + k] += cost.llm_comm(tokens, shapes[k].size, shapes[k].spans);
    llm_total += one_rank;
    if (tokens > largest_tokens) largest_tokens = tokens, images_of_largest = largest_own_image;
  }
  // Per stage and rank: LLM time (its group's) and boundary time (the larger of its sends and its share of
  // its group's receives; both directions).
  std::vector<double> llm(stages * world_size, 0.0), llm_comm(world_size, 0.0), boundary = send;
  for (int m = 0; m < stages; ++m)
    for (int k = 0; k < n_groups; ++k)
      for (int r : plan.llm_groups[k].ranks) {
        llm[m * world_size + r] = group_compute[m * n_groups + k] + group_comm[m * n_groups + k];
        llm_comm[r] += group_comm[m * n_groups + k];
        boundary[m * world_size + r] =
            std::max(boundary[m * world_size + r], group_receive[m * n_groups + k] / shapes[k].size);
      }
  // Each exchange pays one latency: a collective over the world (phases), or one round of point-to-point
  // messages (a pipeline stage, one direction).
  const double exchange_latency =
      encoder_total > 0.0 ? cost.link(world_size > cost.ranks_per_node).latency : 0.0;
  const auto slowest = [&](const std::vector<double>& v, int m) {
    return *std::max_element(v.begin() + m * world_size, v.begin() + (m + 1) * world_size);
  };

  PlanPrediction p;
  std::vector<double> busy(world_size, 0.0);
  for (int m = 0; m < stages; ++m)
    for (int r = 0; r < world_size; ++r)
      busy[r] += encoder[m * world_size + r] + boundary[m * world_size + r] + llm[m * world_size + r];
  for (int r = 0; r < world_size; ++r) {
    double enc = 0.0, model = 0.0;
    for (int m = 0; m < stages; ++m) enc += encoder[m * world_size + r], model += llm[m * world_size + r];
    p.encoder = std::max(p.encoder, enc);
    p.llm = std::max(p.llm, model);
  }
  if (!pipelined) {
    p.boundary = slowest(boundary, 0) + 2.0 * exchange_latency;
    p.makespan = p.encoder + p.boundary + p.llm;
  } else {
    // Dataflow pipeline (step_executor.cpp): each encoder rank runs the forward of every stage in order,
    // then the backward of every stage in order, each once the gradients of its rows have come back; each
    // LLM group runs its micro-batches in order, each once its image rows have arrived. A transfer takes
    // half of the stage's slowest boundary time (one direction) plus one latency.
    std::vector<double> transfer(stages), forward_done(stages * world_size, 0.0);
    for (int m = 0; m < stages; ++m) transfer[m] = 0.5 * slowest(boundary, m) + exchange_latency;
    for (int r : plan.encoder_ranks) {
      double t = 0.0;
      for (int position = 0; position < stages; ++position) {
        const int m = forward_stage(position, stages);
        forward_done[m * world_size + r] = t += kEncoderForwardShare * encoder[m * world_size + r];
      }
    }
    // Rows of stage m reach group k when the last of their encoder ranks has finished stage m's forward.
    const std::vector<int> first_image = first_image_of_samples(batch);
    std::vector<double> rows_ready(stages * n_groups, 0.0), group_end(stages * n_groups, 0.0);
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const int k = group_of_sample[s], m = stage_of_sample[s];
      for (int i = first_image[s]; i < first_image[s + 1]; ++i)
        rows_ready[m * n_groups + k] = std::max(
            rows_ready[m * n_groups + k], forward_done[m * world_size + plan.image_owner[i]] + transfer[m]);
    }
    double end = 0.0;
    for (int k = 0; k < n_groups; ++k) {
      double t = 0.0;
      for (int m = 0; m < stages; ++m) {
        const double work = group_compute[m * n_groups + k] + group_comm[m * n_groups + k];
        group_end[m * n_groups + k] = t = std::max(t, rows_ready[m * n_groups + k]) + work;
      }
      end = std::max(end, t);
    }
    // Gradients of stage m reach encoder rank r when the last group holding its rows has finished stage m.
    std::vector<double> gradients_ready(stages * world_size, 0.0);
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const int k = group_of_sample[s], m = stage_of_sample[s];
      for (int i = first_image[s]; i < first_image[s + 1]; ++i) {
        double& ready = gradients_ready[m * world_size + plan.image_owner[i]];
        ready = std::max(ready, group_end[m * n_groups + k] + transfer[m]);
      }
    }
    for (int r : plan.encoder_ranks) {
      double t = forward_done[forward_stage(stages - 1, stages) * world_size + r];
      for (int m = 0; m < stages; ++m) {
        const double work = (1.0 - kEncoderForwardShare) * encoder[m * world_size + r];
        if (work > 0.0) t = std::max(t, gradients_ready[m * world_size + r]) + work;
      }
      end = std::max(end, t);
    }
    // On the critical path for certain: the first stage's rows and the last stage's gradients (the other
    // transfers overlap compute).
    p.boundary = transfer[forward_stage(0, stages)] + transfer[stages - 1];
    p.makespan = end;
  }
  double total_busy = 0.0;
  for (double b : busy) total_busy += b;
  if (p.makespan > 0.0) {
    p.idle_fraction = std::max(0.0, 1.0 - total_busy / world_size / p.makespan);
    double slowest_comm = 0.0, slowest_llm = -1.0;
    for (int r = 0; r < world_size; ++r) {
      double model = 0.0;
      for (int m = 0; m < stages; ++m) model += llm[m * world_size + r];
      if (model > slowest_llm) slowest_llm = model, slowest_comm = llm_comm[r];
    }
    p.comm_fraction = (p.boundary + slowest_comm) / p.makespan;
  }
  if (!batch.samples.empty()) {
    const double largest_sample = planning::llm_lower_bound(0.0, largest_tokens, cost, world_size);
    if (!pipelined) {
      // The phases run one after the other on all ranks.
      p.lower_bound = std::max(encoder_total / world_size, largest_image) +
                      std::max(llm_total / world_size, largest_sample);
    } else {
      // Encoder and LLM overlap, on disjoint ranks: all the work over all ranks, or the longest sample's
      // chain (its largest image, then its LLM work at its best group size), or the largest image.
      p.lower_bound = std::max(
          {(encoder_total + llm_total) / world_size, images_of_largest + largest_sample, largest_image});
    }
  }
  return p;
}

}  // namespace minimllm
