// Heterogeneous synthetic batches: metadata (lengths, images) identical on every rank, derived from
// (seed, step, sample id); token ids and pixels materialised only by the rank that needs them.
//
// The data is learnable: each sample has a hidden class c. Its images show class c (a class prototype
// repeated per patch, plus noise). Its text follows a hidden successor rule next = perm[(cur + shift)
// mod vocab], where shift depends on c once an image has been seen; with probability `noise` a token is
// uniform instead. A model that reads the images can reach ~noise*ln(vocab) nats, far below the
// unigram entropy (~ln(vocab)); one that ignores them cannot.
#pragma once

#include <cstdint>
#include <vector>

#include "minimllm/config/run_config.hpp"

namespace minimllm {

struct ImageMeta {
  int height = 0, width = 0;  // pixels, multiples of the patch size
  int patches = 0;            // (height / patch) * (width / patch): encoder tokens
  int text_pos = 0;           // number of text tokens that precede the image in its sample
};

struct SampleMeta {
  int id = 0;  // index within the step's global batch
  int text_len = 0;
  int klass = 0;  // hidden class shared by the sample's images and its text rule
  std::vector<ImageMeta> images;

  int image_tokens() const;
  int tokens() const { return text_len + image_tokens(); }  // length of the fused LLM sequence
  int loss_targets() const;  // text tokens that have a predecessor in the fused sequence
};

struct GlobalBatch {
  int step = 0;
  std::vector<SampleMeta> samples;

  std::int64_t text_tokens() const;
  std::int64_t image_tokens() const;
  std::int64_t loss_targets() const;
};

// Where each element of a sample's fused sequence comes from.
struct FusedLayout {
  std::vector<int> text_rows;        // fused position of text token t
  std::vector<int> image_first_row;  // fused position of image i's first patch
};
FusedLayout fused_layout(const SampleMeta& sample);

class Sampler {
 public:
  explicit Sampler(const RunConfig& config);

  GlobalBatch batch(int step) const;
  // Text token ids of one sample, length sample.text_len.
  std::vector<int> text_tokens(int step, const SampleMeta& sample) const;
  // Pixels of one image as patch vectors: [patches, channels*patch*patch], row-major, appended to out.
  void append_image_patches(int step, const SampleMeta& sample, int image, std::vector<float>& out) const;

  int patch_dim() const { return channels_ * patch_ * patch_; }

 private:
  SampleMeta sample_meta(int step, int id) const;
  int shift_of_class(int klass) const;

  DataConfig data_;
  std::uint64_t seed_;
  int vocab_, patch_, channels_;
  std::vector<int> successor_perm_;     // the hidden rule's permutation of the vocabulary
  std::vector<float> class_prototype_;  // [classes, patch_dim]
};

}  // namespace minimllm
