// A batch of whole samples on one rank, and one forward and backward of the model over it (the model tests'
// reference pass: no context parallelism, every image encoded in global order).
#pragma once

#include <cstdint>
#include <vector>

#include "minimllm/data/sampler.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/step/packing.hpp"

namespace minimllm::testing_support {

// The single-rank input of whole samples, as the step executor builds it for one rank without context
// parallelism: every image encoded in global order, one LLM micro-batch holding every sample whole. The LLM
// then receives the encoder's output rows in the same order, so the embeddings feed it directly.
struct PackedBatch {
  EncoderInput encoder;
  LlmInput llm;
  std::int64_t loss_targets = 0;  // text tokens with a predecessor: the mean loss's denominator
};

inline PackedBatch pack_whole_samples(const Sampler& sampler, int step,
                                      const std::vector<SampleMeta>& samples) {
  const GlobalBatch batch{step, samples};
  MicroBatchWork mb;
  mb.sample_offsets = {0};
  int images = 0;
  for (int s = 0; s < static_cast<int>(samples.size()); ++s) {
    mb.samples.push_back(s);
    mb.chunks.push_back({s, 0, samples[s].tokens()});
    mb.sample_offsets.push_back(mb.sample_offsets.back() + samples[s].tokens());
    images += static_cast<int>(samples[s].items.size());
  }
  std::vector<int> all_images(images);
  for (int i = 0; i < images; ++i) all_images[i] = i;
  PackedBatch packed;
  packed.encoder = pack_encoder(sampler, batch, all_images);
  packed.llm = pack_llm(sampler, batch, mb);
  packed.loss_targets = batch.loss_targets();
  return packed;
}

// One forward+backward with an explicit loss-gradient scale; returns the summed loss.
inline double run_step(Model& model, const PackedBatch& batch, float grad_scale) {
  model.zero_grads();
  EncoderActivations enc;
  model.encoder_forward(batch.encoder, enc);
  t_mat d_emb("d_image_embeddings", batch.encoder.patches, model.config().llm.width);
  const double loss_sum = model.llm_forward_backward(batch.llm, enc.embeddings, grad_scale, d_emb);
  model.encoder_backward(batch.encoder, enc, d_emb);
  return loss_sum;
}

}  // namespace minimllm::testing_support
