// What a training run prints on rank 0: the banner, one line per step, the summary with the greppable
// PERFORMANCE line, and the comparison table of `--policy all`.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/step/memory_estimate.hpp"

namespace minimllm {

// Achieved over attainable: an MFU (against the hardware peak) rescaled to the best measured GEMM rate.
double attainable_fraction(const TrainResult& r, double mfu);

void print_banner(std::ostream& log, const RunConfig& config, const World& world, const Model& model,
                  const TrainResult& r, const PeakWork& peak, const std::vector<RunAttribute>& provenance);
void print_step(std::ostream& log, const StepRecord& s, int steps);
void print_summary(std::ostream& log, const TrainResult& r, const World& world, const std::string& out_path);

// Every run of one policy (run --repeat) and the files they wrote.
struct PolicyRuns {
  std::string policy;
  std::vector<TrainResult> runs;
  std::vector<std::string> files;
};

// One line per policy: its runs' median step time and tokens/s (each run's median over the steps after
// the warm-up; with several runs the median of those, and their spread, min-max), tokens/s relative to
// the static runs' (named with its degree, static_cp = parallel.cp; else the first policy's), the cost
// model's median prediction, its ratio to the median measured step and to the lower bound, and the first
// run's last loss with its relative difference from the static run's (layout invariance: ~1e-6).
void print_policy_comparison(std::ostream& out, const std::vector<PolicyRuns>& policies, int static_cp);
// The same, one CSV row per run (a header line first): policy, repetition, file, steps, step_ms,
// tokens_per_second, speedup (over the baseline policy's median tokens/s), predicted_ms, last_loss,
// baseline.
std::string policy_comparison_csv(const std::vector<PolicyRuns>& policies, int static_cp);

}  // namespace minimllm
