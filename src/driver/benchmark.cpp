// Procurement mode (docs/RUN_RULES.md): checks (a) the loss at the reference step against the shipped
// reference and (b) layout invariance (the first steps re-run under `static`), then the figure of merit.
#include "minimllm/driver/benchmark.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <ostream>
#include <sstream>

#include "minimllm/core/sha256.hpp"
#include "minimllm/driver/run_report.hpp"
#include "minimllm/planning/policy_registry.hpp"

namespace minimllm {
namespace {

// |a - b| / |b|; a NaN or infinite loss is infinitely far from any reference.
double relative_difference(double a, double b) {
  const double d = std::abs(a - b) / std::abs(b);
  return std::isfinite(d) ? d : std::numeric_limits<double>::infinity();
}

// Whether a line of the deck opens one of the sections a reported run may change (docs/RUN_RULES.md,
// "Tiers").
bool opens_free_section(const std::string& line) {
  for (const char* key : {"parallel:", "runtime:", "machine:"})
    if (line.rfind(key, 0) == 0) return true;
  return false;
}

// The run rules a finished benchmark run must also obey (docs/RUN_RULES.md, "When a result counts"): the
// shipped problem, all of its steps and samples, a peak MFU is measured against that the deck did not
// lower below what this machine reaches, and a timed run long enough to mean something.
std::vector<std::string> run_rule_failures(const RunConfig& config, const BenchmarkReference& ref,
                                           const TrainResult& result, const BenchmarkVerdict& v) {
  std::vector<std::string> failures;
  const std::string digest = problem_sha256(config.deck_text);
  if (!ref.problem_sha256.empty() && digest != ref.problem_sha256)
    failures.push_back(fmt::format(
        "rule 2 (the shipped problem): the deck, less its parallel, runtime and machine sections, has sha256 "
        "{}, not the reference's {}: only parallel: and runtime: may change",
        digest, ref.problem_sha256));
  const RunConfig deck = parse_run_config(config.deck_text, config.deck_path);
  if (config.steps != deck.steps)
    failures.push_back(
        fmt::format("rule 3 (every step): the run has {} steps, the deck {} (--steps changes "
                    "the problem)",
                    config.steps, deck.steps));
  if (config.data.global_batch != deck.data.global_batch)
    failures.push_back(
        fmt::format("rule 3 (every sample): the global batch is {}, the deck's {} "
                    "(--global-batch changes the problem)",
                    config.data.global_batch, deck.data.global_batch));
  if (result.attainable_gflops_per_rank > 0.0 &&
      result.peak_gflops_per_rank < result.attainable_gflops_per_rank)
    failures.push_back(fmt::format(
        "rule 5 (the MFU peak): the peak of {:.1f} GFLOP/s per rank ({}) is below the {:.1f} GFLOP/s this "
        "machine's GEMM reached ({}); give the hardware's dense peak or leave it to be measured",
        result.peak_gflops_per_rank, result.peak_source, result.attainable_gflops_per_rank,
        result.attainable_source));
  if (v.mfu > 1.0)
    failures.push_back(
        fmt::format("rule 5 (the MFU peak): MFU {:.4f} exceeds 1: the peak ({:.1f} GFLOP/s per "
                    "rank, {}) is not the hardware's",
                    v.mfu, result.peak_gflops_per_rank, result.peak_source));
  if (v.timed_seconds < ref.min_timed_seconds)
    failures.push_back(
        fmt::format("the timed steps took {:.3f} s, less than the reference's minimum of "
                    "{:.1f} s: too short to time; run a larger problem",
                    v.timed_seconds, ref.min_timed_seconds));
  return failures;
}

}  // namespace

std::string problem_text(const std::string& deck_text) {
  std::string out, line;
  std::istringstream in(deck_text);
  bool skipping = false;
  while (std::getline(in, line)) {
    if (const size_t comment = line.find('#');
        comment != std::string::npos && line.find_first_of("\"'") == std::string::npos)
      line.erase(comment);
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty()) continue;
    if (line[0] != ' ') skipping = opens_free_section(line);
    if (!skipping) out += line + "\n";
  }
  return out;
}

std::string problem_sha256(const std::string& deck_text) { return sha256_hex(problem_text(deck_text)); }

std::optional<BenchmarkReference> find_benchmark_reference(const RunConfig& config,
                                                           const std::string& cli_reference) {
  namespace fs = std::filesystem;
  std::string path = cli_reference;
  if (path.empty()) {
    if (config.benchmark.reference.empty()) return std::nullopt;
    const fs::path relative(config.benchmark.reference);
    path = relative.is_absolute() ? relative.string()
                                  : (fs::path(config.deck_path).parent_path() / relative).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw InputError(
          fmt::format("{}: benchmark.reference = {}: no such file {} (the path is relative to the "
                      "deck's directory)",
                      config.deck_path, config.benchmark.reference, path));
  }
  BenchmarkReference ref = load_benchmark_reference(path);
  if (ref.problem != config.name)
    throw InputError(
        fmt::format("{}: problem = {}: this reference belongs to problem {}, but the deck {} is "
                    "problem {}",
                    path, ref.problem, ref.problem, config.deck_path, config.name));
  return ref;
}

