#include "minimllm/data/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "minimllm/data/random.hpp"

namespace minimllm {
namespace {

// Independent streams of the counter-based generator.
enum Stream : std::uint64_t { kMeta = 1, kText = 2, kPixels = 3, kLanguage = 4, kPrototype = 5 };

constexpr float kPixelNoise = 0.5f;

// Poisson(mean) from two hashes: inversion of the cumulative distribution for small means; for large
// means (where exp(-mean) underflows) the normal approximation, rounded and clamped at 0.
int poisson(double mean, std::uint64_t h1, std::uint64_t h2) {
  if (mean > 64.0)
    return static_cast<int>(std::max(0.0, std::round(mean + std::sqrt(mean) * standard_normal(h1, h2))));
  const double u = uniform01(h1);
  double p = std::exp(-mean), cdf = p;
  int n = 0;
  while (u > cdf && p > 0.0) {
    ++n;
    p *= mean / n;
    cdf += p;
  }
  return n;
}

}  // namespace

int largest_item_rows(const RunConfig& config, int module) {
  const EncoderConfig& encoder = config.model.encoders.at(module);
  switch (encoder.modality) {
    case Modality::vision: {
      const int side = config.data.images.max_side / encoder.patch;
      return side * side;
    }
  }
  return 0;
}

int SampleMeta::encoder_rows() const {
  int n = 0;
  for (const auto& im : items) n += im.rows;
  return n;
}

int SampleMeta::loss_targets() const {
  // Every text token is a target except one at fused position 0 (nothing precedes it).
  const bool starts_with_text = items.empty() || items.front().text_pos > 0;
  return text_len - (starts_with_text && text_len > 0 ? 1 : 0);
}

std::int64_t GlobalBatch::text_tokens() const {
  std::int64_t n = 0;
  for (const auto& s : samples) n += s.text_len;
  return n;
}
std::int64_t GlobalBatch::encoder_rows() const {
  std::int64_t n = 0;
  for (const auto& s : samples) n += s.encoder_rows();
  return n;
}
std::int64_t GlobalBatch::loss_targets() const {
  std::int64_t n = 0;
  for (const auto& s : samples) n += s.loss_targets();
  return n;
}

void append_item_first_rows(const SampleMeta& sample, std::vector<int>& out) {
  int rows_before = 0;
  for (const EncoderItem& item : sample.items) {
    out.push_back(item.text_pos + rows_before);
    rows_before += item.rows;
  }
}

FusedLayout fused_layout(const SampleMeta& sample) {
  FusedLayout layout;
  append_item_first_rows(sample, layout.item_first_row);
  layout.text_rows.resize(sample.text_len);
  int rows_before = 0;  // item rows before text token t
  size_t next_item = 0;
  for (int t = 0; t < sample.text_len; ++t) {
    while (next_item < sample.items.size() && sample.items[next_item].text_pos == t)
      rows_before += sample.items[next_item++].rows;
    layout.text_rows[t] = t + rows_before;
  }
  return layout;
}

Sampler::Sampler(const RunConfig& config)
    : data_(config.data),
      seed_(config.seed),
      vocab_(config.model.llm.vocab),
      patch_(config.model.vision().patch),
      channels_(config.model.vision().channels) {
  // The hidden "language": a seeded permutation (Fisher-Yates on counter-based draws).
  successor_perm_.resize(vocab_);
  for (int i = 0; i < vocab_; ++i) successor_perm_[i] = i;
  for (int i = vocab_ - 1; i > 0; --i) {
    const int j = static_cast<int>(hash_coords({seed_, kLanguage, static_cast<std::uint64_t>(i)}) % (i + 1));
    std::swap(successor_perm_[i], successor_perm_[j]);
  }
  class_prototype_.resize(static_cast<size_t>(data_.images.classes) * patch_dim());
  for (size_t i = 0; i < class_prototype_.size(); ++i)
    class_prototype_[i] = static_cast<float>(2.0 * uniform01(hash_coords({seed_, kPrototype, i})) - 1.0);
}

int Sampler::shift_of_class(int klass) const {
  const int stride = std::max(1, vocab_ / (data_.images.classes + 1));
  return (klass + 1) * stride % vocab_;
}

SampleMeta Sampler::sample_meta(int step, int id) const {
  const std::uint64_t sample_hash =
      hash_coords({seed_, kMeta, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(id)});
  const auto draw = [&](std::uint64_t what) { return hash_extend(sample_hash, what); };
  const TextConfig& text = data_.text;
  const ImageConfig& img = data_.images;
  SampleMeta s;
  s.id = id;
  s.klass = static_cast<int>(draw(0) % static_cast<std::uint64_t>(img.classes));

  // Modality mix: an "incoherent" sample is either all image (max images, shortest text) or all text.
  const double kind = uniform01(draw(1));
  const bool image_heavy = kind < 0.5 * data_.incoherence;
  const bool text_heavy = !image_heavy && kind < data_.incoherence;

  double z = standard_normal(draw(2), draw(3));
  if (text_heavy) z = std::abs(z) + 1.0;  // upper tail of the length distribution
  // Clamp before rounding: a long tail can exceed what an integer holds (or overflow to infinity).
  const double len = std::clamp(text.median * std::exp(text.sigma * z), double(text.min), double(text.max));
  s.text_len = image_heavy ? text.min : static_cast<int>(std::lround(len));

  int n_images = 0;
  if (image_heavy) {
    n_images = img.max_per_sample;
  } else if (!text_heavy && img.mean_per_sample > 0.0) {
    n_images = std::min(img.max_per_sample, poisson(img.mean_per_sample, draw(4), draw(5)));
  }
  const int side_choices = (img.max_side - img.min_side) / patch_ + 1;
  s.items.reserve(n_images);
  for (int i = 0; i < n_images; ++i) {
    EncoderItem im;
    const auto ui = static_cast<std::uint64_t>(i);
    im.height = img.min_side + patch_ * static_cast<int>(draw(100 + 3 * ui) % side_choices);
    im.width = img.min_side + patch_ * static_cast<int>(draw(101 + 3 * ui) % side_choices);
    im.rows = (im.height / patch_) * (im.width / patch_);
    im.text_pos = static_cast<int>(draw(102 + 3 * ui) % static_cast<std::uint64_t>(s.text_len + 1));
    s.items.push_back(im);
  }
  // In text order, ties in drawing order: a stable insertion sort (a few dozen images; std::stable_sort
  // would allocate a buffer per sample).
  for (size_t i = 1; i < s.items.size(); ++i) {
    const EncoderItem im = s.items[i];
    size_t j = i;
    for (; j > 0 && s.items[j - 1].text_pos > im.text_pos; --j) s.items[j] = s.items[j - 1];
    s.items[j] = im;
  }
  return s;
}

GlobalBatch Sampler::batch(int step) const {
  GlobalBatch b;
  b.step = step;
  b.samples.reserve(data_.global_batch);
  for (int id = 0; id < data_.global_batch; ++id) b.samples.push_back(sample_meta(step, id));
  return b;
}

std::vector<int> Sampler::text_tokens(int step, const SampleMeta& sample) const {
  std::vector<int> tokens(sample.text_len);
  const int first_image_pos = sample.items.empty() ? sample.text_len + 1 : sample.items.front().text_pos;
  const std::uint64_t sample_hash =
      hash_coords({seed_, kText, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(sample.id)});
  const auto draw = [&](int t, std::uint64_t what) {
    return hash_extend(hash_extend(sample_hash, static_cast<std::uint64_t>(t)), what);
  };
  int prev = 0;  // the rule's predecessor of the first token
  for (int t = 0; t < sample.text_len; ++t) {
    const bool seen_image = t >= first_image_pos;
    int token;
    if (uniform01(draw(t, 0)) < data_.noise || (t == 0 && !seen_image)) {
      token = static_cast<int>(draw(t, 1) % static_cast<std::uint64_t>(vocab_));
    } else {
      const int shift = seen_image ? shift_of_class(sample.klass) : 0;
      token = successor_perm_[(prev + shift) % vocab_];
    }
    tokens[t] = prev = token;
  }
  return tokens;
}

void Sampler::append_image_patches(int step, const SampleMeta& sample, int image,
                                   std::vector<float>& out) const {
  const EncoderItem& im = sample.items[image];
  const int pd = patch_dim();
  const float* proto = &class_prototype_[static_cast<size_t>(sample.klass) * pd];
  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(im.rows) * pd);
  const std::uint64_t image_hash =
      hash_coords({seed_, std::uint64_t(kPixels), static_cast<std::uint64_t>(step),
                   static_cast<std::uint64_t>(sample.id), static_cast<std::uint64_t>(image)});
  for (int p = 0; p < im.rows; ++p)
    for (int e = 0; e < pd; ++e) {
      const auto idx = static_cast<std::uint64_t>(p) * pd + e;
      const double noise = 2.0 * uniform01(hash_extend(image_hash, idx)) - 1.0;
      out[base + idx] = proto[e] + kPixelNoise * static_cast<float>(noise);
    }
}

}  // namespace minimllm
