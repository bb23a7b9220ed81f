// One row of the /steps table: what a step did and how long it took (already reduced over ranks).
#pragma once

#include <cstdint>

#include "minimllm/core/phase.hpp"

namespace minimllm {

struct StepRecord {
  int step = 0;
  double loss = 0.0;              // mean cross-entropy per text target over the global batch
  double grad_norm = 0.0;         // L2 norm of the synchronised gradient (of the mean loss), before AdamW
  std::int64_t text_tokens = 0;   // text tokens in the global batch
  std::int64_t image_tokens = 0;  // image patches (encoder tokens) in the global batch
  std::int64_t loss_targets = 0;  // text positions that carry loss (normalisation denominator)
  int samples = 0;
  double step_seconds = 0.0;  // wall time of the step, max over ranks
  // Phase times (core/phase.hpp), max over ranks: columns data_seconds ... optimizer_seconds.
  PhaseTimes phase_seconds;
  double tokens_per_second = 0.0;    // (text + image tokens) / step_seconds
  double model_flops = 0.0;          // analytic forward+backward FLOPs of the step
  double mfu = 0.0;                  // model_flops / step_seconds / (peak per rank * ranks)
  double predicted_seconds = 0.0;    // the cost model's makespan for the step's plan (no grad sync)
  double lower_bound_seconds = 0.0;  // the cost model's lower bound for any plan of this batch
  std::int64_t boundary_bytes = 0;   // bytes sent by the boundary exchange, summed over ranks
  // Bytes the plan moves between ranks of one node and between nodes (planning/plan_traffic.hpp: samples from
  // their loaders, pixels to their encoders, embeddings to the LLM and their gradients back).
  std::int64_t intra_node_bytes = 0;
  std::int64_t inter_node_bytes = 0;
  // The raw samples' all-to-all as it ran (step/sample_movement.hpp): bytes received from other ranks'
  // loaders, summed over ranks, and its seconds (part of data_seconds), max over ranks.
  std::int64_t movement_bytes = 0;
  double movement_seconds = 0.0;
  // Pipeline parallelism (0 without): the share of its longest stage's 1F1B span that a unit's stages
  // idle on average (StepOutcome::pipeline_bubble), the largest over units; and (p - 1) / (m + p - 1), the
  // ideal 1F1B bubble, for the unit with the fewest micro-batches (the largest ideal).
  double pipeline_bubble = 0.0;
  double ideal_bubble = 0.0;
  int llm_groups = 0;          // LLM groups in the step's plan
  int max_group_size = 0;      // largest LLM group (context-parallel degree)
  std::int64_t comm_hits = 0;  // communicator pool, this step, summed over ranks
  std::int64_t comm_creations = 0;
  std::int64_t comm_evictions = 0;
  double comm_creation_seconds = 0.0;  // max over ranks
  // What this step needed before it could start (the batch, its plan, this rank's work; its forecast is
  // computed while it runs), wherever it ran, max over ranks. On the helper
  // thread (runtime.plan_ahead) it overlaps the step before; phase_seconds[planning] holds only what this
  // step waited for (its exposed planning), so hidden = planning_work_seconds - planning_seconds.
  double planning_work_seconds = 0.0;
  // Rank 0's time writing this step's /ranks and /plans rows to HDF5 (the per-rank values were gathered
  // with the metric reductions before; the append and flush of this row itself come after it).
  double output_seconds = 0.0;
};

}  // namespace minimllm