BenchmarkVerdict judge_recorded(const RunConfig& config, const BenchmarkReference& ref,
                                const TrainResult& result, int ranks, const InvarianceResult& invariance) {
  BenchmarkVerdict v;
  std::vector<std::string>& failures = v.failures;
  const std::vector<StepRecord>& steps = result.steps;

  // A step with a non-finite loss or gradient invalidates the run wherever it falls, after the reference
  // step too. The trainer stops at such a step; this judges results produced otherwise all the same.
  const auto non_finite = std::find_if(steps.begin(), steps.end(), [](const StepRecord& s) {
    return !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  });
  if (non_finite != steps.end())
    failures.push_back(fmt::format("non-finite loss or gradient at step {} (loss {}, gradient norm {})",
                                   non_finite->step, non_finite->loss, non_finite->grad_norm));

  // (a) The loss at the reference step, within the tolerance of the run's precision.
  v.reached = ref.step < static_cast<int>(steps.size());
  v.loss_tolerance = loss_tolerance(ref, config.runtime.precision);
  if (v.loss_tolerance <= 0.0)
    failures.push_back(
        fmt::format("the reference {} has no tolerance for runtime.precision {} (key {}_"
                    "relative_tolerance): such a run cannot be judged against it",
                    ref.path, config.runtime.precision, config.runtime.precision));
  if (v.reached) {
    v.loss = steps[ref.step].loss;
    v.loss_relative_difference = relative_difference(v.loss, ref.loss);
    if (v.loss_tolerance > 0.0 && !(v.loss_relative_difference <= v.loss_tolerance))
      failures.push_back(
          fmt::format("loss at step {} is {:.6f}, the reference {:.6f}: relative difference {:.1e} exceeds "
                      "the tolerance {:.1e} ({})",
                      ref.step, v.loss, ref.loss, v.loss_relative_difference, v.loss_tolerance,
                      config.runtime.precision));
  } else {
    failures.push_back(
        fmt::format("the run has {} steps and never reached the reference step {} (run at least {})",
                    steps.size(), ref.step, ref.step + 1));
  }

  // (b) Layout invariance, as measured: the same first steps under `static`.
  v.invariance_steps = invariance.steps;
  v.invariance_max_relative_difference = invariance.max_relative_difference;
  if (steps.empty()) v.invariance_max_relative_difference = std::numeric_limits<double>::infinity();
  if (!(v.invariance_max_relative_difference <= ref.invariance_relative_tolerance))
    failures.push_back(
        fmt::format("layout invariance: policy {} and static differ by {:.1e} (relative loss) in steps 0-{}, "
                    "more than the "
                    "tolerance {:.1e}",
                    config.parallel.policy, v.invariance_max_relative_difference, v.invariance_steps - 1,
                    ref.invariance_relative_tolerance));

  // Figure of merit: every token of the steps after the warm-up over their whole wall time.
  double tokens = 0.0, samples = 0.0, flops = 0.0;
  const size_t first = steps.size() > 1 ? 1 : 0;
  for (size_t i = first; i < steps.size(); ++i) {
    tokens += static_cast<double>(steps[i].text_tokens + steps[i].image_tokens);
    samples += steps[i].samples;
    flops += steps[i].model_flops;
  }
  v.timed_steps = static_cast<int>(steps.size() - first);
  v.timed_seconds = result.timed_seconds;
  if (v.timed_seconds > 0) {
    v.tokens_per_second = tokens / v.timed_seconds;
    v.samples_per_second = samples / v.timed_seconds;
    v.mfu = flops / v.timed_seconds / (result.peak_gflops_per_rank * 1e9 * ranks);
    v.attainable_fraction = attainable_fraction(result, v.mfu);
  }

  v.rule_failures = run_rule_failures(config, ref, result, v);
  failures.insert(failures.end(), v.rule_failures.begin(), v.rule_failures.end());
  v.valid = failures.empty();
  for (const std::string& f : failures) v.reason += (v.reason.empty() ? "" : "; ") + f;
  return v;
}

BenchmarkVerdict judge_run(const RunConfig& config, const BenchmarkReference& ref, const TrainResult& result,
                           const World& world) {
  // (b) Layout invariance: the same first steps under `static`, from the same initial state and data.
  const std::vector<StepRecord>& steps = result.steps;
  RunConfig baseline = config;
  baseline.parallel.policy = baseline_policy();
  baseline.steps = std::max(1, std::min<int>(ref.invariance_steps, steps.size()));
  baseline.machine.peak_gflops = result.planning_gflops_per_rank;  // the same plans' rate
  const TrainResult reference_layout = train(baseline, world, {});
  InvarianceResult invariance;
  invariance.steps = baseline.steps;
  for (int i = 0; i < invariance.steps && i < static_cast<int>(steps.size()); ++i)
    invariance.max_relative_difference =
        std::max(invariance.max_relative_difference,
                 relative_difference(steps[i].loss, reference_layout.steps[i].loss));
  BenchmarkVerdict v = judge_recorded(config, ref, result, world.size, invariance);
  v.nodes = node_count(world);
  return v;
}

