#include "minimllm/driver/run_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "minimllm/core/device.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/step/gradient_sync.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

// Median of a StepRecord field over the steps after the warm-up (step 0: first-touch allocations,
// BLAS buffers).
template <class Field>
double median_after_warmup(const TrainResult& r, Field field) {
  std::vector<double> values;
  for (size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i) values.push_back(field(r.steps[i]));
  return median(values);
}

// parallel.cp_comm, and under a2a which groups cannot use it (cp_comm_for_group).
std::string cp_comm_line(const RunConfig& config) {
  const std::string& mode = config.parallel.cp_comm;
  if (cp_comm_from_string(mode) != CpComm::a2a) return mode;
  const int heads = config.model.llm.heads / std::max(config.parallel.tp, 1);
  return fmt::format("a2a (a group whose size does not divide the {} heads per rank runs p2p)", heads);
}

// The optimizer and the gradient synchronisation it needs, and what of the deck did not apply.
std::string optimizer_line(const RunConfig& config, const World& world) {
  const GradSyncOptions sync = grad_sync_options(config);
  const std::string all_reduce =
      sync.overlapped()
          ? fmt::format("all-reduce overlapped with the backward ({} MiB buckets)", sync.bucket_mb)
          : "one all-reduce after the backward";
  const int units_ranks = model_parallel_of(config).ranks_per_unit();
  if (!config.parallel.distributed_optimizer)
    return "optimizer: AdamW, replicated (every rank holds every moment) | gradient sync: " + all_reduce;
  return fmt::format(
      "optimizer: AdamW, distributed (ZeRO-1) over {} ranks, each holding the moments of 1/{} of the "
      "parameters{} "
      "| gradient sync: one reduce-scatter after the backward{}, updated parameters all-gathered",
      world.size / units_ranks, world.size / units_ranks,
      units_ranks > 1 ? " (of its stage's tensor-parallel slices, over the units)" : "",
      config.runtime.overlap_grad_sync ? " (runtime.overlap_grad_sync: not supported with the distributed "
                                         "optimizer, not overlapped)"
                                       : "");
}

}  // namespace

double attainable_fraction(const TrainResult& r, double mfu) {
  return r.attainable_gflops_per_rank > 0.0 ? mfu * r.peak_gflops_per_rank / r.attainable_gflops_per_rank
                                            : 0.0;
}

