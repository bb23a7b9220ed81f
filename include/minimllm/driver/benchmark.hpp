// Procurement mode: a reference problem's run is judged VALID or INVALID by built-in checks, and its figure
// of merit (validated training tokens per second) is reported beside samples/s and MFU
// (docs/RUN_RULES.md).
#pragma once

#include <algorithm>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"

namespace minimllm {

// The reference that judges this run: `cli_reference` (--reference, relative to the working directory) or
// else the deck's benchmark.reference (relative to the deck's directory); nullopt when neither is given.
// Throws InputError when the file is missing or invalid or belongs to another problem.
std::optional<BenchmarkReference> find_benchmark_reference(const RunConfig& config,
                                                           const std::string& cli_reference);

// A reference problem's content: the deck's text without its `parallel:`, `runtime:` and `machine:`
// sections (which a reported run may change, docs/RUN_RULES.md), without comments, blank lines and trailing
// spaces; problem_sha256 is its SHA-256, which a reference file's `problem_sha256` must match.
std::string problem_text(const std::string& deck_text);
std::string problem_sha256(const std::string& deck_text);

// The at least 3 VALID runs of one configuration a reported result needs (docs/RUN_RULES.md, "Run length,
// repetitions and scoring").
constexpr int kMinimumRepetitions = 3;

struct BenchmarkVerdict {
  bool valid = false;
  std::string reason;                 // why not VALID (every failed check, "; "-separated); empty when valid
  std::vector<std::string> failures;  // the same, one entry per failed check
  // Check (a): the loss at the reference step.
  bool reached = false;  // the run got to the reference step
  double loss = 0.0, loss_relative_difference = 0.0;
  double loss_tolerance = 0.0;  // at the run's precision (loss_tolerance in config/run_config.hpp)
  // Check (b): layout invariance, the first steps re-run under `static` from the same initial state.
  int invariance_steps = 0;
  double invariance_max_relative_difference = 0.0;
  // Check (c): the run rules (docs/RUN_RULES.md): each one broken, named; empty when all hold.
  std::vector<std::string> rule_failures;
  // Figure of merit: rates over the steps after the warm-up (TrainResult::timed_seconds).
  double tokens_per_second = 0.0, samples_per_second = 0.0, mfu = 0.0;
  double attainable_fraction =
      0.0;  // achieved over the best measured GEMM rate (mfu is over the hardware peak)
  int timed_steps = 0;
  double timed_seconds = 0.0;
  int nodes = 1;  // the run's nodes: the FOM per node is tokens_per_second / nodes
  double tokens_per_second_per_node() const { return tokens_per_second / std::max(1, nodes); }
};

// Check (b)'s outcome: the first `steps` steps re-run under `static`, and the largest relative difference
// of their losses from the run's own.
struct InvarianceResult {
  int steps = 0;
  double max_relative_difference = 0.0;
};

// Judges a finished run against ref. Collective over world: check (b) trains
// min(ref.invariance_steps, steps run) steps under `static` (no output); the rest is judge_recorded's.
BenchmarkVerdict judge_run(const RunConfig& config, const BenchmarkReference& ref, const TrainResult& result,
                           const World& world);

// Judges a finished run on `ranks` ranks from what it recorded (local, nothing trained): the steps' loss,
// gradient norm, tokens, samples and FLOPs, the timed seconds and the MFU peak and attainable rate of result,
// and check (b)'s outcome. judge_run calls it with the invariance it measured; `minimllm verify` with what a
// run's file holds (driver/verify.hpp).
BenchmarkVerdict judge_recorded(const RunConfig& config, const BenchmarkReference& ref,
                                const TrainResult& result, int ranks, const InvarianceResult& invariance);

// Both checks, the FOM line (`minimllm FOM ...`, greppable) and VALID or `INVALID: <reason>`.
void print_verdict(std::ostream& out, const RunConfig& config, const BenchmarkReference& ref,
                   const BenchmarkVerdict& verdict, int ranks);

// The verdict and FOM as /run attributes (docs/HDF5.md).
std::vector<RunAttribute> verdict_attributes(const BenchmarkReference& ref, const BenchmarkVerdict& verdict);

}  // namespace minimllm
