#include "minimllm/driver/simulator.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <ostream>
#include <tuple>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/machine.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/resolve_cost_model.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/layout/comm_ledger.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/planning/memory_fit.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/planning/step_prediction.hpp"
#include "minimllm/step/memory_estimate.hpp"  // kEstimateSteps

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One step of a policy's projection: a record of /simulation/<policy> (docs/HDF5.md).
struct SimulationRow {
  double makespan_s = 0, lower_bound_s = 0, idle_fraction = 0, comm_fraction = 0, planning_s = 0,
         encoder_s = 0, boundary_s = 0, llm_s = 0, data_s = 0, grad_sync_s = 0, optimizer_s = 0, fits = 0,
         peak_bytes_per_rank = 0, comm_creations = 0, intra_node_bytes = 0, inter_node_bytes = 0,
         solver_gap = 0, solver_seconds = 0, exposed_planning_s = 0, comm_creation_s = 0, movement_s = 0,
         bubble_s = 0;
};

// The fields of /simulation/<policy> in file order, each with its unit and member: names and values are
// paired here alone.
const std::vector<std::pair<Column, double SimulationRow::*>>& simulation_fields() {
  using R = SimulationRow;
  static const std::vector<std::pair<Column, double R::*>> fields = {
      {{"makespan_s", "s"}, &R::makespan_s},  // the projected step: plan, exposed planning, creation
      {{"lower_bound_s", "s"}, &R::lower_bound_s},
      {{"idle_fraction", "1"}, &R::idle_fraction},
      {{"comm_fraction", "1"}, &R::comm_fraction},
      {{"planning_s", "s"}, &R::planning_s},
      {{"encoder_s", "s"}, &R::encoder_s},
      {{"boundary_s", "s"}, &R::boundary_s},
      {{"llm_s", "s"}, &R::llm_s},
      {{"data_s", "s"}, &R::data_s},
      {{"grad_sync_s", "s"}, &R::grad_sync_s},
      {{"optimizer_s", "s"}, &R::optimizer_s},
      {{"fits", "1"}, &R::fits},
      {{"peak_bytes_per_rank", "byte"}, &R::peak_bytes_per_rank},
      {{"comm_creations", "1"}, &R::comm_creations},
      {{"intra_node_bytes", "byte"}, &R::intra_node_bytes},
      {{"inter_node_bytes", "byte"}, &R::inter_node_bytes},
      {{"solver_gap", "1"}, &R::solver_gap},
      {{"solver_seconds", "s"}, &R::solver_seconds},
      {{"exposed_planning_s", "s"}, &R::exposed_planning_s},
      {{"comm_creation_s", "s"}, &R::comm_creation_s},
      {{"movement_s", "s"}, &R::movement_s},
      {{"bubble_s", "s"}, &R::bubble_s},
  };
  return fields;
}

// Appends one step's record to /simulation/<policy>.
void append_simulation_row(Hdf5RunWriter& out, const std::string& table, const SimulationRow& row) {
  std::vector<Column> columns;
  std::vector<double> values;
  for (const auto& [column, member] : simulation_fields()) {
    columns.push_back(column);
    values.push_back(row.*member);
  }
  out.append_record(table, columns, values);
}

// One policy's projection over the steps: its summary and its /simulation rows.
struct Projection {
  PolicySummary summary;
  std::vector<SimulationRow> rows;
};

// What a step pays for being dynamic, beyond its plan's predicted step, as the real run pays it.
struct Dynamism {
  int pool_capacity = 1;   // parallel.comm_pool_capacity (CommLedger: the real pool's bookkeeping)
  bool precreate = false;  // parallel.comm_precreate: powers_of_two, created at start-up (not in a step)
  bool plan_ahead = true;  // runtime.plan_ahead
  double planning = -1.0;  // SimulateOptions::planning_seconds (< 0: measured)
  const std::vector<double>* batch_seconds = nullptr;            // drawing each step's batch (the sampler)
  EncoderSchedule encoder_schedule = EncoderSchedule::per_step;  // parallel.encoder_schedule
};

// Planning on step t's critical path, as trainer.cpp pays it: the first kEstimateSteps steps are planned at
// start-up and their step time counts all of it, as does every step without plan_ahead; with it, the
// helper thread plans step t from when step t-1 took its plan (after its exposed planning) to when step t
// begins, so step t waits max(0, planning - (step(t-1) - exposed(t-1))).
double exposed_planning(int step, double planning, bool plan_ahead, double previous_step,
                        double previous_exposed) {
  if (!plan_ahead || step < kEstimateSteps) return planning;
  return std::max(0.0, planning - (previous_step - previous_exposed));
}

