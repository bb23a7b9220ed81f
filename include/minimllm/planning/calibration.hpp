// Calibration: the cost model's coefficients measured on a machine (`minimllm calibrate`, see
// src/driver/calibrate.cpp), the least-squares fit that produces them, and the small YAML file that
// stores them (docs/INPUT.md, "Calibration file"), which a deck names as parallel.cost_model.
// This module does no measurement: it fits, reads, writes and applies.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/gemm_rates.hpp"

namespace minimllm {

// ---------------------------------------------------------------------------------------------------
// Fitting

// Non-negative weighted linear least squares: the coefficients b >= 0 minimising
// sum_i ((y_i - x_i . b) / y_i)^2, i.e. the relative error of every point counts alike, so small sizes
// (where fixed costs show) weigh as much as large ones. Every coefficient is a time per unit, so none may
// be negative. Exact for the few features used here (every active set is tried). rows: x_i; y_i > 0.
struct LinearFit {
  std::vector<double> coefficients;
  double rms_relative_error = 0.0;  // sqrt(mean(((x_i . b - y_i) / y_i)^2))
  double max_relative_error = 0.0;  // max |x_i . b - y_i| / y_i
};
LinearFit fit_nonnegative(const std::vector<std::vector<double>>& rows, const std::vector<double>& y);

// ---------------------------------------------------------------------------------------------------
// What a calibration holds

// The points one fit came from and how well it matches them.
struct FitPoints {
  std::vector<double> sizes;    // tokens, patches or bytes
  std::vector<double> seconds;  // measured: compute: median over repeats, mean over ranks;
                                // collectives: fastest repeat, slowest rank
  double rms_relative_error = 0.0, max_relative_error = 0.0;
};

// Forward + backward of one item (encoder: one image of s patches; LLM: one sample of s tokens).
struct PhaseCalibration {
  PhaseCost cost;
  FitPoints points;
};

// Generating and packing one rank's inputs for a step:
//   c + per_image * images + per_patch * patches + per_token * rows.
struct DataCalibration {
  double c = 0.0, per_image = 0.0, per_patch = 0.0, per_token = 0.0;
  std::vector<double> images, patches, tokens, seconds;  // measured points
  double rms_relative_error = 0.0, max_relative_error = 0.0;
};

// One collective on the calibrating ranks: seconds = latency + bus bytes / bandwidth, where bus bytes
// are what each rank moves: all-gather and all-to-all (N-1)/N of the total, all-reduce 2(N-1)/N of the
// buffer (the nccl-tests convention, so one bandwidth describes any group size).
struct CollectiveCalibration {
  bool measured = false;  // false with one rank (nothing to measure)
  LinkCost link;
  FitPoints points;  // sizes: bytes of the buffer per rank
};

struct Calibration {
  // Where and how it was measured.
  std::string deck, created, host, minimllm_version, kokkos;
  int ranks = 1, ranks_per_node = 1, blas_threads = 1;
  int rows_per_call = 0;  // LLM rows (encoder patches) packed per measured call
  ModelConfig model;      // the model measured: a deck with another model cannot use it
  PhaseCalibration encoder, llm;
  // The encoder's forward over its forward + backward, summed over the image sizes measured; 0: not
  // measured (a file from before it was), and the cost model keeps 1/3.
  double encoder_forward_share = 0.0;
  DataCalibration data;
  double optimizer_seconds = 0.0;  // one AdamW step over every parameter
  long long parameters = 0;
  double grad_sync_seconds = 0.0;  // all-reduce of the gradient buffer on `ranks` ranks (0 on one rank)
  // Within a node. Collectives spanning nodes are measured only when the ranks span nodes.
  CollectiveCalibration all_gather, all_reduce, all_to_all;
  CollectiveCalibration inter_all_gather, inter_all_reduce, inter_all_to_all;
  // One message between two ranks (MPI_Send/MPI_Recv ping-pong, half the round trip): within a node and
  // between two nodes (pipeline parallelism's activations and gradients between stages). Sizes: bytes.
  CollectiveCalibration point_to_point, inter_point_to_point;
  // The all-reduce on tensor_parallel_ranks consecutive ranks inside a node (the deck's parallel.tp: the
  // tensor-parallel groups' collective), measured when that is above 1.
  int tensor_parallel_ranks = 1;
  CollectiveCalibration tensor_parallel_all_reduce;
  // The machine fields measured here (a `machine:` section usable by simulate --machine), and what was
  // and was not measured (written as comments above it; not read back).
  MachineConfig machine;
  std::vector<std::string> machine_notes;
  // GEMM rates at the shapes the deck's layout gives a rank (its linears at tp 1 and at the deck's tp and
  // encoder_tp, over a few row counts; planning/gemm_shapes.hpp), best of the repeats on rank 0; empty:
  // not measured (a file from before they were).
  std::vector<GemmRatePoint> gemm_rates;
};

// ---------------------------------------------------------------------------------------------------
// The file

// The calibration as the documented YAML text (round-trips through parse_calibration).
std::string calibration_to_yaml(const Calibration& calibration);

// Parses and validates a calibration file's text; throws InputError with one line
// `<origin>: <key> = <value>: <what is valid>` (unknown, missing or negative values, wrong format).
Calibration parse_calibration(const std::string& yaml_text, const std::string& origin);
// Reads a file; returns its text in `text` when non-null.
Calibration load_calibration(const std::string& path, std::string* text = nullptr);

// A path named inside a deck: absolute paths as they are, relative ones against the deck's directory.
std::string resolve_against_deck(const std::string& deck_path, const std::string& path);

// A collective's fitted link (latency of the whole collective on `ranks` ranks) per message step of the
// algorithm: latency / (rounds x steps(ranks)); rounds: 1 for all-gather, 2 for all-reduce.
LinkCost per_step(const LinkCost& measured, CollectiveAlgorithm algorithm, int ranks, int rounds);

// The calibrated cost model: `base` (the FLOP-based defaults for this deck, which keep the memory terms
// and whatever the calibration did not measure, e.g. links between nodes on one node) with the
// calibration's compute, data, optimizer and collective terms. Throws InputError naming `origin` and the
// key when the calibration's model differs from `model`.
CostModel apply_calibration(CostModel base, const Calibration& calibration, const ModelConfig& model,
                            const std::string& origin);

}  // namespace minimllm
