// The project's backbone under dynamic layouts: any grouping of the ranks (any sizes, context parallel
// inside a group), any encoder layout, colocated or disaggregated, micro-batched or not, regrouped
// every step, must give the single-rank loss and every gradient, up to float reassociation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "minimllm/driver/trainer.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_planner.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/run_step.hpp"
#include "mpi_world.hpp"
#include "region_recorder.hpp"

namespace minimllm {
namespace {

// Tiny model; 3 LLM heads so group sizes 2 and 4 do not divide the head count (they need not: the
// sequence is split, not the heads).
const char* kDeck = R"(
name: layouts
seed: 99
steps: 1
model:
  encoder: {width: 16, heads: 2, layers: 1, patch: 2, channels: 1}
  llm: {width: 24, heads: 3, layers: 2, vocab: 32}
data:
  global_batch: 7
  text: {median: 20, sigma: 0.7, min: 2, max: 60}
  images: {mean_per_sample: 1.0, max_per_sample: 3, min_side: 2, max_side: 6, classes: 3}
  incoherence: 0.3
runtime: {peak_gflops_per_rank: 1}
)";

RunConfig deck(const std::string& extra = "") {
  return parse_run_config(std::string(kDeck) + extra, "layouts");
}

using testing_support::world_size;

struct Gradients {
  double loss = 0.0;
  std::vector<float> grads;
};

// Every layout test overlaps the gradient all-reduce with a bucket per layer (the most buckets started
// during the backward).
constexpr GradSyncOptions kBucketPerLayer{true, 0.0};

// One step of `plan` on `comm`; returns the mean loss and the synced gradient buffer. started_early: how
// many gradient buckets started during the backward.
Gradients run_step(const RunConfig& config, MPI_Comm comm,
                   const std::function<StepPlan(const GlobalBatch&)>& plan_of, int pool_capacity = 8,
                   GradSyncOptions sync = kBucketPerLayer, int* started_early = nullptr) {
  const World world = World::of(comm);
  const Sampler sampler(config);
  Model model(config.model, config.seed, GemmPrecision::fp32, Recompute::none, {},
              cp_comm_from_string(config.parallel.cp_comm));
  CommPool pool(comm, pool_capacity, choose_collectives(comm, "auto").factory);
  StepExecutor executor(model, sync);
  const GlobalBatch batch = sampler.batch(0);
  const StepPlan plan = plan_of(batch);
  validate_plan(plan, batch, world.size);
  const StepOutcome outcome =
      minimllm::run_step(sampler, executor, pool,
                         planned_step(batch, plan, world.rank, world.size,
                                      encoder_schedule_from_string(config.parallel.encoder_schedule)));
  if (started_early) *started_early = executor.gradient_sync().started_early();
  auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), model.grads());
  return {outcome.loss_sum / batch.loss_targets(),
          std::vector<float>(grads.data(), grads.data() + grads.size())};
}

// Loss and every named tensor's gradient against the single-rank reference. Tolerance: the layouts sum
// the same terms in other orders (fp32, ~1e-7 relative per addition, a few hundred terms), so each
// tensor's gradient must agree to 1e-5 in relative L2 norm, and the loss to 1e-5 relative.
// Without images every encoder gradient is exactly zero (on every layout); otherwise none may be zero,
// or the comparison would be vacuous.
void expect_matches_reference(const RunConfig& config,
                              const std::function<StepPlan(const GlobalBatch&)>& plan_of,
                              int pool_capacity = 8) {
  const bool images = Sampler(config).batch(0).encoder_rows() > 0;
  const Gradients got = run_step(config, MPI_COMM_WORLD, plan_of, pool_capacity);
  const Gradients ref =
      run_step(config, MPI_COMM_SELF, [](const GlobalBatch& b) { return make_in_order_plan(b, 1); });
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss);
  const Model model(config.model, config.seed);
  for (const TensorRange& t : model.tensor_ranges()) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = t.offset; i < t.offset + t.count; ++i) {
      diff += std::pow(double(got.grads[i]) - ref.grads[i], 2);
      norm += std::pow(double(ref.grads[i]), 2);
    }
    const bool encoder_side =
        t.name.rfind("encoder", 0) == 0 || t.name.rfind("projector", 0) == 0 || t.name == "patch_embed";
    if (!images && encoder_side) {
      EXPECT_EQ(norm + diff, 0.0) << t.name << ": no image, yet an encoder gradient";
      continue;
    }
    ASSERT_GT(norm, 0.0) << t.name << ": the reference gradient is zero, the check would be vacuous";
    EXPECT_LE(std::sqrt(diff / norm), 1e-5) << t.name;
  }
}

