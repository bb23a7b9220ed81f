// The device-side input of one rank: its images packed for the encoder and its fused sequences packed
// for the LLM, with the index maps that splice image embeddings into the sequences.
#pragma once

#include <vector>

#include "minimllm/data/sampler.hpp"
#include "minimllm/kernels/attention.hpp"

namespace minimllm {

struct EncoderInput {
  int patches = 0;                 // rows of pixels
  t_mat pixels;                    // [patches, patch_dim]
  std::vector<int> image_patches;  // patches per image, in row order
  AttentionSegments segments;      // bidirectional, one per image
};

struct LlmInput {
  int tokens = 0;                   // rows of the packed fused sequence
  std::vector<int> sample_tokens;   // fused length per sample, in row order
  AttentionSegments segments;       // causal, one per sample
  t_ivec text_ids, text_rows;       // token id and packed row of every text token
  t_ivec image_rows;                // packed row of every encoder output row (same order as EncoderInput)
  t_ivec targets;                   // [tokens]: next text token id, or -1 where no loss is taken
  std::int64_t loss_targets = 0;    // rows with targets >= 0
};

struct PackedBatch {
  EncoderInput encoder;
  LlmInput llm;
};

// Packs `samples` (in order) of step `step`: images for the encoder, fused sequences for the LLM.
PackedBatch pack_samples(const Sampler& sampler, int step, const std::vector<SampleMeta>& samples);

}  // namespace minimllm
