// The training loop: one step reads top to bottom in train(), as a pipeline of values (docs/DESIGN.md,
// "Follow one step"): PlannedStep (batch, plan, rank work) -> StepComms -> StepInputs -> StepOutcome ->
// synchronised gradients -> AdamW -> StepMetrics -> HDF5.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/driver/machine.hpp"
#include "minimllm/metrics/step_record.hpp"

namespace minimllm {

struct TrainOptions {
  std::string out_path;         // HDF5 output; empty = none
  bool overwrite = false;       // replace out_path if it exists
  std::ostream* log = nullptr;  // progress lines on rank 0; null = silent
  std::string command_line;     // recorded in /run (provenance); empty when not run from the command line
  std::string cost_model;       // calibration file overriding the deck's parallel.cost_model; empty: none
  // Checkpoints (driver/checkpoint.hpp): written to checkpoint_path every checkpoint_every steps and
  // after the last step (0: only on a stop request), and, whenever checkpoint_path is set, when a signal
  // asks the run to stop (core/stop_request.hpp). Empty: none.
  std::string checkpoint_path;
  int checkpoint_every = 0;
  std::string restart_path;  // a checkpoint to continue from (its next step to config.steps); empty: none
};

struct TrainResult {
  std::vector<StepRecord> steps;            // identical on every rank, except output_seconds (rank 0's)
  double peak_gflops_per_rank = 0.0;        // the hardware's dense peak: MFU's denominator (mfu_peak.hpp)
  std::string peak_source;                  // "CPU dense ...", "datasheet ..." or "machine section ..."
  double attainable_gflops_per_rank = 0.0;  // the fastest measured GEMM: attainable_fraction's
  std::string attainable_source;
  double planning_gflops_per_rank = 0.0;  // the cost model's compute rate (attainable unless the deck's)
  std::string gemm_backend;       // runtime.gemm's outcome: blas, portable, cublas or mixed (per shape class)
  std::string gemm_choice;        // the same in one line, with the rates behind it
  std::string cost_model_source;  // "default-from-FLOPs", a calibration file, or "calibrated ..."
  double memory_estimate_mib = 0.0;  // analytic, per rank (max over ranks)
  double peak_resident_mib = 0.0;    // max over ranks
  // Resident at the run's start, before the model (the binary, MPI, Kokkos and the libraries): what the
  // analytic estimate does not count, but the peak does; max over ranks.
  double start_resident_mib = 0.0;
  // AdamW's moments this rank holds (AdamW::state_bytes): its shard's with the distributed optimizer.
  double optimizer_state_bytes = 0.0;
  // Wall time of the steps after the warm-up (step 0), everything included: planning, compute, metrics
  // and output; max over ranks. The denominator of the benchmark's rates (FOM).
  double timed_seconds = 0.0;
  double loop_seconds = 0.0;  // the same for all steps, warm-up included
  // Rank 0's HDF5 output time per step: every table row, the /steps row and the flush.
  std::vector<double> output_seconds;
  std::string precision;    // of the GEMMs: "fp32" or "bf16" (runtime.precision)
  std::string recompute;    // activation recomputation: "none", "selective", "full" (runtime.recompute)
  std::string collectives;  // backend of every collective: "mpi" or "nccl"
  std::string collectives_reason;  // why that backend (choose_collectives)
  int first_step = 0;              // the step the run began with (a restart's checkpoint step, else 0)
  int checkpoints_written = 0;
  double checkpoint_seconds = 0.0;  // writing them, max over ranks of the sum (in loop_seconds too)
  // Set when a signal (SIGUSR1, SIGTERM, SIGINT: core/stop_request.hpp) stopped the run after a step: the
  // checkpoint then written, if the run checkpoints, holds its state, and `run --restart` goes on from there.
  bool stopped_on_request = false;
  int stop_signal = 0;      // the signal, agreed over the ranks
  ResolvedMachine machine;  // the machine the run planned for (driver/machine.hpp)
};

// Trains for config.steps steps on world. Throws InputError for invalid input (e.g. the output file
// exists without overwrite) before any step runs; std::runtime_error for runtime failures; NonFiniteError
// (step/finite_check.hpp) on every rank at the first step whose loss or gradient is NaN or infinite,
// before its optimizer step, the file holding the completed steps (and /run `stopped`) closed. With
// options.restart_path, InputError on every rank when the checkpoint cannot be read or belongs to another
// run (read_restart_point).
TrainResult train(const RunConfig& config, const World& world, const TrainOptions& options);

}  // namespace minimllm
