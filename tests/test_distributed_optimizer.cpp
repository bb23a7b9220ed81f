// The distributed optimizer (parallel.distributed_optimizer, ZeRO-1) changes where AdamW's state lives and
// how the gradient travels, never the math: training with it gives the replicated run's losses,
// parameters and moments; its checkpoints restart without it and the reverse; a non-finite gradient
// still stops every rank, naming the tensor.
//
// Bitwise on 1 and 2 ranks: every gradient element is the same a + b sum whether all-reduced or
// reduce-scattered, AdamW's update is element-wise and the all-gather copies. On 3 ranks MPI may associate
// a reduce-scatter's three-term sum differently from an all-reduce's (as it may for two all-reduces of
// different sizes, Training.OverlappedGradientSyncKeepsTheLosses), so the values agree to float
// reassociation: 1e-6 relative on the loss and in norm on the state (this machine's MPICH 4.0 gives
// bitwise equality on 3 ranks too; MPI does not promise it).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/metrics/checkpoint_file.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "minimllm/step/finite_check.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::RemoveAtEnd;
using testing_support::world_rank;
using testing_support::world_size;

TEST(ParameterShards, AreBalancedContiguousAndCoverTheBuffer) {
  for (std::size_t total : {0u, 1u, 2u, 10u, 11u, 1000003u}) {
    for (int parts : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE(std::to_string(total) + " over " + std::to_string(parts));
      const ParameterShards shards(total, parts);
      ASSERT_EQ(shards.parts(), parts);
      ASSERT_EQ(shards.counts().size(), static_cast<std::size_t>(parts));
      std::size_t next = 0;
      for (int r = 0; r < parts; ++r) {
        const ShardRange s = shards.shard(r);
        EXPECT_EQ(s.offset, next);
        EXPECT_EQ(s.count, shards.counts()[r]);
        EXPECT_LE(s.count, shards.largest());
        EXPECT_GE(s.count + 1, shards.largest());  // balanced: at most one element apart
        next += s.count;
      }
      EXPECT_EQ(next, total);
    }
  }
  const ParameterShards three(10, 3);
  EXPECT_EQ(three.counts(), (std::vector<std::size_t>{4, 3, 3}));
  EXPECT_THROW(ParameterShards(10, 0), std::invalid_argument);
}

TEST(ParameterShards, DecayBoundaryBeforeInsideOrAfterAShard) {
  const ShardRange shard{4, 3};  // elements 4, 5, 6
  EXPECT_EQ(leading_in(shard, 0), 0u);
  EXPECT_EQ(leading_in(shard, 2), 0u);  // before: no element decayed
  EXPECT_EQ(leading_in(shard, 4), 0u);
  EXPECT_EQ(leading_in(shard, 5), 1u);  // inside: its first element decayed
  EXPECT_EQ(leading_in(shard, 6), 2u);
  EXPECT_EQ(leading_in(shard, 7), 3u);
  EXPECT_EQ(leading_in(shard, 100), 3u);  // after: all decayed
  EXPECT_EQ(leading_in(ShardRange{0, 0}, 5), 0u);
}

TEST(ParameterShards, StateBytesShrinkByTheMomentsShare) {
  EXPECT_EQ(training_state_bytes(100, 1), 1600.0);  // params, grads, m, v
  // 4 x 25 elements: params and grads whole, m, v and the reduce-scattered gradient of 25.
  EXPECT_EQ(training_state_bytes(100, 4), 800.0 + 3 * 4 * 25.0);
  EXPECT_EQ(training_state_bytes(101, 4), 808.0 + 3 * 4 * 26.0);  // the largest shard
}

RunConfig quickstart(int steps, const std::string& policy, bool distributed) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  config.steps = steps;
  config.parallel.policy = policy;
  config.parallel.distributed_optimizer = distributed;
  // The deck decays nothing: with decay, a shard's decay boundary decides its norm weights' update.
  config.optimizer.weight_decay = 0.1f;
  config.machine.peak_gflops = 100.0;  // skip the start-up sgemm measurement
  return config;
}

std::string temp_path(const std::string& leaf) {
  return testing_support::shared_temp_path("minimllm_zero_", leaf);
}

