// Tensor parallelism (parallel.tp, parallel.encoder_tp) never changes the math: one pass of a model split
// over a tensor-parallel group gives the whole model's loss and, slice by slice, its gradients, and
// training under tp gives the losses of training without it, under static and dynamic layouts, with and
// without the distributed optimizer and recomputation. Invalid grids are refused with the key named.
//
// Bound: relative 1e-5. The group sums partial products where the whole model sums once (the row-parallel
// layers' all-reduces, the vocabulary-parallel softmax's combined statistics), so results agree up to float
// reassociation, as any two layouts do (test_training's bound). A gradient tensor is compared as a whole:
// its largest element difference against 1e-5 x its largest element.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/rank_grid.hpp"
#include "minimllm/step/packing.hpp"
#include "model_parallel_support.hpp"
#include "mpi_world.hpp"
#include "whole_batch.hpp"

namespace minimllm {
namespace {

using testing_support::expect_same_losses;
using testing_support::informative_batch;
using testing_support::PackedBatch;
using testing_support::world_size;

constexpr double kRelative = testing_support::kLayoutBound;
constexpr std::uint64_t kModelSeed = 7;

RunConfig tiny_config() { return testing_support::tiny_model_parallel_config("tensor_parallel", 2); }

// Every tensor is in the split model (a slice of it) and matches the whole model's elements.
void expect_slices_match(const Model& split, const Model& whole) {
  EXPECT_EQ(testing_support::expect_held_tensors_match(split, whole),
            static_cast<int>(whole.tensor_ranges().size()));
}

TEST(TensorParallel, OnePassEqualsTheWholeModelSliceBySlice) {
  const RunConfig config = tiny_config();
  const Sampler sampler(config);
  const PackedBatch batch = informative_batch(sampler);
  const float scale = 1.0f / static_cast<float>(batch.loss_targets);
  const World world = World::of(MPI_COMM_WORLD);
  int grids = 0;
  for (int tp : {2, 4}) {
    if (world.size % tp != 0) continue;
    for (int encoder_tp = 1; encoder_tp <= tp; encoder_tp *= 2) {
      ModelParallel layout;
      layout.tp = tp, layout.encoder_tp = encoder_tp;
      const RankGrid grid(world, layout, config.model.llm.layers, create_mpi_communicator);
      for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
        SCOPED_TRACE("tp " + std::to_string(tp) + ", encoder_tp " + std::to_string(encoder_tp) +
                     ", recompute " + to_string(mode));
        Model whole(config.model, kModelSeed, GemmPrecision::fp32, mode);
        Model split(config.model, kModelSeed, GemmPrecision::fp32, mode, grid.sharding());
        EXPECT_LT(split.parameter_count(), whole.parameter_count());
        const double expected = testing_support::run_step(whole, batch, scale);
        const double loss = testing_support::run_step(split, batch, scale);
        EXPECT_NEAR(loss, expected, kRelative * std::fabs(expected));
        expect_slices_match(split, whole);
        ++grids;
      }
    }
  }
  if (world.size % 2 == 0) {
    EXPECT_GT(grids, 0);
  }
}

// Shared encoder groups: contiguous runs of the unit's images, in order, covering them once, each
// group's patches within one image of an even share.
TEST(TensorParallel, EncoderGroupsShareTheImagesInContiguousBalancedRuns) {
  const RunConfig config = tiny_config();
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(3);
  std::vector<int> images;
  int largest = 0;
  for (const SampleMeta& s : batch.samples)
    for (const auto& image : s.items) {
      images.push_back(static_cast<int>(images.size()));
      largest = std::max(largest, image.rows);
    }
  ASSERT_GT(images.size(), 2u);
  for (int groups : {1, 2, 3}) {
    std::vector<int> joined;
    std::vector<std::size_t> rows;
    for (int g = 0; g < groups; ++g) {
      const std::vector<int> own = encoder_group_images(batch, images, g, groups, rows);
      joined.insert(joined.end(), own.begin(), own.end());
    }
    EXPECT_EQ(joined, images);
    ASSERT_EQ(rows.size(), static_cast<size_t>(groups));
    const double total = std::accumulate(rows.begin(), rows.end(), 0.0);
    for (std::size_t r : rows) EXPECT_LE(std::fabs(r - total / groups), largest) << groups << " groups";
  }
}

RunConfig quickstart(const std::string& policy, int tp, int cp = 1) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  config.steps = policy == "dhp" ? 10 : 4;
  config.data.global_batch = 8;
  config.machine.peak_gflops = 100.0;  // skip the start-up sgemm measurement
  config.parallel.policy = policy;
  config.parallel.tp = tp;
  config.parallel.cp = cp;
  return config;
}

