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
#include "mpi_world.hpp"
#include "whole_batch.hpp"

namespace minimllm {
namespace {

using testing_support::pack_whole_samples;
using testing_support::PackedBatch;
using testing_support::RemoveAtEnd;
using testing_support::world_size;

constexpr double kRelative = 1e-5;
constexpr std::uint64_t kModelSeed = 7;

// Four heads in both stacks (tp and encoder_tp up to 4); a vocabulary of 13, which no group size > 1
// divides, so the vocabulary slices are uneven.
RunConfig tiny_config() {
  const std::string deck =
      "name: tensor_parallel\n"
      "seed: 5\n"
      "model:\n"
      "  init_std: 0.1\n"
      "  encoder: {width: 16, heads: 4, layers: 1, mlp_ratio: 2, patch: 2, channels: 1}\n"
      "  llm: {width: 16, heads: 4, layers: 2, mlp_ratio: 2, vocab: 13}\n"
      "data:\n"
      "  global_batch: 4\n"
      "  text: {median: 8, sigma: 0.5, min: 3, max: 14}\n"
      "  images: {mean_per_sample: 1.5, max_per_sample: 2, min_side: 2, max_side: 6, classes: 3}\n"
      "  incoherence: 0.0\n"
      "  noise: 0.1\n";
  return parse_run_config(deck, "<test_tensor_parallel>");
}

std::vector<float> host_copy(const t_vec& v) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(host.data(), host.data() + host.extent(0));
}

// Each of the split model's tensors against the same elements of the whole model's: the parameters
// exactly (a slice starts as the whole model's values), the gradients within the bound.
void expect_slices_match(const Model& split, const Model& whole) {
  const std::vector<float> params = host_copy(split.params()), whole_params = host_copy(whole.params());
  const std::vector<float> grads = host_copy(split.grads()), whole_grads = host_copy(whole.grads());
  ASSERT_EQ(split.tensor_ranges().size(), whole.tensor_ranges().size());
  for (size_t t = 0; t < split.tensor_ranges().size(); ++t) {
    const TensorRange &slice = split.tensor_ranges()[t], &all = whole.tensor_ranges()[t];
    ASSERT_EQ(slice.name, all.name);
    double largest = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < slice.count; ++i) {
      const std::size_t at = all.offset + whole_tensor_index(slice, i);
      ASSERT_EQ(params[slice.offset + i], whole_params[at]) << slice.name << " element " << i;
      largest = std::max(largest, std::fabs(static_cast<double>(whole_grads[at])));
      worst = std::max(worst, std::fabs(static_cast<double>(grads[slice.offset + i]) - whole_grads[at]));
    }
    EXPECT_LE(worst, kRelative * largest) << slice.name;
  }
}

// One forward and backward of whole samples with images (every rank the same batch).
PackedBatch informative_batch(const Sampler& sampler) {
  for (int step = 0; step < 20; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    if (batch.image_tokens() > 0 && batch.text_tokens() > 8)
      return pack_whole_samples(sampler, step, batch.samples);
  }
  ADD_FAILURE() << "no batch with images in 20 steps";
  return pack_whole_samples(sampler, 0, sampler.batch(0).samples);
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
    for (const auto& image : s.images) {
      images.push_back(static_cast<int>(images.size()));
      largest = std::max(largest, image.patches);
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

void expect_same_losses(const TrainResult& result, const TrainResult& reference) {
  ASSERT_EQ(result.steps.size(), reference.steps.size());
  for (size_t i = 0; i < result.steps.size(); ++i) {
    EXPECT_NEAR(result.steps[i].loss, reference.steps[i].loss, kRelative * reference.steps[i].loss)
        << "step " << i;
    EXPECT_NEAR(result.steps[i].grad_norm, reference.steps[i].grad_norm,
                kRelative * reference.steps[i].grad_norm)
        << "step " << i;
  }
}

struct TrainingCase {
  bool zero;
  const char* recompute;
  int encoder_tp;  // 1: the unit's two encoder groups share its images; 2: one group, split like the LLM
};

// Training under tp = 2 against training without tensor parallelism on the same ranks: static (with
// context parallelism over the units when there are two: TP 2 x CP 2), dhp's per-step groups of units
// under fixed TP 2 for 10 steps, and (with two units) the disaggregated placement. With one unit (2 ranks)
// every combination of the distributed optimizer and recomputation; with two (4 ranks, oversubscribed on
// small machines: each of the group's all-reduces waits for a time slice) fewer. Each with the encoder
// split over both ranks (encoder_tp 2) and shared by two groups of one (encoder_tp 1).
TEST(TensorParallel, TrainingGivesTheLossesOfTrainingWithoutIt) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "tp = 2 needs an even number of ranks";
  const World world = World::of(MPI_COMM_WORLD);
  const int units = world_size() / 2;
  std::vector<TrainingCase> cases = {{false, "none", 1}, {true, "none", 2}, {true, "full", 1}};
  if (units == 1)
    cases.insert(cases.end(), {{false, "selective", 2}, {false, "full", 2}, {true, "selective", 1}});
  std::vector<const char*> policies = {"static", "dhp"};
  if (units > 1) policies.push_back("disagg");
  for (const char* policy : policies) {
    const int cp = std::string(policy) == "static" ? units : 1;
    const TrainResult reference = train(quickstart(policy, 1, cp), world, {});
    for (const TrainingCase& c : cases) {
      SCOPED_TRACE(std::string(policy) + (c.zero ? ", ZeRO-1" : "") + ", recompute " + c.recompute +
                   ", encoder_tp " + std::to_string(c.encoder_tp));
      if (std::string(policy) == "disagg" && (c.zero || c.encoder_tp == 2)) continue;  // time: one case
      RunConfig config = quickstart(policy, 2, cp);
      config.parallel.encoder_tp = c.encoder_tp;
      config.parallel.distributed_optimizer = c.zero;
      config.runtime.recompute = c.recompute;
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
  const World world = World::of(MPI_COMM_WORLD);
  const RemoveAtEnd file{testing_support::shared_temp_path("minimllm_tp_", "tp.ckpt.h5")};
  RunConfig config = quickstart("static", 2);
  config.parallel.distributed_optimizer = true;
  const TrainResult straight = train(config, world, {});
  RunConfig first_part = config;
  first_part.steps = 2;
  TrainOptions checkpointing;
  checkpointing.checkpoint_path = file.path;
  checkpointing.checkpoint_every = 2;
  ASSERT_EQ(train(first_part, world, checkpointing).checkpoints_written, 1);
  TrainOptions restart;
  restart.restart_path = file.path;
  const TrainResult resumed = train(config, world, restart);
  RunConfig without = config;
  without.parallel.tp = 1;
  const TrainResult resumed_without = train(without, world, restart);
  ASSERT_EQ(resumed.steps.size(), 2u);
  ASSERT_EQ(resumed_without.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[2 + i].loss) << "step " << 2 + i;  // bit for bit
    EXPECT_NEAR(resumed_without.steps[i].loss, straight.steps[2 + i].loss,
                kRelative * straight.steps[2 + i].loss)
        << "step " << 2 + i;
  }
}

TEST(TensorParallel, InvalidGridsAreRefusedNamingTheKey) {
  const World world = World::of(MPI_COMM_WORLD);
  const auto refusal = [&](const RunConfig& config) {
    try {
      train(config, world, {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
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
