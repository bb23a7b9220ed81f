// The at-scale simulator: runs the sampler, the planners and the cost model for N virtual ranks without
// any compute, and reports what each policy would do (projected step time, tokens/s, idle fraction,
// communication share, planning time, speed-up over static at its best context-parallel degree and over
// megatron_dcp).
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/machine.hpp"

namespace minimllm {

// The machine (driver/machine.hpp): the command line's values (0: not given) > machine_file's section (or
// the deck's) > measured on this machine (peak; memory: its MemAvailable / ranks per node) > defaults (8
// ranks per node, nominal links).
struct SimulateOptions {
  int ranks = 1;                  // virtual ranks
  int ranks_per_node = 0;         // --ranks-per-node; 0: the machine's, else 8
  double gflops_per_rank = 0.0;   // --gflops; 0: machine.peak_gflops, else measured (this machine's sgemm)
  double memory_gib = 0.0;        // --memory-gib; 0: machine.memory_gib, else detected
  double comm_creation_ms = 0.0;  // --comm-creation-ms; 0: machine.comm_creation_ms, else its default
  std::string machine_file;       // --machine: a machine file replacing the deck's machine section
  std::vector<std::string> policies;  // planners to compare (speed-ups are over static, run in any case)
  // static's context-parallel degree (--cp N); 0 = best (--cp best): static at every power of two
  // dividing the ranks whose bins hold the batch, the fastest predicted kept. Every policy then runs with
  // that degree as parallel.cp (megatron_dcp's derived token budget, the dynamic policies' fallback).
  int cp = 0;
  // Planning work per step charged to the projection (--planning-ms): < 0, the planner's own wall time on
  // this machine, measured per step; >= 0, this value for every step (deterministic projections).
  double planning_seconds = -1.0;
  std::string cost_model;    // calibration file (overrides the deck's parallel.cost_model); empty: none
  std::string out_path;      // HDF5 output; empty: none
  std::string command_line;  // recorded in /run; empty when simulate() was called from a test
  bool overwrite = false;
  std::ostream* log = nullptr;
};

struct PolicySummary {
  std::string policy;
  // Mean projected step time over the steps: the plan's predicted step (model_step_seconds) plus what the
  // real run pays for being dynamic: the planning left exposed, communicator creation and sample movement.
  double step_seconds = 0.0;
  // predict_step (planning/step_prediction.hpp) less its sample movement: phases, data, all-reduce, AdamW.
  double model_step_seconds = 0.0;
  // Means per step: planning on the critical path (runtime.plan_ahead: what the step before did not hide),
  // communicator creation (parallel.comm_pool_capacity's pool), moving samples from their loaders.
  double exposed_planning_seconds = 0.0, comm_creation_seconds = 0.0, movement_seconds = 0.0;
  double lower_bound_seconds = 0.0;
  double tokens_per_second = 0.0;
  // Model FLOPs per second (forward and backward, no recomputation) over the real ranks' peak
  // (machine.peak_gflops x ranks): projected MFU.
  double mfu = 0.0;
  // Mean share of the projected step (step_seconds' steps) the longest pipeline bubble takes
  // (parallel.pp > 1; 0 otherwise). MFU's denominator is the projected step too.
  double bubble_fraction = 0.0;
  double idle_fraction = 0.0, comm_fraction = 0.0;
  double planning_ms = 0.0;          // median wall time of the planner per step, on this machine
  bool fits = true;                  // every step's plan fits the memory per rank
  double peak_bytes_per_rank = 0.0;  // the most any rank holds in any step (memory_fit.hpp)
  std::string does_not_fit;          // why not (the first step's DoesNotFit), when it does not
  // Communicators created per step after the first, the pool capped at parallel.comm_pool_capacity per
  // rank (CommLedger): a layout that repeats creates none once warm.
  double comm_creations_per_step = 0.0;
  int cp = 1;                              // the parallel.cp it ran with (static: its degree)
  double speedup = 1.0;                    // over static at its best (or the given) context-parallel degree
  double speedup_over_megatron_dcp = 0.0;  // 0: megatron_dcp not among the policies
  // static only: the mean step of every degree tried (cp, seconds); degrees whose bins cannot hold the
  // longest sample (parallel.tokens_per_rank) are left out.
  std::vector<std::pair<int, double>> cp_steps;
  // Mean bytes per step the plans move between ranks of a node and between nodes (planning/plan_traffic.hpp).
  double intra_node_bytes = 0.0, inter_node_bytes = 0.0;
  // Steps by what produced their plan (StepPlan::origin: heuristic, milp, static_layout) and, for flexsp,
  // by how its MILP solver fared (optimal, time_limit, ...); the median gap over the steps the solver
  // bounded (-1: none) and the median solve time.
  std::map<std::string, int> sources, solver_statuses;
  double solver_gap = -1.0, solver_seconds = 0.0;
};

// The context-parallel degrees `--cp best` tries on `ranks`: the powers of two that divide it.
std::vector<int> cp_degrees(int ranks);

std::vector<PolicySummary> simulate(const RunConfig& config, const SimulateOptions& options);

// The cost model simulate() plans with on options.ranks virtual ranks (driver/resolve_cost_model.hpp: a run
// of the same deck on the same machine plans with the same), with the machine it resolved.
struct SimulationCostModel {
  ResolvedMachine machine;
  CostModelChoice choice;  // choice.model: the resolved cost model
};
SimulationCostModel simulation_cost_model(const RunConfig& config, const SimulateOptions& options);

}  // namespace minimllm
