#include "minimllm/driver/checkpoint_schedule.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/stop_request.hpp"
#include "minimllm/core/watchdog.hpp"
#include "minimllm/driver/checkpoint.hpp"

namespace minimllm {

CheckpointSchedule::CheckpointSchedule(const RunConfig& config, const World& world,
                                       const TrainOptions& options, RunSetup& run, TrainResult& result)
    : config_(config),
      world_(world),
      options_(options),
      run_(run),
      result_(result),
      checkpointing_(!options.checkpoint_path.empty()) {
  // main installs the handlers first thing; a caller of train() gets them here, keeping a signal already
  // received.
  install_stop_request_handler();
}

void CheckpointSchedule::write(int next_step) {
  heartbeat("checkpoint");
  const double t = now_seconds();
  save_checkpoint(options_.checkpoint_path, config_, world_, run_.data(), *run_.model, *run_.optimizer,
                  next_step, run_.planning);
  result_.checkpoint_seconds += now_seconds() - t;
  ++result_.checkpoints_written;
}

bool CheckpointSchedule::after_step(int step) {
  const bool last = step + 1 == config_.steps;
  const bool due = checkpointing_ && options_.checkpoint_every > 0 &&
                   ((step + 1) % options_.checkpoint_every == 0 || last);
  const int stop = agree_on_stop(world_.comm);  // the ranks may have seen the signal at different steps
  if (due || (stop && checkpointing_)) write(step + 1);
  if (!stop || last) return false;
  result_.stopped_on_request = true;
  result_.stop_signal = stop;
  if (*run_.out)
    run_.out->writer().set_run_attribute("stopped", stop_note(stop, step, options_.checkpoint_path));
  return true;
}

}  // namespace minimllm
