#include "minimllm/driver/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <ostream>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/plan/plan_traffic.hpp"
#include "minimllm/plan/planner.hpp"
#include "minimllm/plan/step_prediction.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One policy's projection over the steps: its summary and its /simulation rows.
struct Projection {
  PolicySummary summary;
  std::vector<std::vector<double>> rows;
};

Projection project(const std::string& policy, const PlannerOptions& planner_options,
                   const std::vector<GlobalBatch>& batches, const CostModel& cost, int ranks) {
  const std::unique_ptr<Planner> planner = make_planner(policy, cost, planner_options);
  Projection out;
  PolicySummary& sum = out.summary;
  sum.policy = policy;
  sum.cp = planner_options.cp;
  std::vector<double> planning, gaps, solves;
  double tokens = 0.0;
  for (const GlobalBatch& batch : batches) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepPlan plan = planner->plan(batch, ranks);
    planning.push_back(1e3 * seconds_since(t0));
    validate_plan(plan, batch, ranks);
    const PlanPrediction p = predict_step(plan, batch, cost, ranks);
    const PlanTraffic traffic = plan_traffic(plan, batch, cost, ranks);
    sum.intra_node_bytes += traffic.intra_node_bytes / batches.size();
    sum.inter_node_bytes += traffic.inter_node_bytes / batches.size();
    ++sum.sources[plan.origin.source];
    if (plan.origin.solver_status != "not_run") {
      ++sum.solver_statuses[plan.origin.solver_status];
      solves.push_back(plan.origin.solver_seconds);
      if (plan.origin.solver_gap >= 0.0) gaps.push_back(plan.origin.solver_gap);
    }
    sum.step_seconds += p.makespan / batches.size();
    sum.lower_bound_seconds += p.lower_bound / batches.size();
    sum.idle_fraction += p.idle_fraction / batches.size();
    sum.comm_fraction += p.comm_fraction / batches.size();
    tokens += static_cast<double>(batch.text_tokens() + batch.image_tokens());
    out.rows.push_back({p.makespan, p.lower_bound, p.idle_fraction, p.comm_fraction, planning.back() * 1e-3,
                        p.encoder, p.boundary, p.llm, p.data, p.grad_sync, p.optimizer,
                        traffic.intra_node_bytes, traffic.inter_node_bytes, plan.origin.solver_gap,
                        plan.origin.solver_seconds});
  }
  sum.tokens_per_second = tokens / (sum.step_seconds * batches.size());
  sum.planning_ms = median(planning);
  if (!gaps.empty()) sum.solver_gap = median(gaps);
  if (!solves.empty()) sum.solver_seconds = median(solves);
  return out;
}

