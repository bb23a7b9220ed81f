// LayoutSource: where each step's plan comes from — the deck's own layout (parallel.policy: deck) or a
// planner policy — and what the cost model predicts for it. Identical on every rank.
#pragma once

#include <memory>
#include <string>

#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_prediction.hpp"

namespace minimllm {

class LayoutSource {
 public:
  // cost: the model the planners optimise and predictions use (same on every rank).
  LayoutSource(const RunConfig& config, int world_size, CostModel cost);

  // The step's plan, validated. Throws InputError when the deck's layout cannot fit world_size.
  StepPlan plan(const GlobalBatch& batch) const;
  // The whole step's predicted time (predict_step: the plan's phases and the per-step terms).
  PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch) const;
  const std::string& policy() const { return policy_; }
  // Whether plan() gives every rank the same plan on its own (else one rank plans and broadcasts).
  bool deterministic() const { return !planner_ || planner_->deterministic(); }
  const CostModel& cost() const { return cost_; }
  // When a colocated plan's encoder runs (parallel.encoder_schedule): what each rank's work follows.
  EncoderSchedule encoder_schedule() const;

 private:
  const RunConfig& config_;
  int world_size_;
  CostModel cost_;
  std::string policy_;
  std::unique_ptr<Planner> planner_;  // null for the deck's own layout
};

}  // namespace minimllm
