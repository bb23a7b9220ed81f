// Planner: one policy that turns a step's batch metadata into a StepPlan, identical on every rank
// (deterministic: no randomness, no rank-dependent input). Each reports its predicted makespan and a
// lower bound under the cost model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimllm/plan/cost_model.hpp"
#include "minimllm/plan/step_plan.hpp"

namespace minimllm {

struct PlanPrediction {
  double makespan = 0.0;     // predicted step time of the slowest rank (seconds)
  double lower_bound = 0.0;  // max(total work / ranks, largest single sample on all ranks)
  double idle_fraction = 0.0;   // 1 - mean busy / makespan
  double comm_fraction = 0.0;   // communication share of the makespan
};

struct PlannerOptions {
  int static_group_size = 1;  // static: the fixed context-parallel degree (divides the world)
  int encoder_ranks = 0;      // disagg: 0 = choose from the cost model
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual const char* name() const = 0;
  virtual StepPlan plan(const GlobalBatch& batch, int world_size) const = 0;
};

// "static", "orch", "dhp", "flexsp", "disagg"; throws InputError for an unknown name (listing valid ones).
std::unique_ptr<Planner> make_planner(const std::string& policy, const CostModel& cost, const PlannerOptions& options);
const std::vector<std::string>& planner_names();

// Predicted time of a plan under the cost model (phases of a rank add up; the step is the slowest rank).
PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, int world_size);

}  // namespace minimllm