std::function<StepPlan(const GlobalBatch&)> grouped(std::vector<int> sizes) {
  return [sizes](const GlobalBatch& b) { return make_grouped_plan(b, sizes); };
}

// One group of every rank, its samples in `parts` micro-batches.
std::function<StepPlan(const GlobalBatch&)> one_group_of_all(int parts) {
  return [parts](const GlobalBatch& b) {
    StepPlan plan = make_grouped_plan(b, {world_size()});
    plan.llm_groups[0].micro_batches = parts;
    return plan;
  };
}

// The deck with each context-parallel mechanism (parallel.cp_comm). a2a with 4 heads: groups of 2 and 4
// shard them, a group of 3 runs the ring (cp_comm_for_group), in the same step where both occur.
std::vector<RunConfig> with_every_cp_comm(const RunConfig& config) {
  std::vector<RunConfig> out;
  for (const char* mode : {"p2p", "a2a", "all_gather"}) {
    out.push_back(config);
    out.back().parallel.cp_comm = mode;
    if (std::string(mode) == "a2a") out.back().model.llm.heads = 4;
  }
  return out;
}

TEST(Layouts, AnyGroupSizesOnFourRanks) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const RunConfig& config : with_every_cp_comm(deck()))
    for (const std::vector<int>& sizes :
         std::vector<std::vector<int>>{{4}, {3, 1}, {2, 2}, {2, 1, 1}, {1, 1, 1, 1}, {1, 3}}) {
      SCOPED_TRACE(config.parallel.cp_comm + " " + ::testing::PrintToString(sizes));
      expect_matches_reference(config, grouped(sizes));
    }
}

TEST(Layouts, AnyGroupSizesOnThreeRanks) {
  if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
  for (const RunConfig& config : with_every_cp_comm(deck()))
    for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{3}, {2, 1}, {1, 1, 1}}) {
      SCOPED_TRACE(config.parallel.cp_comm + " " + ::testing::PrintToString(sizes));
      expect_matches_reference(config, grouped(sizes));
    }
}

TEST(Layouts, OneGroupOfAllRanksWithMicroBatches) { expect_matches_reference(deck(), one_group_of_all(3)); }

TEST(Layouts, EncoderLayoutIndependentOfLlmLayout) {
  // Images scattered over ranks with no relation to where their samples' LLM rows live.
  expect_matches_reference(deck(), [](const GlobalBatch& b) {
    StepPlan plan =
        make_grouped_plan(b, world_size() >= 2 ? std::vector<int>{world_size() - 1, 1} : std::vector<int>{1});
    for (size_t i = 0; i < plan.item_owner.size(); ++i) plan.item_owner[i] = (7 * i + 3) % world_size();
    return plan;
  });
}

