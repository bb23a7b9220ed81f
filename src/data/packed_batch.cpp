#include "minimllm/data/packed_batch.hpp"

namespace minimllm {
namespace {

t_ivec to_device(const std::vector<int>& host, const char* label) {
  t_ivec v(std::string(label), host.size());
  Kokkos::deep_copy(v, Kokkos::View<const int*, HostSpace, Kokkos::MemoryUnmanaged>(host.data(), host.size()));
  return v;
}

}  // namespace

PackedBatch pack_samples(const Sampler& sampler, int step, const std::vector<SampleMeta>& samples) {
  PackedBatch batch;
  std::vector<float> pixels;
  std::vector<int> text_ids, text_rows, image_rows, targets;
  int row0 = 0;  // first packed row of the current sample
  for (const SampleMeta& s : samples) {
    const FusedLayout layout = fused_layout(s);
    const std::vector<int> tokens = sampler.text_tokens(step, s);
    for (size_t i = 0; i < s.images.size(); ++i) {
      sampler.append_image_patches(step, s, static_cast<int>(i), pixels);
      batch.encoder.image_patches.push_back(s.images[i].patches);
      for (int p = 0; p < s.images[i].patches; ++p) image_rows.push_back(row0 + layout.image_first_row[i] + p);
    }
    targets.resize(row0 + s.tokens(), -1);
    for (int t = 0; t < s.text_len; ++t) {
      text_ids.push_back(tokens[t]);
      text_rows.push_back(row0 + layout.text_rows[t]);
      // The row before a text token predicts it.
      if (layout.text_rows[t] > 0) targets[row0 + layout.text_rows[t] - 1] = tokens[t];
    }
    batch.llm.sample_tokens.push_back(s.tokens());
    batch.llm.loss_targets += s.loss_targets();
    row0 += s.tokens();
  }
  EncoderInput& enc = batch.encoder;
  enc.patches = static_cast<int>(image_rows.size());
  enc.pixels = t_mat(Kokkos::view_alloc(Kokkos::WithoutInitializing, "batch::pixels"), enc.patches,
                     sampler.patch_dim());
  Kokkos::deep_copy(enc.pixels, Kokkos::View<const float**, Kokkos::LayoutRight, HostSpace, Kokkos::MemoryUnmanaged>(
                                    pixels.data(), enc.patches, sampler.patch_dim()));
  enc.segments = make_self_segments(enc.image_patches, /*causal=*/false);

  LlmInput& llm = batch.llm;
  llm.tokens = row0;
  llm.segments = make_self_segments(llm.sample_tokens, /*causal=*/true);
  llm.text_ids = to_device(text_ids, "batch::text_ids");
  llm.text_rows = to_device(text_rows, "batch::text_rows");
  llm.image_rows = to_device(image_rows, "batch::image_rows");
  llm.targets = to_device(targets, "batch::targets");
  return batch;
}

}  // namespace minimllm
