// A training run's HDF5 file (metrics/hdf5_writer.hpp), written by rank 0: /run provenance, and per step
// the /ranks, /plans and /predicted rows and the /steps row. Other ranks hold an empty RunOutput.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimllm/core/world.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/step_metrics.hpp"

namespace minimllm {

// A file a run reads (the deck, the calibration, the reference), which its output may never replace.
struct RunInputFile {
  std::string what;  // "deck", "calibration file (--cost-model)", ...
  std::string path;  // empty: none
};

// Whether a and b name the same file: by filesystem identity when both exist, else by absolute,
// normalised path (symbolic links of the existing part resolved).
bool same_file(const std::string& a, const std::string& b);

// Checks an output path before anything runs (rank 0's view; run it on rank 0, then agree): throws
// InputError naming the path when it names one of inputs (even with overwrite), when it exists and
// overwrite is false, or when a running minimllm holds its lock (FileLock::check_not_busy). flag is the
// option that named path (--out, --checkpoint), for the messages.
void check_output_path(const std::string& path, bool overwrite, const std::vector<RunInputFile>& inputs,
                       const std::string& flag = "--out");

class RunOutput {
 public:
  // Collective: rank 0 opens `path` (none when empty); every rank learns whether that worked
  // (agree_on_error), so all fail alike: InputError (e.g. the file exists without overwrite, or a running
  // minimllm writes it), else AgreedFailure.
  RunOutput(const std::string& path, bool overwrite, const World& world);

  explicit operator bool() const { return writer_ != nullptr; }
  Hdf5RunWriter& writer() { return *writer_; }

  // /run: provenance, the run's choices (peak, precision, collectives, cost model) and the estimate.
  void write_run_attributes(const RunConfig& config, const TrainResult& r, double parameters,
                            std::vector<RunAttribute> provenance, const std::string& calibration_text);

  // The step's per-rank values, plan and prediction; the /steps row follows with append_step.
  void append_step_tables(const StepMetrics& metrics, const PlannedStep& planned, int world_size);
  void append_step(const StepRecord& record) { writer_->append_step(record); }

 private:
  void describe_step_tables();  // a `units` attribute on every /ranks and /plans table

  std::unique_ptr<Hdf5RunWriter> writer_;
  // The members of the enumerated tables /plans/policy, /plans/planner_source and /plans/solver_status:
  // every value a plan can name, fixed before the first step (policy_names(), kPlanSources,
  // kSolverStatuses).
  std::vector<std::string> policies_, sources_, solver_statuses_;
  bool tables_described_ = false;  // the units of /ranks and /plans are written with their first rows
};

}  // namespace minimllm
