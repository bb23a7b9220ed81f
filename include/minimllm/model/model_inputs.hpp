// What the model consumes on one rank: the images it encodes, packed for the encoder, and its chunks of
// fused sequences, packed for the LLM, with the index maps that splice image embeddings into them. Built
// by the step layer (step/packing.hpp), on the device before any compute.
#pragma once

#include <vector>

#include "minimllm/kernels/attention.hpp"

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

}  // namespace minimllm