TEST(Layouts, DisaggregatedOneEncoderRankTwoLlmRanks) {
  if (world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
  for (bool one_group : {false, true}) {
    SCOPED_TRACE(one_group ? "LLM group {1,2}" : "LLM groups {1},{2}");
    expect_matches_reference(deck(), [one_group](const GlobalBatch& b) {
      LayoutShape shape;
      shape.placement = Placement::disaggregated;
      shape.encoder_ranks = {0};
      shape.llm_groups =
          one_group ? std::vector<std::vector<int>>{{1, 2}} : std::vector<std::vector<int>>{{1}, {2}};
      shape.items_follow_groups = false;
      return deal_in_order(b, shape, "test-disaggregated");
    });
  }
}

// Disaggregated plans run as a pipeline over micro-batches (step_executor.cpp): groups with different
// micro-batch counts (a group's last micro-batch is the last stage), a context-parallel LLM group, and
// images spread over two encoder ranks out of sample order.
TEST(Layouts, DisaggregatedPipelineOverMicroBatches) {
  if (world_size() < 3) GTEST_SKIP() << "needs an encoder rank and two LLM ranks";
  RunConfig config = deck();
  config.data.global_batch = 9;
  const bool four = world_size() == 4;
  SCOPED_TRACE(four ? "encoder {0,1}, LLM {2},{3}" : "encoder {0}, LLM {1,2} and {1},{2}");
  for (bool one_group : {false, true}) {
    if (four && one_group) continue;
    expect_matches_reference(config, [four, one_group](const GlobalBatch& b) {
      LayoutShape shape;
      shape.placement = Placement::disaggregated;
      shape.encoder_ranks = four ? std::vector<int>{0, 1} : std::vector<int>{0};
      shape.llm_groups = four        ? std::vector<std::vector<int>>{{2}, {3}}
                         : one_group ? std::vector<std::vector<int>>{{1, 2}}
                                     : std::vector<std::vector<int>>{{1}, {2}};
      shape.items_follow_groups = false;
      StepPlan plan = deal_in_order(b, shape, "test-pipeline");
      plan.llm_groups.front().micro_batches = std::min<int>(4, plan.llm_groups.front().samples.size());
      plan.llm_groups.back().micro_batches = std::min<int>(2, plan.llm_groups.back().samples.size());
      for (size_t i = 0; i < plan.item_owner.size(); ++i)
        plan.item_owner[i] = shape.encoder_ranks[(5 * i + 1) % shape.encoder_ranks.size()];
      return plan;
    });
  }
}

// The overlapped all-reduce (buckets started as the last micro-batch's backward finishes their layers)
// against one all-reduce after the backward, on layouts where ranks finish their units in different
// orders: micro-batches (only the last one's backward may start a bucket: an earlier start would miss
// the later micro-batches' contributions), images owned away from their samples, disaggregated
// pipelines whose encoder ranks have no LLM rows. On 2 ranks every element is a + b either way: bitwise.
TEST(Layouts, OverlappedGradientSyncEqualsTheSerialOne) {
  const int ranks = world_size();
  std::vector<std::pair<std::string, std::function<StepPlan(const GlobalBatch&)>>> layouts;
  layouts.emplace_back("one group, 3 micro-batches", one_group_of_all(3));
  layouts.emplace_back("data parallel, images elsewhere, 2 micro-batches", [ranks](const GlobalBatch& b) {
    StepPlan plan = make_grouped_plan(b, std::vector<int>(ranks, 1));
    for (LlmGroup& g : plan.llm_groups) g.micro_batches = std::max(1, std::min<int>(2, g.samples.size()));
    for (size_t i = 0; i < plan.item_owner.size(); ++i) plan.item_owner[i] = (7 * i + 3) % ranks;
    return plan;
  });
  if (ranks >= 3)
    layouts.emplace_back("disaggregated", [ranks](const GlobalBatch& b) {
      LayoutShape shape;
      shape.placement = Placement::disaggregated;
      shape.encoder_ranks = {0};
      for (int r = 1; r < ranks; ++r) shape.llm_groups.push_back({r});
      shape.items_follow_groups = false;
      StepPlan plan = deal_in_order(b, shape, "test-overlap");
      plan.llm_groups.front().micro_batches =
          std::max(1, std::min<int>(2, plan.llm_groups.front().samples.size()));
      return plan;
    });
  for (const auto& [name, plan_of] : layouts) {
    SCOPED_TRACE(name);
    int early = 0;
    const Gradients overlapped = run_step(deck(), MPI_COMM_WORLD, plan_of, 8, kBucketPerLayer, &early);
    const Gradients serial = run_step(deck(), MPI_COMM_WORLD, plan_of, 8, GradSyncOptions{false, 0.0});
    // Not vacuous: buckets did start during the backward (a group of one has nothing to overlap).
    if (ranks > 1) {
      EXPECT_GT(early, 0);
    }
    ASSERT_EQ(overlapped.grads.size(), serial.grads.size());
    if (ranks <= 2) {
      EXPECT_EQ(overlapped.loss, serial.loss);
      size_t differing = 0;
      for (size_t i = 0; i < serial.grads.size(); ++i) differing += overlapped.grads[i] != serial.grads[i];
      EXPECT_EQ(differing, 0u) << "of " << serial.grads.size() << " gradients";
    } else {
      EXPECT_NEAR(overlapped.loss, serial.loss, 1e-5 * serial.loss);
      double diff = 0.0, norm = 0.0;
      for (size_t i = 0; i < serial.grads.size(); ++i) {
        diff += std::pow(double(overlapped.grads[i]) - serial.grads[i], 2);
        norm += std::pow(double(serial.grads[i]), 2);
      }
      EXPECT_LE(std::sqrt(diff / norm), 1e-5);
    }
  }
}

TEST(Layouts, SequencesShorterThanTheGroup) {
  if (world_size() < 2) GTEST_SKIP() << "needs a group of 2 or more";
  // Text of 2 to 3 tokens, no images: most ranks of a 3- or 4-rank group hold nothing of a sample.
  RunConfig short_config = deck();
  short_config.data.text = {2, 0.5, 2, 3};
  short_config.data.images.max_per_sample = 0;
  short_config.data.images.mean_per_sample = 0;
  for (const RunConfig& config : with_every_cp_comm(short_config)) {
    SCOPED_TRACE(config.parallel.cp_comm);
    expect_matches_reference(config, grouped({world_size()}));
  }
}

// Whole runs: the loss curve of a layout that changes every step equals the single-rank curve.
void expect_same_curve(const RunConfig& config) {
  const TrainResult got = train(config, World::of(MPI_COMM_WORLD), {});
  RunConfig single = config;
  single.parallel = ParallelConfig();
  const TrainResult ref = train(single, World::of(MPI_COMM_SELF), {});
  ASSERT_EQ(got.steps.size(), ref.steps.size());
  for (size_t i = 0; i < got.steps.size(); ++i)
    EXPECT_NEAR(got.steps[i].loss, ref.steps[i].loss, 1e-5 * ref.steps[i].loss) << "step " << i;
}

TEST(Layouts, PlanChangingEveryStepForTenSteps) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks to regroup";
  RunConfig config = deck();
  config.steps = 10;
  config.parallel.group_sizes = {world_size() - 1, 1};
  config.parallel.rotate_groups = true;
  expect_same_curve(config);
}

