// Everything a training run sets up before its first step, as values (docs/DESIGN.md, "Follow one run"):
// the model-parallel grid and its communicators, the memory checks, the restart point, the model, the
// machine and the cost model (as a simulation resolves them), the planners with the first steps planned,
// the GEMM backends, the output file, the communicator pool, AdamW and the step executor. Built in that
// order; every input and start-up check agreed over the ranks, so that invalid input stops every rank with
// exit 2 before any output is written.
#pragma once

#include <memory>
#include <optional>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/checkpoint.hpp"
#include "minimllm/driver/gemm_choice.hpp"
#include "minimllm/driver/run_output.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/metrics/file_lock.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/parallel/rank_grid.hpp"
#include "minimllm/planning/layout_source.hpp"
#include "minimllm/planning/plan_ahead.hpp"
#include "minimllm/planning/step_planner.hpp"
#include "minimllm/step/optimizer.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/step_executor.hpp"

namespace minimllm {

class RunSetup {
 public:
  // Collective over world. Fills result's choices (peaks, precision, collectives, cost model, machine,
  // GEMM backends, memory estimate) and writes /run. Throws as train() does.
  RunSetup(const RunConfig& config, const World& world, const TrainOptions& options, TrainResult& result);
  RunSetup(const RunSetup&) = delete;
  RunSetup& operator=(const RunSetup&) = delete;

  const World& data() const { return rank_grid->data(); }  // the data-parallel world of this rank's units

  bool own_peak = false;          // the process's peak resident memory was reset for this run
  double start_resident_mib = 0;  // before the model
  ModelParallel grid;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<RankGrid> rank_grid;
  std::optional<RestartPoint> restart;
  int first_step = 0;  // the restart's next step, else 0
  std::unique_ptr<Model> model;
  CostModelChoice cost;  // cost.model resolved for this run's ranks (driver/resolve_cost_model.hpp)
  std::unique_ptr<LayoutSource> layouts;
  std::unique_ptr<StepPlanner> planner;
  std::unique_ptr<PlanAhead> plans;  // the first kEstimateSteps steps already planned and agreed
  std::unique_ptr<GemmSelectionScope> gemm_scope;
  std::unique_ptr<RunOutput> out;             // rank 0's file (empty elsewhere, or without --out)
  std::unique_ptr<FileLock> checkpoint_lock;  // rank 0, while checkpointing: no other run writes it
  std::unique_ptr<CommPool> pool;
  std::unique_ptr<AdamW> optimizer;
  PlanningBasis planning;  // what the planners planned with: saved in checkpoints
  std::unique_ptr<StepExecutor> executor;
};

}  // namespace minimllm
