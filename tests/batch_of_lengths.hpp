// A global batch of text-only samples of the given lengths (planner tests).
#pragma once

#include <vector>

#include "minimllm/data/sampler.hpp"

namespace minimllm::testing_support {

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
