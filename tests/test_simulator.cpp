// The simulator: every policy's projection is at least the lower bound, speed-ups are over static at its
// best context-parallel degree (and over megatron_dcp), `--cp best` keeps the fastest predicted degree, and
// the HDF5 output holds one row per step and policy.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

#include "hdf5_attributes.hpp"
#include "hdf5_records.hpp"
#include "minimllm/config/input_error.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/simulator.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_prediction.hpp"
#include "minimllm/step/memory_estimate.hpp"

namespace minimllm {
namespace {

using testing_support::read_number_attribute;
using testing_support::read_record_field;
using testing_support::read_string_attribute;

TEST(Simulator, ProjectsEveryPolicyAboveItsLowerBound) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  config.steps = 3;
  config.data.global_batch = 256;
  SimulateOptions options;
  options.ranks = 24;
  options.ranks_per_node = 4;
  options.gflops_per_rank = 50.0;
  options.policies = planner_names();
  options.out_path = "/tmp/minimllm-test-simulator-" + std::to_string(getpid()) + ".h5";
  options.overwrite = true;
  const std::vector<PolicySummary> result = simulate(config, options);
  ASSERT_EQ(result.size(), planner_names().size());
  ASSERT_EQ(result[0].policy, "static");
  ASSERT_EQ(result[2].policy, "megatron_dcp");
  EXPECT_DOUBLE_EQ(result[0].speedup, 1.0);
  for (const PolicySummary& s : result) {
    SCOPED_TRACE(s.policy);
    EXPECT_GE(s.step_seconds, s.lower_bound_seconds * (1 - 1e-12));
    EXPECT_GT(s.tokens_per_second, 0.0);
    EXPECT_NEAR(s.speedup, result[0].step_seconds / s.step_seconds, 1e-12);
    EXPECT_NEAR(s.speedup_over_megatron_dcp, result[2].step_seconds / s.step_seconds, 1e-12);
    EXPECT_EQ(s.cp, result[0].cp);  // every policy runs with static's degree as parallel.cp
    EXPECT_GE(s.idle_fraction, 0.0);
    EXPECT_LE(s.idle_fraction, 1.0);
  }
  // Balancing policies' plans are never predicted slower than static's (they keep its layout when it is
  // faster); what being dynamic costs them (planning, new communicators, moving samples) comes on top.
  for (const PolicySummary& s : result) {
    if (s.policy == "orch" || s.policy == "dhp" || s.policy == "dhp_search" || s.policy == "flexsp") {
      EXPECT_LE(s.model_step_seconds, result[0].model_step_seconds * (1 + 1e-9)) << s.policy;
    }
    EXPECT_NEAR(
        s.step_seconds,
        s.model_step_seconds + s.exposed_planning_seconds + s.comm_creation_seconds + s.movement_seconds,
        1e-12 * s.step_seconds)
        << s.policy;
  }