// dynamism.pool_capacity: for the communicators each step creates (CommLedger, the bookkeeping of the real
// pool, played for every virtual rank).
Projection project(const std::string& policy, const PlannerOptions& planner_options,
                   const std::vector<GlobalBatch>& batches, const CostModel& cost, int ranks,
                   const Dynamism& dynamism) {
  const std::unique_ptr<Planner> planner = make_planner(policy, cost, planner_options);
  std::unique_ptr<Planner> unbounded;  // what a policy that does not fit would plan with unlimited memory
  Projection out;
  PolicySummary& sum = out.summary;
  sum.policy = policy;
  sum.cp = planner_options.cp;
  std::vector<double> planning, gaps, solves;
  double tokens = 0.0;
  CommLedger pool(dynamism.pool_capacity);
  if (dynamism.precreate)  // as CommPool::precreate: at start-up, before the first step
    for (const std::vector<int>& group : power_of_two_blocks(ranks, dynamism.pool_capacity)) pool.use(group);
  double previous_step = 0.0, previous_exposed = 0.0;
  double warm_creations = 0.0;  // after the first step
  for (const GlobalBatch& batch : batches) {
    const auto t0 = std::chrono::steady_clock::now();
    StepPlan plan;
    bool fits = true;
    try {
      plan = planner->plan(batch, ranks);
    } catch (const DoesNotFit& e) {
      // static is the baseline: a degree that does not fit is no baseline (project_static skips it).
      if (policy == baseline_policy()) throw;
      if (sum.does_not_fit.empty()) sum.does_not_fit = e.what();
      if (!unbounded) {
        CostModel free = cost;
        free.capacity_bytes = 0.0;
        unbounded = make_planner(policy, free, planner_options);
      }
      plan = unbounded->plan(batch, ranks);
      fits = false;
    }
    // The real run's planning work (StepPlanner::plan) also draws the batch and derives each rank's work
    // (here rank 0's): timed alike. Its forecast (the predicted step and traffic) runs during the step.
    const RankWork rank0_work = derive_rank_work(plan, batch, 0, ranks, dynamism.encoder_schedule);
    (void)rank0_work;
    const size_t step_index = static_cast<size_t>(&batch - &batches.front());
    const double planning_work = dynamism.planning >= 0.0
                                     ? dynamism.planning
                                     : seconds_since(t0) + dynamism.batch_seconds->at(step_index);
    const PlanPrediction p = predict_step(plan, batch, cost, ranks);
    const PlanTraffic traffic = plan_traffic(plan, batch, cost, ranks);
    planning.push_back(1e3 * planning_work);
    validate_plan(plan, batch, ranks);
    const std::vector<double> bytes = rank_peak_bytes(plan, batch, cost, ranks);
    const double peak = *std::max_element(bytes.begin(), bytes.end());
    sum.fits = sum.fits && fits;
    sum.peak_bytes_per_rank = std::max(sum.peak_bytes_per_rank, peak);
    sum.intra_node_bytes += traffic.intra_node_bytes / batches.size();
    sum.inter_node_bytes += traffic.inter_node_bytes / batches.size();
    ++sum.sources[plan.origin.source];
    if (plan.origin.solver_status != "not_run") {
      ++sum.solver_statuses[plan.origin.solver_status];
      solves.push_back(plan.origin.solver_seconds);
      if (plan.origin.solver_gap >= 0.0) gaps.push_back(plan.origin.solver_gap);
    }
    sum.lower_bound_seconds += p.lower_bound / batches.size();
    sum.idle_fraction += p.idle_fraction / batches.size();
    sum.comm_fraction += p.comm_fraction / batches.size();
    tokens += static_cast<double>(batch.text_tokens() + batch.encoder_rows());
    std::vector<std::vector<int>> groups;  // in the pool's canonical (sorted) order, as acquire_step does
    for (const LlmGroup& group : plan.llm_groups)
      if (group.ranks.size() > 1) groups.push_back(group.ranks);
    std::sort(groups.begin(), groups.end());
    double creations = 0.0;
    for (const std::vector<int>& group : groups) creations += pool.use(group).hit ? 0.0 : 1.0;
    if (&batch != &batches.front()) warm_creations += creations;
    // A step's groups are disjoint and created concurrently, each on its members: one creation's time.
    const double creation = creations > 0.0 ? cost.step.comm_creation : 0.0;
    const double movement = p.movement;  // in p.data and p.makespan already (predict_step)
    const int step = static_cast<int>(step_index);
    const double exposed =
        exposed_planning(step, planning_work, dynamism.plan_ahead, previous_step, previous_exposed);
    const double projected = p.makespan + exposed + creation;
    previous_step = projected, previous_exposed = exposed;
    sum.step_seconds += projected / batches.size();
    if (projected > 0.0) sum.bubble_fraction += p.bubble / projected / batches.size();
    sum.model_step_seconds += (p.makespan - movement) / batches.size();
    sum.exposed_planning_seconds += exposed / batches.size();
    sum.comm_creation_seconds += creation / batches.size();
    sum.movement_seconds += movement / batches.size();
    SimulationRow row;
    row.makespan_s = projected;
    row.lower_bound_s = p.lower_bound;
    row.idle_fraction = p.idle_fraction;
    row.comm_fraction = p.comm_fraction;
    row.planning_s = planning_work;
    row.encoder_s = p.encoder;
    row.boundary_s = p.boundary;
    row.llm_s = p.llm;
    row.data_s = p.data;
    row.grad_sync_s = p.grad_sync;
    row.optimizer_s = p.optimizer;
    row.fits = fits ? 1.0 : 0.0;
    row.peak_bytes_per_rank = peak;
    row.comm_creations = creations;
    row.intra_node_bytes = traffic.intra_node_bytes;
    row.inter_node_bytes = traffic.inter_node_bytes;
    row.solver_gap = plan.origin.solver_gap;
    row.solver_seconds = plan.origin.solver_seconds;
    row.exposed_planning_s = exposed;
    row.comm_creation_s = creation;
    row.movement_s = movement;
    row.bubble_s = p.bubble;
    out.rows.push_back(row);
  }
  sum.comm_creations_per_step = batches.size() > 1 ? warm_creations / (batches.size() - 1) : 0.0;
  sum.tokens_per_second = tokens / (sum.step_seconds * batches.size());
  sum.planning_ms = median(planning);
  if (!gaps.empty()) sum.solver_gap = median(gaps);
  if (!solves.empty()) sum.solver_seconds = median(solves);
  return out;
}

