#include "minimllm/driver/cli.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "embedded_decks.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/core/printable.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/planning/policy_registry.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

// The registry's policies, one line each (--help of run and simulate).
std::string policy_help() {
  std::string text = "Policies (parallel.policy, --policy):\n";
  for (const PolicyRow& row : policy_registry()) text += fmt::format("  {:<13} {}\n", row.name, row.summary);
  return text;
}

}  // namespace

const char* embedded_quickstart_deck() { return kQuickstartDeck; }

namespace {

// An integer in decimal digits only: CLI11 itself would read 0x10, 0b1, 0o7 and 010 (as octal). Leading
// zeros are dropped, so what CLI11 converts is decimal.
CLI::Validator decimal() {
  return CLI::Validator(
      [](std::string& value) {
        if (value.empty() || value.size() > 12 || value.find_first_not_of("0123456789") != std::string::npos)
          return "'" + value + "' is not a decimal integer";
        value.erase(0, std::min(value.find_first_not_of('0'), value.size() - 1));
        return std::string();
      },
      "INT");
}

// A finite number in [low, high] (or (low, high] when low is excluded), the bounds printed readably
// (CLI::Range prints an infinite bound with 309 digits and lets NaN through).
CLI::Validator finite(double low, bool low_included, double high) {
  return CLI::Validator(
      [=](const std::string& value) {
        const char* begin = value.c_str();
        char* end = nullptr;
        const double x = value.empty() ? 0.0 : std::strtod(begin, &end);
        const std::string range = fmt::format("{}{:g}, {:g}]", low_included ? "[" : "(", low, high);
        if (value.empty() || end != begin + value.size() || !std::isfinite(x))
          return fmt::format("'{}' is not a finite number in {}", value, range);
        if (x > high || x < low || (!low_included && x == low))
          return fmt::format("{} is outside {}", value, range);
        return std::string();
      },
      "NUMBER");
}

// A path given as "" would silently fall back to the default.
CLI::Validator non_empty() {
  return CLI::Validator(
      [](const std::string& value) {
        return value.empty() ? std::string("an empty path; name a file") : std::string();
      },
      "FILE");
}

}  // namespace

