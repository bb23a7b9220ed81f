// Checkpoint and restart (docs/RUNNING.md, "Checkpoint and restart"; schema in docs/HDF5.md): the model's
// parameters, AdamW's moments, the step counter and the sampler's state, so that `run --restart FILE`
// continues a run with losses bitwise identical to an uninterrupted one on the same ranks and policy.
//
// The sampler is a pure function of (seed, step, sample id), so its state is the seed and the next step.
// A checkpoint also keeps what the run's planners planned with (the cost model's rate and calibration),
// so that a restart plans every step as the uninterrupted run would have, whatever this machine measures
// now.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/step/optimizer.hpp"

namespace minimllm {

// What the planners of a run planned with: restored by a restart.
struct PlanningBasis {
  double gflops_per_rank = 0.0;  // the cost model's compute rate
  std::string cost_model_source;
  std::string calibration_text;  // the calibration applied to the cost model; empty for the defaults
  double capacity_bytes = 0.0;   // the memory per rank plans had to fit; 0: unbounded
  // runtime.gemm's backend per shape class (encode_gemm_selection); a restart reuses it, so its GEMMs round
  // as the uninterrupted run's did. Empty: none recorded (older checkpoints), measured again.
  std::string gemm_selection;
};

// A checkpoint read for a restart, identical on every rank.
struct RestartPoint {
  std::string path;
  int next_step = 0;  // the first step the restart runs
  PlanningBasis planning;
  std::vector<float> params, first_moment, second_moment;
};

// `<out without .h5>.ckpt.h5`: the default checkpoint file of the run writing out.
std::string default_checkpoint_path(const std::string& out);

// Collective over world. Writes what a restart needs after next_step steps to path (rank 0, the
// distributed optimizer's moment shards gathered over `data` first, the world itself without tensor
// parallelism; under it the first unit's slices then assembled into the whole model, so the file is the
// same whatever the grid; atomic, fsynced: see write_checkpoint_file). A failure (e.g. a full disk) is
// agreed: every rank throws AgreedFailure, the previous checkpoint kept.
void save_checkpoint(const std::string& path, const RunConfig& config, const World& world, const World& data,
                     const Model& model, const AdamW& optimizer, int next_step,
                     const PlanningBasis& planning);

// Collective. Reads path on rank 0 and gives every rank its contents. Throws InputError on every rank
// (agreed) when it cannot be read or does not belong to this run: another deck (by its sha256), seed,
// global batch or model size, or no step left to run (next step >= config.steps).
RestartPoint read_restart_point(const std::string& path, const RunConfig& config, const World& world,
                                std::size_t parameter_count);

// Loads the point's parameters and moments into model and optimizer (with the distributed optimizer, its
// shard of the moments: a checkpoint restarts with or without it, whichever way it was written; under
// tensor parallelism this rank's slices of both).
void restore_checkpoint(const RestartPoint& point, Model& model, const AdamW& optimizer);

}  // namespace minimllm
