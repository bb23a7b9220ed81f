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

// Colocated plans: the step executor runs three phases separated by world-wide exchanges (encoder forward |
// boundary all-to-all | LLM forward+backward | boundary all-to-all | encoder backward), so a phase starts
// when the slowest rank finished the previous one: the predicted step is the sum over phases of the
// slowest rank.
//   makespan    = max_r encoder_r + max_r boundary_r + max_r llm_r
//   lower_bound = max(sum of image times / N, largest image)
//               + max(sum of one-rank LLM compute / N, min over g <= N of the largest sample's time on g)
// which holds for every colocated plan of every policy.
// Disaggregated plans run as a dataflow pipeline over micro-batches (step_executor.cpp): the makespan
// follows each encoder rank's forwards (a third of an image's time) and backwards, each LLM group's
// micro-batches, and the point-to-point transfers between them. Encoder and LLM work overlap, so their
// bound is the one every schedule obeys:
//   lower_bound = max((sum of image times + sum of one-rank LLM compute) / N, largest image,
//                     the longest sample's largest image + its best time on any group size)
struct PlanPrediction {
  double makespan = 0.0;       // predicted step time (seconds), excluding the gradient all-reduce
  double lower_bound = 0.0;    // see above (the bound of the plan's placement)
  double idle_fraction = 0.0;  // 1 - mean busy / makespan
  double comm_fraction = 0.0;  // communication on the critical path (boundary + the slowest LLM rank's
                               // context-parallel exchanges) / makespan
  // Slowest rank of each phase (busy time). Pipelines: boundary = the first stage's rows and the last
  // stage's gradients in transit (the other transfers overlap compute).
  double encoder = 0.0, boundary = 0.0, llm = 0.0;
  // Per-step terms outside the phases, set (and added to makespan) by predict_step only
  // (plan/step_prediction.hpp): slowest rank's data generation and packing, gradient all-reduce, AdamW.
  double data = 0.0, grad_sync = 0.0, optimizer = 0.0;
};

struct PlannerOptions {
  int static_group_size = 1;  // static: the fixed context-parallel degree (divides the world)
  int encoder_ranks = 0;      // disagg: 0 = choose from the cost model
  // orch, dhp, flexsp, disagg (LPT over encoder ranks): an image goes to the least-loaded encoder rank on
  // its sample's LLM node unless that rank carries more than this fraction of the mean encoder load
  // above the least-loaded rank overall (node-aware tie-breaking; 0 = plain LPT).
  double locality_tolerance = 0.02;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual const char* name() const = 0;
  virtual StepPlan plan(const GlobalBatch& batch, int world_size) const = 0;
};

// "static", "orch", "dhp", "flexsp", "disagg"; throws InputError for an unknown name (listing valid ones).
std::unique_ptr<Planner> make_planner(const std::string& policy, const CostModel& cost,
                                      const PlannerOptions& options);
const std::vector<std::string>& planner_names();

// Predicted time of a plan under the cost model (see PlanPrediction).
PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, int world_size);

}  // namespace minimllm
