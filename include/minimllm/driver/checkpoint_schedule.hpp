// When a training run writes its checkpoints and stops early (docs/RUNNING.md, "Checkpoint and restart",
// "Signals"): every checkpoint_every steps and after the last step; and after the current step when
// SIGUSR1, SIGTERM or SIGINT asks the run to stop (core/stop_request.hpp), with a checkpoint where the run
// checkpoints. The request is agreed over the ranks after each step, as they may have seen the signal at
// different steps.
#pragma once

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/driver/run_setup.hpp"
#include "minimllm/driver/trainer.hpp"

namespace minimllm {

class CheckpointSchedule {
 public:
  // Installs the stop handlers (core/stop_request.hpp), keeping a signal already received.
  CheckpointSchedule(const RunConfig& config, const World& world, const TrainOptions& options, RunSetup& run,
                     TrainResult& result);
  CheckpointSchedule(const CheckpointSchedule&) = delete;
  CheckpointSchedule& operator=(const CheckpointSchedule&) = delete;

  // Collective, after step `step` completed: writes the checkpoint when one is due or a stop was
  // requested; true when the run stops here (result.stopped_on_request, stop_signal and /run `stopped`
  // set).
  bool after_step(int step);

 private:
  void write(int next_step);

  const RunConfig& config_;
  const World& world_;
  const TrainOptions& options_;
  RunSetup& run_;
  TrainResult& result_;
  bool checkpointing_;
};

}  // namespace minimllm