// Trains config, its state after the last step checkpointed to path.
TrainResult train_to(const RunConfig& config, const std::string& path) {
  TrainOptions options;
  options.checkpoint_path = path;
  options.checkpoint_every = config.steps;
  return train(config, World::of(MPI_COMM_WORLD), options);
}

TrainResult restart_from(const RunConfig& config, const std::string& path) {
  TrainOptions options;
  options.restart_path = path;
  return train(config, World::of(MPI_COMM_WORLD), options);
}

bool bitwise_expected() { return world_size() <= 2; }

void expect_same_losses(const TrainResult& a, const TrainResult& b, std::size_t b_from = 0) {
  ASSERT_EQ(a.steps.size() + b_from, b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(b_from + i));
    const StepRecord &x = a.steps[i], &y = b.steps[b_from + i];
    if (bitwise_expected())
      EXPECT_EQ(x.loss, y.loss);
    else
      EXPECT_NEAR(x.loss, y.loss, 1e-6 * y.loss);
    // Sharded, the norm's sum of squares is summed shard by shard: equal to the rounding of doubles when
    // the gradients are bitwise equal.
    EXPECT_NEAR(x.grad_norm, y.grad_norm, (bitwise_expected() ? 1e-12 : 1e-6) * y.grad_norm);
  }
}

// The checkpoints' arrays (params, adamw_m, adamw_v), compared on rank 0: element by element, or beyond
// 2 ranks in norm (reassociation may cancel single elements' sums, not the whole array's size).
void expect_same_state(const std::string& a, const std::string& b) {
  if (world_rank() != 0) return;
  const CheckpointContents x = read_checkpoint_file(a), y = read_checkpoint_file(b);
  for (const char* name : {"params", "adamw_m", "adamw_v"}) {
    SCOPED_TRACE(name);
    const std::vector<float>&u = x.array(name, a), &v = y.array(name, b);
    ASSERT_EQ(u.size(), v.size());
    std::size_t differ = 0, first = 0;
    double difference = 0.0, size = 0.0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      if (u[i] != v[i] && differ++ == 0) first = i;
      difference += (double(u[i]) - v[i]) * (double(u[i]) - v[i]);
      size += double(v[i]) * v[i];
    }
    if (bitwise_expected())
      EXPECT_EQ(differ, 0u) << "first at " << first << ": " << u[first] << " vs " << v[first];
    else
      EXPECT_LE(std::sqrt(difference), 1e-6 * std::sqrt(size)) << differ << " elements differ";
  }
}

class SameTraining : public ::testing::TestWithParam<const char*> {};