CliOutcome parse_command_line(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "minimllm: a multimodal LLM training mini-app (vision encoder + LLM, handwritten forward and "
      "backward)\n"
      "on heterogeneous batches, with per-step metrics in HDF5. Exit codes: 0 success, 1 runtime failure,\n"
      "2 invalid input (deck or command line), 3 a benchmark run finished INVALID (its results are kept; "
      "see\n"
      "docs/RUN_RULES.md) or verify judged its runs INVALID, 75 stopped by SIGUSR1 after a checkpoint "
      "(resume with run --restart), 143, 130\n"
      "or 138 stopped after a step by SIGTERM, SIGINT or SIGUSR1 without a checkpoint (docs/RUNNING.md).",
      "minimllm"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  // One line per error, as for every other invalid input.
  const auto one_line = [](const CLI::App*, const CLI::Error& e) {
    return printable(std::string("minimllm: error: ") + e.what() + " (see minimllm --help)") + "\n";
  };
  app.failure_message(one_line);

  RunRequest request;
  int steps = 0;
  CLI::App* run =
      app.add_subcommand("run", "Train on a deck (YAML input; see docs/INPUT.md) and write HDF5 metrics");
  run->add_option("deck", request.deck, "Input deck (default: the embedded quickstart deck)")
      ->check(CLI::ExistingFile);
  run->add_option("--out,-o", request.out,
                  "HDF5 output file (default: <deck name>-<UTC date-time>.h5 in the working directory)")
      ->check(non_empty());
  run->add_option("--steps", steps, "Number of steps, overriding the deck's `steps`")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 30));
  int run_global_batch = 0;
  run->add_option("--global-batch", run_global_batch,
                  "Samples per step over all ranks, overriding the deck's data.global_batch (e.g. ranks x "
                  "samples per rank for weak scaling)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 24));
  std::vector<std::string> policies = policy_names();
  policies.push_back("all");
  run->add_option("--policy", request.policy,
                  "Layout policy, overriding the deck's parallel.policy (policies below); `all` runs every "
                  "planner in turn on the same data and compares them (one output file per policy: "
                  "<out>-<policy>.h5; the comparison also in <out>-comparison.csv)")
      ->check(CLI::IsMember(policies));
  run->add_option("--repeat", request.repeat,
                  "Run each policy N times, interleaved (every policy once, then again), one output file per "
                  "run (<out>-<policy>-r<k>.h5, or <out>-r<k>.h5 for one policy); the comparison shows the "
                  "median and spread and is written to <out>-comparison.csv (default 1)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1000));
  run->footer(policy_help());
  run->add_option("--cost-model", request.cost_model,
                  "Calibration file (from minimllm calibrate) for the planners and predictions, overriding "
                  "the deck's parallel.cost_model")
      ->check(non_empty());
  run->add_flag("--calibrate", request.calibrate,
                "Calibrate the cost model at start-up, as runtime.calibrate: true (with --policy all: before "
                "each policy's steps)");
  run->add_flag("--overwrite", request.overwrite,
                "Replace the output file (and checkpoint file) if it exists");
  run->add_option("--checkpoint-every", request.checkpoint_every,
                  "Write a checkpoint (model, AdamW state, step, sampler state) every N steps and after the "
                  "last, atomically replacing the previous one (docs/RUNNING.md)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 30));
  run->add_option("--checkpoint", request.checkpoint,
                  "Checkpoint file (default: the --out path with .ckpt.h5 in place of .h5). Given alone, a "
                  "checkpoint is written only when a signal stops the run (SIGUSR1: exit 75)")
      ->check(non_empty());
  run->add_option("--restart", request.restart,
                  "Continue the run a checkpoint holds (same deck) from its next step to --steps, writing "
                  "these steps to --out; losses are bitwise those of an uninterrupted run on the same ranks "
                  "and policy")
      ->check(non_empty());
  run->add_option("--reference", request.reference,
                  "Benchmark reference to judge the run by (VALID or INVALID, exit code 3 when INVALID), "
                  "overriding the deck's benchmark.reference (docs/RUN_RULES.md)")
      ->check(CLI::ExistingFile);
  run->failure_message(one_line);

  SimulateRequest sim;
  int sim_steps = 0;
  CLI::App* simulate = app.add_subcommand(
      "simulate",
      "Plan every step of a deck for N virtual ranks with the cost model, without compute, and "
      "compare policies (projected step time, tokens/s, idle and communication shares)");
  simulate->add_option("deck", sim.deck, "Input deck")->required()->check(CLI::ExistingFile);
  // The simulator's time grows about linearly in the virtual ranks (and the samples): at 2^20 ranks, about
  // 9 s per simulated step of every policy on one core (docs/PARALLELISM.md).
  simulate->add_option("--ranks", sim.ranks, "Virtual ranks (at most 1048576)")
      ->required()
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 20));
  simulate
      ->add_option("--ranks-per-node", sim.ranks_per_node,
                   "Virtual ranks per node, overriding the machine's ranks_per_node (default 8)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 24));
  simulate
      ->add_option(
          "--machine", sim.machine,
          "Machine file (a YAML file with a machine: section, e.g. inputs/machines/dgx-h100.yaml, or "
          "a calibration file), replacing the deck's machine section")
      ->check(CLI::ExistingFile);
  simulate
      ->add_option("--memory-gib", sim.memory_gib,
                   "Memory per rank in GiB, overriding machine.memory_gib (default: this machine's memory "
                   "divided among the ranks per node)")
      ->check(finite(0.0, false, 1e6));
  simulate
      ->add_option("--comm-creation-ms", sim.comm_creation_ms,
                   "Milliseconds to create one communicator, overriding machine.comm_creation_ms (how much "
                   "the projections depend on it; the DGX preset's 2000 is assumed)")
      ->check(finite(0.0, false, 1e7));
  std::vector<std::string> planners(policies.begin() + 1, policies.end());  // every policy but `deck`
  simulate
      ->add_option(
          "--policy", sim.policy,
          "A planner (below), a comma-separated list of them (e.g. static,dhp), or all (default: all, "
          "speed-ups over static)")
      ->check(CLI::Validator(
          [planners](const std::string& value) {
            if (value == "all") return std::string();
            const std::vector<std::string> names = split_policy_list(value);
            for (const std::string& name : names) {
              if (name.empty())
                return fmt::format("'{}' has an empty name; list planners as static,dhp", value);
              if (name == "all") return fmt::format("'{}': all stands alone, not in a list", value);
              if (std::count(names.begin(), names.end(), name) > 1)
                return fmt::format("'{}' lists {} twice", value, name);
              if (std::find(planners.begin(), planners.end(), name) == planners.end())
                return fmt::format("'{}' is not a planner; valid: {}, or a comma-separated list of planners",
                                   name, fmt::join(planners, ", "));
            }
            return std::string();
          },
          "P[,P...]|all"));
  simulate->footer(policy_help());
  simulate
      ->add_option("--cp", sim.cp,
                   "static's context-parallel degree (dividing --ranks; also parallel.cp for the other "
                   "policies), or best (default): every power of two, the fastest predicted is the baseline")
      ->check(CLI::Validator(
          [](const std::string& value) {
            if (value == "best") return std::string();
            const std::string digits = "0123456789";
            if (value.empty() || value.size() > 8 || value.find_first_not_of(digits) != std::string::npos ||
                std::stoi(value) < 1)
              return "--cp must be a positive integer or best, not '" + value + "'";
            return std::string();
          },
          "N|best"));
  int tokens_per_rank = 0;
  simulate
      ->add_option("--tokens-per-rank", tokens_per_rank,
                   "Per-rank token budget of static's bins and megatron_dcp's groups, overriding the deck's "
                   "parallel.tokens_per_rank (0: derived from the longest sample)")
      ->transform(decimal())
      ->check(CLI::Range(0, 1 << 30));
  std::string cp_comm;
  simulate
      ->add_option("--cp-comm", cp_comm,
                   "Context-parallel mechanism of every group, overriding the deck's parallel.cp_comm: p2p "
                   "(a ring overlapped with attention, Megatron-LM's default), a2a (Ulysses' all-to-alls; "
                   "groups whose size does not divide the heads per rank run p2p) or all_gather")
      ->check(CLI::IsMember({"p2p", "a2a", "all_gather"}));
  simulate->add_option("--steps", sim_steps, "Number of steps, overriding the deck's `steps`")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 30));
  int global_batch = 0;
  simulate
      ->add_option("--global-batch", global_batch,
                   "Samples per step, overriding the deck's data.global_batch")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 24));
  simulate
      ->add_option("--gflops", sim.gflops,
                   "Cost-model rate per rank in GFLOP/s, overriding machine.peak_gflops (default: this "
                   "machine's measured sgemm rate)")
      ->check(finite(0.0, false, 1e9));
  simulate
      ->add_option("--planning-ms", sim.planning_ms,
                   "Planning work per step charged to the projection (default: the planner's wall time on "
                   "this machine, measured per step)")
      ->check(finite(0.0, true, 1e7));
  simulate
      ->add_option("--cost-model", sim.cost_model,
                   "Calibration file (from minimllm calibrate), overriding the deck's parallel.cost_model")
      ->check(non_empty());
  simulate
      ->add_option(
          "--out,-o", sim.out,
          "HDF5 output file (/simulation/<policy>: one row per step; default: <deck name>-simulate-<UTC "
          "date-time>.h5 in the working directory)")
      ->check(non_empty());
  simulate->add_flag("--overwrite", sim.overwrite, "Replace the output file if it exists");
  simulate->failure_message(one_line);

  CalibrateRequest cal;
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "Measure the cost model on this machine for a deck's model (compute per phase at several sizes, data, "
      "optimizer, gradient all-reduce, collectives on the ranks it runs on), fit it and write a calibration "
      "file that decks name as parallel.cost_model");
  calibrate->add_option("deck", cal.deck, "Input deck")->required()->check(CLI::ExistingFile);
  calibrate
      ->add_option("--out,-o", cal.out,
                   "Calibration file to write (YAML; default: <deck name>-calibration.yaml)")
      ->check(non_empty());
  calibrate->add_option("--sizes", cal.sizes, "Sizes per phase (default 5)")
      ->transform(decimal())
      ->check(CLI::Range(3, 64));
  calibrate->add_option("--repeats", cal.repeats, "Timed repetitions per size (default 3)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1000));
  calibrate
      ->add_option("--rows", cal.rows,
                   "LLM rows and encoder patches per measured call (default: the deck's mean per rank)")
      ->transform(decimal())
      ->check(CLI::Range(1, 1 << 30));
  calibrate->add_flag("--overwrite", cal.overwrite, "Replace the output file if it exists");
  calibrate->failure_message(one_line);

  VerifyRequest ver;
  CLI::App* verify = app.add_subcommand(
      "verify",
      "Judge benchmark run files again from what they record, with the checks their runs applied and the "
      "rules of a reported result (docs/RUN_RULES.md), and write a submission file (JSON: the machine, the "
      "build, every run, the FOM's median and spread, the verdict; docs/SUBMISSION.md). Exit codes: 0 "
      "VALID, 3 INVALID (every failure on one line), 2 a file that cannot be judged");
  verify
      ->add_option(
          "files", ver.files,
          "Run files (HDF5) of benchmark runs (run with --reference or a deck's benchmark.reference): "
          "the repetitions of one configuration, at least 3")
      ->required();
  verify->add_option("--out,-o", ver.out, "Submission file to write (default: submission.json)")
      ->check(non_empty());
  verify
      ->add_option("--reference", ver.reference,
                   "Benchmark reference to judge every run by, instead of the one each file names "
                   "(/run/benchmark_reference, relative to the run's working directory)")
      ->check(CLI::ExistingFile);
  verify->add_flag("--overwrite", ver.overwrite,
                   "Replace the submission file if it exists (only a submission file minimllm wrote)");
  verify->failure_message(one_line);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return {std::nullopt, std::nullopt, code == 0 ? 0 : 2, std::nullopt, std::nullopt};
  }
  if (verify->parsed()) {
    CliOutcome outcome;
    outcome.verify = ver;
    return outcome;
  }
  if (calibrate->parsed()) {
    CliOutcome outcome;
    outcome.calibrate = cal;
    return outcome;
  }
  if (simulate->parsed()) {
    if (simulate->count("--steps")) sim.steps = sim_steps;
    if (simulate->count("--global-batch")) sim.global_batch = global_batch;
    if (simulate->count("--tokens-per-rank")) sim.tokens_per_rank = tokens_per_rank;
    if (simulate->count("--cp-comm")) sim.cp_comm = cp_comm;
    return {std::nullopt, sim, 0, std::nullopt, std::nullopt};
  }
  if (run->count("--steps")) request.steps = steps;
  if (run->count("--global-batch")) request.global_batch = run_global_batch;
  return {request, std::nullopt, 0, std::nullopt, std::nullopt};
}

std::vector<std::string> split_policy_list(const std::string& value) {
  std::vector<std::string> names;
  size_t begin = 0;
  for (size_t comma; (comma = value.find(',', begin)) != std::string::npos; begin = comma + 1)
    names.push_back(value.substr(begin, comma - begin));
  names.push_back(value.substr(begin));
  return names;
}

}  // namespace minimllm