void print_banner(std::ostream& log, const RunConfig& config, const World& world, const Model& model,
                  const TrainResult& r, const PeakWork& peak, const std::vector<RunAttribute>& provenance) {
  const ModelConfig& m = config.model;
  log << fmt::format("minimllm {} | deck {} ({}) | {} MPI ranks | {} | BLAS threads/rank {}\n",
                     MINIMLLM_VERSION, config.name, config.deck_path, world.size, kokkos_description(),
                     config.runtime.blas_threads);
  log << provenance_summary(provenance) << "\n";
  if (!kokkos_environment_note().empty()) log << kokkos_environment_note() << "\n";
  log << "model:";
  for (const EncoderConfig& e : m.encoders)
    log << fmt::format(" {} encoder {}x{} (heads {}, patch {}) ->", to_string(e.modality), e.layers, e.width,
                       e.heads, e.patch);
  log << fmt::format(" LLM {}x{} (heads {}, vocab {}) | {:.3f} M parameters\n", m.llm.layers, m.llm.width,
                     m.llm.heads, m.llm.vocab, model.parameter_count() / 1e6);
  const ParallelConfig& p = config.parallel;
  const int unit_ranks = model_parallel_of(config).ranks_per_unit();
  if (p.tp > 1)
    log << fmt::format(
        "tensor parallelism: LLM over {} ranks, encoder over {} ({} encoder group{} per unit sharing its "
        "images); the planners regroup {} unit(s) of {} ranks; parameters above: one rank's slices\n",
        p.tp, p.encoder_tp, p.tp / p.encoder_tp, p.tp / p.encoder_tp == 1 ? "" : "s", world.size / unit_ranks,
        unit_ranks);
  if (p.pp > 1 || p.encoder_stage) {
    const PipelineStage& stage = model.sharding().pipeline;
    std::string layers;
    for (int n : stage.stage_layers) layers += fmt::format("{}{}", layers.empty() ? "" : ", ", n);
    log << fmt::format(
        "pipeline parallelism: {}the LLM's layers in {} stage(s) of [{}] layers (the first also {}the "
        "embedding, the last the head), 1F1B over each LLM group's micro-batches; the planners regroup {} "
        "unit(s) of {} ranks; parameters above: rank 0's stage\n",
        p.encoder_stage ? "the encoder's own stage (its image rows to the LLM's first stage and back), then "
                        : "",
        p.pp, layers.empty() ? std::to_string(m.llm.layers) : layers,
        p.encoder_stage ? "" : "the encoder and ", world.size / unit_ranks, unit_ranks);
  }
  const std::string layout =
      p.policy != "deck"
          ? fmt::format("policy {} (cost model: {})", p.policy,
                        r.cost_model_source == "default-from-FLOPs"
                            ? fmt::format("{} at {:.1f} GFLOP/s per rank", r.cost_model_source,
                                          r.planning_gflops_per_rank)
                            : r.cost_model_source)
          : fmt::format(
                "deck: {} placement, LLM groups [{}]{}, micro-batches {}", p.placement,
                p.group_sizes.empty() ? "1 per rank" : fmt::format("{}", fmt::join(p.group_sizes, ", ")),
                p.rotate_groups ? " rotating every step" : "", p.micro_batches);
  log << fmt::format(
      "data: global batch {} samples, {} steps, seed {} | layout: {} | context parallelism: {} | comm pool "
      "{}{}\n",
      config.data.global_batch, config.steps, config.seed, layout, cp_comm_line(config), p.comm_pool_capacity,
      p.policy != "deck" ? fmt::format(", pre-created: {}", p.comm_precreate) : "");
  log << fmt::format("precision: {} GEMMs | recompute: {} | collectives: {} ({})\n", r.precision, r.recompute,
                     r.collectives, r.collectives_reason);
  log << optimizer_line(config, world) << "\n";
  log << fmt::format("peak for MFU (hardware): {:.1f} GFLOP/s per rank ({})\n", r.peak_gflops_per_rank,
                     r.peak_source);
  log << fmt::format("attainable (best measured GEMM): {:.1f} GFLOP/s per rank, {:.0f}% of the peak ({})\n",
                     r.attainable_gflops_per_rank,
                     100.0 * r.attainable_gflops_per_rank / r.peak_gflops_per_rank, r.attainable_source);
  if (!r.gemm_choice.empty()) log << r.gemm_choice << "\n";
  log << r.machine.describe();
  log << fmt::format(
      "memory estimate per rank: {:.1f} MiB (parameters, gradients, AdamW state; activations "
      "for up to {} LLM rows, {} key rows of other members, {} patches: the largest of the first {} steps)\n",
      r.memory_estimate_mib, peak.llm_rows, peak.key_rows, peak.patches,
      std::min(config.steps, kEstimateSteps));
}

void print_step(std::ostream& log, const StepRecord& s, int steps) {
  log << fmt::format(
      "step {:>5}/{}  loss {:.4f}  tokens {:>7} (text {}, image {})  {:8.1f} ms  {:>10.0f} tok/s  "
      "MFU {:5.1f}%\n",
      s.step, steps, s.loss, s.text_tokens + s.image_tokens, s.text_tokens, s.image_tokens,
      1e3 * s.step_seconds, s.tokens_per_second, 100.0 * s.mfu);
}