Dynamism dynamism_of(const RunConfig& config, const SimulateOptions& options,
                     const std::vector<double>& batch_seconds) {
  return {config.parallel.comm_pool_capacity,
          config.parallel.comm_precreate == "powers_of_two",
          config.runtime.plan_ahead,
          options.planning_seconds,
          &batch_seconds,
          encoder_schedule_from_string(config.parallel.encoder_schedule)};
}

// The machine of the simulation (driver/machine.hpp): the command line > --machine FILE's section, else
// the deck's > this machine's measured sgemm rate and memory > 8 ranks per node.
ResolvedMachine simulation_machine(const RunConfig& config, const SimulateOptions& options) {
  MachineConfig section =
      options.machine_file.empty() ? config.machine : load_machine_file(options.machine_file);
  const std::string section_name = !options.machine_file.empty() ? options.machine_file
                                   : section.empty()             ? "none"
                                                                 : config.deck_path;
  if (options.comm_creation_ms > 0.0) section.comm_creation_ms = options.comm_creation_ms;  // named below
  const auto [per_node, per_node_source] =
      first_given({{static_cast<double>(options.ranks_per_node), "--ranks-per-node"},
                   {static_cast<double>(section.ranks_per_node), "machine section"},
                   {8.0, "default"}});
  Sourced peak;
  std::tie(peak.value, peak.source) =
      first_given({{options.gflops_per_rank, "--gflops"}, {section.peak_gflops, "machine section"}});
  if (peak.value <= 0.0) {  // neither given: this machine's sgemm rate
    set_blas_threads(config.runtime.blas_threads);
    peak = {measure_gemm_gflops(GemmPrecision::fp32), "measured: this machine's fp32 GEMM 1024^3"};
  }
  Sourced memory;
  std::tie(memory.value, memory.source) =
      first_given({{options.memory_gib, "--memory-gib"}, {section.memory_gib, "machine section"}});
  if (memory.value <= 0.0) {
    const AvailableMemory available = available_memory();
    if (available.bytes > 0.0)
      memory = {available.bytes / per_node / (1024.0 * 1024.0 * 1024.0),
                fmt::format("detected: {} of this machine / {} ranks per node",
                            available.device ? "free GPU memory" : "MemAvailable", per_node)};
  }
  return resolve_machine(section, section_name, {per_node, per_node_source}, peak, memory);
}

