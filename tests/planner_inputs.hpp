// Inputs of the planner tests: the decks in inputs/ with a case's batch size and seed, and a global batch of
// text-only samples of given lengths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/data/sampler.hpp"

namespace minimllm::testing_support {

inline RunConfig deck(const std::string& name, int global_batch, std::uint64_t seed) {
  const auto inputs = std::filesystem::path(__FILE__).parent_path().parent_path() / "inputs";
  RunConfig c = load_run_config((inputs / (name + ".yaml")).string());
  c.seed = seed;
  c.data.global_batch = global_batch;
  return c;
}

inline GlobalBatch batch_of_lengths(const std::vector<int>& text_lengths) {
  GlobalBatch batch;
  for (size_t i = 0; i < text_lengths.size(); ++i) {
    SampleMeta s;
    s.id = static_cast<int>(i);
    s.text_len = text_lengths[i];
    batch.samples.push_back(s);
  }
  return batch;
}

}  // namespace minimllm::testing_support