// Five steps, static (fixed groups) and dhp (regrouped every step): the same losses, and the same
// parameters and moments after the last step (the sharded moments gathered into the checkpoint).
TEST_P(SameTraining, WithAndWithoutTheDistributedOptimizer) {
  const RemoveAtEnd sharded_file{temp_path(std::string(GetParam()) + "_on.ckpt.h5")};
  const RemoveAtEnd replicated_file{temp_path(std::string(GetParam()) + "_off.ckpt.h5")};
  const TrainResult sharded = train_to(quickstart(5, GetParam(), true), sharded_file.path);
  const TrainResult replicated = train_to(quickstart(5, GetParam(), false), replicated_file.path);
  expect_same_losses(sharded, replicated);
  expect_same_state(sharded_file.path, replicated_file.path);
  // Not vacuous: the sharded run held the moments of its shard only (the activations are the same).
  const std::size_t parameters = parameter_count(quickstart(1, "static", false).model);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(replicated.optimizer_state_bytes, 8.0 * parameters);
  EXPECT_EQ(sharded.optimizer_state_bytes, 8.0 * ParameterShards(parameters, world_size()).shard(rank).count);
  const double saved_mib =
      (training_state_bytes(parameters, 1) - training_state_bytes(parameters, world_size())) / 1048576.0;
  EXPECT_NEAR(replicated.memory_estimate_mib - sharded.memory_estimate_mib, saved_mib, 1e-9);
  if (world_size() > 1) {
    EXPECT_GT(saved_mib, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, SameTraining, ::testing::Values("static", "dhp"));

// A checkpoint written with the distributed optimizer restarts without it, and the reverse; either
// continues as the uninterrupted replicated run.
TEST(DistributedOptimizerCheckpoint, RestartsWithOrWithoutIt) {
  const RemoveAtEnd file{temp_path("switch.ckpt.h5")};
  const TrainResult straight = train(quickstart(6, "dhp", false), World::of(MPI_COMM_WORLD), {});
  for (const bool first_sharded : {true, false}) {
    SCOPED_TRACE(first_sharded ? "on, then off" : "off, then on");
    train_to(quickstart(3, "dhp", first_sharded), file.path);
    const TrainResult resumed = restart_from(quickstart(6, "dhp", !first_sharded), file.path);
    ASSERT_EQ(resumed.first_step, 3);
    expect_same_losses(resumed, straight, 3);
  }
}

// lr 1e6 blows the weights up after step 0 (Training.NonFiniteStepStopsTheRunNamingIt): with the
// distributed optimizer every rank still stops at the same step, and rank 0's message, which users see,
// names the same first tensor as the replicated run's although that element may sit in another rank's
// shard.
TEST(DistributedOptimizer, NonFiniteGradientStopsEveryRankNamingTheTensor) {
  const auto stop = [](bool distributed) {
    RunConfig config = quickstart(10, "static", distributed);
    config.optimizer.lr = 1e6f;
    try {
      train(config, World::of(MPI_COMM_WORLD), {});
    } catch (const NonFiniteError& e) {
      return std::make_pair(e.step(), std::string(e.what()));
    }
    return std::make_pair(-1, std::string());
  };
  const auto [sharded_step, sharded_message] = stop(true);
  const auto [replicated_step, replicated_message] = stop(false);
  ASSERT_GE(sharded_step, 1) << "the run did not stop at a non-finite step";
  int steps[2] = {sharded_step, -sharded_step};  // every rank stopped, and at the same step
  MPI_Allreduce(MPI_IN_PLACE, steps, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(steps[0], -steps[1]);
  EXPECT_NE(sharded_message.find("first non-finite gradient in "), std::string::npos) << sharded_message;
  EXPECT_EQ(sharded_message.find("none found"), std::string::npos) << sharded_message;
  if (bitwise_expected()) {
    EXPECT_EQ(sharded_step, replicated_step);
    EXPECT_EQ(sharded_message, replicated_message);
  }
}

// The first non-finite element in the last rank's shard only: every rank (rank 0 included) names its
// tensor, and the norm over the shards is non-finite on every rank.
TEST(DistributedOptimizer, FirstNonFiniteElementOfAnotherRanksShardIsNamedEverywhere) {
  const RunConfig config = quickstart(1, "static", true);
  Model model(config.model, config.seed);
  const ParameterShards shards(model.parameter_count(), world_size());
  const std::unique_ptr<Communicator> world =
      create_mpi_communicator(MPI_COMM_WORLD, consecutive_ranks(0, world_size()));
  const SynchronisedGradient own{shards.shard(world_rank()), world.get()};
  // The last tensor that starts in the last shard, its second element non-finite.
  const ShardRange last = shards.shard(world_size() - 1);
  const TensorRange* target = nullptr;
  for (const TensorRange& t : model.tensor_ranges())
    if (t.offset >= last.offset && t.count > 1) target = &t;
  ASSERT_NE(target, nullptr);
  Kokkos::deep_copy(model.grads(), 1.0f);
  if (world_rank() == world_size() - 1)
    Kokkos::deep_copy(Kokkos::subview(model.grads(), target->offset + 1),
                      std::numeric_limits<float>::quiet_NaN());
  const double norm = gradient_norm(model, own);
  ASSERT_TRUE(std::isnan(norm)) << "rank " << world_rank();
  std::string message;
  try {
    check_finite_step(model, 4, 1.0, norm, own);
  } catch (const NonFiniteError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "step 4: non-finite gradient: first non-finite gradient in " + target->name);
  // And finite, the norm over the shards is the replicated one's.
  Kokkos::deep_copy(model.grads(), 0.5f);
  EXPECT_DOUBLE_EQ(gradient_norm(model, own), 0.5 * std::sqrt(static_cast<double>(model.parameter_count())));
}

}  // namespace
}  // namespace minimllm