// Where a simulation came from (/run, docs/HDF5.md): the build's provenance as a run records it, without
// the real ranks' (the virtual cluster is /run virtual_ranks and the machine_* attributes), and what was
// simulated.
std::vector<RunAttribute> simulation_provenance(const RunConfig& config, const SimulateOptions& options,
                                                const std::string& start_time) {
  std::vector<RunAttribute> out;
  for (RunAttribute& a : gather_provenance(config, World::of(MPI_COMM_SELF), options.command_line)) {
    if (a.name == "ranks" || a.name == "ranks_per_node" || a.name == "nodes" || a.name == "hostnames" ||
        a.name == "devices" || a.name == "cpus" || a.name == "slurm_environment")
      continue;
    if (a.name == "hostname") a.name = "simulated_on";
    if (a.name == "start_time_utc") a.value = start_time;
    out.push_back(std::move(a));
  }
  out.push_back({"seed", static_cast<long long>(config.seed)});
  out.push_back({"steps", static_cast<long long>(config.steps)});
  out.push_back({"global_batch", static_cast<long long>(config.data.global_batch)});
  out.push_back({"policies", fmt::format("{}", fmt::join(options.policies, ", "))});
  out.push_back({"cp_comm", config.parallel.cp_comm});
  out.push_back({"comm_precreate", config.parallel.comm_precreate});
  out.push_back({"planning_ms", options.planning_seconds >= 0.0
                                    ? fmt::format("{} (--planning-ms)", 1e3 * options.planning_seconds)
                                    : std::string("measured per step on this host")});
  return out;
}

// What makes a projection mean little, said before it: a virtual cluster of this host's rate and memory
// (no machine file or section), and a global batch too small to give every data-parallel unit a sample.
std::string simulation_warnings(const RunConfig& config, const ResolvedMachine& machine, int units) {
  std::string out;
  if (machine.section == "none")
    out += fmt::format(
        "warning: no --machine and no machine section in the deck: every virtual rank is this host ({}; "
        "{}); pass --machine inputs/machines/dgx-h100.yaml (or a file of your cluster) to project a real "
        "one\n",
        machine.peak_source, machine.memory_source.empty() ? "memory unbounded" : machine.memory_source);
  if (config.data.global_batch < units)
    out += fmt::format(
        "warning: data.global_batch = {} samples over {} data-parallel units, less than one each: every plan "
        "must spread samples over context-parallel groups; raise --global-batch (a multiple of {}) for a "
        "data-parallel study\n",
        config.data.global_batch, units, units);
  return out;
}

// The reference: static at options.cp, or (0) at the fastest degree of cp_degrees() whose bins hold the
// batch; the degrees tried go to cp_steps.
Projection project_static(const RunConfig& config, const SimulateOptions& options,
                          const std::vector<GlobalBatch>& batches, const CostModel& cost, int units,
                          const Dynamism& dynamism) {
  PlannerOptions planner_options = planner_options_of(config.parallel);
  if (options.cp > 0) {
    planner_options.cp = options.cp;
    Projection p = project("static", planner_options, batches, cost, units, dynamism);
    p.summary.cp_steps = {{options.cp, p.summary.step_seconds}};
    return p;
  }
  std::optional<Projection> best;
  std::vector<std::pair<int, double>> steps;
  std::string refused;  // why each degree could not be the baseline
  for (int cp : cp_degrees(units)) {
    planner_options.cp = cp;
    try {
      Projection p = project("static", planner_options, batches, cost, units, dynamism);
      steps.emplace_back(cp, p.summary.step_seconds);
      if (!best || p.summary.step_seconds < best->summary.step_seconds) best = std::move(p);
    } catch (const InputError& e) {  // a sample longer than its bins or than cp ranks' memory holds
      refused += fmt::format("{}cp {}: {}", refused.empty() ? "" : " | ", cp, e.what());
    }
  }
  if (!best)
    throw InputError("static, the baseline, can run at no context-parallel degree of --cp best: " + refused);
  best->summary.cp_steps = std::move(steps);
  return std::move(*best);
}

