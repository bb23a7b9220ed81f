#include "minimllm/plan/layout_source.hpp"

#include "minimllm/plan/step_prediction.hpp"

namespace minimllm {

LayoutSource::LayoutSource(const RunConfig& config, int world_size, CostModel cost)
    : config_(config), world_size_(world_size), cost_(std::move(cost)), policy_(config.parallel.policy) {
  if (policy_ != "deck") planner_ = make_planner(policy_, cost_, PlannerOptions{});
}

StepPlan LayoutSource::plan(const GlobalBatch& batch) const {
  StepPlan plan = planner_ ? planner_->plan(batch, world_size_) : make_deck_plan(config_, batch, world_size_);
  validate_plan(plan, batch, world_size_);
  return plan;
}

PlanPrediction LayoutSource::predict(const StepPlan& plan, const GlobalBatch& batch) const {
  return predict_step(plan, batch, cost_, world_size_);
}

}  // namespace minimllm
