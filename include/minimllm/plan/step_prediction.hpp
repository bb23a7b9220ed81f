// The predicted time of a plan under the cost model: its phases (predict(): encoder, boundary, LLM; what
// the planners optimise), and the whole training step, comparable to the measured one
// (/steps/step_seconds: predict_step(), the phases plus the per-step terms every plan pays
// (CostModel::step): generating and packing the inputs, the gradient all-reduce and the optimizer).
#pragma once

#include "minimllm/data/sampler.hpp"
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
  // The longest pipeline bubble of any LLM group (CostModel::pipeline_stages > 1; included in llm).
  double bubble = 0.0;
  // Per-step terms outside the phases, set (and added to makespan) by predict_step only
  // (plan/step_prediction.hpp): the data phase (the slowest rank's generation and packing, then the
  // samples' all-to-all from their loaders: movement, included in data), gradient all-reduce, AdamW.
  double data = 0.0, movement = 0.0, grad_sync = 0.0, optimizer = 0.0;
};

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
// routed (every image's rows to every member of its group at the slower link, a message step per image and
// member at the slower latency). Colocated plans; a disaggregated plan gets predict() itself. For a
// planner's quick "certainly faster than X" before it needs the exact prediction.
PlanPrediction predict_upper_bound(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                                   int world_size);

// As predict(), with data, grad_sync and optimizer set and added to makespan (the predicted step) and to
// lower_bound (the step terms of the lower bound: the gradient all-reduce, the optimizer, and the data
// of the busiest rank if the inputs were spread evenly). comm_fraction counts the all-reduce as
// communication; idle_fraction counts data imbalance as idle time.
//   data_r    = data_c + data_per_image * (images rank r encodes) + data_per_patch * (their patches)
//             + data_per_token * (LLM rows of r)
//   data      = max_r data_r      (each rank packs its own inputs before the first exchange)
//             + movement_seconds  (the samples' all-to-all from their loaders, plan_traffic.hpp)
//   grad_sync = CostModel::grad_sync(world_size): hierarchical all-reduce (cost_model.hpp)
//   boundary += route_check_time(world_size) per boundary exchange (one a step; one a stage when
//               disaggregated), counted in the makespan and, once, in the lower bound
PlanPrediction predict_step(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                            int world_size);

}  // namespace minimllm
