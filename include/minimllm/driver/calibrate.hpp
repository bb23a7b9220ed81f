// Calibration on the machine (`minimllm calibrate DECK`, or runtime.calibrate: true at start-up): times
// the deck's model through the real step path (StepExecutor) on every rank at once, each rank alone, at
// several sizes; times the optimizer, the gradient all-reduce and the collectives on the ranks it runs on;
// fits the cost model's coefficients (planning/calibration.hpp). Also picks a run's cost model.
#pragma once

#include <iosfwd>
#include <string>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/planning/calibration.hpp"
#include "minimllm/planning/gemm_rates.hpp"

namespace minimllm {

struct CalibrateOptions {
  int sizes = 5;          // sizes per phase (tokens per sample, patches per image)
  int repeats = 3;        // timed repetitions of every size, after one warm-up pass
  int rows_per_call = 0;  // LLM rows (and encoder patches) per measured call; 0: the deck's mean per rank
  std::ostream* log = nullptr;  // progress and the table, rank 0 only
};

// Collective over world: every rank measures; the result (identical on every rank) averages the ranks'
// compute medians and takes the slowest rank for collectives.
Calibration calibrate(const RunConfig& config, const World& world, const CalibrateOptions& options);

// The fitted coefficients and their fit errors, one line per term.
void print_calibration(std::ostream& out, const Calibration& calibration);

// The cost model of a run: a calibration file (`path` if non-empty, else the deck's parallel.cost_model
// resolved against the deck's directory), a calibration at start-up (runtime.calibrate), or the defaults
// from the model's FLOPs at `gflops`. Throws InputError (one line naming the file and key) for a missing,
// invalid or mismatched calibration file, identically on every rank.
struct CostModelChoice {
  CostModel model;
  std::string source;            // "default-from-FLOPs", the file's path, or "calibrated at start-up ..."
  std::string calibration_text;  // the calibration's YAML; empty for the defaults
  bool intra_measured = false, inter_measured = false;  // the calibration replaced these links
  bool creation_measured = false;                       // ... and the communicator creation time
  // The calibration's GEMM rates at the layout's shapes (its gemm_rates); empty: none measured, or the
  // FLOP-based defaults (then machine.gemm, where given, prices the shapes).
  std::vector<GemmRatePoint> gemm_rates;
};
CostModelChoice choose_cost_model(const RunConfig& config, const World& world, double gflops,
                                  int ranks_per_node, const std::string& path = "");
// The cost model a checkpointed run planned with, for its restart to plan every step alike: the defaults
// at gflops per rank, with calibration_text (a calibration's YAML) applied unless empty; source names it.
CostModelChoice restored_cost_model(const RunConfig& config, double gflops, int ranks_per_node,
                                    const std::string& calibration_text, const std::string& source);

}  // namespace minimllm
