// Planner: one policy that turns a step's batch metadata into a StepPlan, identical on every rank
// (deterministic: no randomness, no rank-dependent input). Each reports its predicted makespan and a
// lower bound under the cost model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/step_prediction.hpp"  // predict(): what plans are compared by

namespace minimllm {

struct PlannerOptions {
  // static, naive: the fixed context-parallel degree (divides the world); megatron_dcp: the degree its
  // derived token budget assumes.
  int cp = 1;
  // static, megatron_dcp: tokens per rank of a packed bin (Megatron-LM's max_seqlen_per_dp_cp_rank);
  // 0 = the step's longest sample / cp, rounded up (token_budget in planner.cpp).
  int tokens_per_rank = 0;
  // flexsp: seconds of wall time for its MILP per step (parallel.flexsp_time_limit); 0 = the heuristic only.
  double flexsp_time_limit = 0.1;
  int flexsp_buckets = 16;  // flexsp: length buckets of its MILP at least (more when the model is small)
  int encoder_ranks = 0;    // disagg: 0 = choose from the cost model
  // orch, dhp, flexsp, disagg (LPT over encoder ranks): an item goes to the least-loaded encoder rank on
  // its sample's LLM node unless that rank carries more than this fraction of the mean encoder load
  // above the least-loaded rank overall (node-aware tie-breaking; 0 = plain LPT).
  double locality_tolerance = 0.02;
  // The dynamic policies' communicators (at_least_static in planner.cpp): whether the pool holds the aligned
  // power-of-two blocks from start-up (parallel.comm_precreate: powers_of_two) and its capacity
  // (parallel.comm_pool_capacity), so that a plan's other groups are known to be created for it.
  bool precreated_powers_of_two = true;
  int pool_capacity = 64;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual const char* name() const = 0;
  virtual StepPlan plan(const GlobalBatch& batch, int world_size) const = 0;
  // Whether every call on the same batch gives the same plan. A planner that is not (flexsp's MILP under a
  // wall-clock time limit) is run on one rank and its plan broadcast (StepPlanner, step/planned_step.hpp).
  virtual bool deterministic() const { return true; }
};

// A policy's planner (planning/policy_registry.hpp: every policy but `deck`); throws InputError for an
// unknown name (listing valid ones). planner_names(): the registry's planners, in its order.
std::unique_ptr<Planner> make_planner(const std::string& policy, const CostModel& cost,
                                      const PlannerOptions& options);
const std::vector<std::string>& planner_names();

// The options a deck's parallel: section gives the planners (cp, tokens_per_rank, flexsp_time_limit,
// encoder_ranks).
PlannerOptions planner_options_of(const ParallelConfig& parallel);

}  // namespace minimllm
