// Planning time per policy at two scales (1,024 ranks x 4,096 samples; 16,384 ranks x 65,536 samples)
// on the text long-tail and modality-incoherent decks and the two stress decks (tens of images per sample,
// lengths up to 32k tokens; inputs/), with the quality of each plan as
// counters: predicted makespan over the lower bound, predicted speed-up over the static baseline, idle
// and communication fractions. Targets: median planning time <= 5 ms and <= 100 ms. The batch metadata
// (Sampler) and the prediction are outside the timed region.
//
// plan_random/<policy>: the same at 1,024 ranks x 4,096 samples over kRandomSections data sections drawn at
// random (seeded) from wide ranges, planned with the DGX preset's cost model as `simulate --machine` plans,
// each timed twice: the planner alone, and all the planning work a run
// does before a step can start (StepPlanner::plan: drawing the batch, the plan, this rank's work). Counters:
// the median and the maximum over the sections of each section's median over kRandomSteps steps. Target:
// both within 5 ms for every heuristic policy.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "minimllm/core/statistics.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/machine.hpp"
#include "minimllm/driver/resolve_cost_model.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/planning/layout_source.hpp"
#include "minimllm/planning/memory_fit.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_planner.hpp"

namespace minimllm {
namespace {

constexpr double kGflops = 100.0;  // nominal per-rank rate of the default cost model
constexpr int kRanksPerNode = 8;
constexpr double kMemoryGib = 79.6;  // inputs/machines/dgx-h100.yaml

std::filesystem::path inputs_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "inputs";
}

struct Workload {
  RunConfig config;
  GlobalBatch batch;
  CostModel cost;
  double static_makespan = 0.0;
};

// One workload per (deck, samples, ranks), built on first use.
const Workload& workload(const std::string& deck, int samples, int ranks) {
  static std::map<std::tuple<std::string, int, int>, std::unique_ptr<Workload>> cache;
  auto& entry = cache[{deck, samples, ranks}];
  if (!entry) {
    entry = std::make_unique<Workload>();
    entry->config = load_run_config((inputs_dir() / (deck + ".yaml")).string());
    entry->config.data.global_batch = samples;
    entry->batch = Sampler(entry->config).batch(0);
    entry->cost = default_cost_model(entry->config, kGflops, kRanksPerNode);
    entry->cost.memory = memory_model(entry->config.model, GemmPrecision::fp32);
    entry->cost.capacity_bytes = kMemoryGib * 1024.0 * 1024.0 * 1024.0;
    const StepPlan baseline = make_planner("static", entry->cost, {})->plan(entry->batch, ranks);
    entry->static_makespan = predict(baseline, entry->batch, entry->cost, ranks).makespan;
  }
  return *entry;
}

void BM_Plan(benchmark::State& state, std::string deck, int ranks, int samples, std::string policy,
             PlannerOptions options) {
  const Workload& w = workload(deck, samples, ranks);
  const std::unique_ptr<Planner> planner = make_planner(policy, w.cost, options);
  StepPlan plan;
  for (auto _ : state) {
    plan = planner->plan(w.batch, ranks);
    benchmark::DoNotOptimize(plan);
  }
  validate_plan(plan, w.batch, ranks);
  const PlanPrediction p = predict(plan, w.batch, w.cost, ranks);
  state.counters["makespan_ms"] = 1e3 * p.makespan;
  state.counters["makespan/LB"] = p.makespan / p.lower_bound;
  state.counters["speedup_vs_static"] = w.static_makespan / p.makespan;
  state.counters["idle"] = p.idle_fraction;
  state.counters["comm"] = p.comm_fraction;
  int largest_group = 0;
  for (const LlmGroup& g : plan.llm_groups) largest_group = std::max<int>(largest_group, g.ranks.size());
  state.counters["largest_group"] = largest_group;
  state.counters["encoder_ranks"] = plan.encoder_ranks.size();
}

constexpr int kRandomSections = 24;
constexpr int kRandomSteps = 3;
constexpr int kRandomRanks = 1024;
constexpr int kRandomSamples = 4096;

// Data section `index`, drawn from wide ranges: text medians of 16 to 16,384 tokens with tails up to 128k,
// 0 to 64 images per sample of 1 to 64 patches a side, any share of extreme (incoherent) samples. The
// model is many_images.yaml's (what is timed is planning, not the model's cost).
RunConfig random_section(int index) {
  RunConfig config = load_run_config((inputs_dir() / "many_images.yaml").string());
  std::mt19937_64 rng(0x5eed0000u + static_cast<unsigned>(index));
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto integer = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto log_uniform = [&](double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); };
  config.seed = 1000 + index;
  DataConfig& data = config.data;
  data.global_batch = kRandomSamples;
  data.text.median = static_cast<int>(log_uniform(16, 16384));
  data.text.sigma = uniform(0.2, 2.0);
  data.text.min = 4;
  data.text.max = std::max(data.text.median, static_cast<int>(log_uniform(2.0 * data.text.median, 131072)));
  const int patch = config.model.vision().patch;
  data.images.max_per_sample = integer(0, 64);
  data.images.mean_per_sample = uniform(0.0, data.images.max_per_sample);
  const int min_patches = integer(1, 64), max_patches = integer(min_patches, 64);
  data.images.min_side = patch * min_patches;
  data.images.max_side = patch * max_patches;
  data.incoherence = uniform(0.0, 1.0);
  return config;
}

