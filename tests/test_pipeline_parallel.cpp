// Pipeline parallelism (parallel.pp, parallel.pp_layers) never changes the math: one pass of a model split
// into stages gives the whole model's loss and, tensor by tensor, its gradients, and training under pp
// (1F1B over micro-batches) gives the losses of training without it: PP 2, PP 4, TP 2 x PP 2, PP 2 x DP 2,
// PP 2 x CP 2, dynamic groups under fixed PP 2, the encoder as its own stage (parallel.encoder_stage) before
// PP 1 or 3, with TP 2, with DP 2 and under dynamic groups, with and without the distributed optimizer and
// recomputation. The 1F1B schedule itself, the stage split, and the grids runs refuse are checked too.
//
// Bound: relative 1e-5, as test_tensor_parallel (the stages hold disjoint tensors, so a pass is the whole
// model's arithmetic; the gradient norm and tensor parallelism's sums reassociate).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/rank_grid.hpp"
#include "minimllm/step/pipeline_schedule.hpp"
#include "model_parallel_support.hpp"
#include "mpi_world.hpp"
#include "region_recorder.hpp"
#include "whole_batch.hpp"

namespace minimllm {
namespace {

using testing_support::expect_held_tensors_match;
using testing_support::expect_same_losses;
using testing_support::informative_batch;
using testing_support::PackedBatch;
using testing_support::world_size;

constexpr double kRelative = testing_support::kLayoutBound;
constexpr std::uint64_t kModelSeed = 7;

TEST(PipelineParallel, OneFOneBRunsEveryMicroBatchOnceWithAtMostTheStagesLeftInFlight) {
  for (int stages = 1; stages <= 4; ++stages)
    for (int micro_batches = 0; micro_batches <= 6; ++micro_batches)
      for (int stage = 0; stage < stages; ++stage) {
        SCOPED_TRACE(std::to_string(stage) + " of " + std::to_string(stages) + " stages, " +
                     std::to_string(micro_batches) + " micro-batches");
        int next_forward = 0, next_backward = 0, in_flight = 0, most = 0;
        for (const PipelineOp& op : one_f_one_b(stage, stages, micro_batches)) {
          if (op.forward) {
            EXPECT_EQ(op.micro_batch, next_forward++);  // forwards in order
            most = std::max(most, ++in_flight);
          } else {
            EXPECT_EQ(op.micro_batch, next_backward++);  // backwards in order, each after its forward
            EXPECT_LT(op.micro_batch, next_forward);
            --in_flight;
          }
        }
        EXPECT_EQ(next_forward, micro_batches);
        EXPECT_EQ(next_backward, micro_batches);
        EXPECT_EQ(most, std::min(stages - stage, micro_batches));
      }
  EXPECT_DOUBLE_EQ(ideal_bubble(2, 4), 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(ideal_bubble(4, 4), 3.0 / 7.0);
  EXPECT_EQ(ideal_bubble(1, 8), 0.0);
}

TEST(PipelineParallel, StagesSplitTheLayersEvenlyOrAsListed) {
  EXPECT_EQ(stage_layer_counts(4, 4, {}), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(stage_layer_counts(5, 2, {}), (std::vector<int>{2, 3}));  // the first stage runs the encoder
  EXPECT_EQ(stage_layer_counts(7, 3, {}), (std::vector<int>{2, 2, 3}));
  EXPECT_EQ(stage_layer_counts(5, 2, {4, 1}), (std::vector<int>{4, 1}));
  const PipelineStage last = pipeline_stage(7, 2, 3, {});
  EXPECT_EQ(last.first_layer, 4);
  EXPECT_EQ(last.layers, 3);
  EXPECT_TRUE(last.last());
  const std::string deck = embedded_quickstart_deck();  // 2 LLM layers
  const auto refusal = [&](const std::string& parallel) {
    try {
      parse_run_config(deck + "\nparallel: " + parallel + "\n", "deck");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(refusal("{pp: 2, pp_layers: [1, 1]}"), "(accepted)");
  EXPECT_NE(refusal("{pp: 2, pp_layers: [2]}").find("parallel.pp_layers"), std::string::npos);
  EXPECT_NE(refusal("{pp: 2, pp_layers: [1, 2]}").find("must sum to model.llm.layers"), std::string::npos);
  EXPECT_NE(refusal("{pp: 2, pp_layers: [2, 0]}").find("parallel.pp_layers"), std::string::npos);
  EXPECT_EQ(refusal("{pp: 2, encoder_schedule: per_micro_batch}"), "(accepted)");  // simulate projects it
  EXPECT_NE(refusal("{encoder_schedule: per_sample}").find("per_micro_batch"), std::string::npos);
}

// Four LLM layers: pp up to 4.
RunConfig tiny_config() { return testing_support::tiny_model_parallel_config("pipeline_parallel", 4); }

// One micro-batch through the stages by hand: the stage holding the encoder encodes (the encoder's own
// stage sends the image rows to the LLM's first and gets their gradients back), each LLM stage sends its
// output on, the last computes the loss, and the gradients come back the same way.
double pipelined_pass(Model& model, const PackedBatch& batch, float scale) {
  constexpr int kRows = 2, kGradients = 3;
  const PipelineStage& stage = model.sharding().pipeline;
  Communicator& stages = *stage.comm;
  const int width = model.config().llm.width, patches = batch.encoder.patches;
  const auto rows = static_cast<std::size_t>(batch.llm.tokens);
  model.zero_grads();
  EncoderActivations enc;
  if (stage.holds_encoder()) model.encoder_forward(batch.encoder, enc);
  const t_mat d_emb("d_emb", stage.holds_encoder() || stage.first() ? patches : 0, width);
  if (stage.stage < 0) {  // the encoder's own stage
    stages.isend(enc.embeddings.data(), enc.embeddings.size(), stage.group_rank(0), kRows)->wait();
    stages.irecv(d_emb.data(), d_emb.size(), stage.group_rank(0), kGradients)->wait();
    model.encoder_backward(batch.encoder, enc, d_emb);
    return stages.allreduce_sum(0.0);
  }
  t_mat received = enc.embeddings;
  if (stage.first() && !stage.holds_encoder()) {
    received = t_mat("received", patches, width);
    stages.irecv(received.data(), received.size(), stage.group_rank(-1), kRows)->wait();
  }
  t_mat x_in("x_in", stage.first() ? 0 : rows, width), d_out("d_out", stage.last() ? 0 : rows, width);
  t_mat d_in("d_in", stage.first() ? 0 : rows, width);
  if (!stage.first()) stages.irecv(x_in.data(), x_in.size(), stage.group_rank(stage.stage - 1), 0)->wait();
  LlmStageActivations acts;
  model.llm_stage_forward(batch.llm, received, x_in, scale, nullptr, acts);
  if (!stage.last()) {
    stages.isend(acts.x_out.data(), acts.x_out.size(), stage.group_rank(stage.stage + 1), 0)->wait();
    stages.irecv(d_out.data(), d_out.size(), stage.group_rank(stage.stage + 1), 1)->wait();
  }
  model.llm_stage_backward(batch.llm, acts, d_out, d_in, d_emb, nullptr);
  if (!stage.first()) stages.isend(d_in.data(), d_in.size(), stage.group_rank(stage.stage - 1), 1)->wait();
  if (stage.holds_encoder()) model.encoder_backward(batch.encoder, enc, d_emb);
  if (stage.first() && !stage.holds_encoder())
    stages.isend(d_emb.data(), d_emb.size(), stage.group_rank(-1), kGradients)->wait();
  return stages.allreduce_sum(acts.loss_sum);  // the last stage's
}

TEST(PipelineParallel, OnePassEqualsTheWholeModelStageByStage) {
  const World world = World::of(MPI_COMM_WORLD);
  if (world.size == 1 || world.size == 3) GTEST_SKIP() << "stages of 2 or 4 ranks";
  const RunConfig config = tiny_config();
  const Sampler sampler(config);
  const PackedBatch batch = informative_batch(sampler);
  const float scale = 1.0f / static_cast<float>(batch.loss_targets);
  std::vector<ModelParallel> grids(2);
  grids[0].pp = world.size;                                     // PP 2 or PP 4
  grids[1].pp = world.size - 1, grids[1].encoder_stage = true;  // the encoder's stage, then PP 1 or 3
  if (world.size == 4) {
    grids.emplace_back();
    grids.back().tp = 2, grids.back().pp = 2, grids.back().encoder_tp = 2;  // TP 2 x PP 2
    grids.emplace_back();
    grids.back().pp = 2, grids.back().tp = 2,
    grids.back().pp_layers = {3, 1};  // listed, shared encoder groups
    grids.emplace_back();
    grids.back().tp = 2, grids.back().encoder_tp = 2, grids.back().encoder_stage = true;  // TP 2, own encoder
  }
  for (const ModelParallel& layout : grids) {
    const RankGrid grid(world, layout, config.model.llm.layers, create_mpi_communicator);
    // The fixed groups by name: the unit's stages (the encoder's own among them) and its tp ranks.
    ASSERT_NE(grid.group("pp"), nullptr);
    EXPECT_EQ(grid.group("pp")->size(), layout.unit_stages());
    EXPECT_EQ(grid.group("tp") ? grid.group("tp")->size() : 1, layout.tp);
    EXPECT_EQ(grid.ranks_per_unit(), layout.ranks_per_unit());
    EXPECT_THROW(grid.group("dp"), std::invalid_argument);
    for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
      SCOPED_TRACE("tp " + std::to_string(layout.tp) + ", pp " + std::to_string(layout.pp) +
                   (layout.encoder_stage ? " + encoder stage" : "") + ", recompute " + to_string(mode));
      Model whole(config.model, kModelSeed, GemmPrecision::fp32, mode);
      Model split(config.model, kModelSeed, GemmPrecision::fp32, mode, grid.sharding());
      const double expected = testing_support::run_step(whole, batch, scale);
      // Under tp the encoder is split too: the one-pass test keeps every rank of a stage's group busy.
      const double loss = pipelined_pass(split, batch, scale);
      EXPECT_NEAR(loss, expected, kRelative * std::fabs(expected));
      EXPECT_GT(expect_held_tensors_match(split, whole), 0);
      // Every tensor is held by exactly one stage (per tensor-parallel rank), the encoder's by the stage
      // holding it only.
      EXPECT_EQ(split.config().vision().layers > 0 && !split.weights().encoder.empty(),
                grid.sharding().pipeline.holds_encoder());
      const double held = static_cast<double>(split.tensor_ranges().size());
      EXPECT_EQ(grid.sharding().pipeline.comm->allreduce_sum(held),
                static_cast<double>(whole.tensor_ranges().size()));
    }
  }
}

RunConfig quickstart(const std::string& policy, int pp, int tp = 1, int cp = 1, bool encoder_stage = false) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  config.model.llm.layers = 4;
  config.steps = policy == "dhp" ? 10 : 4;
  config.data.global_batch = 8;
  config.machine.peak_gflops = 100.0;  // skip the start-up sgemm measurement
  config.parallel.policy = policy;
  config.parallel.micro_batches = 3;  // 1F1B over more than one micro-batch
  config.parallel.pp = pp;
  config.parallel.tp = tp;
  config.parallel.encoder_tp = tp;
  config.parallel.cp = cp;
  config.parallel.encoder_stage = encoder_stage;
  return config;
}

struct TrainingCase {
  const char* policy;
  int pp, tp, cp;
  bool zero;
  const char* recompute;
  bool encoder_stage = false;
  const char* cp_comm = "p2p";
};

// Training under pp against training without model parallelism on the same ranks (the same data-parallel
// and context-parallel layout of units). 2 ranks: PP 2 with every combination of the distributed optimizer
// and recomputation, and dhp's per-step groups. 4 ranks (oversubscribed on small machines): PP 4,
// TP 2 x PP 2, PP 2 x CP 2 (ring and all-to-all), PP 2 x DP 2 and dhp's per-step groups of two units under
// fixed PP 2 for 10 steps, the optimizer and recomputation varied across them.
TEST(PipelineParallel, TrainingGivesTheLossesOfTrainingWithoutIt) {
  const World world = World::of(MPI_COMM_WORLD);
  std::vector<TrainingCase> cases;
  if (world.size == 2)
    cases = {{"static", 2, 1, 1, false, "none"},
             {"static", 2, 1, 1, true, "none"},
             {"static", 2, 1, 1, false, "selective"},
             {"static", 2, 1, 1, true, "selective"},
             {"static", 2, 1, 1, false, "full"},
             {"static", 2, 1, 1, true, "full"},
             {"dhp", 2, 1, 1, false, "none"},
             {"static", 1, 1, 1, false, "none", true},
             {"static", 1, 1, 1, true, "selective", true},
             {"static", 1, 1, 1, false, "full", true},
             {"dhp", 1, 1, 1, true, "none", true}};
  if (world.size == 4)
    cases = {{"static", 4, 1, 1, false, "none"},
             {"static", 4, 1, 1, true, "full"},
             {"static", 2, 2, 1, true, "selective"},
             {"static", 2, 2, 1, false, "none"},
             {"static", 2, 1, 1, true, "none"},
             {"static", 2, 1, 2, false, "full"},
             {"static", 2, 1, 2, true, "selective", false, "a2a"},
             {"dhp", 2, 1, 1, false, "none"},
             {"dhp", 2, 1, 1, true, "selective"}};
  if (cases.empty()) GTEST_SKIP() << "2 or 4 ranks";
  std::map<std::string, TrainResult> references;  // by policy and cp
  for (const TrainingCase& c : cases) {
    const int units = world.size / ((c.pp + (c.encoder_stage ? 1 : 0)) * c.tp);
    SCOPED_TRACE(std::string(c.policy) + ": PP " + std::to_string(c.pp) + " x TP " + std::to_string(c.tp) +
                 (c.cp > 1 ? " x CP " + std::to_string(c.cp) : " x DP " + std::to_string(units)) +
                 (c.encoder_stage ? " + encoder stage" : "") + (c.zero ? ", ZeRO-1" : "") + ", recompute " +
                 c.recompute + ", cp_comm " + c.cp_comm);
    RunConfig config = quickstart(c.policy, c.pp, c.tp, c.cp, c.encoder_stage);
    config.parallel.cp_comm = c.cp_comm;
    config.parallel.distributed_optimizer = c.zero;
    config.runtime.recompute = c.recompute;
    // The reference: the same deck without model parallelism (on all the ranks: the layout never changes
    // the math).
    const std::string key = std::string(c.policy) + " cp " + std::to_string(c.cp);
    if (!references.count(key)) references[key] = train(quickstart(c.policy, 1, 1, c.cp), world, {});
    const TrainResult& reference = references[key];
    const TrainResult result = train(config, world, {});
    expect_same_losses(result, reference);
    // MFU counts the whole model's FLOPs once over every rank.
    EXPECT_NEAR(result.steps.back().model_flops, reference.steps.back().model_flops,
                1e-9 * reference.steps.back().model_flops);
    // The bubble was measured, and the ideal one is (p - 1) / (m + p - 1) for a whole number m of
    // micro-batches (the planner's: static packs bins, parallel.micro_batches splits dynamic groups).
    for (const StepRecord& s : result.steps) {
      EXPECT_GT(s.phase_seconds[Phase::pipeline], 0.0);  // the stages wait on each other
      if (c.pp == 1) {  // the encoder's stage and one LLM stage: no 1F1B schedule
        EXPECT_EQ(s.pipeline_bubble, 0.0);
        EXPECT_EQ(s.ideal_bubble, 0.0);
        continue;
      }
      EXPECT_GT(s.pipeline_bubble, 0.0);
      EXPECT_LT(s.pipeline_bubble, 1.0);
      ASSERT_GT(s.ideal_bubble, 0.0);
      const double micro_batches = (c.pp - 1) * (1.0 - s.ideal_bubble) / s.ideal_bubble;
      EXPECT_NEAR(micro_batches, std::round(micro_batches), 1e-9);
      EXPECT_GE(std::round(micro_batches), 1.0);
    }
    if (c.cp > 1) {
      EXPECT_EQ(result.steps.back().max_group_size, c.cp);  // PP 2 x CP 2 really ran
    }
  }
}

// Checkpoints under pp (and with the encoder's own stage) hold the whole model (the stages assembled): such
// a run restarts from one bit for bit, and a run without stages restarts from the same file and goes on
// with the same losses.
TEST(PipelineParallel, CheckpointsHoldTheWholeModel) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "pp = 2 needs an even number of ranks";
  for (const bool encoder_stage : {false, true}) {
    SCOPED_TRACE(encoder_stage ? "the encoder's own stage and PP 1" : "PP 2");
    RunConfig config = encoder_stage ? quickstart("static", 1, 1, 1, true) : quickstart("static", 2);
    config.parallel.distributed_optimizer = true;
    RunConfig without = config;
    without.parallel.pp = 1, without.parallel.encoder_stage = false;
    testing_support::expect_checkpoints_hold_the_whole_model(config, without, "minimllm_pp_");
  }
}

// The wait on the neighbouring stages is a phase like the others: a Kokkos Tools region.
TEST(PipelineParallel, WaitingOnTheStagesIsAKokkosToolsRegion) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "pp = 2 needs an even number of ranks";
  testing_support::RegionRecorder regions;
  RunConfig config = quickstart("static", 2);
  config.steps = 1;
  train(config, World::of(MPI_COMM_WORLD), {});
  EXPECT_TRUE(regions.pushed("minimllm::pipeline"));
}

TEST(PipelineParallel, InvalidGridsAreRefusedNamingTheKey) {
  const auto refusal = testing_support::training_refusal;
  // More stages than ranks; stages or the encoder's own stage under the disaggregated placement.
  EXPECT_NE(refusal(quickstart("static", 4 * world_size())).find("parallel.pp"), std::string::npos);
  if (world_size() % 2 == 0) {
    const std::string disagg = refusal(quickstart("disagg", 2));
    EXPECT_NE(disagg.find("parallel.pp = 2: pipeline stages run with the colocated placement"),
              std::string::npos)
        << disagg;
  }
  const std::string encoder_stage = refusal(quickstart("disagg", 1, 1, 1, true));
  EXPECT_NE(encoder_stage.find("parallel.encoder_stage = true: the disaggregated placement"),
            std::string::npos)
      << encoder_stage;
}

}  // namespace
}  // namespace minimllm