void print_summary(std::ostream& log, const TrainResult& r, const World& world, const std::string& out_path) {
  // Step 0 is a warm-up (first-touch allocations, BLAS buffers): rates use the steps after it.
  std::vector<double> times, rates, mfus;
  for (size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i) {
    times.push_back(r.steps[i].step_seconds);
    rates.push_back(r.steps[i].tokens_per_second);
    mfus.push_back(r.steps[i].mfu);
  }
  const StepRecord &first = r.steps.front(), &last = r.steps.back();
  log << fmt::format(
      "summary: loss {:.4f} -> {:.4f} over {} steps | median step {:.1f} ms | median {:.0f} tok/s "
      "({:.0f} per rank) | median MFU {:.1f}% of the hardware peak, {:.1f}% of the attainable GEMM rate\n",
      first.loss, last.loss, r.steps.size(), 1e3 * median(times), median(rates), median(rates) / world.size,
      100.0 * median(mfus), 100.0 * attainable_fraction(r, median(mfus)));
  std::string phases;
  for (Phase phase : kPhases) {
    phases += fmt::format(
        "{}{} {:.2f}", phases.empty() ? "" : " | ", phase_name(phase),
        1e3 * median_after_warmup(r, [phase](const StepRecord& s) { return s.phase_seconds[phase]; }));
  }
  log << "phases (median ms, slowest rank): " << phases << "\n";
  // Planning after the start-up steps: what the helper thread hid (runtime.plan_ahead).
  double work = 0.0, exposed = 0.0;
  for (size_t i = std::min<size_t>(kEstimateSteps, r.steps.size()); i < r.steps.size(); ++i)
    work += r.steps[i].planning_work_seconds, exposed += r.steps[i].phase_seconds[Phase::planning];
  if (work > 0.0)
    log << fmt::format(
        "planning after the first {} steps: {:.3f} ms per step, {:.1f}% of it hidden behind the step "
        "before\n",
        kEstimateSteps, 1e3 * work / (r.steps.size() - kEstimateSteps),
        100.0 * std::max(0.0, 1.0 - exposed / work));
  if (!out_path.empty()) {
    // Step 0 also creates every table; the median is the steady cost of a step.
    const std::vector<double> later(r.output_seconds.begin() + (r.output_seconds.size() > 1),
                                    r.output_seconds.end());
    double total = 0.0;
    for (double t : r.output_seconds) total += t;
    log << fmt::format(
        "output: HDF5 writes on rank 0: median {:.3f} ms per step ({:.3f}% of the median step), first step "
        "{:.3f} ms; {:.3f}% of the run's wall time in all\n",
        1e3 * median(later), 100.0 * median(later) / median(times), 1e3 * r.output_seconds.front(),
        100.0 * total / r.loop_seconds);
  }
  // The peak counts the process's own start-up residency (binary, MPI, Kokkos), which the analytic estimate
  // of state and activations does not: both ratios.
  log << fmt::format(
      "memory per rank: peak resident {:.1f} MiB, analytic estimate {:.1f} MiB + {:.1f} MiB resident at the "
      "start (peak / (estimate + start) {:.2f}; peak / estimate {:.2f})\n",
      r.peak_resident_mib, r.memory_estimate_mib, r.start_resident_mib,
      r.peak_resident_mib / (r.memory_estimate_mib + r.start_resident_mib),
      r.peak_resident_mib / r.memory_estimate_mib);
  if (!out_path.empty()) log << "metrics written to " << out_path << "\n";
  log << fmt::format(
      "minimllm PERFORMANCE tokens_per_second={:.1f} tokens_per_second_per_rank={:.1f} mfu={:.4f} "
      "attainable_fraction={:.4f} ranks={}\n",
      median(rates), median(rates) / world.size, median(mfus), attainable_fraction(r, median(mfus)),
      world.size);
}

