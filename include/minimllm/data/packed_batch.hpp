// The device-side input of one rank: the images it encodes, packed for the encoder, and its chunks of
// fused sequences, packed for the LLM, with the index maps that splice image embeddings into them.
#pragma once

#include <vector>

#include "minimllm/data/sampler.hpp"
#include "minimllm/kernels/attention.hpp"
#include "minimllm/plan/rank_work.hpp"

namespace minimllm {

struct EncoderInput {
  int patches = 0;                 // rows of pixels
  t_mat pixels;                    // [patches, patch_dim]
  std::vector<int> image_patches;  // patches per image, in row order
  AttentionSegments segments;      // bidirectional, one per image
  double attention_pairs = 0.0;    // visible query-key pairs (for FLOP counts)
};

struct LlmInput {
  int tokens = 0;                // local rows: this rank's chunks, concatenated
  int key_rows = 0;              // rows of the (gathered) key sequence the segments index
  AttentionSegments segments;    // causal; one per chunk: local query rows vs the sample's key rows
  t_ivec text_ids, text_rows;    // token id and local row of every text token
  t_ivec image_rows;             // local row of every image row...
  t_ivec image_src_rows;         // ...and the received-embeddings row that fills it
  t_ivec targets;                // [tokens]: next text token id, or -1 where no loss is taken
  double attention_pairs = 0.0;  // visible query-key pairs over local query rows (FLOP counts)
};

// The images `images` (global numbers, in order) for the encoder.
EncoderInput pack_encoder(const Sampler& sampler, const GlobalBatch& batch, const std::vector<int>& images);

// This rank's chunks of one micro-batch for the LLM; image rows read from the received buffer starting
// at mb.received_offset.
LlmInput pack_llm(const Sampler& sampler, const GlobalBatch& batch, const MicroBatchWork& mb);

struct PackedBatch {
  EncoderInput encoder;
  LlmInput llm;
};

// `samples` of step `step` as one rank would hold them alone (one group, one micro-batch; encoder rows
// in image order map one to one onto received rows). For tests and benchmarks.
PackedBatch pack_samples(const Sampler& sampler, int step, const std::vector<SampleMeta>& samples);

}  // namespace minimllm
