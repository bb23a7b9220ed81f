// The simulator: every policy's projection is at least the lower bound, speed-ups are relative to the
// first policy, and the HDF5 output holds one row per step and policy.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/simulator.hpp"

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
  options.policies = {"static", "orch", "dhp", "flexsp", "disagg"};
  options.out_path = "/tmp/minimllm-test-simulator-" + std::to_string(getpid()) + ".h5";
  options.overwrite = true;
  const std::vector<PolicySummary> result = simulate(config, options);
  ASSERT_EQ(result.size(), 5u);
  EXPECT_DOUBLE_EQ(result[0].speedup, 1.0);
  for (const PolicySummary& s : result) {
    SCOPED_TRACE(s.policy);
    EXPECT_GE(s.step_seconds, s.lower_bound_seconds * (1 - 1e-12));
    EXPECT_GT(s.tokens_per_second, 0.0);
    EXPECT_NEAR(s.speedup, result[0].step_seconds / s.step_seconds, 1e-12);
    EXPECT_GE(s.idle_fraction, 0.0);
    EXPECT_LE(s.idle_fraction, 1.0);
  }
  // Balancing policies are never predicted slower than the in-order baseline.
  for (size_t i = 1; i < 4; ++i) EXPECT_GE(result[i].speedup, 1.0 - 1e-9) << result[i].policy;

  hid_t file = H5Fopen(options.out_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t dset = H5Dopen2(file, "/simulation/dhp", H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  hid_t space = H5Dget_space(dset);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  EXPECT_EQ(dims[0], 3u);   // one row per step
  EXPECT_EQ(dims[1], 11u);  // makespan, lower bound, idle, comm, planning, encoder, boundary, llm, data,
                            // gradient all-reduce, optimizer
  H5Sclose(space), H5Dclose(dset), H5Fclose(file);
  unlink(options.out_path.c_str());
}

}  // namespace
}  // namespace minimllm