TEST(Layouts, PoolCappedAtOneCommunicatorPerRankUnderChurn) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  RunConfig config = deck();
  config.steps = 10;
  config.parallel.group_sizes = {2, 1, 1};  // rotating: the 2-rank group moves every step
  config.parallel.rotate_groups = true;
  // Every rank is in two of the rotating pairs: a cap of one communicator per rank evicts.
  config.parallel.comm_pool_capacity = 1;
  expect_same_curve(config);
  const TrainResult result = train(config, World::of(MPI_COMM_WORLD), {});
  std::int64_t evictions = 0, creations = 0;
  for (const StepRecord& s : result.steps) evictions += s.comm_evictions, creations += s.comm_creations;
  EXPECT_GT(evictions, 0) << "the cap never bit: the test does not exercise eviction";
  EXPECT_GT(creations, 2);
}

TEST(Layouts, EveryPlannerGivesTheSingleRankLossCurve) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks for the planners to differ";
  for (const std::string& policy : planner_names()) {
    SCOPED_TRACE(policy);
    RunConfig config = deck();
    config.steps = 3;
    config.parallel.policy = policy;
    expect_same_curve(config);
  }
}

// The encoder per micro-batch (parallel.encoder_schedule: per_micro_batch): each stage's items encoded
// before its micro-batches and their backward after, on groups with different micro-batch counts (a
// group's last micro-batch is the last stage), context-parallel groups of every mechanism, items owned away
// from their samples, and groups without a micro-batch in a stage. Also whole runs under every planner.
TEST(Layouts, EncoderPerMicroBatchGivesTheSingleRankGradients) {
  const int ranks = world_size();
  RunConfig per_micro_batch = deck("parallel: {encoder_schedule: per_micro_batch}\n");
  per_micro_batch.data.global_batch = 9;
  std::vector<std::pair<std::string, std::function<StepPlan(const GlobalBatch&)>>> layouts;
  layouts.emplace_back("one group, 3 micro-batches", one_group_of_all(3));
  layouts.emplace_back("groups of 4, 2, 1... micro-batches, items elsewhere", [ranks](const GlobalBatch& b) {
    StepPlan plan =
        make_grouped_plan(b, ranks >= 3 ? std::vector<int>{2, ranks - 2} : std::vector<int>(ranks, 1));
    int parts = 4;
    for (LlmGroup& g : plan.llm_groups) {
      g.micro_batches = std::max(1, std::min<int>(parts, g.samples.size()));
      parts = std::max(1, parts / 2);
    }
    for (size_t i = 0; i < plan.item_owner.size(); ++i) plan.item_owner[i] = (5 * i + 1) % ranks;
    return plan;
  });
  for (const RunConfig& config : with_every_cp_comm(per_micro_batch))
    for (const auto& [name, plan_of] : layouts) {
      SCOPED_TRACE(config.parallel.cp_comm + ", " + name);
      expect_matches_reference(config, plan_of);
    }
  if (ranks < 2) return;
  for (const std::string& policy : planner_names()) {
    SCOPED_TRACE(policy);
    RunConfig config = per_micro_batch;
    config.steps = 3;
    config.parallel.policy = policy;
    config.parallel.micro_batches = 3;
    expect_same_curve(config);
  }
}

