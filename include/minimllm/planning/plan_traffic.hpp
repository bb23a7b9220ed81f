// The bytes a plan moves between ranks in one step, and how many of them cross nodes. Each rank's loader
// holds a contiguous shard of the global batch (sample_loader_rank), as a distributed sampler gives each
// data-parallel rank its share; the plan then moves
//   - a sample's token ids from its loader to each of its LLM group's ranks (all of them: a member reads its
//     chunk's ids and the next row's as targets),
//   - each item's raw input from its sample's loader to the item's encoder rank,
//   - each item's embedding rows from its encoder rank to its sample's group (rows / g to each), and
//     their gradients back (CostModel::boundary_bytes_per_patch counts both directions).
// Bytes that stay on their rank are not counted. All of them move in a run: the raw samples in the step's
// all-to-all (step/sample_movement.hpp), the rows in the boundary exchange. OrchMLLM's node-wise
// rearrangement (orch) keeps them inside nodes; /steps/inter_node_bytes and `minimllm simulate` report them
// per step.
#pragma once

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/plan_prediction.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm {

// A sample's raw inputs as its loader holds them (token ids and pixels), in bytes.
double sample_input_bytes(const SampleMeta& sample, const CostModel& cost);

PlanTraffic plan_traffic(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                         int world_size);

// Time of moving the samples' raw inputs from their loaders to where the plan uses them (token ids to each
// member of the sample's LLM group; raw input to the item's encoder rank), as one all-to-all
// before the step's first phase: each rank pays, for what it sends and for what it receives, a message
// step per peer and its bytes at the link to that peer (all_to_all_time, cost_model.hpp); the step waits
// for the slowest rank. 0 when nothing leaves its loader. The embedding rows of the boundary exchange are
// not in it (the boundary phase charges them).
double movement_seconds(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                        int world_size);

}  // namespace minimllm
