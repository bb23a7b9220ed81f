// The 4-D layout's cost model (layout/model_parallel.hpp): the parameter split matches the model, a trivial
// grid changes nothing, tensor and pipeline parallelism and the distributed optimizer divide compute and
// memory as stated, the 1F1B bubble in predict, the grid's validation, and the 7B-class preset that fits
// only with the grid.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "minimllm/config/input_error.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/simulator.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/step_prediction.hpp"
#include "minimllm/planning/unit_cost_model.hpp"

namespace minimllm {
namespace {

const std::filesystem::path kInputs = std::filesystem::path(__FILE__).parent_path().parent_path() / "inputs";

RunConfig preset(const std::string& name) { return load_run_config((kInputs / (name + ".yaml")).string()); }

RunConfig without_encoder_stage(RunConfig config) {
  config.parallel.encoder_stage = false;
  return config;
}

CostModel rank_cost(const RunConfig& config, int ranks_per_node) {
  CostModel cost = default_cost_model(config, 1000.0, ranks_per_node);
  cost.memory = memory_model(config.model, GemmPrecision::fp32);
  cost.capacity_bytes = 80.0 * (1 << 30);
  cost.step.optimizer = 0.01;
  return cost;
}

TEST(ModelParallel, ParameterSplitIsTheModelsParameterCount) {
  for (const std::string name :
       {"quickstart", "gpt2_124m", "llm_7b_multimodal_4d", "llm_72b_multimodal_4d"}) {
    const RunConfig config =
        name == "quickstart" ? parse_run_config(embedded_quickstart_deck(), name) : preset(name);
    EXPECT_EQ(parameter_split(config.model).total(), static_cast<double>(parameter_count(config.model)))
        << name;
  }
}

TEST(ModelParallel, TrivialGridChangesNothing) {
  RunConfig config = preset("llm_7b_multimodal");
  const CostModel rank = rank_cost(config, 8);
  const CostModel unit = unit_cost_model(rank, config, ModelParallel{}, 64);
  EXPECT_DOUBLE_EQ(unit.llm(4096.0), rank.llm(4096.0));
  const EncoderItem image{384, 384, 576, 0};
  EXPECT_DOUBLE_EQ(unit.encoder_time(image), rank.encoder_time(image));
  EXPECT_DOUBLE_EQ(unit.llm_comm(4096.0, 4, false), rank.llm_comm(4096.0, 4, false));
  EXPECT_DOUBLE_EQ(unit.memory.state, rank.memory.state);
  EXPECT_DOUBLE_EQ(unit.memory.per_row, rank.memory.per_row);
  EXPECT_DOUBLE_EQ(unit.step.grad_bytes, rank.step.grad_bytes);
  EXPECT_EQ(unit.ranks_per_node, 8);
  EXPECT_EQ(unit.pipeline_stages, 1);
}

TEST(ModelParallel, TensorAndPipelineParallelismDivideWorkAndMemory) {
  const RunConfig config = preset("llm_7b_multimodal");
  const CostModel rank = rank_cost(config, 8);
  ModelParallel grid;
  grid.tp = 4, grid.pp = 2;
  const CostModel unit = unit_cost_model(rank, config, grid, 64);
  EXPECT_EQ(unit.ranks_per_node, 2);  // units of 4 ranks: 2 per node
  EXPECT_EQ(unit.pipeline_stages, 2);
  // Compute / 8, plus the tensor-parallel all-reduces (positive, linear in tokens).
  const double s = 4096.0;
  const double compute = (rank.llm(s) - rank.llm.c) / 8.0;
  const double traffic = unit.llm(s) - unit.llm.c - compute;
  EXPECT_GT(traffic, 0.0);
  EXPECT_NEAR(unit.llm(2 * s) - unit.llm.c - (rank.llm(2 * s) - rank.llm.c) / 8.0, 2.0 * traffic,
              1e-9 * compute);
  // 4 all-reduces of a fp32 row per layer and token, on the 4 ranks of a node: the ring's bus bytes; and
  // the row's activation and gradient between the stages, 32 ranks each: on the link between nodes.
  const double per_token =
      4.0 * 32 / 2 * 2.0 * 3.0 / 4.0 * (4.0 * 4096) / rank.step.allreduce_intra.bandwidth +
      2.0 * 4.0 * 4096 / rank.point_to_point(true).bandwidth;
  EXPECT_NEAR(traffic / s, per_token, 1e-9 * per_token);
  EXPECT_DOUBLE_EQ(unit.kv_row_bytes, rank.kv_row_bytes / 4);
  EXPECT_DOUBLE_EQ(unit.cp_layers, rank.cp_layers / 2);
  EXPECT_EQ(unit.cp_recompute, grid.recompute);  // the forward exchanges recomputation repeats
  EXPECT_DOUBLE_EQ(unit.memory.per_row, rank.memory.per_row / 4);
  // The state: the larger stage's 16 layers and embedding (or head) / 4, the encoder whole, 16 bytes each.
  const ParameterSplit split = parameter_split(config.model);
  const double parameters =
      (16 * split.llm_block + std::max(split.embedding, split.head)) / 4 + split.encoder;
  EXPECT_DOUBLE_EQ(parameters_per_rank(config.model, grid), parameters);
  EXPECT_DOUBLE_EQ(unit.memory.state, 16.0 * parameters);
  EXPECT_NEAR(unit.step.grad_bytes, 4.0 * parameters, 1e-6 * unit.step.grad_bytes);
}

// The encoder runs on one stage's tp ranks, the LLM's first or its own (parallel.encoder_stage), as runs
// place it; its own stage adds one point-to-point hop per patch (the rows to the LLM's first stage and
// back), and a rank then holds the larger of the two stages' parameters, never both. A listed stage split
// (parallel.pp_layers) sets the pace and the memory by its fullest stage.
TEST(ModelParallel, TheEncodersStageAndTheListedStagesSetWorkAndMemory) {
  const RunConfig config = preset("llm_7b_multimodal");
  const CostModel rank = rank_cost(config, 8);
  ModelParallel shared, own;
  shared.tp = own.tp = 4, shared.pp = own.pp = 2, own.encoder_stage = true;
  const CostModel with_llm = unit_cost_model(rank, config, shared, 64);  // 8 units of 8 ranks
  const CostModel apart = unit_cost_model(rank, config, own, 96);        // 8 units of 12 ranks
  const PhaseCost &apart_encoder = apart.encoders.at(0).compute,
                  &shared_encoder = with_llm.encoders.at(0).compute;
  EXPECT_DOUBLE_EQ(apart_encoder.a2, rank.encoders.at(0).compute.a2 / 4);
  EXPECT_DOUBLE_EQ(shared_encoder.a2, rank.encoders.at(0).compute.a2 / 4);
  const double hop = 2.0 * 4.0 * config.model.llm.width / rank.point_to_point(true).bandwidth;
  EXPECT_NEAR(apart_encoder.a1 - shared_encoder.a1, hop, 1e-9 * hop);
  EXPECT_DOUBLE_EQ(apart.llm.a2, with_llm.llm.a2);  // the LLM's stages alike
  EXPECT_FALSE(with_llm.memory.encoder_apart);
  EXPECT_TRUE(apart.memory.encoder_apart);
  const ParameterSplit split = parameter_split(config.model);
  const double llm = (16 * split.llm_block + std::max(split.embedding, split.head)) / 4;
  EXPECT_DOUBLE_EQ(parameters_per_rank(config.model, own), std::max(llm, split.encoder));
  EXPECT_DOUBLE_EQ(parameters_per_rank(config.model, shared), llm + split.encoder);
  // 32 layers as [8, 24]: the second stage, 24 layers and the head, sets both.
  ModelParallel listed = shared;
  listed.pp_layers = {8, 24};
  const CostModel uneven = unit_cost_model(rank, config, listed, 64);
  EXPECT_DOUBLE_EQ(uneven.llm.a2, with_llm.llm.a2 * 24.0 / 16.0);
  EXPECT_DOUBLE_EQ(parameters_per_rank(config.model, listed),
                   (24 * split.llm_block + split.head) / 4 + split.encoder);
}

TEST(ModelParallel, DistributedOptimizerShardsTheMomentsOverTheUnits) {
  const RunConfig config = preset("llm_7b_multimodal");
  const CostModel rank = rank_cost(config, 8);
  ModelParallel grid;
  grid.tp = 2, grid.distributed_optimizer = true;
  const CostModel unit = unit_cost_model(rank, config, grid, 64);  // 32 units
  const double parameters = parameters_per_rank(config.model, grid);
  EXPECT_NEAR(unit.memory.state, (8.0 + 12.0 / 32) * parameters, 16.0);  // rounding to whole parameters
  EXPECT_NEAR(unit.step.optimizer,
              rank.step.optimizer * parameters / parameter_split(config.model).total() / 32, 1e-12);
}

TEST(ModelParallel, FullRecomputationAddsAForward) {
  const RunConfig config = preset("llm_7b_multimodal");
  const CostModel rank = rank_cost(config, 8);
  ModelParallel grid;
  grid.recompute = Recompute::full;
  const CostModel unit = unit_cost_model(rank, config, grid, 8);
  EXPECT_DOUBLE_EQ(unit.llm.a1, rank.llm.a1 * 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(unit.llm.a2, rank.llm.a2 * 4.0 / 3.0);
  grid.recompute = Recompute::selective;  // the attention core: the quadratic term only
  const CostModel selective = unit_cost_model(rank, config, grid, 8);
  EXPECT_DOUBLE_EQ(selective.llm.a1, rank.llm.a1);
  EXPECT_DOUBLE_EQ(selective.llm.a2, rank.llm.a2 * 4.0 / 3.0);
}

// One group of 2 units running m micro-batches through 4 stages: (m + 3) / m of its work, the bubble 3 / m.
TEST(ModelParallel, PredictChargesThePipelineBubble) {
  const RunConfig config = preset("llm_7b_multimodal");
  CostModel cost = rank_cost(config, 8);
  cost.capacity_bytes = 0.0;
  GlobalBatch batch;
  for (int i = 0; i < 8; ++i) {
    SampleMeta s;
    s.id = i, s.text_len = 1000 + 100 * i;
    batch.samples.push_back(s);
  }
  StepPlan plan;
  plan.policy = "deck";
  LlmGroup group;
  group.ranks = {0, 1};
  for (int i = 0; i < 8; ++i) group.samples.push_back(i);
  group.micro_batches = 4;
  group.micro_batch_ends = {2, 4, 6, 8};
  plan.llm_groups = {group};
  plan.encoder_ranks = {0, 1};
  const PlanPrediction flat = predict(plan, batch, cost, 2);
  cost.pipeline_stages = 4;
  const PlanPrediction piped = predict(plan, batch, cost, 2);
  EXPECT_NEAR(piped.llm, flat.llm * 7.0 / 4.0, 1e-12 * piped.llm);
  EXPECT_NEAR(piped.bubble, flat.llm * 3.0 / 4.0, 1e-12 * piped.llm);
  EXPECT_DOUBLE_EQ(flat.bubble, 0.0);
}

TEST(ModelParallel, InvalidGridsAreRejectedNamingTheKey) {
  const auto message = [](const ModelParallel& grid, int ranks, int per_node) {
    try {
      validate_model_parallel(grid, ranks, per_node);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ModelParallel grid;
  grid.tp = 3;
  EXPECT_NE(message(grid, 24, 8).find("parallel.tp = 3: must divide the ranks per node (8)"),
            std::string::npos);
  grid.tp = 4, grid.pp = 3;
  EXPECT_NE(message(grid, 16, 8).find("must divide the 16 ranks"), std::string::npos);
  grid.pp = 2, grid.encoder_tp = 8;  // more than a stage's tp ranks: its groups would span nodes
  EXPECT_NE(message(grid, 16, 8).find("parallel.encoder_tp = 8: must divide parallel.tp (= 4)"),
            std::string::npos);
  // The encoder's own stage adds tp ranks to a unit: 4 x (2 + 1) does not divide 16, does divide 24.
  grid.encoder_tp = 1, grid.encoder_stage = true;
  EXPECT_NE(message(grid, 16, 8).find("parallel.encoder_stage"), std::string::npos);
  EXPECT_EQ(message(grid, 24, 8), "");
  EXPECT_EQ(grid.ranks_per_unit(), 12);
  grid.encoder_stage = false;
  EXPECT_EQ(message(grid, 16, 8), "");
  // Deck rules: heads split by tp, layers by pp.
  const std::string deck = embedded_quickstart_deck();
  EXPECT_THROW(parse_run_config(deck + "\nparallel: {tp: 3}\n", "deck"), InputError);
  EXPECT_THROW(parse_run_config(deck + "\nparallel: {pp: 64}\n", "deck"), InputError);
  // Runs have tensor, pipeline, data and context parallelism and the encoder's own stage; pipeline stages
  // and the encoder's stage need the colocated placement.
  grid = ModelParallel{};
  grid.tp = 2, grid.encoder_tp = 2, grid.pp = 2;
  EXPECT_NO_THROW(require_runnable_grid(grid));
  EXPECT_THROW(require_runnable_grid(grid, true), InputError);
  // Runs take the encoder per micro-batch without pipeline stages or an encoder stage only.
  EXPECT_THROW(require_runnable_grid(grid, false, EncoderSchedule::per_micro_batch), InputError);
  EXPECT_NO_THROW(require_runnable_grid(ModelParallel{}, false, EncoderSchedule::per_micro_batch));
  grid.pp = 1;
  EXPECT_NO_THROW(require_runnable_grid(grid, true));
  grid.encoder_stage = true;
  EXPECT_NO_THROW(require_runnable_grid(grid));
  EXPECT_THROW(require_runnable_grid(grid, true), InputError);
}

// The 7B-class preset does not fit an 80 GB rank without its grid (16 bytes per parameter), and fits with
// it; every policy's projected MFU is a fraction, and pipeline parallelism shows a bubble.
TEST(ModelParallel, SevenBillionPresetFitsOnlyWithTheGrid) {
  RunConfig config = preset("llm_7b_multimodal_4d");
  config.steps = 1;
  config.data.global_batch = 512;
  SimulateOptions options;
  options.ranks = 128;
  options.machine_file = (kInputs / "machines" / "dgx-h100.yaml").string();
  options.planning_seconds = 0.0;
  options.policies = {"static", "dhp_search"};
  const std::vector<PolicySummary> result = simulate(config, options);
  for (const PolicySummary& s : result) {
    SCOPED_TRACE(s.policy);
    EXPECT_TRUE(s.fits);
    EXPECT_GT(s.mfu, 0.0);
    EXPECT_LT(s.mfu, 1.0);
    EXPECT_GT(s.bubble_fraction, 0.0);
  }
  // The encoder's own stage (12-rank units): a rank holds the LLM's stage or the encoder's, not both; on
  // as many units (8) as the grid without it, each unit's images go to 4 encoder ranks instead of 8, and
  // the stages run one after the other, each idle while the other works: a lower MFU.
  RunConfig encoder_apart = config;
  encoder_apart.parallel.encoder_stage = true;
  encoder_apart.data.global_batch = config.data.global_batch / 4;
  SimulateOptions eight_units = options;
  eight_units.ranks = 64;
  const std::vector<PolicySummary> shared = simulate(without_encoder_stage(encoder_apart), eight_units);
  eight_units.ranks = 96;
  const std::vector<PolicySummary> apart = simulate(encoder_apart, eight_units);
  for (size_t i = 0; i < apart.size(); ++i) {
    SCOPED_TRACE(apart[i].policy + " with the encoder's own stage");
    EXPECT_TRUE(apart[i].fits);
    EXPECT_GT(apart[i].mfu, 0.0);
    EXPECT_LT(apart[i].mfu, shared[i].mfu);
  }
  options.ranks = 128;
  config.parallel.tp = config.parallel.pp = config.parallel.encoder_tp = 1;
  config.parallel.distributed_optimizer = false;
  try {
    simulate(config, options);
    ADD_FAILURE() << "the 7B-class model fitted without its grid";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parameters, gradients and AdamW moments alone need"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace minimllm