// flexsp with its MILP under a wall-clock limit is not deterministic (ranks could stop the solver at
// different points), so rank 0 plans and agree() broadcasts: every rank then holds rank 0's plan, its own
// work derived from it, and the solver's record; the others planned nothing themselves.
TEST(Layouts, TimeLimitedPlanIsMadeOnRankZeroAndBroadcast) {
  RunConfig config = deck();
  config.parallel.policy = "flexsp";
  config.parallel.flexsp_time_limit = 0.05;
  const World world = World::of(MPI_COMM_WORLD);
  const Sampler sampler(config);
  const LayoutSource layouts(config, world.size, default_cost_model(config, 1.0, world.size));
  const StepPlanner planner(sampler, layouts, world);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    PlannedStep planned = planner.plan(step);
    EXPECT_EQ(planned.awaiting_plan, !layouts.deterministic() && world.rank != 0);
    planner.agree(planned);
    EXPECT_FALSE(planned.awaiting_plan);
    EXPECT_NO_THROW(validate_plan(planned.plan, planned.batch, world.size));
    EXPECT_NE(planned.plan.origin.solver_status, "not_run");
    // Rank 0's bytes against every rank's.
    std::string mine = serialize_plan(planned.plan), root = mine;
    long long size = static_cast<long long>(root.size());
    MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    root.resize(static_cast<size_t>(size));
    MPI_Bcast(&root[0], static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD);
    EXPECT_EQ(mine, root);
    const RankWork work = derive_rank_work(planned.plan, planned.batch, world.rank, world.size);
    EXPECT_EQ(work.group, planned.work.group);
    EXPECT_EQ(work.items, planned.work.items);
    EXPECT_EQ(work.received_rows, planned.work.received_rows);
    EXPECT_GT(planner.forecast(planned).prediction.makespan, 0.0);
  }
}

