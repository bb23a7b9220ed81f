#include "minimllm/step/packing.hpp"

#include <algorithm>

namespace minimllm {
namespace {

// Patches of each of `images` (global numbers).
std::vector<int> patches_of(const GlobalBatch& batch, const std::vector<int>& images) {
  const std::vector<int> first_item = first_item_of_samples(batch);
  std::vector<int> patches;
  for (int image : images) {
    const int s =
        static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), image) - first_item.begin()) -
        1;
    patches.push_back(batch.samples[s].items[image - first_item[s]].rows);
  }
  return patches;
}

}  // namespace

EncoderInput pack_encoder(const SampleInputs& inputs, const GlobalBatch& batch,
                          const std::vector<int>& images) {
  EncoderInput enc;
  enc.image_patches = patches_of(batch, images);
  std::vector<float> pixels;
  for (size_t i = 0; i < images.size(); ++i) {
    inputs.append_pixels(images[i], pixels);
    enc.attention_pairs += static_cast<double>(enc.image_patches[i]) * enc.image_patches[i];
    enc.patches += enc.image_patches[i];
  }
  enc.pixels = t_mat(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("batch::pixels")),
                     enc.patches, inputs.patch_dim());
  transfer(enc.pixels, Kokkos::View<const float**, Kokkos::LayoutRight, HostSpace, Kokkos::MemoryUnmanaged>(
                           pixels.data(), enc.patches, inputs.patch_dim()));
  enc.segments = make_self_segments(enc.image_patches, /*causal=*/false);
  return enc;
}

std::vector<int> encoder_group_images(const GlobalBatch& batch, const std::vector<int>& images, int group,
                                      int groups, std::vector<std::size_t>& group_rows) {
  const std::vector<int> patches = patches_of(batch, images);
  std::int64_t total = 0;
  for (int p : patches) total += p;
  // Image i goes to the group whose share of the patches holds its first patch.
  std::vector<int> own;
  group_rows.assign(groups, 0);
  std::int64_t before = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const int g = total > 0 ? static_cast<int>(before * groups / total) : 0;
    group_rows[g] += patches[i];
    if (g == group) own.push_back(images[i]);
    before += patches[i];
  }
  return own;
}

LlmInput pack_llm(const SampleInputs& inputs, const GlobalBatch& batch, const MicroBatchWork& mb) {
  LlmInput llm;
  std::vector<int> text_ids, text_rows, image_rows, image_src_rows, targets;
  SegmentTable segments;
  int received = mb.received_offset;
  size_t j = 0;  // the chunk's sample's position in the micro-batch (a sample may have two chunks)
  for (const SequenceChunk& chunk : mb.chunks) {
    while (mb.samples[j] != chunk.sample) ++j;
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
  const RankWork work = derive_rank_work(make_in_order_plan(batch, 1), batch, 0, 1);
  return {pack_encoder(sampler, batch, work.items), pack_llm(sampler, batch, work.micro_batches.at(0))};
}

}  // namespace minimllm
