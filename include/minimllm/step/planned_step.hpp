// A step planned: its global batch, the plan every rank agrees on, this rank's work under it, and what
// the cost model predicts. Made once per step (planning/step_planner.hpp: StepPlanner::plan, then agree;
// the forecast while the step runs) and consumed by the step's stages.
#pragma once

#include <exception>

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/plan_prediction.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/layout/step_plan.hpp"

namespace minimllm {

// What only reports on a step: the cost model's prediction of its time and what its plan moves.
struct StepForecast {
  PlanPrediction prediction;
  PlanTraffic traffic;  // what the plan moves between ranks and nodes (layout/plan_prediction.hpp)
};

struct PlannedStep {
  int step = 0;
  GlobalBatch batch;
  StepPlan plan;
  RankWork work;
  StepForecast forecast;  // filled while the step runs (StepPlanner::forecast), for the step's records
  // What the step needed before it could start: generating the batch, planning it and deriving this rank's
  // work (and receiving the plan, when one rank plans for all). The forecast is not part of it.
  double planning_seconds = 0.0;
  // A rank waiting for the planning rank's plan (StepPlanner::agree) holds only the batch; the planning
  // rank keeps its planning failure here until agree() shares it.
  bool awaiting_plan = false;
  std::exception_ptr planning_error;
  bool agreed = false;  // StepPlanner::agree has run on it (every rank alike): a second call is a no-op
};

// A step with a given plan (tests, benchmarks, calibration): this rank's work derived from it under the
// encoder's schedule, no prediction.
PlannedStep planned_step(GlobalBatch batch, StepPlan plan, int rank, int world_size,
                         EncoderSchedule schedule = EncoderSchedule::per_step);

}  // namespace minimllm