void print_verdict(std::ostream& out, const RunConfig& config, const BenchmarkReference& ref,
                   const BenchmarkVerdict& v, int ranks) {
  const auto pass = [](bool ok) { return ok ? "pass" : "FAIL"; };
  out << fmt::format("\nbenchmark {} (reference {}):\n", config.name, ref.path);
  if (v.reached)
    out << fmt::format(
        "  (a) loss at step {}: {:.6f}, reference {:.6f}: relative difference {:.1e}, tolerance "
        "{:.1e}{}: {}\n",
        ref.step, v.loss, ref.loss, v.loss_relative_difference, v.loss_tolerance,
        config.runtime.precision == "bf16" ? " (bf16)" : "",
        pass(v.loss_tolerance > 0.0 && v.loss_relative_difference <= v.loss_tolerance));
  else
    out << fmt::format("  (a) loss at step {}: not reached: FAIL\n", ref.step);
  out << fmt::format(
      "  (b) layout invariance, {} vs static on steps 0-{}: largest relative loss difference {:.1e}, "
      "tolerance "
      "{:.1e}: {}\n",
      config.parallel.policy, v.invariance_steps - 1, v.invariance_max_relative_difference,
      ref.invariance_relative_tolerance,
      pass(v.invariance_max_relative_difference <= ref.invariance_relative_tolerance));
  out << fmt::format(
      "  (d) run rules: the problem (sha256 {}{}), every step and sample, the MFU peak{}: {}\n",
      problem_sha256(config.deck_text).substr(0, 12),
      ref.problem_sha256.empty() ? ", not checked: the reference has no problem_sha256" : "",
      ref.min_timed_seconds > 0 ? fmt::format(", at least {:.1f} s timed", ref.min_timed_seconds) : "",
      pass(v.rule_failures.empty()));
  out << fmt::format(
      "FOM {}: {:.1f} {} training tokens/s | {:.3f} samples/s | MFU {:.2f}% of the hardware peak, {:.2f}% of "
      "the attainable GEMM rate ({} steps after the warm-up in {:.3f} s on {} ranks)\n",
      config.name, v.tokens_per_second, v.valid ? "validated" : "NOT validated", v.samples_per_second,
      100.0 * v.mfu, 100.0 * v.attainable_fraction, v.timed_steps, v.timed_seconds, ranks);
  out << fmt::format(
      "minimllm FOM problem={} tokens_per_second={:.1f} tokens_per_second_per_node={:.1f} "
      "samples_per_second={:.3f} mfu={:.4f} attainable_fraction={:.4f} ranks={} nodes={} policy={} "
      "verdict={}\n",
      config.name, v.tokens_per_second, v.tokens_per_second_per_node(), v.samples_per_second, v.mfu,
      v.attainable_fraction, ranks, v.nodes, config.parallel.policy, v.valid ? "VALID" : "INVALID");
  out << (v.valid ? std::string("VALID") : "INVALID: " + v.reason) << std::endl;
}

std::vector<RunAttribute> verdict_attributes(const BenchmarkReference& ref, const BenchmarkVerdict& v) {
  return {
      {"verdict", std::string(v.valid ? "VALID" : "INVALID")},
      {"verdict_reason", v.reason},
      {"benchmark_reference", ref.path},
      {"reference_step", static_cast<long long>(ref.step)},
      {"reference_loss", ref.loss},
      {"reference_relative_tolerance", ref.relative_tolerance},
      {"reference_bf16_relative_tolerance", ref.bf16_relative_tolerance},
      {"reference_step_loss", v.reached ? v.loss : std::numeric_limits<double>::quiet_NaN()},
      {"reference_relative_difference",
       v.reached ? v.loss_relative_difference : std::numeric_limits<double>::quiet_NaN()},
      {"invariance_steps", static_cast<long long>(v.invariance_steps)},
      {"invariance_relative_tolerance", ref.invariance_relative_tolerance},
      {"invariance_max_relative_difference", v.invariance_max_relative_difference},
      {"fom_tokens_per_second", v.tokens_per_second},
      {"fom_tokens_per_second_per_node", v.tokens_per_second_per_node()},
      {"fom_samples_per_second", v.samples_per_second},
      {"fom_mfu", v.mfu},
      {"fom_attainable_fraction", v.attainable_fraction},
      {"fom_timed_steps", static_cast<long long>(v.timed_steps)},
      {"fom_timed_seconds", v.timed_seconds},
  };
}

}  // namespace minimllm
