#include "minimllm/driver/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <ostream>

#include "minimllm/core/statistics.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
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

}  // namespace

std::vector<PolicySummary> simulate(const RunConfig& config, const SimulateOptions& options) {
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
  // Opened once the inputs are known good: invalid input leaves no file behind.
  std::unique_ptr<Hdf5RunWriter> out;
  if (!options.out_path.empty()) out = std::make_unique<Hdf5RunWriter>(options.out_path, options.overwrite);
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
  if (out) {
    out->set_run_attribute("mode", "simulate");
    out->set_run_attribute("deck_text", config.deck_text);
    out->set_run_attribute("deck_path", config.deck_path);
    out->set_run_attribute("virtual_ranks", static_cast<long long>(options.ranks));
    out->set_run_attribute("ranks_per_node", static_cast<long long>(options.ranks_per_node));
    out->set_run_attribute("gflops_per_rank", gflops);
    out->set_run_attribute("cost_model_source", choice.source);
    if (!choice.calibration_text.empty()) out->set_run_attribute("calibration", choice.calibration_text);
  }

  std::vector<PolicySummary> summaries;
  for (const std::string& policy : options.policies) {
    const std::unique_ptr<Planner> planner = make_planner(policy, cost, PlannerOptions{});
    PolicySummary sum;
    sum.policy = policy;
    std::vector<double> planning;
    double tokens = 0.0;
    for (const GlobalBatch& batch : batches) {
      const auto t0 = std::chrono::steady_clock::now();
      const StepPlan plan = planner->plan(batch, options.ranks);
      planning.push_back(1e3 * seconds_since(t0));
      validate_plan(plan, batch, options.ranks);
      const PlanPrediction p = predict_step(plan, batch, cost, options.ranks);
      sum.step_seconds += p.makespan / batches.size();
      sum.lower_bound_seconds += p.lower_bound / batches.size();
      sum.idle_fraction += p.idle_fraction / batches.size();
      sum.comm_fraction += p.comm_fraction / batches.size();
      tokens += static_cast<double>(batch.text_tokens() + batch.image_tokens());
      if (out)
        out->append_row("/simulation/" + policy,
                        std::vector<double>{p.makespan, p.lower_bound, p.idle_fraction, p.comm_fraction,
                                            planning.back() * 1e-3, p.encoder, p.boundary, p.llm, p.data,
                                            p.grad_sync, p.optimizer});
    }
    sum.tokens_per_second = tokens / (sum.step_seconds * batches.size());
    sum.planning_ms = median(planning);
    sum.speedup = summaries.empty() ? 1.0 : summaries.front().step_seconds / sum.step_seconds;
    summaries.push_back(sum);
  }
  if (out) {
    out->set_run_attribute("simulation_columns",
                           "makespan_s, lower_bound_s, idle_fraction, comm_fraction, planning_s, encoder_s, "
                           "boundary_s, llm_s, data_s, grad_sync_s, optimizer_s");
    out->close();  // flushed, fsynced, the lock released
  }
  if (options.log) {
    std::ostream& log = *options.log;
    log << fmt::format("{:<8} {:>13} {:>11} {:>13} {:>7} {:>7} {:>12} {:>9}\n", "policy", "step ms (pred)",
                       "vs LB", "tokens/s", "idle", "comm", "planning ms", "speed-up");
    for (const PolicySummary& s : summaries)
      log << fmt::format("{:<8} {:>13.2f} {:>11.3f} {:>13.0f} {:>6.1f}% {:>6.1f}% {:>12.2f} {:>8.2f}x\n",
                         s.policy, 1e3 * s.step_seconds, s.step_seconds / s.lower_bound_seconds,
                         s.tokens_per_second, 100 * s.idle_fraction, 100 * s.comm_fraction, s.planning_ms,
                         s.speedup);
    if (!options.out_path.empty()) log << "simulation written to " << options.out_path << "\n";
  }
  return summaries;
}

}  // namespace minimllm
