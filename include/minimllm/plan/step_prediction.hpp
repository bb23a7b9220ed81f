// The predicted time of a whole training step, comparable to the measured one (/steps/step_seconds):
// the plan's phases (predict(): encoder, boundary, LLM; what the planners optimise) plus the per-step
// terms every plan pays (CostModel::step): generating and packing the inputs, the gradient all-reduce
// and the optimizer.
#pragma once

#include "minimllm/plan/planner.hpp"

namespace minimllm {

// As predict(), with data, grad_sync and optimizer set and added to makespan (the predicted step) and to
// lower_bound (the step terms of the lower bound: the gradient all-reduce, the optimizer, and the data
// of the busiest rank if the inputs were spread evenly). comm_fraction counts the all-reduce as
// communication; idle_fraction counts data imbalance as idle time.
//   data_r    = data_c + data_per_image * (images rank r encodes) + data_per_patch * (their patches)
//             + data_per_token * (LLM rows of r)
//   data      = max_r data_r      (each rank packs its own inputs before the first exchange)
//   grad_sync = StepCost::grad_sync(world_size, ranks_per_node)
PlanPrediction predict_step(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                            int world_size);

}  // namespace minimllm
