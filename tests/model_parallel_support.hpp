// What the model-parallel tests (test_tensor_parallel, test_pipeline_parallel) share: a tiny deck with
// four heads in both stacks and a vocabulary of 13 (no group size > 1 divides it: uneven vocabulary
// slices), a batch with images, the bound between layouts, and the comparisons of training runs.
//
// Bound: relative 1e-5. Model parallelism sums partial products where the whole model sums once (the
// row-parallel layers' all-reduces, the vocabulary-parallel softmax's statistics, the gradient norm over
// stages), so results agree up to float reassociation, as any two layouts do (test_training's bound).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"
#include "mpi_world.hpp"
#include "whole_batch.hpp"

namespace minimllm::testing_support {

inline constexpr double kLayoutBound = 1e-5;

inline RunConfig tiny_model_parallel_config(const std::string& name, int llm_layers) {
  const std::string deck =
      "name: " + name +
      "\n"
      "seed: 5\n"
      "model:\n"
      "  init_std: 0.1\n"
      "  encoder: {width: 16, heads: 4, layers: 1, mlp_ratio: 2, patch: 2, channels: 1}\n"
      "  llm: {width: 16, heads: 4, layers: " +
      std::to_string(llm_layers) +
      ", mlp_ratio: 2, vocab: 13}\n"
      "data:\n"
      "  global_batch: 4\n"
      "  text: {median: 8, sigma: 0.5, min: 3, max: 14}\n"
      "  images: {mean_per_sample: 1.5, max_per_sample: 2, min_side: 2, max_side: 6, classes: 3}\n"
      "  incoherence: 0.0\n"
      "  noise: 0.1\n";
  return parse_run_config(deck, "<" + name + ">");
}

inline std::vector<float> host_copy(const t_vec& v) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(host.data(), host.data() + host.extent(0));
}

// Each tensor this rank holds against the same elements of the whole model's, found by name: the
// parameters exactly, the gradients within the bound. Returns how many tensors it compared.
inline int expect_held_tensors_match(const Model& split, const Model& whole) {
  const std::vector<float> params = host_copy(split.params()), whole_params = host_copy(whole.params());
  const std::vector<float> grads = host_copy(split.grads()), whole_grads = host_copy(whole.grads());
  std::map<std::string, TensorRange> all;
  for (const TensorRange& t : whole.tensor_ranges()) all.emplace(t.name, t);
  for (const TensorRange& slice : split.tensor_ranges()) {
    const TensorRange& tensor = all.at(slice.name);
    double largest = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < slice.count; ++i) {
      const std::size_t at = tensor.offset + whole_tensor_index(slice, i);
      EXPECT_EQ(params[slice.offset + i], whole_params[at]) << slice.name << " element " << i;
      largest = std::max(largest, std::fabs(static_cast<double>(whole_grads[at])));
      worst = std::max(worst, std::fabs(static_cast<double>(grads[slice.offset + i]) - whole_grads[at]));
    }
    EXPECT_LE(worst, kLayoutBound * largest) << slice.name;
  }
  return static_cast<int>(split.tensor_ranges().size());
}

// One forward and backward of whole samples with images (every rank the same batch).
inline PackedBatch informative_batch(const Sampler& sampler) {
  for (int step = 0; step < 20; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    if (batch.encoder_rows() > 0 && batch.text_tokens() > 8)
      return pack_whole_samples(sampler, step, batch.samples);
  }
  ADD_FAILURE() << "no batch with images in 20 steps";
  return pack_whole_samples(sampler, 0, sampler.batch(0).samples);
}

// Each step's loss and gradient norm within the bound.
inline void expect_same_losses(const TrainResult& result, const TrainResult& reference) {
  ASSERT_EQ(result.steps.size(), reference.steps.size());
  for (size_t i = 0; i < result.steps.size(); ++i) {
    EXPECT_NEAR(result.steps[i].loss, reference.steps[i].loss, kLayoutBound * reference.steps[i].loss)
        << "step " << i;
    EXPECT_NEAR(result.steps[i].grad_norm, reference.steps[i].grad_norm,
                kLayoutBound * reference.steps[i].grad_norm)
        << "step " << i;
  }
}

// The InputError training `config` on every rank throws, or "(accepted)".
inline std::string training_refusal(const RunConfig& config) {
  try {
    train(config, World::of(MPI_COMM_WORLD), {});
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("(accepted)");
}

// A checkpoint holds the whole model whatever the grid: `config` (4 steps) run straight, and run 2 steps,
// checkpointed and restarted, give the same last 2 losses bit for bit; `other_grid` restarted from the
// same file gives them within the bound.
inline void expect_checkpoints_hold_the_whole_model(const RunConfig& config, const RunConfig& other_grid,
                                                    const std::string& prefix) {
  const World world = World::of(MPI_COMM_WORLD);
  const RemoveAtEnd file{shared_temp_path(prefix, "ckpt.h5")};
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
  const TrainResult resumed_other = train(other_grid, world, restart);
  ASSERT_EQ(resumed.steps.size(), 2u);
  ASSERT_EQ(resumed_other.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[2 + i].loss) << "step " << 2 + i;  // bit for bit
    EXPECT_NEAR(resumed_other.steps[i].loss, straight.steps[2 + i].loss,
                kLayoutBound * straight.steps[2 + i].loss)
        << "step " << 2 + i;
  }
}

}  // namespace minimllm::testing_support
