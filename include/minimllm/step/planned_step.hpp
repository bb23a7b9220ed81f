// A step planned: its global batch, the plan every rank agrees on, this rank's work under it, and what
// the cost model predicts. Made once per step (planning/step_planner.hpp: StepPlanner::plan, then agree) and
// consumed by the step's stages.
#pragma once

#include <exception>

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/plan_prediction.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/layout/step_plan.hpp"

namespace minimllm {

struct PlannedStep {
  int step = 0;
  GlobalBatch batch;
  StepPlan plan;
  RankWork work;
  PlanPrediction prediction;
  PlanTraffic traffic;  // what the plan moves between ranks and nodes (layout/plan_prediction.hpp)
  // Generating the batch, planning it, deriving this rank's work and predicting the plan's time (and
  // receiving the plan, when one rank plans for all).
  double planning_seconds = 0.0;
  // A rank waiting for the planning rank's plan (StepPlanner::agree) holds only the batch; the planning
  // rank keeps its planning failure here until agree() shares it.
  bool awaiting_plan = false;
  std::exception_ptr planning_error;
  bool agreed = false;  // StepPlanner::agree has run on it (every rank alike): a second call is a no-op
};

// A step with a given plan (tests, benchmarks, calibration): this rank's work derived from it, no
// prediction.
PlannedStep planned_step(GlobalBatch batch, StepPlan plan, int rank, int world_size);

}  // namespace minimllm
