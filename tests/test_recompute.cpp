// Activation recomputation (runtime.recompute) changes what the forward keeps, never the math: training
// under any layout gives bitwise the losses and gradient norms of keeping everything, and the memory
// estimate falls with what is dropped. (The single-pass check, every gradient element of a tiny model,
// is in test_model_gradients.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>

#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"

namespace minimllm {
namespace {

const Recompute kDroppingModes[] = {Recompute::selective, Recompute::full};

RunConfig quickstart_with(const std::string& policy, int cp) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "<embedded quickstart deck>");
  config.steps = 4;
  config.machine.peak_gflops = 100.0;  // skip the start-up sgemm measurement
  config.parallel.policy = policy;
  config.parallel.cp = cp;
  return config;
}

// Static's layout does not depend on the cost model's compute times, so under recomputation its plans, and
// so its losses, are bitwise those of `none` (exact). The dynamic policies see recomputation's extra
// forward in their cost model (layout/model_parallel.hpp) and may choose other layouts: their losses then
// agree within layout invariance's float reassociation (test_training's 1e-5 relative), as any two
// layouts do; the bitwise check of the recomputation itself on one pass is test_model_gradients'.
void expect_same_training(const RunConfig& config, bool context_parallel, bool exact) {
  const TrainResult reference = train(config, World::of(MPI_COMM_WORLD), {});
  ASSERT_EQ(reference.recompute, "none");
  int widest_group = 0;
  for (const StepRecord& s : reference.steps) widest_group = std::max(widest_group, s.max_group_size);
  // Not vacuous: the K|V exchange (and its repetition under recomputation) really ran.
  if (context_parallel) {
    EXPECT_GT(widest_group, 1);
  }
  for (Recompute mode : kDroppingModes) {
    SCOPED_TRACE(std::string("recompute ") + to_string(mode));
    RunConfig recomputing = config;
    recomputing.runtime.recompute = to_string(mode);
    const TrainResult result = train(recomputing, World::of(MPI_COMM_WORLD), {});
    ASSERT_EQ(result.recompute, to_string(mode));
    ASSERT_EQ(result.steps.size(), reference.steps.size());
    for (size_t i = 0; i < result.steps.size(); ++i) {
      if (exact) {
        EXPECT_EQ(result.steps[i].loss, reference.steps[i].loss) << "step " << i;
        EXPECT_EQ(result.steps[i].grad_norm, reference.steps[i].grad_norm) << "step " << i;
      } else {
        EXPECT_NEAR(result.steps[i].loss, reference.steps[i].loss, 1e-5 * reference.steps[i].loss)
            << "step " << i;
      }
    }
    // On the same layout the estimate falls; a dynamic policy's other layout may hold more rows a rank.
    if (exact) {
      EXPECT_LT(result.memory_estimate_mib, reference.memory_estimate_mib);
    }
  }
}

int world_size() {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  return ranks;
}

// Under every context-parallel mechanism (the quickstart's 4 heads: a2a shards them over cp 2).
TEST(Recompute, StaticContextParallelTrainingIsBitwiseTheSame) {
  const int cp = world_size() % 2 == 0 ? 2 : 1;
  for (const char* mode : {"p2p", "a2a", "all_gather"}) {
    SCOPED_TRACE(mode);
    RunConfig config = quickstart_with("static", cp);
    config.parallel.cp_comm = mode;
    expect_same_training(config, cp > 1, true);
  }
}

TEST(Recompute, DynamicPoliciesTrainTheSameUpToReassociation) {
  for (const char* policy : {"dhp", "flexsp"}) {
    SCOPED_TRACE(policy);
    expect_same_training(quickstart_with(policy, 1), false, false);
  }
}

// The estimate (and so the planners' capacity) follows the mode: selective drops attn and lse per block,
// full all but each block's input.
TEST(Recompute, ActivationEstimateFallsWithWhatIsDropped) {
  const RunConfig config = quickstart_with("static", 1);
  ModelConfig model = config.model;
  model.llm.layers = 6;
  model.vision().layers = 3;
  for (std::int64_t keys : {0, 3000}) {
    SCOPED_TRACE("key rows " + std::to_string(keys));
    const auto bytes = [&](Recompute mode) {
      return activation_bytes(model, GemmPrecision::fp32, mode, 1000, 500, keys);
    };
    EXPECT_GT(bytes(Recompute::none), bytes(Recompute::selective));
    EXPECT_GT(bytes(Recompute::selective), bytes(Recompute::full));
    // Per block selective drops attn and lse (width + heads floats per row) of all but one block.
    const double dropped =
        4.0 * (model.llm.width + model.llm.heads) * (model.llm.layers - 1) * 1000 +
        4.0 * (model.vision().width + model.vision().heads) * (model.vision().layers - 1) * 500;
    EXPECT_DOUBLE_EQ(bytes(Recompute::none) - bytes(Recompute::selective), dropped);
  }
  const MemoryModel none = memory_model(model, GemmPrecision::fp32, Recompute::none);
  const MemoryModel selective = memory_model(model, GemmPrecision::fp32, Recompute::selective);
  const MemoryModel full = memory_model(model, GemmPrecision::fp32, Recompute::full);
  EXPECT_GT(none.per_row, selective.per_row);
  EXPECT_GT(selective.per_row, full.per_row);
  EXPECT_GT(none.per_encoder_row.at(0), selective.per_encoder_row.at(0));
  EXPECT_GT(selective.per_encoder_row.at(0), full.per_encoder_row.at(0));
  // The ring keeps no other member's K|V: its key rows cost the same whatever the blocks keep.
  EXPECT_DOUBLE_EQ(selective.per_key_row, full.per_key_row);
  const auto gathered = [&](Recompute mode) {
    return memory_model(model, GemmPrecision::fp32, mode, 1, CpComm::all_gather);
  };
  // Gathered: full recomputation keeps one block's gathered K|V, not every block's.
  EXPECT_GT(gathered(Recompute::selective).per_key_row, gathered(Recompute::full).per_key_row);
  // The ring's blocks in flight weigh more per row than one gathered block, but cover a member's rows
  // (tokens / g): less from a group of 2; and less per row than every layer's gathered K|V.
  EXPECT_LT(full.per_key_row / 2, gathered(Recompute::full).per_key_row);
  EXPECT_LT(full.per_key_row, gathered(Recompute::none).per_key_row);
  // a2a: the head shard of the group's rows, kept per block, counted per row of the largest member (and
  // never less than the ring, which a group not dividing the heads runs).
  const auto sharded = [&](Recompute mode) {
    return memory_model(model, GemmPrecision::fp32, mode, 1, CpComm::a2a);
  };
  EXPECT_TRUE(sharded(Recompute::none).keys_per_member);
  EXPECT_GE(sharded(Recompute::full).per_key_row, full.per_key_row);
  EXPECT_GT(sharded(Recompute::selective).per_key_row, sharded(Recompute::full).per_key_row);
}

}  // namespace
}  // namespace minimllm
