#include "minimllm/planning/layout_source.hpp"

#include "minimllm/config/input_error.hpp"
#include "minimllm/planning/step_prediction.hpp"

namespace minimllm {

EncoderSchedule LayoutSource::encoder_schedule() const {
  return encoder_schedule_from_string(config_.parallel.encoder_schedule);
}

LayoutSource::LayoutSource(const RunConfig& config, int world_size, CostModel cost)
    : config_(config), world_size_(world_size), cost_(std::move(cost)), policy_(config.parallel.policy) {
  if (policy_ != "deck") planner_ = make_planner(policy_, cost_, planner_options_of(config.parallel));
}

StepPlan LayoutSource::plan(const GlobalBatch& batch) const {
  StepPlan plan;
  try {
    plan = planner_ ? planner_->plan(batch, world_size_) : make_deck_plan(config_, batch, world_size_);
  } catch (const InputError& e) {
    // A planner's (parallel.cp, a sample its token budget cannot hold): name the deck.
    if (!planner_) throw;
    throw InputError(config_.deck_path + ": " + e.what());
  }
  validate_plan(plan, batch, world_size_);
  return plan;
}

PlanPrediction LayoutSource::predict(const StepPlan& plan, const GlobalBatch& batch) const {
  return predict_step(plan, batch, cost_, world_size_);
}

}  // namespace minimllm