// Mean model FLOPs of the batches (forward and backward, as MFU counts them): the default cost model's
// compute at 1 GFLOP/s without its per-sample and per-item overheads.
double mean_batch_flops(const RunConfig& config, const std::vector<GlobalBatch>& batches) {
  CostModel flops = default_cost_model(config, 1.0, 1);
  flops.llm.c = 0.0;
  for (EncoderCost& module : flops.encoders) module.compute.c = 0.0;
  double seconds = 0.0;
  for (const GlobalBatch& batch : batches)
    for (const SampleMeta& sample : batch.samples) {
      seconds += flops.llm(sample.tokens());
      for (const EncoderItem& item : sample.items) seconds += flops.encoder_time(item);
    }
  return batches.empty() ? 0.0 : 1e9 * seconds / batches.size();
}

}  // namespace

std::vector<int> cp_degrees(int ranks) {
  std::vector<int> degrees;
  for (int cp = 1; cp <= ranks && ranks % cp == 0; cp *= 2) degrees.push_back(cp);
  return degrees;
}

SimulationCostModel simulation_cost_model(const RunConfig& config, const SimulateOptions& options) {
  SimulationCostModel out;
  out.machine = simulation_machine(config, options);
  // A calibration (from --cost-model or the deck) replaces the FLOP-based compute and the links it
  // measured; the machine's links replace both; links neither gives keep the nominal defaults.
  out.choice = choose_cost_model(config, World::of(MPI_COMM_SELF), out.machine.machine.peak_gflops,
                                 out.machine.machine.ranks_per_node, options.cost_model);
  out.choice.model = resolve_cost_model(config, out.choice, out.machine, options.ranks);
  if (options.comm_creation_ms > 0.0) out.machine.comm_creation_source = "--comm-creation-ms";
  return out;
}

