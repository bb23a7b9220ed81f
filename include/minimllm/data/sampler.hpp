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

// One input of an encoder module: an image (vision). Its rows are the encoder tokens it becomes and the
// rows it adds to the sample's fused LLM sequence, spliced in after text_pos text tokens.
struct EncoderItem {
  int height = 0, width = 0;  // the input's geometry: an image's pixels, multiples of the patch size
  int rows = 0;               // encoder tokens: an image's (height / patch) * (width / patch) patches
  int text_pos = 0;           // number of text tokens that precede the item in its sample
  int module = 0;             // its encoder module: an index into ModelConfig::encoders
  Modality modality = Modality::vision;
};

struct SampleMeta {
  int id = 0;  // index within the step's global batch
  int text_len = 0;
  int klass = 0;                   // hidden class shared by the sample's images and its text rule
  std::vector<EncoderItem> items;  // in sequence order

  int encoder_rows() const;                                 // rows all its items add to the fused sequence
  int tokens() const { return text_len + encoder_rows(); }  // length of the fused LLM sequence
  int loss_targets() const;  // text tokens that have a predecessor in the fused sequence
};

struct GlobalBatch {
  int step = 0;
  std::vector<SampleMeta> samples;

  std::int64_t text_tokens() const;
  std::int64_t encoder_rows() const;
  std::int64_t loss_targets() const;
};

// The most rows one item of an encoder module can have under the deck's data section (an image of
// data.images.max_side on both sides).
int largest_item_rows(const RunConfig& config, int module);

// Where each element of a sample's fused sequence comes from.
struct FusedLayout {
  std::vector<int> text_rows;       // fused position of text token t
  std::vector<int> item_first_row;  // fused position of item i's first row
};
FusedLayout fused_layout(const SampleMeta& sample);
// fused_layout(sample).item_first_row alone, appended to `out`, in O(items) (items in sequence order: item
// i's first row is its text position plus the rows of the items before it).
void append_item_first_rows(const SampleMeta& sample, std::vector<int>& out);

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