// static packs its replicas' samples into bins of their own sizes (explicit micro-batch ends) and
// megatron_dcp groups them by length: at every context-parallel degree that divides the ranks (the budget
// derived from it: longest / cp, so at cp = ranks megatron_dcp gives long samples groups of 2 and more),
// both keep the single-rank loss curve.
TEST(Layouts, MegatronBaselinesAtEveryContextParallelDegree) {
  for (int cp = 1; cp <= world_size(); ++cp) {
    if (world_size() % cp != 0) continue;
    for (const char* policy : {"static", "megatron_dcp"})
      for (RunConfig config : with_every_cp_comm(deck())) {
        SCOPED_TRACE(std::string(policy) + " cp " + std::to_string(cp) + " " + config.parallel.cp_comm);
        config.steps = 3;
        config.parallel.policy = policy;
        config.parallel.cp = cp;
        expect_same_curve(config);
      }
  }
}

// Loss and every gradient through packed bins of several micro-batches per replica.
TEST(Layouts, PackedBinsGiveTheSingleRankGradients) {
  const RunConfig config = deck();
  const CostModel cost = default_cost_model(config, 1.0, world_size());
  PlannerOptions options;
  options.cp = world_size();
  const auto planner = make_planner("static", cost, options);
  const StepPlan plan = planner->plan(Sampler(config).batch(0), world_size());
  ASSERT_GT(plan.llm_groups.front().micro_batches, 1) << "one bin: the test would not exercise packing";
  expect_matches_reference(config, [&](const GlobalBatch& b) { return planner->plan(b, world_size()); });
}

// The device path's contract: once a step's inputs are on the device, nothing but documented scalars
// crosses between host and device, whatever the layout (context parallel K/V exchange, boundary exchange
// across ranks, micro-batches, gradient all-reduce). Asserted on the backend that runs: host builds
// count nothing at all; CUDA builds with NCCL collectives, or on one rank, count only each micro-batch's
// loss sum (one 8-byte double back to the host); CUDA builds with MPI collectives across ranks (no NCCL,
// or ranks sharing a GPU) count their host staging besides.
TEST(Layouts, NoHostDeviceTransfersInsideAStepOnTheDevicePath) {
  RunConfig config = deck();
  config.steps = 3;
  const World world = World::of(MPI_COMM_WORLD);
  const CollectivesChoice collectives = choose_collectives(world.comm, "auto");
  const Sampler sampler(config);
  Model model(config.model, config.seed);
  CommPool pool(world.comm, 8, collectives.factory);
  StepExecutor executor(model);
  for (int step = 0; step < config.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ", collectives " + collectives.backend);
    const GlobalBatch batch = sampler.batch(step);
    // One context-parallel group of every rank, two micro-batches, images encoded away from their rows.
    StepPlan plan = make_grouped_plan(batch, {world.size});
    plan.llm_groups[0].micro_batches = 2;
    for (size_t i = 0; i < plan.item_owner.size(); ++i)
      plan.item_owner[i] = static_cast<int>((5 * i + step) % world.size);
    validate_plan(plan, batch, world.size);
    const StepOutcome out =
        minimllm::run_step(sampler, executor, pool, planned_step(batch, plan, world.rank, world.size));
    EXPECT_EQ(out.input_transfers.to_host, 0) << "packing inputs read something back";
    if (kMemSpaceIsHostAccessible) {
      EXPECT_EQ(out.input_transfers.to_device + out.input_transfers.bytes, 0);
      EXPECT_EQ(out.transfers.to_device + out.transfers.to_host + out.transfers.bytes, 0);
    } else {
      EXPECT_GT(out.input_transfers.to_device, 0) << "the inputs must reach the device somehow";
      if (collectives.backend == "nccl" || world.size == 1) {
        // NCCL works on device memory; a lone rank's collectives are copies on the device.
        EXPECT_EQ(out.transfers.to_device, 0);
        EXPECT_LE(out.transfers.to_host, 2) << "more than the loss sums of two micro-batches";
        EXPECT_EQ(out.transfers.bytes, 8 * out.transfers.to_host) << "something bigger than a scalar";
      } else {
        // At least the gradient all-reduce is staged out and back.
        EXPECT_GT(out.transfers.to_host, 0);
        EXPECT_GT(out.transfers.to_device, 0);
      }
    }
  }
}

