// The at-scale simulator: runs the sampler, the planners and the cost model for N virtual ranks without
// any compute, and reports what each policy would do (projected step time, tokens/s, idle fraction,
// communication share, speed-up over static, planning time).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"

namespace minimllm {

struct SimulateOptions {
  int ranks = 1;                 // virtual ranks
  int ranks_per_node = 8;        // for the cost model's node boundary
  double gflops_per_rank = 0.0;  // cost model rate; 0: the deck's runtime.peak_gflops_per_rank, else measure
  std::vector<std::string> policies;  // planners to compare (the first is the reference for speed-ups)
  std::string cost_model;  // calibration file (overrides the deck's parallel.cost_model); empty: none
  std::string out_path;    // HDF5 output; empty: none
  bool overwrite = false;
  std::ostream* log = nullptr;
};

struct PolicySummary {
  std::string policy;
  double step_seconds = 0.0;  // mean projected step time over the steps
  double lower_bound_seconds = 0.0;
  double tokens_per_second = 0.0;
  double idle_fraction = 0.0, comm_fraction = 0.0;
  double planning_ms = 0.0;  // median wall time of the planner per step, on this machine
  double speedup = 1.0;      // over the first policy
};

std::vector<PolicySummary> simulate(const RunConfig& config, const SimulateOptions& options);

}  // namespace minimllm
