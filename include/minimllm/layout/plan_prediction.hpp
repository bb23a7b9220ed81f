// What the planners say of a plan, as plain data: its predicted time by phase
// (planning/step_prediction.hpp computes it) and the bytes it moves (planning/plan_traffic.hpp), carried with
// each step (step/planned_step.hpp) into its metrics; and where each sample's loader is.
#pragma once

namespace minimllm {

// Colocated plans: the step executor runs three phases separated by world-wide exchanges (encoder forward |
// boundary all-to-all | LLM forward+backward | boundary all-to-all | encoder backward), so a phase starts
// when the slowest rank finished the previous one: the predicted step is the sum over phases of the
// slowest rank.
//   makespan    = max_r encoder_r + max_r boundary_r + max_r llm_r
//   lower_bound = max(sum of item times / N, largest item)
//               + max(sum of one-rank LLM compute / N, min over g <= N of the largest sample's time on g)
// which holds for every colocated plan of every policy.
// Disaggregated plans run as a dataflow pipeline over micro-batches (step_executor.cpp): the makespan
// follows each encoder rank's forwards (a third of an item's time) and backwards, each LLM group's
// micro-batches, and the point-to-point transfers between them. Encoder and LLM work overlap, so their
// bound is the one every schedule obeys:
//   lower_bound = max((sum of item times + sum of one-rank LLM compute) / N, largest item,
//                     the longest sample's largest item + its best time on any group size)
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
  // (planning/step_prediction.hpp): the data phase (the slowest rank's generation and packing, then the
  // samples' all-to-all from their loaders: movement, included in data), gradient all-reduce, AdamW.
  double data = 0.0, movement = 0.0, grad_sync = 0.0, optimizer = 0.0;
};

struct PlanTraffic {
  double intra_node_bytes = 0.0;  // between ranks of one node
  double inter_node_bytes = 0.0;  // between nodes
};

// The rank whose loader holds sample `sample` of `samples`: contiguous shards, rank r holding samples
// [r * samples / world_size, (r + 1) * samples / world_size).
int sample_loader_rank(int sample, int samples, int world_size);

}  // namespace minimllm
