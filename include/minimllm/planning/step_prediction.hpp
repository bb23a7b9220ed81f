// The predicted time of a plan under the cost model: its phases (predict(): encoder, boundary, LLM; what
// the planners optimise), and the whole training step, comparable to the measured one
// (/steps/step_seconds: predict_step(), the phases plus the per-step terms every plan pays
// (CostModel::step): generating and packing the inputs, the gradient all-reduce and the optimizer).
#pragma once

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/plan_prediction.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm {

// A boundary exchange checks its route when it is built (parallel/boundary_exchange.cpp), before any row
// moves: an all-to-all of 3 ints with every rank of the world, then an all-reduce of one int over the
// world, both with MPI's small-message algorithms (Bruck's all-to-all: ceil(log2 n) steps each carrying
// half the blocks; recursive doubling), hierarchical over nodes:
//   steps(n) = ceil(log2 n);  all-to-all = steps(per_node) (alpha_intra + 6 N / bw_intra)
//                                        + steps(nodes) (alpha_inter + 6 N / bw_inter)
//   + Network::all_reduce of 4 bytes, tree. Its time; 0 on one rank.
double route_check_time(const CostModel& cost, int world_size);

// Predicted time of a plan's phases under the cost model (see PlanPrediction).
PlanPrediction predict(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost, int world_size);

// As predict(), cheaper, with a makespan at least predict()'s: the boundary exchange is bounded instead of
// routed (every item's rows to every member of its group at the slower link, a message step per item and
// member at the slower latency). Colocated plans; a disaggregated plan gets predict() itself. For a
// planner's quick "certainly faster than X" before it needs the exact prediction.
PlanPrediction predict_upper_bound(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                                   int world_size);

// As predict(), with data, grad_sync and optimizer set and added to makespan (the predicted step) and to
// lower_bound (the step terms of the lower bound: the gradient all-reduce, the optimizer, and the data
// of the busiest rank if the inputs were spread evenly). comm_fraction counts the all-reduce as
// communication; idle_fraction counts data imbalance as idle time.
//   data_r    = data_c + sum of its items' module data_per_item + data_per_row x rows
//             + data_per_token * (LLM rows of r)
//   data      = max_r data_r      (each rank packs its own inputs before the first exchange)
//             + movement_seconds  (the samples' all-to-all from their loaders, plan_traffic.hpp)
//   grad_sync = CostModel::grad_sync(world_size): hierarchical all-reduce (cost_model.hpp)
//   boundary += route_check_time(world_size) per boundary exchange (one a step; one a stage when
//               disaggregated), counted in the makespan and, once, in the lower bound
PlanPrediction predict_step(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                            int world_size);

}  // namespace minimllm
