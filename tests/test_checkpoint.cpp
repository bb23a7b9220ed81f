// Checkpoint and restart: a run continued from a checkpoint gives the uninterrupted run's losses bit for
// bit on the same ranks and policy (and within the invariance bound on another rank count or policy);
// a stop request (SIGUSR1) seen by one rank stops every rank after the same step with a checkpoint; a
// checkpoint of another run is refused on every rank.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>

#include "minimllm/config/input_error.hpp"
#include "minimllm/driver/checkpoint.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/metrics/checkpoint_file.hpp"
#include "minimllm/model/model.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::RemoveAtEnd;
using testing_support::world_rank;
using testing_support::world_size;

RunConfig quickstart(int steps, const std::string& policy) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  config.steps = steps;
  config.parallel.policy = policy;
  config.machine.peak_gflops = 100.0;  // skip the start-up sgemm measurement
  return config;
}

std::string temp_path(const std::string& leaf) {
  return testing_support::shared_temp_path("minimllm_ckpt_", leaf);
}

TrainResult restart_from(const RunConfig& config, const World& world, const std::string& checkpoint) {
  TrainOptions options;
  options.restart_path = checkpoint;
  return train(config, world, options);
}

// Trains config with a checkpoint to `path` every `every` steps (and after the last).
TrainResult train_checkpointing(const RunConfig& config, const World& world, const std::string& path,
                                int every) {
  TrainOptions options;
  options.checkpoint_path = path;
  options.checkpoint_every = every;
  return train(config, world, options);
}

// Steps [0, stop) with a checkpoint after the last, then a restart to `steps`: the second run's records.
TrainResult run_in_two_parts(RunConfig config, int stop, const std::string& checkpoint, const World& first,
                             const World& second, const std::string& restart_policy = "") {
  const int steps = config.steps;
  config.steps = stop;
  const TrainResult part = train_checkpointing(config, first, checkpoint, stop);
  EXPECT_EQ(part.checkpoints_written, 1);
  config.steps = steps;
  if (!restart_policy.empty()) config.parallel.policy = restart_policy;
  return restart_from(config, second, checkpoint);
}

// The resumed run's losses are the uninterrupted run's from step `from` on, bit for bit.
void expect_bitwise_from(const TrainResult& resumed, const TrainResult& straight, size_t from) {
  ASSERT_EQ(resumed.steps.size(), straight.steps.size() - from);
  for (size_t i = 0; i < resumed.steps.size(); ++i)
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[from + i].loss) << "step " << from + i;
}

class RestartIsBitwise : public ::testing::TestWithParam<const char*> {};

TEST_P(RestartIsBitwise, TwentyStepsEqualTenThenTen) {
  const RemoveAtEnd file{temp_path(std::string(GetParam()) + ".ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  const RunConfig config = quickstart(20, GetParam());
  const TrainResult straight = train(config, world, {});
  const TrainResult resumed = run_in_two_parts(config, 10, file.path, world, world);
  ASSERT_EQ(resumed.first_step, 10);
  ASSERT_EQ(resumed.steps.size(), 10u);
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(10 + i));
    EXPECT_EQ(resumed.steps[i].step, static_cast<int>(10 + i));
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[10 + i].loss);  // bit for bit
    EXPECT_EQ(resumed.steps[i].grad_norm, straight.steps[10 + i].grad_norm);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RestartIsBitwise, ::testing::Values("static", "dhp"));