namespace {

// What the comparison reports of one run: medians over its steps after the warm-up.
struct RunFigures {
  double step = 0.0, tokens_per_second = 0.0, predicted = 0.0, predicted_over_bound = 0.0, last_loss = 0.0;
};

RunFigures run_figures(const TrainResult& r) {
  RunFigures f;
  f.step = median_after_warmup(r, [](const StepRecord& s) { return s.step_seconds; });
  f.tokens_per_second = median_after_warmup(r, [](const StepRecord& s) { return s.tokens_per_second; });
  f.predicted = median_after_warmup(r, [](const StepRecord& s) { return s.predicted_seconds; });
  f.predicted_over_bound = median_after_warmup(r, [](const StepRecord& s) {
    return s.lower_bound_seconds > 0 ? s.predicted_seconds / s.lower_bound_seconds : 0.0;
  });
  f.last_loss = r.steps.empty() ? 0.0 : r.steps.back().loss;
  return f;
}

std::vector<double> figure_of_runs(const PolicyRuns& p, double RunFigures::*field) {
  std::vector<double> values;
  for (const TrainResult& r : p.runs) values.push_back(run_figures(r).*field);
  return values;
}

// The baseline: static's runs where they are among the policies, else the first policy's; its name with
// its degree.
// A CSV field: quoted (quotes doubled) where it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

const PolicyRuns& baseline_runs(const std::vector<PolicyRuns>& policies) {
  const auto base = std::find_if(policies.begin(), policies.end(),
                                 [](const PolicyRuns& p) { return p.policy == baseline_policy(); });
  return base != policies.end() ? *base : policies.front();
}

std::string baseline_name(const PolicyRuns& base, int static_cp) {
  return base.policy == baseline_policy() ? fmt::format("{} (cp {})", base.policy, static_cp) : base.policy;
}

}  // namespace

void print_policy_comparison(std::ostream& out, const std::vector<PolicyRuns>& policies, int static_cp) {
  if (policies.empty() || policies.front().runs.empty()) return;
  const PolicyRuns& base = baseline_runs(policies);
  const double base_tps = median(figure_of_runs(base, &RunFigures::tokens_per_second));
  const double base_loss = run_figures(base.runs.front()).last_loss;
  out << fmt::format(
      "\npolicy comparison (same data; {} run(s) each; rates from steps after the warm-up, median over the "
      "runs, spread min-max; speed-up and loss difference over {}, parallel.cp; `minimllm simulate --cp "
      "best` "
      "finds its fastest degree):\n",
      base.runs.size(), baseline_name(base, static_cp));
  out << fmt::format("{:<12} {:>10} {:>11} {:>19} {:>8} {:>13} {:>10} {:>11} {:>11} {:>12}\n", "policy",
                     "step ms", "tokens/s", "tokens/s spread", "speed-up", "predicted ms", "pred/meas",
                     "pred./LB", "last loss", "loss diff");
  for (const PolicyRuns& p : policies) {
    const std::vector<double> tps = figure_of_runs(p, &RunFigures::tokens_per_second);
    const double step = median(figure_of_runs(p, &RunFigures::step));
    const double predicted = median(figure_of_runs(p, &RunFigures::predicted));
    const double loss = run_figures(p.runs.front()).last_loss;
    const auto [low, high] = std::minmax_element(tps.begin(), tps.end());
    out << fmt::format(
        "{:<12} {:>10.1f} {:>11.0f} {:>19} {:>7.2f}x {:>13.2f} {:>10.3f} {:>11.3f} {:>11.5f} {:>12.1e}\n",
        p.policy, 1e3 * step, median(tps), fmt::format("{:.0f}-{:.0f}", *low, *high), median(tps) / base_tps,
        1e3 * predicted, predicted / step, median(figure_of_runs(p, &RunFigures::predicted_over_bound)), loss,
        std::abs(loss - base_loss) / base_loss);
  }
}

std::string policy_comparison_csv(const std::vector<PolicyRuns>& policies, int static_cp) {
  std::string csv =
      "policy,repetition,file,steps,step_ms,tokens_per_second,speedup,predicted_ms,last_loss,baseline\n";
  if (policies.empty() || policies.front().runs.empty()) return csv;
  const PolicyRuns& base = baseline_runs(policies);
  const double base_tps = median(figure_of_runs(base, &RunFigures::tokens_per_second));
  for (const PolicyRuns& p : policies)
    for (size_t k = 0; k < p.runs.size(); ++k) {
      const RunFigures f = run_figures(p.runs[k]);
      csv += fmt::format("{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.10g},{}\n", p.policy, k + 1,
                         csv_field(k < p.files.size() ? p.files[k] : ""), p.runs[k].steps.size(),
                         1e3 * f.step, f.tokens_per_second, f.tokens_per_second / base_tps, 1e3 * f.predicted,
                         f.last_loss, baseline_name(base, static_cp));
    }
  return csv;
}

}  // namespace minimllm