// Under context parallelism the K/V exchange is a Kokkos Tools region of its own (inside the LLM's).
TEST(Layouts, ContextParallelExchangeIsAKokkosToolsRegion) {
  if (world_size() < 2) GTEST_SKIP() << "context parallelism needs 2 or more ranks";
  const RunConfig config = deck();
  const World world = World::of(MPI_COMM_WORLD);
  const Sampler sampler(config);
  Model model(config.model, config.seed);
  CommPool pool(world.comm, 8, choose_collectives(world.comm, "auto").factory);
  StepExecutor executor(model);
  const GlobalBatch batch = sampler.batch(0);
  testing_support::RegionRecorder regions;
  const StepOutcome out =
      minimllm::run_step(sampler, executor, pool,
                         planned_step(batch, make_grouped_plan(batch, {world.size}), world.rank, world.size));
  EXPECT_TRUE(regions.pushed("minimllm::kv_exchange"));
  EXPECT_TRUE(regions.pushed("minimllm::llm"));
  EXPECT_GT(out.seconds[Phase::kv_exchange], 0.0);
  EXPECT_LE(out.seconds[Phase::kv_exchange], out.seconds[Phase::llm])
      << "the exchange is part of the LLM pass";
}

TEST(Layouts, InvalidPlansAreRejectedClearly) {
  const RunConfig config = deck();
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(0);
  const auto message = [&](const StepPlan& plan, int world) {
    try {
      validate_plan(plan, batch, world);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  StepPlan twice = make_grouped_plan(batch, {2, 2});
  twice.llm_groups[1].ranks = {1, 2};
  EXPECT_NE(message(twice, 4).find("rank 1 is in LLM groups 0 and 1"), std::string::npos)
      << message(twice, 4);
  StepPlan lost = make_grouped_plan(batch, {2});
  lost.llm_groups[0].samples.pop_back();
  EXPECT_NE(message(lost, 2).find("sample 6 is in no LLM group"), std::string::npos) << message(lost, 2);
  StepPlan foreign = make_grouped_plan(batch, {1, 1});
  foreign.placement = Placement::disaggregated;
  foreign.encoder_ranks = {0};
  foreign.llm_groups = {{{1}, foreign.llm_groups[0].samples, 1, {}}};
  foreign.llm_groups[0].samples.insert(foreign.llm_groups[0].samples.end(), {3, 4, 5, 6});
  if (!foreign.item_owner.empty()) foreign.item_owner.back() = 1;
  EXPECT_NE(message(foreign, 2).find("not an encoder rank"), std::string::npos) << message(foreign, 2);
  StepPlan outside = make_grouped_plan(batch, {2});
  EXPECT_NE(message(outside, 1).find("valid ranks are 0..0"), std::string::npos) << message(outside, 1);
}

TEST(Layouts, DeckLayoutThatDoesNotFitIsAnInputError) {
  RunConfig config = deck();
  config.parallel.group_sizes = {world_size() + 1};
  const Sampler sampler(config);
  try {
    make_deck_plan(config, sampler.batch(0), world_size());
    FAIL() << "accepted group sizes that exceed the ranks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.group_sizes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minimllm
