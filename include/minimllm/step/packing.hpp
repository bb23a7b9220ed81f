// Packing a rank's share of a global batch into the model's inputs (model/model_inputs.hpp): pixels and
// token ids as the step's sample movement delivered them (sample_movement.hpp), index lists from the
// rank's work, all uploaded to the device.
#pragma once

#include <cstddef>
#include <vector>

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/model/model_inputs.hpp"
#include "minimllm/step/sample_movement.hpp"

namespace minimllm {

// The images `images` (global numbers, in order) for the encoder.
EncoderInput pack_encoder(const SampleInputs& inputs, const GlobalBatch& batch,
                          const std::vector<int>& images);

// Shared encoder groups (parallel.encoder_tp < parallel.tp, RankGrid::encoder_groups): the
// unit's `images` cut into `groups` contiguous runs balanced by patches (an image goes whole to the group
// whose share holds its first patch). Returns group `group`'s run; group_rows: every group's patches, in
// group order (the all-gather of their embeddings).
std::vector<int> encoder_group_images(const GlobalBatch& batch, const std::vector<int>& images, int group,
                                      int groups, std::vector<std::size_t>& group_rows);

// This rank's chunks of one micro-batch for the LLM; image rows read from the received buffer starting
// at mb.received_offset.
LlmInput pack_llm(const SampleInputs& inputs, const GlobalBatch& batch, const MicroBatchWork& mb);

// The same with the inputs generated here (SampleInputs::generate): a rank alone, tests and benchmarks.
EncoderInput pack_encoder(const Sampler& sampler, const GlobalBatch& batch, const std::vector<int>& images);
LlmInput pack_llm(const Sampler& sampler, const GlobalBatch& batch, const MicroBatchWork& mb);

struct PackedBatch {
  EncoderInput encoder;
  LlmInput llm;
};

// `samples` of step `step` as one rank would hold them alone (one group, one micro-batch; encoder rows
// in image order map one to one onto received rows). For tests and benchmarks.
PackedBatch pack_samples(const Sampler& sampler, int step, const std::vector<SampleMeta>& samples);

}  // namespace minimllm