// The cost model `simulate --machine inputs/machines/dgx-h100.yaml` plans with (its links, memory, the
// ring's overlap and the precision of what moves), without calibration.
CostModel dgx_cost_model(const RunConfig& config, int ranks) {
  const MachineConfig section = load_machine_file((inputs_dir() / "machines" / "dgx-h100.yaml").string());
  ResolvedMachine machine = resolve_machine(
      section, "dgx-h100.yaml", {static_cast<double>(section.ranks_per_node), "machine section"},
      {section.peak_gflops, "machine section"}, {section.memory_gib, "machine section"});
  CostModelChoice choice;
  choice.model = default_cost_model(config, section.peak_gflops, section.ranks_per_node);
  choice.source = "default-from-FLOPs";
  return resolve_cost_model(config, choice, machine, ranks);
}

double milliseconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One policy over every random section (one iteration: the counters are the result).
void BM_PlanRandom(benchmark::State& state, std::string policy, double flexsp_time_limit) {
  std::vector<double> planner_ms, work_ms, batch_ms, rank_work_ms;
  int not_fitting = 0;
  for (auto _ : state) {
    for (int section = 0; section < kRandomSections; ++section) {
      RunConfig config = random_section(section);
      config.parallel.policy = policy;
      config.parallel.flexsp_time_limit = flexsp_time_limit;
      const CostModel cost = dgx_cost_model(config, kRandomRanks);
      const Sampler sampler(config);
      const LayoutSource layouts(config, kRandomRanks, cost);
      const StepPlanner step_planner(sampler, layouts, World{MPI_COMM_WORLD, 0, kRandomRanks});
      const std::unique_ptr<Planner> planner =
          make_planner(policy, cost, planner_options_of(config.parallel));
      std::vector<double> alone, work, draw, derive;
      try {
        for (int step = 0; step < kRandomSteps; ++step) {
          auto t0 = std::chrono::steady_clock::now();
          const GlobalBatch batch = sampler.batch(step);
          draw.push_back(milliseconds_since(t0));
          t0 = std::chrono::steady_clock::now();
          const StepPlan plan = planner->plan(batch, kRandomRanks);
          alone.push_back(milliseconds_since(t0));
          t0 = std::chrono::steady_clock::now();
          benchmark::DoNotOptimize(derive_rank_work(plan, batch, 0, kRandomRanks));
          derive.push_back(milliseconds_since(t0));
          t0 = std::chrono::steady_clock::now();
          benchmark::DoNotOptimize(step_planner.plan(step));
          work.push_back(milliseconds_since(t0));
        }
      } catch (const DoesNotFit&) {
        ++not_fitting;
        continue;
      }
      planner_ms.push_back(median(alone));
      work_ms.push_back(median(work));
      batch_ms.push_back(median(draw));
      rank_work_ms.push_back(median(derive));
    }
  }
  if (planner_ms.empty()) {
    state.SkipWithError("no random section fits");
    return;
  }
  state.counters["planner_median_ms"] = median(planner_ms);
  state.counters["planner_max_ms"] = *std::max_element(planner_ms.begin(), planner_ms.end());
  state.counters["work_median_ms"] = median(work_ms);
  state.counters["work_max_ms"] = *std::max_element(work_ms.begin(), work_ms.end());
  // Two parts of the work besides the planner: drawing the batch, and rank 0's work (RankWork).
  state.counters["batch_max_ms"] = *std::max_element(batch_ms.begin(), batch_ms.end());
  state.counters["rank_work_max_ms"] = *std::max_element(rank_work_ms.begin(), rank_work_ms.end());
  state.counters["sections"] = planner_ms.size();
  state.counters["not_fitting"] = not_fitting;
}

void register_all() {
  for (std::string policy : planner_names())
    for (const bool heuristic_only : {false, true}) {
      if (heuristic_only && policy != "flexsp") continue;
      const double time_limit = heuristic_only ? 0.0 : ParallelConfig{}.flexsp_time_limit;
      const std::string name = "plan_random/" + policy + (heuristic_only ? "_heuristic" : "");
      benchmark::RegisterBenchmark(name.c_str(), BM_PlanRandom, policy, time_limit)
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
    }
  for (const std::string deck : {"text_longtail", "modality_incoherent", "many_images", "long_context"})
    for (const auto& [ranks, samples] : {std::pair{1024, 4096}, std::pair{16384, 65536}})
      for (std::string policy : planner_names()) {
        // flexsp as runs use it (its MILP tried within parallel.flexsp_time_limit), and its heuristic alone
        // (the 5 ms target is the heuristics'), "flexsp_heuristic".
        for (const bool heuristic_only : {false, true}) {
          if (heuristic_only && policy != "flexsp") continue;
          PlannerOptions options;
          if (heuristic_only) options.flexsp_time_limit = 0.0;
          const std::string name = "plan/" + deck + "/" + std::to_string(ranks) + "x" +
                                   std::to_string(samples) + "/" + policy +
                                   (heuristic_only ? "_heuristic" : "");
          benchmark::RegisterBenchmark(name.c_str(), BM_Plan, deck, ranks, samples, policy, options)
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.2)
              ->Repetitions(5)
              ->ReportAggregatesOnly(true);
        }
      }
}

}  // namespace
}  // namespace minimllm

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  minimllm::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