// The reference: static at options.cp, or (0) at the fastest degree of cp_degrees() whose bins hold the
// batch; the degrees tried go to cp_steps.
Projection project_static(const RunConfig& config, const SimulateOptions& options,
                          const std::vector<GlobalBatch>& batches, const CostModel& cost) {
  PlannerOptions planner_options = planner_options_of(config.parallel);
  if (options.cp > 0) {
    planner_options.cp = options.cp;
    Projection p = project("static", planner_options, batches, cost, options.ranks);
    p.summary.cp_steps = {{options.cp, p.summary.step_seconds}};
    return p;
  }
  std::optional<Projection> best;
  std::vector<std::pair<int, double>> steps;
  std::exception_ptr first_error;
  for (int cp : cp_degrees(options.ranks)) {
    planner_options.cp = cp;
    try {
      Projection p = project("static", planner_options, batches, cost, options.ranks);
      steps.emplace_back(cp, p.summary.step_seconds);
      if (!best || p.summary.step_seconds < best->summary.step_seconds) best = std::move(p);
    } catch (const InputError&) {  // a sample longer than cp x parallel.tokens_per_rank
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (!best) std::rethrow_exception(first_error);
  best->summary.cp_steps = std::move(steps);
  return std::move(*best);
}

}  // namespace

std::vector<int> cp_degrees(int ranks) {
  std::vector<int> degrees;
  for (int cp = 1; cp <= ranks && ranks % cp == 0; cp *= 2) degrees.push_back(cp);
  return degrees;
}

std::vector<PolicySummary> simulate(const RunConfig& config, const SimulateOptions& options) {
  if (options.cp > 0 && options.ranks % options.cp != 0)
    throw InputError(
        fmt::format("--cp {} must divide --ranks {} (static forms ranks / cp data-parallel "
                    "replicas of cp ranks); or --cp best",
                    options.cp, options.ranks));
  double gflops =
      options.gflops_per_rank > 0.0 ? options.gflops_per_rank : config.runtime.peak_gflops_per_rank;
  if (gflops <= 0.0) {  // neither given: this machine's sgemm rate
    set_blas_threads(config.runtime.blas_threads);
    gflops = measure_gemm_gflops(GemmPrecision::fp32);
  }
  // A calibration (from --cost-model or the deck) replaces the FLOP-based compute and the links it
  // measured; links it could not measure (between nodes, calibrated on one) keep the nominal defaults.
  const CostModelChoice choice =
      choose_cost_model(config, World::of(MPI_COMM_SELF), gflops, options.ranks_per_node, options.cost_model);
  const CostModel& cost = choice.model;
  const Sampler sampler(config);
  std::vector<GlobalBatch> batches;
  for (int step = 0; step < config.steps; ++step) batches.push_back(sampler.batch(step));
  if (options.log)
    *options.log << fmt::format(
        "minimllm {} simulate | deck {} | {} virtual ranks, {} per node | {} steps x {} samples | cost "
        "model: "
        "{}\n",
        MINIMLLM_VERSION, config.name, options.ranks, options.ranks_per_node, config.steps,
        config.data.global_batch,
        choice.calibration_text.empty() ? fmt::format("{} at {:.1f} GFLOP/s per rank", choice.source, gflops)
                                        : choice.source);

  // Every policy is planned before the output file is opened: invalid input (a sample no bin holds, a
  // degree that does not divide the ranks) leaves no file behind.
  const Projection reference = project_static(config, options, batches, cost);
  // Every policy runs with static's degree as parallel.cp: megatron_dcp's derived token budget and the
  // dynamic policies' static fallback are then those of the baseline they are compared with.
  PlannerOptions planner_options = planner_options_of(config.parallel);
  planner_options.cp = reference.summary.cp;
  std::vector<Projection> projections;
  for (const std::string& policy : options.policies)
    projections.push_back(
        policy == "static" ? reference : project(policy, planner_options, batches, cost, options.ranks));
  const auto dcp = std::find_if(projections.begin(), projections.end(),
                                [](const Projection& p) { return p.summary.policy == "megatron_dcp"; });
  std::vector<PolicySummary> summaries;
  for (Projection& p : projections) {
    PolicySummary& sum = p.summary;
    sum.speedup = reference.summary.step_seconds / sum.step_seconds;
    if (dcp != projections.end())
      sum.speedup_over_megatron_dcp = dcp->summary.step_seconds / sum.step_seconds;
    summaries.push_back(sum);
  }
  const std::string baseline = fmt::format("static (cp {})", reference.summary.cp);
  std::string tried;
  for (const auto& [cp, seconds] : reference.summary.cp_steps)
    tried += fmt::format("{}cp {}: {:.2f} ms", tried.empty() ? "" : ", ", cp, 1e3 * seconds);

  if (!options.out_path.empty()) {
    Hdf5RunWriter out(options.out_path, options.overwrite);
    out.set_run_attribute("mode", "simulate");
    out.set_run_attribute("deck_text", config.deck_text);
    out.set_run_attribute("deck_path", config.deck_path);
    out.set_run_attribute("virtual_ranks", static_cast<long long>(options.ranks));
    out.set_run_attribute("ranks_per_node", static_cast<long long>(options.ranks_per_node));
    out.set_run_attribute("gflops_per_rank", gflops);
    out.set_run_attribute("cost_model_source", choice.source);
    if (!choice.calibration_text.empty()) out.set_run_attribute("calibration", choice.calibration_text);
    out.set_run_attribute("static_cp", static_cast<long long>(reference.summary.cp));
    out.set_run_attribute("static_cp_search",
                          options.cp > 0 ? fmt::format("--cp {}", options.cp) : "best of " + tried);
    out.set_run_attribute("speedup_baseline", baseline);
    for (const Projection& p : projections)
      for (const std::vector<double>& row : p.rows) out.append_row("/simulation/" + p.summary.policy, row);
    out.set_run_attribute("simulation_columns",
                          "makespan_s, lower_bound_s, idle_fraction, comm_fraction, planning_s, encoder_s, "
                          "boundary_s, llm_s, data_s, grad_sync_s, optimizer_s, intra_node_bytes, "
                          "inter_node_bytes, solver_gap, solver_seconds");
    for (const PolicySummary& sum : summaries) {
      std::string sources;
      for (const auto& [source, steps] : sum.sources)
        sources += fmt::format("{}{}: {}", sources.empty() ? "" : ", ", source, steps);
      for (const auto& [status, steps] : sum.solver_statuses)
        sources += fmt::format(", solver {}: {}", status, steps);
      out.set_run_attribute("plan_sources_" + sum.policy, sources);
    }
    out.close();  // flushed, fsynced, the lock released
  }
  if (options.log) {
    std::ostream& log = *options.log;
    log << fmt::format("static: {} ({})\n",
                       options.cp > 0 ? "--cp " + std::to_string(options.cp) : "fastest of " + tried,
                       baseline);
    log << fmt::format("{:<12} {:>14} {:>7} {:>13} {:>6} {:>6} {:>11} {:>13} {:>19} {:>17}\n", "policy",
                       "step ms (pred)", "vs LB", "tokens/s", "idle", "comm", "planning ms", "inter-node MB",
                       "over " + baseline, "over megatron_dcp");
    for (const PolicySummary& s : summaries)
      log << fmt::format(
          "{:<12} {:>14.2f} {:>7.3f} {:>13.0f} {:>5.1f}% {:>5.1f}% {:>11.2f} {:>13.2f} {:>18.2f}x {:>17}\n",
          s.policy, 1e3 * s.step_seconds, s.step_seconds / s.lower_bound_seconds, s.tokens_per_second,
          100 * s.idle_fraction, 100 * s.comm_fraction, s.planning_ms, s.inter_node_bytes / 1e6, s.speedup,
          s.speedup_over_megatron_dcp > 0 ? fmt::format("{:.2f}x", s.speedup_over_megatron_dcp) : "-");
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
