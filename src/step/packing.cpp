#include "minimllm/step/packing.hpp"

#include <algorithm>

namespace minimllm {
EncoderInput pack_encoder(const SampleInputs& inputs, const GlobalBatch& batch,
                          const std::vector<int>& images) {
  const std::vector<int> first_image = first_image_of_samples(batch);
  EncoderInput enc;
  std::vector<float> pixels;
  for (int image : images) {
    const int s = static_cast<int>(std::upper_bound(first_image.begin(), first_image.end(), image) -
                                   first_image.begin()) -
                  1;
    const SampleMeta& sample = batch.samples[s];
    const int i = image - first_image[s];
    inputs.append_pixels(image, pixels);
    enc.image_patches.push_back(sample.images[i].patches);
    enc.attention_pairs += static_cast<double>(sample.images[i].patches) * sample.images[i].patches;
    enc.patches += sample.images[i].patches;
  }
  enc.pixels = t_mat(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("batch::pixels")),
                     enc.patches, inputs.patch_dim());
  transfer(enc.pixels, Kokkos::View<const float**, Kokkos::LayoutRight, HostSpace, Kokkos::MemoryUnmanaged>(
                           pixels.data(), enc.patches, inputs.patch_dim()));
  enc.segments = make_self_segments(enc.image_patches, /*causal=*/false);
  return enc;
}

LlmInput pack_llm(const SampleInputs& inputs, const GlobalBatch& batch, const MicroBatchWork& mb) {
  LlmInput llm;
  std::vector<int> text_ids, text_rows, image_rows, image_src_rows, targets;
  SegmentTable segments;
  int received = mb.received_offset;
  for (size_t j = 0; j < mb.chunks.size(); ++j) {
    const SequenceChunk& chunk = mb.chunks[j];
    const SampleMeta& sample = batch.samples[chunk.sample];
    const FusedLayout layout = fused_layout(sample);
    // What fills each fused row: a text token id (>= 0) or an image patch (-1).
    std::vector<int> token_at(sample.tokens(), -1);
    const std::vector<int> tokens = inputs.text_tokens(chunk.sample);
    for (int t = 0; t < sample.text_len; ++t) token_at[layout.text_rows[t]] = tokens[t];

    const int row0 = llm.tokens;  // local row of the chunk's first row
    for (int row = chunk.begin; row < chunk.end; ++row) {
      const int local = row0 + row - chunk.begin;
      if (token_at[row] >= 0) {
        text_ids.push_back(token_at[row]);
        text_rows.push_back(local);
      } else {
        image_rows.push_back(local);
        image_src_rows.push_back(received++);
      }
      // The row before a text token predicts it.
      targets.push_back(row + 1 < sample.tokens() ? token_at[row + 1] : -1);
    }
    const int n = chunk.end - chunk.begin;
    segments.add(row0, n, mb.sample_offsets[j], sample.tokens(), chunk.begin);
    llm.attention_pairs += 0.5 * (static_cast<double>(chunk.end) * (chunk.end + 1) -
                                  static_cast<double>(chunk.begin) * (chunk.begin + 1));
    llm.tokens += n;
  }
  llm.key_rows = mb.sample_offsets.back();
  llm.segments = make_segments(segments, /*causal=*/true);
  llm.text_ids = to_device(text_ids, "batch::text_ids");
  llm.text_rows = to_device(text_rows, "batch::text_rows");
  llm.image_rows = to_device(image_rows, "batch::image_rows");
  llm.image_src_rows = to_device(image_src_rows, "batch::image_src_rows");
  llm.targets = to_device(targets, "batch::targets");
  return llm;
}

EncoderInput pack_encoder(const Sampler& sampler, const GlobalBatch& batch, const std::vector<int>& images) {
  return pack_encoder(SampleInputs::generate(sampler, batch, {}, images), batch, images);
}

LlmInput pack_llm(const Sampler& sampler, const GlobalBatch& batch, const MicroBatchWork& mb) {
  std::vector<int> samples;
  for (const SequenceChunk& chunk : mb.chunks) samples.push_back(chunk.sample);
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
  return pack_llm(SampleInputs::generate(sampler, batch, samples, {}), batch, mb);
}

PackedBatch pack_samples(const Sampler& sampler, int step, const std::vector<SampleMeta>& samples) {
  GlobalBatch batch;
  batch.step = step;
  batch.samples = samples;
  const RankWork work = derive_rank_work(make_in_order_plan(batch, 1), batch, 0, 1, 0.0);
  return {pack_encoder(sampler, batch, work.images), pack_llm(sampler, batch, work.micro_batches.at(0))};
}

}  // namespace minimllm
