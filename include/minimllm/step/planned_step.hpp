// A step planned: its global batch, the plan every rank agrees on, this rank's work under it, and what
// the cost model predicts. Made once per step (StepPlanner::plan) and consumed by the step's stages.
#pragma once

#include "minimllm/data/sampler.hpp"
#include "minimllm/plan/layout_source.hpp"
#include "minimllm/plan/rank_work.hpp"
#include "minimllm/plan/step_plan.hpp"

namespace minimllm {

struct PlannedStep {
  int step = 0;
  GlobalBatch batch;
  StepPlan plan;
  RankWork work;
  PlanPrediction prediction;
  // Generating the batch, planning it, deriving this rank's work and predicting the plan's time.
  double planning_seconds = 0.0;
};

// A step with a given plan (tests, benchmarks, calibration): this rank's work derived from it, no
// prediction. linear_weight: Model::linear_weight_in_attention_pairs (balances context-parallel chunks).
PlannedStep planned_step(GlobalBatch batch, StepPlan plan, int rank, int world_size, double linear_weight);

// Each step's plan from the run's layout source.
class StepPlanner {
 public:
  StepPlanner(const Sampler& sampler, const LayoutSource& layouts, int rank, int world_size,
              double linear_weight);

  // Host work only, and const: safe on a helper thread while the main thread runs kernels (PlanAhead).
  PlannedStep plan(int step) const;

 private:
  const Sampler& sampler_;
  const LayoutSource& layouts_;
  int rank_, world_size_;
  double linear_weight_;
};

}  // namespace minimllm
