// The simulator: every policy's projection is at least the lower bound, speed-ups are over static at its
// best context-parallel degree (and over megatron_dcp), `--cp best` keeps the fastest predicted degree, and
// the HDF5 output holds one row per step and policy.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "minimllm/config/input_error.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/simulator.hpp"
#include "minimllm/plan/planner.hpp"

namespace minimllm {
namespace {

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
  // Balancing policies are never predicted slower than static (they keep its layout when it is faster).
  for (const PolicySummary& s : result)
    if (s.policy == "orch" || s.policy == "dhp" || s.policy == "dhp_search" || s.policy == "flexsp") {
      EXPECT_GE(s.speedup, 1.0 - 1e-9) << s.policy;
    }

  hid_t file = H5Fopen(options.out_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t dset = H5Dopen2(file, "/simulation/dhp", H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  hid_t space = H5Dget_space(dset);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  EXPECT_EQ(dims[0], 3u);   // one row per step
  EXPECT_EQ(dims[1], 18u);  // makespan, lower bound, idle, comm, planning, encoder, boundary, llm, data,
                            // gradient all-reduce, optimizer, fits, peak bytes per rank, communicators
                            // created, intra- and inter-node bytes, solver gap and seconds
  H5Sclose(space), H5Dclose(dset);
  hid_t run = H5Gopen2(file, "/run", H5P_DEFAULT);
  hid_t attr = H5Aopen(run, "static_cp", H5P_DEFAULT);
  long long static_cp = 0;
  H5Aread(attr, H5T_NATIVE_LLONG, &static_cp);
  EXPECT_EQ(static_cp, result[0].cp);
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

}  // namespace
}  // namespace minimllm