struct TrainingCase {
  bool zero;
  const char* recompute;
  int encoder_tp;  // 1: the unit's two encoder groups share its images; 2: one group, split like the LLM
  const char* cp_comm = "p2p";  // static's CP 2 over two units: its 2 heads per rank suit a2a too
  const char* encoder_schedule = "per_step";
};

// Training under tp = 2 against training without tensor parallelism on the same ranks: static (with
// context parallelism over the units when there are two: TP 2 x CP 2), dhp's per-step groups of units
// under fixed TP 2 for 10 steps, and (with two units) the disaggregated placement. With one unit (2 ranks)
// every combination of the distributed optimizer and recomputation; with two (4 ranks, oversubscribed on
// small machines: each of the group's all-reduces waits for a time slice) fewer. Each with the encoder
// split over both ranks (encoder_tp 2) and shared by two groups of one (encoder_tp 1), and with the encoder
// run per micro-batch (parallel.encoder_schedule).
TEST(TensorParallel, TrainingGivesTheLossesOfTrainingWithoutIt) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "tp = 2 needs an even number of ranks";
  const World world = World::of(MPI_COMM_WORLD);
  const int units = world_size() / 2;
  std::vector<TrainingCase> cases = {{false, "none", 1},
                                     {true, "none", 2},
                                     {true, "full", 1},
                                     {false, "full", 2, "p2p", "per_micro_batch"},
                                     {true, "none", 1, "p2p", "per_micro_batch"}};
  if (units == 1)
    cases.insert(cases.end(), {{false, "selective", 2}, {false, "full", 2}, {true, "selective", 1}});
  else
    cases.push_back({false, "selective", 2, "a2a"});
  std::vector<const char*> policies = {"static", "dhp"};
  if (units > 1) policies.push_back("disagg");
  for (const char* policy : policies) {
    const int cp = std::string(policy) == "static" ? units : 1;
    const TrainResult reference = train(quickstart(policy, 1, cp), world, {});
    for (const TrainingCase& c : cases) {
      SCOPED_TRACE(std::string(policy) + (c.zero ? ", ZeRO-1" : "") + ", recompute " + c.recompute +
                   ", encoder_tp " + std::to_string(c.encoder_tp) + ", cp_comm " + c.cp_comm + ", encoder " +
                   c.encoder_schedule);
      if (std::string(policy) == "disagg" && (c.zero || c.encoder_tp == 2)) continue;  // time: one case
      RunConfig config = quickstart(policy, 2, cp);
      config.parallel.encoder_tp = c.encoder_tp;
      config.parallel.distributed_optimizer = c.zero;
      config.runtime.recompute = c.recompute;
      config.parallel.cp_comm = c.cp_comm;
      config.parallel.encoder_schedule = c.encoder_schedule;
      const TrainResult result = train(config, world, {});
      expect_same_losses(result, reference);
      // MFU counts the whole model's FLOPs once over every rank.
      EXPECT_NEAR(result.steps.back().model_flops, reference.steps.back().model_flops,
                  1e-9 * reference.steps.back().model_flops);
      if (std::string(policy) == "static") {
        EXPECT_EQ(result.steps.back().max_group_size, units);  // TP 2 x CP 2 really ran
      }
    }
  }
}

// Checkpoints under tp hold the whole model (the slices assembled): a tp run restarts from one bit for bit,
// and a run without tensor parallelism restarts from the same file and goes on with the same losses
// (within the bound: the layouts differ).
TEST(TensorParallel, CheckpointsHoldTheWholeModel) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "tp = 2 needs an even number of ranks";
  RunConfig config = quickstart("static", 2);
  config.parallel.distributed_optimizer = true;
  RunConfig without = config;
  without.parallel.tp = 1;
  testing_support::expect_checkpoints_hold_the_whole_model(config, without, "minimllm_tp_");
}

TEST(TensorParallel, InvalidGridsAreRefusedNamingTheKey) {
  const auto refusal = testing_support::training_refusal;
  // More tensor-parallel ranks than a node holds (and than the world has).
  RunConfig wide = quickstart("static", 2 * world_size());
  EXPECT_NE(refusal(wide).find("parallel.tp"), std::string::npos) << refusal(wide);
  RunConfig encoder_wider = quickstart("static", 1);
  encoder_wider.parallel.encoder_tp = 2;
  EXPECT_NE(refusal(encoder_wider).find("parallel.encoder_tp"), std::string::npos);
  // Stages wider than the world (test_pipeline_parallel checks the rest of the pipeline's rules).
  RunConfig pipelined = quickstart("static", 1);
  pipelined.parallel.pp = 4 * world_size();
  EXPECT_NE(refusal(pipelined).find("parallel.pp"), std::string::npos);
}

}  // namespace
}  // namespace minimllm