  // One record per step, with the projected step under its name.
  const std::vector<double> makespan = read_record_field(options.out_path, "/simulation/dhp", "makespan_s");
  ASSERT_EQ(makespan.size(), 3u);
  for (double seconds : makespan) EXPECT_GT(seconds, 0.0);
  hid_t file = H5Fopen(options.out_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t run = H5Gopen2(file, "/run", H5P_DEFAULT);
  hid_t attr = H5Aopen(run, "static_cp", H5P_DEFAULT);
  long long static_cp = 0;
  H5Aread(attr, H5T_NATIVE_LLONG, &static_cp);
  EXPECT_EQ(static_cp, result[0].cp);
  // Where the simulation came from and what it simulated, as a run records it.
  EXPECT_EQ(read_number_attribute(run, "steps"), 3.0);
  EXPECT_EQ(read_number_attribute(run, "global_batch"), 256.0);
  EXPECT_EQ(read_number_attribute(run, "seed"), static_cast<double>(config.seed));
  EXPECT_FALSE(read_string_attribute(run, "git_revision").empty());
  EXPECT_FALSE(read_string_attribute(run, "minimllm_version").empty());
  EXPECT_EQ(read_string_attribute(run, "deck_sha256").size(), 64u);
  EXPECT_EQ(read_string_attribute(run, "start_time_utc").size(), 20u);
  EXPECT_EQ(read_string_attribute(run, "end_time_utc").size(), 20u);
  EXPECT_LE(H5Aexists(run, "ranks"), 0);  // the real ranks' provenance is not the virtual cluster's
  H5Aclose(attr), H5Gclose(run), H5Fclose(file);
  unlink(options.out_path.c_str());
}

// --cp best: static at every power of two dividing the ranks; the baseline is the fastest predicted, and
// equals static run at that degree (--cp N). On the long-tailed deck a degree above 1 wins: its longest
// samples are too long for one rank.
TEST(Simulator, BestContextParallelDegreeIsTheFastestPredicted) {
  RunConfig config = parse_run_config(R"(
name: longtail
steps: 2
model:
  llm: {width: 128, heads: 4, layers: 2, vocab: 256}
data:
  global_batch: 256
  text: {median: 64, sigma: 1.2, min: 8, max: 2048}
  images: {mean_per_sample: 0, max_per_sample: 0}
)",
                                      "longtail");
  SimulateOptions options;
  options.ranks = 32;
  options.ranks_per_node = 8;
  options.gflops_per_rank = 100.0;
  options.policies = {"static"};
  options.planning_seconds = 0.0;  // the planner's measured wall time would differ between the runs
  const PolicySummary best = simulate(config, options).front();
  EXPECT_EQ(cp_degrees(32), (std::vector<int>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(cp_degrees(24), (std::vector<int>{1, 2, 4, 8}));
  ASSERT_EQ(best.cp_steps.size(), 6u);
  const auto fastest = std::min_element(best.cp_steps.begin(), best.cp_steps.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_EQ(best.cp, fastest->first);
  EXPECT_GT(best.cp, 1);
  EXPECT_DOUBLE_EQ(best.step_seconds, fastest->second);
  for (const auto& [cp, seconds] : best.cp_steps) {
    options.cp = cp;
    EXPECT_DOUBLE_EQ(simulate(config, options).front().step_seconds, seconds) << "cp " << cp;
  }
  // A fixed budget that one rank cannot hold rules out the degrees whose bins are too small.
  int longest = 0;
  for (int step = 0; step < config.steps; ++step)
    for (const SampleMeta& s : Sampler(config).batch(step).samples) longest = std::max(longest, s.tokens());
  ASSERT_GT(longest, 600);
  options.cp = 0;
  config.parallel.tokens_per_rank = 600;
  const PolicySummary bounded = simulate(config, options).front();
  EXPECT_LT(bounded.cp_steps.size(), best.cp_steps.size());
  for (const auto& [cp, seconds] : bounded.cp_steps) EXPECT_GE(cp * 600, longest) << "cp " << cp;
  options.cp = 1;
  EXPECT_THROW(simulate(config, options), InputError);
  options.cp = 3;
  EXPECT_THROW(simulate(config, options), InputError);  // does not divide 32
}

// The projected step charges what the real run pays for being dynamic (trainer.cpp): the planning the
// step before did not hide (all of it for the start-up steps and without runtime.plan_ahead), one
// communicator creation when the step's layout needs new groups, and moving samples from their loaders.
// The fields of /simulation/<policy> a test reads, by name.
std::map<std::string, std::vector<double>> simulation_fields(const std::string& path,
                                                             const std::string& policy,
                                                             const std::vector<std::string>& names) {
  std::map<std::string, std::vector<double>> fields;
  for (const std::string& name : names) fields[name] = read_record_field(path, "/simulation/" + policy, name);
  return fields;
}

// The quickstart deck with creation at 250 ms a communicator, and a small virtual cluster (4 ranks per
// node, 50 GFLOP/s a rank) writing its projection to a file of the test's own.
RunConfig creation_deck(int steps, int global_batch, double creation_ms = 250.0) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  config.steps = steps;
  config.data.global_batch = global_batch;
  config.machine.comm_creation_ms = creation_ms;
  return config;
}

SimulateOptions small_cluster(int ranks, int cp, const std::string& test) {
  SimulateOptions options;
  options.ranks = ranks;
  options.ranks_per_node = 4;
  options.gflops_per_rank = 50.0;
  options.cp = cp;
  options.out_path = "/tmp/minimllm-test-simulator-" + test + "-" + std::to_string(getpid()) + ".h5";
  options.overwrite = true;
  return options;
}

// A creation of 1 us, far below what dhp's groups save on this deck's millisecond steps: dhp creates groups.
TEST(Simulator, ChargesExposedPlanningCommunicatorsAndMovement) {
  constexpr double kCreation = 1e-6;
  RunConfig config = creation_deck(kEstimateSteps + 4, 96, 1e3 * kCreation);
  SimulateOptions options = small_cluster(24, 1, "dynamism");
  options.policies = {"static", "dhp"};
  for (const double planning : {0.0, 0.004, 2.0}) {
    for (const bool plan_ahead : {false, true}) {
      SCOPED_TRACE(testing::Message() << "planning " << planning << " s, plan_ahead " << plan_ahead);
      config.runtime.plan_ahead = plan_ahead;
      options.planning_seconds = planning;
      const std::vector<PolicySummary> result = simulate(config, options);
      for (const PolicySummary& s : result) {
        auto f = simulation_fields(options.out_path, s.policy,
                                   {"makespan_s", "planning_s", "exposed_planning_s", "comm_creation_s",
                                    "movement_s", "comm_creations"});
        const std::vector<double>&makespan = f["makespan_s"], &exposed = f["exposed_planning_s"],
              &creation = f["comm_creation_s"];
        ASSERT_EQ(makespan.size(), static_cast<size_t>(config.steps)) << s.policy;
        double creations = 0.0;
        for (size_t t = 0; t < makespan.size(); ++t) {
          SCOPED_TRACE(testing::Message() << s.policy << " step " << t);
          EXPECT_EQ(f["planning_s"][t], planning);
          const double window = t == 0 ? 0.0 : makespan[t - 1] - exposed[t - 1];
          const double expected = !plan_ahead || t < static_cast<size_t>(kEstimateSteps)
                                      ? planning
                                      : std::max(0.0, planning - window);
          EXPECT_NEAR(exposed[t], expected, 1e-12);
          EXPECT_EQ(creation[t], f["comm_creations"][t] > 0 ? kCreation : 0.0);
          EXPECT_GE(f["movement_s"][t], 0.0);
          creations += f["comm_creations"][t];
        }
        // static's layout is the same every step: its groups are created once, at the first step.
        if (s.policy == "static") {
          EXPECT_EQ(creation[1], 0.0);
        }
        if (s.policy == "dhp") {
          EXPECT_GT(creations, 0.0);
        }
        // On 24 ranks most samples leave their loaders.
        EXPECT_GT(s.movement_seconds, 0.0) << s.policy;
      }
      if (planning == 2.0 && plan_ahead) {  // far longer than a step: the helper thread hides little
        EXPECT_GT(result[0].exposed_planning_seconds, 1.9);
      }
    }
  }
  unlink(options.out_path.c_str());
}

// The planners weigh a group's creation against what it saves (at_least_static): at 250 ms a creation,
// against steps of milliseconds, dhp keeps static's pooled layout and no step of it creates a group.
TEST(Simulator, DynamicPlansDoNotCreateGroupsThatCostMoreThanTheySave) {
  const RunConfig config = creation_deck(6, 96);
  SimulateOptions options = small_cluster(24, 1, "dear-creation");
  options.planning_seconds = 0.0;
  options.policies = {"static", "dhp"};
  const std::vector<PolicySummary> result = simulate(config, options);
  const auto f = simulation_fields(options.out_path, "dhp", {"comm_creations", "makespan_s"});
  for (double c : f.at("comm_creations")) EXPECT_EQ(c, 0.0);
  EXPECT_EQ(result[1].policy, "dhp");
  EXPECT_EQ(result[1].comm_creation_seconds, 0.0);
  unlink(options.out_path.c_str());
}

// Moving samples: by hand on two ranks of one node. Sample 0 is rank 0's (its loader's), sample 1 rank 1's
// (contiguous shards); a plan putting both on rank 0 moves sample 1's token ids and pixels from rank 1.
// parallel.comm_precreate: powers_of_two creates the aligned power-of-two blocks before the first step, so
// that static's cp groups, megatron_dcp's and flexsp's cost no creation in any step; without it static's
// groups are created at its first step.
TEST(Simulator, PrecreatedGroupsCostTheStepsNothing) {
  RunConfig config = creation_deck(3, 64);
  SimulateOptions options = small_cluster(16, 2, "precreate");
  options.planning_seconds = 0.0;
  options.policies = {"static", "megatron_dcp", "flexsp"};
  for (const std::string precreate : {"powers_of_two", "none"}) {
    SCOPED_TRACE(precreate);
    config.parallel.comm_precreate = precreate;
    for (const PolicySummary& s : simulate(config, options)) {
      const std::vector<double> creations =
          simulation_fields(options.out_path, s.policy, {"comm_creations"})["comm_creations"];
      ASSERT_EQ(creations.size(), 3u);
      if (precreate == "powers_of_two") {
        EXPECT_EQ(creations[0] + creations[1] + creations[2], 0.0) << s.policy;
        EXPECT_EQ(s.comm_creation_seconds, 0.0) << s.policy;
      } else if (s.policy == "static") {
        EXPECT_GT(creations[0], 0.0);  // cp 2: eight groups of two, one creation's time
        EXPECT_EQ(creations[1] + creations[2], 0.0);
      }
    }
  }
  unlink(options.out_path.c_str());
}

// --comm-creation-ms replaces the machine's creation time, and the machine description names it.
TEST(Simulator, CommCreationFromTheCommandLine) {
  RunConfig config = creation_deck(2, 32);
  config.parallel.comm_precreate = "none";
  SimulateOptions options = small_cluster(8, 2, "creation");
  options.planning_seconds = 0.0;
  options.policies = {"static"};
  options.comm_creation_ms = 40.0;
  std::ostringstream log;
  options.log = &log;
  const std::vector<PolicySummary> result = simulate(config, options);
  const std::vector<double> creation =
      simulation_fields(options.out_path, "static", {"comm_creation_s"})["comm_creation_s"];
  ASSERT_EQ(creation.size(), 2u);
  EXPECT_DOUBLE_EQ(creation[0], 0.040);  // static's cp 2 groups, created at its first step
  EXPECT_EQ(creation[1], 0.0);
  EXPECT_NE(log.str().find("communicator creation 40.000 ms (--comm-creation-ms)"), std::string::npos)
      << log.str();
  unlink(options.out_path.c_str());
}

TEST(Simulator, SampleMovementByHand) {
  GlobalBatch batch;
  batch.samples.resize(2);
  batch.samples[0].text_len = 100;
  batch.samples[1].text_len = 300;
  EncoderItem image;
  image.rows = 16;
  batch.samples[1].items = {image};
  CostModel cost;
  cost.ranks_per_node = 2;
  cost.intra_node = {2e-6, 1e9};
  cost.inter_node = {50e-6, 1e8};
  cost.input_bytes_per_token = 4.0;
  cost.encoders = {EncoderCost{}};
  cost.encoders[0].input_bytes_per_row = 768.0;
  StepPlan plan;
  const auto group = [](std::vector<int> ranks, std::vector<int> samples) {
    return LlmGroup{std::move(ranks), std::move(samples), 1, {}};
  };
  plan.llm_groups = {group({0}, {0, 1}), group({1}, {})};
  plan.encoder_ranks = {0, 1};
  plan.item_owner = {0};
  EXPECT_EQ(sample_loader_rank(0, 2, 2), 0);
  EXPECT_EQ(sample_loader_rank(1, 2, 2), 1);
  // One peer (rank 0): one message step, 300 x 4 + 16 x 768 bytes.
  EXPECT_NEAR(movement_seconds(plan, batch, cost, 2), 2e-6 + (1200.0 + 12288.0) / 1e9, 1e-15);
  // Each sample on its loader: nothing moves.
  plan.llm_groups = {group({0}, {0}), group({1}, {1})};
  plan.item_owner = {1};
  EXPECT_EQ(movement_seconds(plan, batch, cost, 2), 0.0);
  // Across nodes: sample 1's image encoded on rank 0 of another node; its tokens stay.
  cost.ranks_per_node = 1;
  plan.item_owner = {0};
  EXPECT_NEAR(movement_seconds(plan, batch, cost, 2), 50e-6 + 12288.0 / 1e8, 1e-15);
  // Both samples on a group of both ranks: each loader sends all its sample's token ids to the other
  // (a member reads its chunk's and the next row's); the slower is rank 1's 300 x 4 bytes.
  cost.ranks_per_node = 2;
  plan.llm_groups = {group({0, 1}, {0, 1})};
  plan.item_owner = {1};
  EXPECT_NEAR(movement_seconds(plan, batch, cost, 2), 2e-6 + 1200.0 / 1e9, 1e-15);
}

// The executor's boundary exchange checks its route before rows move (an all-to-all of 3 ints with every
// rank, an all-reduce of one int): the predicted step pays it once per exchange, by hand on 16 ranks of 2
// nodes: Bruck's all-to-all, 3 steps in the node and 1 between them, each 16 x 12 / 2 bytes; the
// all-reduce by recursive doubling, hierarchical (3 + 2 + 3 steps).
TEST(Simulator, PredictedStepPaysTheRouteCheck) {
  CostModel cost;
  cost.ranks_per_node = 8;
  cost.intra_node = {1e-6, 1e10};
  cost.inter_node = {1e-5, 1e9};
  const double all_to_all = 3 * (1e-6 + 96 / 1e10) + 1 * (1e-5 + 96 / 1e9);
  const double all_reduce =
      3 * 1e-6 + 7.0 / 8 * 4 / 1e10 + 2 * (1e-5 + 0.5 * 0.5 / 1e9) + 3 * 1e-6 + 7.0 / 8 * 4 / 1e10;
  EXPECT_NEAR(route_check_time(cost, 16), all_to_all + all_reduce, 1e-15);
  EXPECT_EQ(route_check_time(cost, 1), 0.0);
  // In the step: the phases, the per-step terms and one check, in the boundary phase and the makespan.
  const RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  CostModel model = default_cost_model(config, 50.0, 8);
  const GlobalBatch batch = Sampler(config).batch(0);
  const StepPlan plan = make_planner("static", model, PlannerOptions{})->plan(batch, 16);
  const PlanPrediction phases = predict(plan, batch, model, 16), step = predict_step(plan, batch, model, 16);
  const double check = route_check_time(model, 16);
  EXPECT_NEAR(step.boundary, phases.boundary + check, 1e-15);
  EXPECT_NEAR(step.makespan, phases.makespan + step.data + step.grad_sync + step.optimizer + check, 1e-12);
}

}  // namespace
}  // namespace minimllm