std::vector<PolicySummary> simulate(const RunConfig& config, const SimulateOptions& options) {
  const std::string start_time = utc_now();
  const ModelParallel grid = model_parallel_of(config);
  if (options.ranks % grid.ranks_per_unit() != 0)
    throw InputError(fmt::format("parallel.tp x parallel.pp = {}: must divide --ranks {}",
                                 grid.ranks_per_unit(), options.ranks));
  // The planners regroup units of tp x pp ranks (layout/model_parallel.hpp); plain ranks without a grid.
  const int units = options.ranks / grid.ranks_per_unit();
  if (options.cp > 0 && units % options.cp != 0)
    throw InputError(
        fmt::format("--cp {} must divide the {} ranks / (parallel.tp x parallel.pp) = {} (static forms "
                    "data-parallel replicas of cp of them); or --cp best",
                    options.cp, options.ranks, units));
  const SimulationCostModel resolved = simulation_cost_model(config, options);
  const ResolvedMachine& machine = resolved.machine;
  const CostModelChoice& choice = resolved.choice;
  const CostModel& cost = choice.model;
  const double gflops = machine.machine.peak_gflops;
  const int per_node = machine.machine.ranks_per_node;
  const Sampler sampler(config);
  std::vector<GlobalBatch> batches;
  std::vector<double> batch_seconds;  // part of each step's planning work (StepPlanner::plan)
  for (int step = 0; step < config.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    batches.push_back(sampler.batch(step));
    batch_seconds.push_back(seconds_since(t0));
  }
  if (options.log)
    *options.log << fmt::format(
                        "minimllm {} simulate | deck {} | {} virtual ranks, {} per node | {} steps x {} "
                        "samples | cost "
                        "model: "
                        "{}\n",
                        MINIMLLM_VERSION, config.name, options.ranks, per_node, config.steps,
                        config.data.global_batch,
                        choice.calibration_text.empty()
                            ? fmt::format("{} at {:.1f} GFLOP/s per rank", choice.source, gflops)
                            : choice.source)
                 << machine.describe();
  if (options.log) *options.log << simulation_warnings(config, machine, units);
  if (options.log && !grid.trivial())
    *options.log << fmt::format(
        "model-parallel grid: tp {} x pp {}{} (encoder tp {}), {} units of {} ranks regrouped by the "
        "planners; "
        "distributed optimizer {}, recompute {}; {:.2f} GiB of state per rank\n",
        grid.tp, grid.pp, grid.encoder_stage ? " + the encoder's own stage" : "", grid.encoder_tp, units,
        grid.ranks_per_unit(), grid.distributed_optimizer ? "on" : "off", to_string(grid.recompute),
        cost.memory.state / (1024.0 * 1024.0 * 1024.0));
  // A batch that no layout can hold (a sample longer than the whole world's memory holds) is invalid
  // input: exit 2 before anything is planned or written.
  for (const GlobalBatch& batch : batches) require_batch_fits(batch, cost, units);

  // Every policy is planned before the output file is opened: invalid input (a sample no bin holds, a
  // degree that does not divide the ranks) leaves no file behind.
  const Dynamism dynamism = dynamism_of(config, options, batch_seconds);
  if (options.log && dynamism.precreate) {
    const std::vector<std::vector<int>> blocks = power_of_two_blocks(units, dynamism.pool_capacity);
    const int sizes = blocks.empty() ? 0 : static_cast<int>(std::log2(blocks.back().size()));
    *options.log << fmt::format(
        "communicators pre-created at start-up (parallel.comm_precreate: powers_of_two): {} groups of 2 to "
        "{} "
        "ranks, {} per rank; {:.1f} s at start-up (one creation per size), not charged to the steps\n",
        blocks.size(), blocks.empty() ? 0 : blocks.back().size(), sizes, sizes * cost.step.comm_creation);
  }
  const Projection reference = project_static(config, options, batches, cost, units, dynamism);
  // Every policy runs with static's degree as parallel.cp: megatron_dcp's derived token budget and the
  // dynamic policies' static fallback are then those of the baseline they are compared with.
  PlannerOptions planner_options = planner_options_of(config.parallel);
  planner_options.cp = reference.summary.cp;
  std::vector<Projection> projections;
  for (const std::string& policy : options.policies)
    projections.push_back(policy == baseline_policy()
                              ? reference
                              : project(policy, planner_options, batches, cost, units, dynamism));
  const auto dcp = std::find_if(projections.begin(), projections.end(), [](const Projection& p) {
    return p.summary.policy == dynamic_baseline_policy();
  });
  const double flops = mean_batch_flops(config, batches);
  std::vector<PolicySummary> summaries;
  for (Projection& p : projections) {
    PolicySummary& sum = p.summary;
    sum.mfu = flops / sum.step_seconds / (1e9 * gflops * options.ranks);
    sum.speedup = reference.summary.step_seconds / sum.step_seconds;
    if (dcp != projections.end())
      sum.speedup_over_megatron_dcp = dcp->summary.step_seconds / sum.step_seconds;
    summaries.push_back(sum);
  }
  const std::string baseline =
      fmt::format("static (cp {}, {})", reference.summary.cp, config.parallel.cp_comm);
  std::string tried;
  for (const auto& [cp, seconds] : reference.summary.cp_steps)
    tried += fmt::format("{}cp {}: {:.2f} ms", tried.empty() ? "" : ", ", cp, 1e3 * seconds);

  if (!options.out_path.empty()) {
    Hdf5RunWriter out(options.out_path, options.overwrite);
    out.set_run_attribute("mode", "simulate");
    out.set_run_attributes(simulation_provenance(config, options, start_time));
    out.set_run_attribute("virtual_ranks", static_cast<long long>(options.ranks));
    out.set_run_attribute(
        "model_parallel",
        fmt::format("tp {}, pp {}, encoder_tp {}, encoder_stage {}, units {}, distributed_optimizer {}, "
                    "recompute {}",
                    grid.tp, grid.pp, grid.encoder_tp, grid.encoder_stage, units, grid.distributed_optimizer,
                    to_string(grid.recompute)));
    out.set_run_attribute("ranks_per_node", static_cast<long long>(per_node));
    out.set_run_attributes(machine.attributes());
    out.set_run_attribute("gflops_per_rank", gflops);
    out.set_run_attribute("cost_model_source", choice.source);
    if (!choice.calibration_text.empty()) out.set_run_attribute("calibration", choice.calibration_text);
    out.set_run_attribute("static_cp", static_cast<long long>(reference.summary.cp));
    out.set_run_attribute("static_cp_search",
                          options.cp > 0 ? fmt::format("--cp {}", options.cp) : "best of " + tried);
    out.set_run_attribute("speedup_baseline", baseline);
    for (const Projection& p : projections) {
      const std::string table = "/simulation/" + p.summary.policy;
      for (const SimulationRow& row : p.rows) append_simulation_row(out, table, row);
      out.set_table_attribute(table, "fits", p.summary.fits ? "true" : "false");
      out.set_table_attribute(table, "mfu", fmt::format("{:.4f}", p.summary.mfu));
      if (!p.summary.fits) out.set_table_attribute(table, "does_not_fit", p.summary.does_not_fit);
    }
    for (const PolicySummary& sum : summaries) {
      std::string sources;
      for (const auto& [source, steps] : sum.sources)
        sources += fmt::format("{}{}: {}", sources.empty() ? "" : ", ", source, steps);
      for (const auto& [status, steps] : sum.solver_statuses)
        sources += fmt::format(", solver {}: {}", status, steps);
      out.set_run_attribute("plan_sources_" + sum.policy, sources);
    }
    out.set_run_attribute("end_time_utc", utc_now());
    out.close();  // flushed, fsynced, the lock released
  }
  if (options.log) {
    std::ostream& log = *options.log;
    log << fmt::format("static: {} ({})\n",
                       options.cp > 0 ? "--cp " + std::to_string(options.cp) : "fastest of " + tried,
                       baseline);
    log << fmt::format(
        "{:<12} {:>14} {:>7} {:>13} {:>6} {:>6} {:>11} {:>10} {:>13} {:>19} {:>17} {:>4} {:>13} {:>10} "
        "{:>13} {:>6} {:>6}\n",
        "policy", "step ms (pred)", "vs LB", "tokens/s", "idle", "comm", "planning ms", "new comms",
        "inter-node MB", "over " + baseline, "over megatron_dcp", "fits", "peak GiB/rank", "model ms",
        "plan|new|move", "MFU", "bubble");
    for (const PolicySummary& s : summaries)
      log << fmt::format(
          "{:<12} {:>14.2f} {:>7.3f} {:>13.0f} {:>5.1f}% {:>5.1f}% {:>11.2f} {:>10.1f} {:>13.2f} {:>18.2f}x "
          "{:>17} "
          "{:>4} {:>13.3f} {:>10.2f} {:>13} {:>5.1f}% {:>5.1f}%\n",
          s.policy, 1e3 * s.step_seconds, s.step_seconds / s.lower_bound_seconds, s.tokens_per_second,
          100 * s.idle_fraction, 100 * s.comm_fraction, s.planning_ms, s.comm_creations_per_step,
          s.inter_node_bytes / 1e6, s.speedup,
          s.speedup_over_megatron_dcp > 0 ? fmt::format("{:.2f}x", s.speedup_over_megatron_dcp) : "-",
          s.fits ? "yes" : "no", s.peak_bytes_per_rank / (1024.0 * 1024.0 * 1024.0),
          1e3 * s.model_step_seconds,
          fmt::format("{:.2f}|{:.2f}|{:.2f}", 1e3 * s.exposed_planning_seconds, 1e3 * s.comm_creation_seconds,
                      1e3 * s.movement_seconds),
          100 * s.mfu, 100 * s.bubble_fraction);
    for (const PolicySummary& s : summaries)
      if (!s.fits)
        log << fmt::format("{} does not fit (its figures are with unlimited memory): {}\n", s.policy,
                           s.does_not_fit);
    // Which algorithm made the plans, where a policy has more than one (StepPlan::origin).
    const int steps = static_cast<int>(batches.size());
    for (const PolicySummary& s : summaries) {
      if (s.sources.size() == 1 && s.sources.count("heuristic") && s.solver_statuses.empty()) continue;
      std::string line;
      for (const auto& [source, count] : s.sources)
        line += fmt::format("{}{} {}/{}", line.empty() ? "" : ", ", source, count, steps);
      if (!s.solver_statuses.empty()) {
        std::string statuses;
        for (const auto& [status, count] : s.solver_statuses)
          statuses += fmt::format("{}{} {}", statuses.empty() ? "" : ", ", status, count);
        line += fmt::format("; MILP (CBC, {:.2f} s limit): {}; median gap {}, median solve {:.3f} s",
                            planner_options.flexsp_time_limit, statuses,
                            s.solver_gap >= 0 ? fmt::format("{:.2f}%", 100 * s.solver_gap) : "-",
                            s.solver_seconds);
      }
      log << fmt::format("  {} plans from: {}\n", s.policy, line);
    }
    if (!options.out_path.empty()) log << "simulation written to " << options.out_path << "\n";
  }
  return summaries;
}

}  // namespace minimllm