TEST(Restart, PlansWithTheCheckpointedRunsCostModel) {
  // dhp's plans depend on the cost model's rate: a restart on a machine that measures another rate still
  // plans as the checkpointed run did, so the losses stay bitwise.
  const RemoveAtEnd file{temp_path("rate.ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  RunConfig config = quickstart(12, "dhp");
  const TrainResult straight = train(config, world, {});
  config.steps = 6;
  train_checkpointing(config, world, file.path, 6);
  config.steps = 12;
  config.machine.peak_gflops = 3.0;  // what this "other machine" would plan with
  expect_bitwise_from(restart_from(config, world, file.path), straight, 6);
}

TEST(Restart, OnOneRankOrAnotherPolicyKeepsTheLossWithinTheInvarianceBound) {
  const RemoveAtEnd file{temp_path("other.ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  const RunConfig config = quickstart(16, "static");
  const TrainResult straight = train(config, world, {});
  // Checkpointed on every rank, continued on each rank alone under another policy: the same path, read by
  // rank 0 of each one-rank world in turn.
  TrainResult resumed;
  {
    RunConfig first = config;
    first.steps = 8;
    train_checkpointing(first, world, file.path, 8);
  }
  TrainOptions resume;
  resume.restart_path = file.path;
  RunConfig second = config;
  second.parallel.policy = "orch";
  resumed = train(second, World::of(MPI_COMM_SELF), resume);
  ASSERT_EQ(resumed.steps.size(), 8u);
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(8 + i));
    // The bound of Training.SameLossOnAnyRankCount: fp32 reassociation, kept small by AdamW.
    EXPECT_NEAR(resumed.steps[i].loss, straight.steps[8 + i].loss, 1e-5 * straight.steps[8 + i].loss);
  }
}

// Raises SIGUSR1 in the last rank only, when the optimizer of its `at`-th step begins: a stop request
// the other ranks never see themselves.
struct SignalAtOptimizerStep {
  static int& remaining() {
    static int n = 0;
    return n;
  }
  static void on_region(const char* name) {
    if (std::string(name) == "minimllm::optimizer" && --remaining() == 0) std::raise(SIGUSR1);
  }
  explicit SignalAtOptimizerStep(int at) {
    remaining() = world_rank() == world_size() - 1 ? at : -1;
    Kokkos::Tools::Experimental::set_push_region_callback(on_region);
  }
  ~SignalAtOptimizerStep() { Kokkos::Tools::Experimental::set_push_region_callback(nullptr); }
};

TEST(StopRequest, OneRanksSignalStopsEveryRankAfterTheSameStepWithACheckpoint) {
  const RemoveAtEnd file{temp_path("stop.ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  const RunConfig config = quickstart(12, "dhp");
  const TrainResult straight = train(config, world, {});
  TrainOptions options;
  options.checkpoint_path = file.path;  // no periodic checkpoints: only the one the stop writes
  TrainResult stopped;
  {
    const SignalAtOptimizerStep signal(4);
    stopped = train(config, world, options);
  }
  EXPECT_TRUE(stopped.stopped_on_request);
  ASSERT_EQ(stopped.steps.size(), 4u);  // steps 0-3 on every rank
  EXPECT_EQ(stopped.checkpoints_written, 1);
  const TrainResult resumed = restart_from(config, world, file.path);
  EXPECT_FALSE(resumed.stopped_on_request);
  expect_bitwise_from(resumed, straight, 4);
}

TEST(Restart, RefusesACheckpointOfAnotherRunOnEveryRank) {
  const RemoveAtEnd file{temp_path("refuse.ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  RunConfig config = quickstart(4, "static");
  train_checkpointing(config, world, file.path, 2);
  TrainOptions resume;
  resume.restart_path = file.path;
  const auto refused = [&](RunConfig other, const std::string& says) {
    try {
      train(other, world, resume);
      ADD_FAILURE() << "restart accepted; expected: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  RunConfig longer = config;
  longer.steps = 8;
  RunConfig seed = longer;
  seed.seed += 1;
  refused(seed, "restart with the same seed");
  RunConfig batch = longer;
  batch.data.global_batch += 1;
  refused(batch, "data.global_batch");
  RunConfig deck = longer;
  deck.deck_text += "\n# edited\n";
  refused(deck, "another deck");
  refused(config, "nothing is left to run");  // the checkpoint holds all 4 steps
  TrainOptions missing;
  missing.restart_path = file.path + ".missing";
  EXPECT_THROW(train(longer, world, missing), InputError);
  EXPECT_NO_THROW(train(longer, world, resume));
}

// A checkpoint whose fields are out of range (here written whole, with matching digests, as a hand-made or
// foreign file would be) is invalid input on every rank, never a wrapped step count or an abort later.
TEST(Restart, RefusesOutOfRangeFieldsOnEveryRank) {
  const RemoveAtEnd file{temp_path("range.ckpt.h5")};
  const RemoveAtEnd edited{temp_path("range_edited.ckpt.h5")};
  const World world = World::of(MPI_COMM_WORLD);
  RunConfig config = quickstart(2, "static");
  train_checkpointing(config, world, file.path, 2);
  config.steps = 4;
  const auto refused = [&](const std::string& name, const decltype(RunAttribute::value)& value,
                           const std::string& says) {
    if (world.is_root()) {
      CheckpointContents c = read_checkpoint_file(file.path);
      for (RunAttribute& a : c.attributes)
        if (a.name == name) a.value = value;
      write_checkpoint_file(edited.path, c);
    }
    MPI_Barrier(world.comm);
    try {
      read_restart_point(edited.path, config, world, parameter_count(config.model));
      ADD_FAILURE() << name << ": accepted; expected: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("next_step", 1LL << 40, "next_step = 1099511627776 is outside");
  refused("next_step", -1LL, "next_step = -1 is outside");
  refused("world_size", 0LL, "world_size = 0 is outside");
  refused("planning_gflops_per_rank", std::nan(""), "planning_gflops_per_rank = nan");
  refused("planning_gflops_per_rank", -1.0, "planning_gflops_per_rank = -1");
  refused("planning_capacity_bytes", std::nan(""), "planning_capacity_bytes = nan");
  refused("gemm_selection", std::string("fwd 1x1=magic"), "gemm_selection:");
}

}  // namespace
}  // namespace minimllm
