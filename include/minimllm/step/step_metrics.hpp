// A step's measurements, reduced over ranks: the /steps row (times: the slowest rank's; counts and
// FLOPs: sums) and rank 0's copy of every rank's own values for the /ranks tables.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "minimllm/metrics/step_record.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/step_executor.hpp"

namespace minimllm {

// One rank's values of a step, one per /ranks table (rank_table_names, in that order).
struct RankStepValues {
  double step_seconds = 0.0;
  PhaseTimes seconds;
  double model_flops = 0.0, llm_rows = 0.0, encoder_rows = 0.0;
};
// "step_seconds", each phase's seconds_column, "model_flops", "llm_rows", "encoder_rows".
const std::vector<std::string>& rank_table_names();
// The unit of a /ranks table's values: "s" for the times, "FLOP", "row" (docs/HDF5.md).
const char* rank_table_unit(const std::string& name);

struct StepMetrics {
  StepRecord record;                             // identical on every rank, but output_seconds
  std::vector<std::vector<double>> rank_tables;  // rank 0: [table][rank], tables as rank_table_names
};

// The pool's work during one step (stats now minus stats before).
CommPoolStats pool_activity(const CommPoolStats& now, const CommPoolStats& before);

// Collective over world. outcome: after GradientSync::finish (loss summed), with every phase of the
// step in outcome.seconds; step_seconds: this rank's wall time of the step; peak_gflops_per_rank: MFU's
// denominator. Under tensor parallelism world is a data world (one rank per unit, each counting its
// share of its unit's FLOPs, Model::llm_flops) and ranks_per_unit the tp ranks each stands for: the step's
// model FLOPs and MFU are then the whole world's.
StepMetrics reduce_step_metrics(MPI_Comm world, const PlannedStep& planned, const StepOutcome& outcome,
                                double step_seconds, const CommPoolStats& pool, double peak_gflops_per_rank,
                                int ranks_per_unit = 1);

}  // namespace minimllm
