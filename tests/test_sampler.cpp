// Sampler and packing tests: determinism of the counter-based generator, metadata invariants, the
// incoherence dial, the fused layout, the learnable hidden rule, and the index maps of pack_encoder and
// pack_llm (whole samples and context-parallel chunks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/data/random.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/step/packing.hpp"

namespace minimllm {
namespace {

template <class View>
auto to_host(const View& v) {
  return Kokkos::create_mirror_view_and_copy(HostSpace(), v);
}

std::vector<int> to_std(const t_ivec& v) {
  auto h = to_host(v);
  return std::vector<int>(h.data(), h.data() + h.extent(0));
}

// Knobs of the decks used below; everything else is fixed.
struct DeckKnobs {
  std::uint64_t seed = 7;
  int vocab = 32;
  int classes = 4;
  int patch = 4;
  int channels = 3;
  int global_batch = 64;
  int text_median = 24, text_min = 4, text_max = 64;
  double text_sigma = 0.8;
  double mean_images = 1.0;
  int max_images = 3;
  int min_side = 4, max_side = 16;
  double incoherence = 0.2;
  double noise = 0.1;
};

RunConfig make_config(const DeckKnobs& k) {
  const auto s = [](auto v) { return std::to_string(v); };
  const std::string deck = "name: sampler_test\nseed: " + s(k.seed) +
                           "\n"
                           "model:\n"
                           "  encoder: {width: 8, heads: 2, layers: 1, mlp_ratio: 2, patch: " +
                           s(k.patch) + ", channels: " + s(k.channels) +
                           "}\n"
                           "  llm: {width: 8, heads: 2, layers: 1, mlp_ratio: 2, vocab: " +
                           s(k.vocab) +
                           "}\n"
                           "data:\n"
                           "  global_batch: " +
                           s(k.global_batch) + "\n  text: {median: " + s(k.text_median) +
                           ", sigma: " + s(k.text_sigma) + ", min: " + s(k.text_min) +
                           ", max: " + s(k.text_max) + "}\n  images: {mean_per_sample: " + s(k.mean_images) +
                           ", max_per_sample: " + s(k.max_images) + ", min_side: " + s(k.min_side) +
                           ", max_side: " + s(k.max_side) + ", classes: " + s(k.classes) +
                           "}\n  incoherence: " + s(k.incoherence) + "\n  noise: " + s(k.noise) + "\n";
  return parse_run_config(deck, "<test_sampler>");
}

std::vector<float> pixels_of(const Sampler& sampler, int step, const SampleMeta& s, int image) {
  std::vector<float> out;
  sampler.append_image_patches(step, s, image, out);
  return out;
}

bool same_meta(const SampleMeta& a, const SampleMeta& b) {
  if (a.id != b.id || a.text_len != b.text_len || a.klass != b.klass || a.items.size() != b.items.size())
    return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    const EncoderItem &x = a.items[i], &y = b.items[i];
    if (x.height != y.height || x.width != y.width || x.rows != y.rows || x.text_pos != y.text_pos)
      return false;
  }
  return true;
}

// Number of image tokens in front of text token t (images at text_pos <= t precede it).
int image_tokens_before_text(const SampleMeta& s, int t) {
  int n = 0;
  for (const auto& im : s.items)
    if (im.text_pos <= t) n += im.rows;
  return n;
}

// ---------------------------------------------------------------------------------------------------
// Determinism

// The sampler hashes a sample's (or an image's) leading coordinates once and extends them per draw: the
// values must be those of the whole tuple hashed at once.
TEST(Random, HashExtendContinuesATuple) {
  for (std::uint64_t a : {0ULL, 1ULL, 42ULL, ~0ULL})
    for (std::uint64_t b : {0ULL, 7ULL, 1ULL << 40}) {
      EXPECT_EQ(hash_coords({a, b}), hash_extend(hash_coords({a}), b));
      EXPECT_EQ(hash_coords({a, 3, b, 9}), hash_extend(hash_extend(hash_coords({a, 3}), b), 9));
    }
}

TEST(Sampler, SameConfigGivesIdenticalBatchesTokensAndPixels) {
  const RunConfig config = make_config({});
  const Sampler a(config), b(config);
  int images_seen = 0;
  for (int step : {0, 1, 17, 1000}) {
    const GlobalBatch ba = a.batch(step), bb = b.batch(step);
    ASSERT_EQ(ba.step, step);
    ASSERT_EQ(ba.samples.size(), bb.samples.size());
    ASSERT_EQ(static_cast<int>(ba.samples.size()), config.data.global_batch);
    for (size_t i = 0; i < ba.samples.size(); ++i) {
      const SampleMeta& s = ba.samples[i];
      ASSERT_TRUE(same_meta(s, bb.samples[i])) << "step " << step << " sample " << i;
      ASSERT_EQ(a.text_tokens(step, s), b.text_tokens(step, s)) << "step " << step << " sample " << i;
      for (size_t im = 0; im < s.items.size(); ++im, ++images_seen) {
        const auto pa = pixels_of(a, step, s, static_cast<int>(im));
        const auto pb = pixels_of(b, step, s, static_cast<int>(im));
        ASSERT_EQ(pa, pb) << "step " << step << " sample " << i << " image " << im;  // bitwise
      }
    }
  }
  EXPECT_GT(images_seen, 0);
}

TEST(Sampler, ResultsDoNotDependOnCallOrder) {
  // Counter-based: a value is a function of its coordinates, not of what was drawn before.
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  const GlobalBatch first = sampler.batch(5);
  std::vector<std::vector<int>> tokens;
  for (const auto& s : first.samples) tokens.push_back(sampler.text_tokens(5, s));
  for (int step = 9; step >= 0; --step) (void)sampler.batch(step);  // interleave unrelated draws
  const GlobalBatch again = sampler.batch(5);
  for (int i = static_cast<int>(again.samples.size()) - 1; i >= 0; --i) {
    ASSERT_TRUE(same_meta(first.samples[i], again.samples[i])) << "sample " << i;
    EXPECT_EQ(sampler.text_tokens(5, again.samples[i]), tokens[i]) << "sample " << i;
  }
}

TEST(Sampler, AppendImagePatchesAppendsWithoutTouchingExistingData) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(3);
  std::vector<float> out = {1.5f, -2.5f};
  std::vector<float> expected = out;
  int images = 0;
  for (const auto& s : batch.samples)
    for (size_t i = 0; i < s.items.size(); ++i, ++images) {
      const auto one = pixels_of(sampler, 3, s, static_cast<int>(i));
      ASSERT_EQ(one.size(), static_cast<size_t>(s.items[i].rows) * sampler.patch_dim());
      expected.insert(expected.end(), one.begin(), one.end());
      sampler.append_image_patches(3, s, static_cast<int>(i), out);
    }
  ASSERT_GT(images, 1);
  EXPECT_EQ(out, expected);
}

TEST(Sampler, DifferentSeedOrStepGivesDifferentData) {
  DeckKnobs knobs;
  const RunConfig config = make_config(knobs);
  knobs.seed = 8;
  const RunConfig other_seed = make_config(knobs);
  const Sampler a(config), b(other_seed);

  const auto differs = [](const GlobalBatch& x, const GlobalBatch& y) {
    int different = 0;
    for (size_t i = 0; i < x.samples.size(); ++i) different += !same_meta(x.samples[i], y.samples[i]);
    return different;
  };
  // Metadata: most of the 64 samples must differ (a collision of every field is rare).
  EXPECT_GT(differs(a.batch(0), a.batch(1)), 32) << "step 0 vs step 1";
  EXPECT_GT(differs(a.batch(0), b.batch(0)), 32) << "seed 7 vs seed 8";

  // Tokens and pixels of the very same SampleMeta depend on step and seed too.
  const GlobalBatch batch = a.batch(0);
  const auto with_image = std::find_if(batch.samples.begin(), batch.samples.end(), [](const SampleMeta& s) {
    return !s.items.empty() && s.text_len >= 8;
  });
  ASSERT_NE(with_image, batch.samples.end());
  const SampleMeta& s = *with_image;
  const auto tokens = a.text_tokens(0, s);
  EXPECT_NE(tokens, a.text_tokens(1, s)) << "tokens: step 0 vs step 1";
  EXPECT_NE(tokens, b.text_tokens(0, s)) << "tokens: seed 7 vs seed 8";
  const auto pixels = pixels_of(a, 0, s, 0);
  EXPECT_NE(pixels, pixels_of(a, 1, s, 0)) << "pixels: step 0 vs step 1";
  EXPECT_NE(pixels, pixels_of(b, 0, s, 0)) << "pixels: seed 7 vs seed 8";
  // Different samples of one step get different tokens.
  SampleMeta renamed = s;
  renamed.id = s.id + 1;
  EXPECT_NE(tokens, a.text_tokens(0, renamed)) << "tokens: sample id";
}

// ---------------------------------------------------------------------------------------------------
// Metadata invariants

TEST(Sampler, MetadataInvariantsHoldOverManySteps) {
  DeckKnobs knobs;
  const RunConfig config = make_config(knobs);
  const Sampler sampler(config);
  std::set<int> heights, widths, classes;
  int image_at_start = 0, image_at_end = 0, image_count = 0;
  for (int step = 0; step < 200; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    ASSERT_EQ(static_cast<int>(batch.samples.size()), knobs.global_batch);
    std::int64_t text = 0, image = 0, targets = 0;
    for (int i = 0; i < knobs.global_batch; ++i) {
      const SampleMeta& s = batch.samples[i];
      SCOPED_TRACE("step " + std::to_string(step) + " sample " + std::to_string(i));
      ASSERT_EQ(s.id, i);
      ASSERT_GE(s.klass, 0);
      ASSERT_LT(s.klass, knobs.classes);
      classes.insert(s.klass);
      ASSERT_GE(s.text_len, knobs.text_min);
      ASSERT_LE(s.text_len, knobs.text_max);
      ASSERT_LE(static_cast<int>(s.items.size()), knobs.max_images);
      int patches = 0;
      for (size_t m = 0; m < s.items.size(); ++m) {
        const EncoderItem& im = s.items[m];
        ASSERT_GE(im.height, knobs.min_side);
        ASSERT_LE(im.height, knobs.max_side);
        ASSERT_GE(im.width, knobs.min_side);
        ASSERT_LE(im.width, knobs.max_side);
        ASSERT_EQ(im.height % knobs.patch, 0);
        ASSERT_EQ(im.width % knobs.patch, 0);
        ASSERT_EQ(im.rows, (im.height / knobs.patch) * (im.width / knobs.patch));
        ASSERT_GE(im.text_pos, 0);
        ASSERT_LE(im.text_pos, s.text_len);
        if (m > 0) {
          ASSERT_LE(s.items[m - 1].text_pos, im.text_pos);
        }
        heights.insert(im.height);
        widths.insert(im.width);
        image_at_start += im.text_pos == 0;
        image_at_end += im.text_pos == s.text_len;
        ++image_count;
        patches += im.rows;
      }
      ASSERT_EQ(s.encoder_rows(), patches);
      ASSERT_EQ(s.tokens(), s.text_len + patches);
      const auto tokens = sampler.text_tokens(step, s);
      ASSERT_EQ(static_cast<int>(tokens.size()), s.text_len);
      for (int tok : tokens) {
        ASSERT_GE(tok, 0);
        ASSERT_LT(tok, knobs.vocab);
      }
      text += s.text_len;
      image += s.encoder_rows();
      targets += s.loss_targets();
    }
    ASSERT_EQ(batch.text_tokens(), text);
    ASSERT_EQ(batch.encoder_rows(), image);
    ASSERT_EQ(batch.loss_targets(), targets);
  }
  // Every allowed side {4, 8, 12, 16} and every class occurs; images land at both ends of the text.
  EXPECT_EQ(heights, (std::set<int>{4, 8, 12, 16}));
  EXPECT_EQ(widths, (std::set<int>{4, 8, 12, 16}));
  EXPECT_EQ(static_cast<int>(classes.size()), knobs.classes);
  EXPECT_GT(image_count, 1000);
  EXPECT_GT(image_at_start, 0);
  EXPECT_GT(image_at_end, 0);
}

TEST(Sampler, TextLengthsCoverTheirRangeAndMedian) {
  DeckKnobs knobs;
  knobs.incoherence = 0.0;
  const Sampler sampler(make_config(knobs));
  std::vector<int> lengths;
  for (int step = 0; step < 60; ++step)
    for (const auto& s : sampler.batch(step).samples) lengths.push_back(s.text_len);
  std::sort(lengths.begin(), lengths.end());
  // Lognormal(median 24, sigma 0.8) clamped to [4, 64]: the clamps are hit, and the median is ~24.
  EXPECT_EQ(lengths.front(), knobs.text_min);
  EXPECT_EQ(lengths.back(), knobs.text_max);
  const int median = lengths[lengths.size() / 2];
  EXPECT_NEAR(median, knobs.text_median, 2);
}

TEST(Sampler, TextOnlyConfigHasNoImages) {
  DeckKnobs knobs;
  knobs.max_images = 0;
  knobs.mean_images = 2.0;  // the cap wins
  knobs.incoherence = 0.6;  // image-heavy samples get max_per_sample = 0 images
  const Sampler sampler(make_config(knobs));
  for (int step = 0; step < 100; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    ASSERT_EQ(batch.encoder_rows(), 0) << "step " << step;
    for (const auto& s : batch.samples) {
      ASSERT_TRUE(s.items.empty()) << "step " << step << " sample " << s.id;
      ASSERT_EQ(s.loss_targets(), s.text_len - 1);
    }
  }
}

TEST(Sampler, ZeroMeanImagesWithoutIncoherenceHasNoImages) {
  DeckKnobs knobs;
  knobs.mean_images = 0.0;
  knobs.incoherence = 0.0;
  const Sampler sampler(make_config(knobs));
  for (int step = 0; step < 100; ++step) ASSERT_EQ(sampler.batch(step).encoder_rows(), 0) << "step " << step;
}

// ---------------------------------------------------------------------------------------------------
// The incoherence dial

TEST(Sampler, FullIncoherenceGivesOnlyExtremeSamples) {
  DeckKnobs knobs;
  knobs.incoherence = 1.0;
  const Sampler sampler(make_config(knobs));
  // Text-heavy samples are drawn from the upper tail z >= 1: length >= median * exp(sigma), clamped.
  const int tail_floor =
      std::min(knobs.text_max, static_cast<int>(std::floor(knobs.text_median * std::exp(knobs.text_sigma))));
  int image_heavy = 0, total = 0;
  for (int step = 0; step < 63; ++step)  // 63 * 64 = 4032 samples
    for (const auto& s : sampler.batch(step).samples) {
      ++total;
      SCOPED_TRACE("step " + std::to_string(step) + " sample " + std::to_string(s.id));
      if (s.items.empty()) {
        ASSERT_GE(s.text_len, tail_floor);  // text-heavy
      } else {
        ASSERT_EQ(static_cast<int>(s.items.size()), knobs.max_images);
        ASSERT_EQ(s.text_len, knobs.text_min);
        ++image_heavy;
      }
    }
  // Half of the extreme samples are image-heavy: binomial(4032, 0.5) has sd 0.008; allow 0.05.
  EXPECT_NEAR(static_cast<double>(image_heavy) / total, 0.5, 0.05);
}

TEST(Sampler, ZeroIncoherenceGivesPoissonImageCounts) {
  DeckKnobs knobs;
  knobs.incoherence = 0.0;
  knobs.mean_images = 1.0;
  knobs.max_images = 8;  // P(Poisson(1) > 8) ~ 1e-6: the cap is irrelevant
  const Sampler sampler(make_config(knobs));
  int with_images = 0, total = 0, images = 0, extreme_looking = 0;
  for (int step = 0; step < 63; ++step)
    for (const auto& s : sampler.batch(step).samples) {
      ++total;
      with_images += !s.items.empty();
      images += static_cast<int>(s.items.size());
      extreme_looking += static_cast<int>(s.items.size()) == knobs.max_images;
    }
  // P(N > 0) = 1 - exp(-1) = 0.632; over 4032 samples the sd is 0.0076: allow 0.03 (4 sd).
  EXPECT_NEAR(static_cast<double>(with_images) / total, 1.0 - std::exp(-1.0), 0.03);
  // Mean image count 1 with sd 1/sqrt(4032) = 0.016: allow 0.06.
  EXPECT_NEAR(static_cast<double>(images) / total, 1.0, 0.06);
  EXPECT_LE(extreme_looking, 2);
}

TEST(Sampler, PoissonImageCountsForLargeMean) {
  // mean_per_sample may be up to 2^20. With a mean of 800 and a cap of 2000, the count is Poisson(800)
  // (sd 28), so the average over 64 samples is within a few units of 800. Inversion of the CDF starting
  // from exp(-800), which underflows to 0 in double, cannot produce that.
  // Regression: the Poisson draw once underflowed here and gave every sample max_per_sample images.
  DeckKnobs knobs;
  knobs.incoherence = 0.0;
  knobs.mean_images = 800.0;
  knobs.max_images = 2000;
  knobs.min_side = knobs.max_side = knobs.patch;  // one patch per image keeps the batch small
  const Sampler sampler(make_config(knobs));
  const GlobalBatch batch = sampler.batch(0);
  double mean = 0.0;
  for (const auto& s : batch.samples) mean += static_cast<double>(s.items.size()) / batch.samples.size();
  EXPECT_NEAR(mean, 800.0, 40.0) << "average images per sample with mean_per_sample = 800";
}

TEST(Sampler, HugeSigmaTextHeavySamplesClampToMax) {
  // data.text.sigma has no upper bound. Text-heavy samples draw z >= 1, so with sigma = 1000 the lognormal
  // length is astronomically large (or inf): it must clamp to data.text.max, never to data.text.min.
  // Regression: lround() of an out-of-range length once clamped these to data.text.min.
  DeckKnobs knobs;
  knobs.incoherence = 1.0;
  knobs.text_sigma = 1000.0;
  const Sampler sampler(make_config(knobs));
  int text_heavy = 0, at_max = 0, first_bad = -1, first_bad_len = 0;
  for (const auto& s : sampler.batch(0).samples) {
    if (!s.items.empty()) continue;
    ++text_heavy;
    if (s.text_len == knobs.text_max) {
      ++at_max;
    } else if (first_bad < 0) {
      first_bad = s.id;
      first_bad_len = s.text_len;
    }
  }
  ASSERT_GT(text_heavy, 0);
  EXPECT_EQ(at_max, text_heavy) << "text-heavy samples at data.text.max = " << knobs.text_max
                                << "; e.g. sample " << first_bad << " has text_len " << first_bad_len;
}

// ---------------------------------------------------------------------------------------------------
// Fused layout and loss targets

TEST(Sampler, FusedLayoutPartitionsRowsInOrder) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  int checked_with_images = 0;
  for (int step = 0; step < 50; ++step)
    for (const auto& s : sampler.batch(step).samples) {
      SCOPED_TRACE("step " + std::to_string(step) + " sample " + std::to_string(s.id));
      const FusedLayout layout = fused_layout(s);
      ASSERT_EQ(static_cast<int>(layout.text_rows.size()), s.text_len);
      ASSERT_EQ(layout.item_first_row.size(), s.items.size());
      std::vector<int> owner(s.tokens(), 0);  // how many elements claim each row
      for (int t = 0; t < s.text_len; ++t) {
        const int row = layout.text_rows[t];
        ASSERT_GE(row, 0);
        ASSERT_LT(row, s.tokens());
        ++owner[row];
        // Text token t follows every image whose text_pos <= t.
        ASSERT_EQ(row, t + image_tokens_before_text(s, t)) << "text token " << t;
      }
      int preceding_image_tokens = 0;
      for (size_t i = 0; i < s.items.size(); ++i) {
        const EncoderItem& im = s.items[i];
        const int first = layout.item_first_row[i];
        // Image i comes after the text_pos text tokens before it and after the images listed before it.
        ASSERT_EQ(first, im.text_pos + preceding_image_tokens) << "image " << i;
        ASSERT_GE(first, 0);
        ASSERT_LE(first + im.rows, s.tokens());
        for (int r = first; r < first + im.rows; ++r) ++owner[r];
        // ... and right before text token text_pos (or another image at the same position, or the end).
        const int after = first + im.rows;
        if (i + 1 < s.items.size() && s.items[i + 1].text_pos == im.text_pos) {
          ASSERT_EQ(after, layout.item_first_row[i + 1]);
        } else if (im.text_pos < s.text_len) {
          ASSERT_EQ(after, layout.text_rows[im.text_pos]);
        } else {
          ASSERT_EQ(after, s.tokens());
        }
        preceding_image_tokens += im.rows;
      }
      for (int r = 0; r < s.tokens(); ++r) ASSERT_EQ(owner[r], 1) << "row " << r;
      checked_with_images += !s.items.empty();
    }
  EXPECT_GT(checked_with_images, 100);
}

TEST(Sampler, LossTargetsCountTextTokensWithAPredecessor) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  int image_first = 0, text_first = 0;
  for (int step = 0; step < 50; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    std::int64_t sum = 0;
    for (const auto& s : batch.samples) {
      const FusedLayout layout = fused_layout(s);
      const int expected = static_cast<int>(
          std::count_if(layout.text_rows.begin(), layout.text_rows.end(), [](int row) { return row > 0; }));
      ASSERT_EQ(s.loss_targets(), expected) << "step " << step << " sample " << s.id;
      const bool starts_with_image = !s.items.empty() && s.items.front().text_pos == 0;
      ASSERT_EQ(s.loss_targets(), s.text_len - (starts_with_image ? 0 : 1));
      (starts_with_image ? image_first : text_first)++;
      sum += expected;
    }
    ASSERT_EQ(batch.loss_targets(), sum) << "step " << step;
  }
  EXPECT_GT(image_first, 0);
  EXPECT_GT(text_first, 0);
}

// Hand-made samples pin down the corner cases of the layout.
TEST(Sampler, FusedLayoutOfHandMadeSample) {
  SampleMeta s;
  s.text_len = 3;
  // Two images before token 0, one before token 2, one after the last token.
  s.items = {{4, 4, 1, 0}, {4, 8, 2, 0}, {8, 4, 2, 2}, {4, 4, 1, 3}};
  ASSERT_EQ(s.encoder_rows(), 6);
  ASSERT_EQ(s.tokens(), 9);
  ASSERT_EQ(s.loss_targets(), 3);
  const FusedLayout layout = fused_layout(s);
  // rows: img0 | img1 img1 | t0 | t1 | img2 img2 | t2 | img3
  EXPECT_EQ(layout.item_first_row, (std::vector<int>{0, 1, 5, 8}));
  EXPECT_EQ(layout.text_rows, (std::vector<int>{3, 4, 7}));

  SampleMeta text_only;
  text_only.text_len = 4;
  EXPECT_EQ(fused_layout(text_only).text_rows, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(text_only.loss_targets(), 3);
}

// ---------------------------------------------------------------------------------------------------
// The hidden rule

// prev -> next maps observed per rule: key -1 is the rule before any image, k >= 0 the rule of class k.
using RuleMaps = std::map<int, std::map<int, int>>;

struct RuleStats {
  RuleMaps rules;
  long transitions = 0;
  long conflicts = 0;  // transitions whose next differs from the first next seen after the same prev
};

int rule_of(const SampleMeta& s, int t) {
  const int first_item = s.items.empty() ? s.text_len + 1 : s.items.front().text_pos;
  return t >= first_item ? s.klass : -1;
}

RuleStats collect_rules(const Sampler& sampler, int steps, const RuleMaps* reference = nullptr) {
  RuleStats stats;
  for (int step = 0; step < steps; ++step)
    for (const auto& s : sampler.batch(step).samples) {
      const auto tokens = sampler.text_tokens(step, s);
      for (int t = 1; t < s.text_len; ++t) {
        const int rule = rule_of(s, t), prev = tokens[t - 1], next = tokens[t];
        ++stats.transitions;
        if (reference) {
          const auto& map = reference->at(rule);
          const auto it = map.find(prev);
          if (it == map.end()) {
            --stats.transitions;  // unknown to the reference: not counted
          } else {
            stats.conflicts += it->second != next;
          }
          continue;
        }
        const auto [it, inserted] = stats.rules[rule].emplace(prev, next);
        if (!inserted) stats.conflicts += it->second != next;
      }
    }
  return stats;
}

TEST(Sampler, NoiselessTextFollowsAClassDependentFunction) {
  DeckKnobs knobs;
  knobs.vocab = 16;
  knobs.classes = 3;
  knobs.noise = 0.0;
  knobs.mean_images = 1.0;
  const Sampler sampler(make_config(knobs));

  // Direct form of the brief's check: samples of one class with an image at text_pos 0 agree on the
  // next token after identical previous tokens.
  std::map<int, std::map<int, int>> after_image_at_start;
  int samples_with_image_first = 0;
  for (int step = 0; step < 40; ++step)
    for (const auto& s : sampler.batch(step).samples) {
      if (s.items.empty() || s.items.front().text_pos != 0) continue;
      ++samples_with_image_first;
      const auto tokens = sampler.text_tokens(step, s);
      for (int t = 1; t < s.text_len; ++t) {
        const auto [it, inserted] = after_image_at_start[s.klass].emplace(tokens[t - 1], tokens[t]);
        ASSERT_EQ(it->second, tokens[t]) << "class " << s.klass << " prev " << tokens[t - 1] << " step "
                                         << step << " sample " << s.id << " t " << t;
      }
    }
  ASSERT_GT(samples_with_image_first, 20);

  // Every transition of every sample: before the first image one rule, after it the class's rule.
  const RuleStats stats = collect_rules(sampler, 100);
  ASSERT_GT(stats.transitions, 10000);
  EXPECT_EQ(stats.conflicts, 0) << "noise 0: next must be a function of (rule, prev)";
  ASSERT_EQ(stats.rules.size(), 1u + knobs.classes);
  for (const auto& [rule, map] : stats.rules) {
    SCOPED_TRACE("rule " + std::to_string(rule));
    // next = perm[(prev + shift) mod vocab]: every prev is seen, and the map is a permutation.
    EXPECT_EQ(static_cast<int>(map.size()), knobs.vocab);
    std::set<int> images;
    for (const auto& [prev, next] : map) images.insert(next);
    EXPECT_EQ(images.size(), map.size()) << "the rule must be injective";
  }
  // The rules differ between classes and from the no-image rule (so the images carry information).
  for (const auto& [ra, ma] : stats.rules)
    for (const auto& [rb, mb] : stats.rules) {
      if (ra >= rb) continue;
      int shared = 0, disagree = 0;
      for (const auto& [prev, next] : ma) {
        const auto it = mb.find(prev);
        if (it == mb.end()) continue;
        ++shared;
        disagree += it->second != next;
      }
      EXPECT_GT(shared, 0);
      EXPECT_GT(disagree, 0) << "rules " << ra << " and " << rb << " are identical";
    }
}

TEST(Sampler, NoiseBreaksTheRuleAtTheConfiguredRate) {
  DeckKnobs knobs;
  knobs.vocab = 16;
  knobs.classes = 3;
  knobs.noise = 0.0;
  const Sampler clean(make_config(knobs));
  const RuleStats reference = collect_rules(clean, 100);
  ASSERT_EQ(reference.conflicts, 0);

  // Same seed, vocab and classes: the same hidden rule, now with noise 0.5. A noisy token is uniform, so it
  // matches the rule by chance with probability 1/vocab: the break rate is 0.5 * (1 - 1/16) = 0.469.
  knobs.noise = 0.5;
  const Sampler noisy(make_config(knobs));
  const RuleStats stats = collect_rules(noisy, 30, &reference.rules);
  ASSERT_GT(stats.transitions, 3000);
  const double rate = static_cast<double>(stats.conflicts) / stats.transitions;
  EXPECT_NEAR(rate, 0.5 * (1.0 - 1.0 / knobs.vocab), 0.05);
}

// ---------------------------------------------------------------------------------------------------
// pack_encoder / pack_llm

// One micro-batch holding chunks of samples of `batch`; keys are the sample-major concatenation of the
// whole samples (what context parallelism gathers; with whole chunks, exactly the local rows).
MicroBatchWork micro_batch(const GlobalBatch& batch, const std::vector<SequenceChunk>& chunks,
                           int received_offset = 0) {
  MicroBatchWork mb;
  mb.sample_offsets = {0};
  for (const SequenceChunk& c : chunks) {
    mb.samples.push_back(c.sample);
    mb.chunks.push_back(c);
    mb.sample_offsets.push_back(mb.sample_offsets.back() + batch.samples[c.sample].tokens());
  }
  mb.received_offset = received_offset;
  return mb;
}

MicroBatchWork whole_samples(const GlobalBatch& batch, const std::vector<int>& picks) {
  std::vector<SequenceChunk> chunks;
  for (int s : picks) chunks.push_back({s, 0, batch.samples[s].tokens()});
  return micro_batch(batch, chunks);
}

// Global image numbers (images numbered in sample order) of the picked samples, in pick order.
std::vector<int> images_of(const GlobalBatch& batch, const std::vector<int>& picks) {
  std::vector<int> first(1, 0);
  for (const auto& s : batch.samples) first.push_back(first.back() + static_cast<int>(s.items.size()));
  std::vector<int> images;
  for (int s : picks)
    for (int i = first[s]; i < first[s + 1]; ++i) images.push_back(i);
  return images;
}

struct ExpectedLlm {
  int tokens = 0;
  std::vector<int> text_ids, text_rows, image_rows, image_src_rows, targets;
  std::vector<int> q_start, q_len, k_start, k_len, causal_offset;
  double attention_pairs = 0.0;
};

// The LLM packing spelled out row by row from the public pieces (fused_layout, text_tokens).
ExpectedLlm expected_llm(const Sampler& sampler, const GlobalBatch& batch, const MicroBatchWork& mb) {
  ExpectedLlm e;
  int received = mb.received_offset;
  for (size_t j = 0; j < mb.chunks.size(); ++j) {
    const SequenceChunk& c = mb.chunks[j];
    const SampleMeta& s = batch.samples[c.sample];
    const FusedLayout layout = fused_layout(s);
    const auto tokens = sampler.text_tokens(batch.step, s);
    std::vector<int> text_at_row(s.tokens(), -1);  // token index of each text row of the sample
    for (int t = 0; t < s.text_len; ++t) text_at_row[layout.text_rows[t]] = t;
    e.q_start.push_back(e.tokens);
    e.q_len.push_back(c.end - c.begin);
    e.k_start.push_back(mb.sample_offsets[j]);
    e.k_len.push_back(s.tokens());
    e.causal_offset.push_back(c.begin);
    for (int row = c.begin; row < c.end; ++row, ++e.tokens) {
      if (text_at_row[row] >= 0) {
        e.text_ids.push_back(tokens[text_at_row[row]]);
        e.text_rows.push_back(e.tokens);
      } else {
        e.image_rows.push_back(e.tokens);
        e.image_src_rows.push_back(received++);
      }
      const bool next_is_text = row + 1 < s.tokens() && text_at_row[row + 1] >= 0;
      e.targets.push_back(next_is_text ? tokens[text_at_row[row + 1]] : -1);
      e.attention_pairs += row + 1;  // causal: row sees keys 0..row of its sample
    }
  }
  return e;
}

void check_llm(const Sampler& sampler, const GlobalBatch& batch, const MicroBatchWork& mb) {
  const LlmInput llm = pack_llm(sampler, batch, mb);
  const ExpectedLlm e = expected_llm(sampler, batch, mb);
  EXPECT_EQ(llm.tokens, e.tokens);
  EXPECT_EQ(llm.key_rows, mb.sample_offsets.back());
  EXPECT_EQ(to_std(llm.text_ids), e.text_ids);
  EXPECT_EQ(to_std(llm.text_rows), e.text_rows);
  EXPECT_EQ(to_std(llm.image_rows), e.image_rows);
  EXPECT_EQ(to_std(llm.image_src_rows), e.image_src_rows);
  EXPECT_EQ(to_std(llm.targets), e.targets);
  EXPECT_DOUBLE_EQ(llm.attention_pairs, e.attention_pairs);
  const AttentionSegments& segs = llm.segments;
  EXPECT_TRUE(segs.causal);
  EXPECT_EQ(to_std(segs.q_start), e.q_start);
  EXPECT_EQ(to_std(segs.q_len), e.q_len);
  EXPECT_EQ(to_std(segs.k_start), e.k_start);
  EXPECT_EQ(to_std(segs.k_len), e.k_len);
  EXPECT_EQ(to_std(segs.causal_offset), e.causal_offset);
  // Text and image rows partition the local rows.
  std::vector<int> owner(e.tokens, 0);
  for (int r : to_std(llm.text_rows))
    ASSERT_TRUE(r >= 0 && r < e.tokens && ++owner[r] == 1) << "text row " << r;
  for (int r : to_std(llm.image_rows))
    ASSERT_TRUE(r >= 0 && r < e.tokens && ++owner[r] == 1) << "image row " << r;
  EXPECT_TRUE(std::all_of(owner.begin(), owner.end(), [](int n) { return n == 1; }));
}

void check_encoder(const Sampler& sampler, const GlobalBatch& batch, const std::vector<int>& images) {
  const EncoderInput enc = pack_encoder(sampler, batch, images);
  std::vector<int> first(1, 0);
  for (const auto& s : batch.samples) first.push_back(first.back() + static_cast<int>(s.items.size()));
  std::vector<float> pixels;
  std::vector<int> patches;
  double pairs = 0.0;
  for (int image : images) {
    const int s = static_cast<int>(std::upper_bound(first.begin(), first.end(), image) - first.begin()) - 1;
    const int i = image - first[s];
    sampler.append_image_patches(batch.step, batch.samples[s], i, pixels);
    patches.push_back(batch.samples[s].items[i].rows);
    pairs += static_cast<double>(patches.back()) * patches.back();  // bidirectional within the image
  }
  const int total = std::accumulate(patches.begin(), patches.end(), 0);
  EXPECT_EQ(enc.patches, total);
  EXPECT_EQ(enc.image_patches, patches);
  EXPECT_DOUBLE_EQ(enc.attention_pairs, pairs);
  ASSERT_EQ(static_cast<int>(enc.pixels.extent(0)), total);
  ASSERT_EQ(static_cast<int>(enc.pixels.extent(1)), sampler.patch_dim());
  const auto host = to_host(enc.pixels);
  for (int p = 0; p < total; ++p)
    for (int d = 0; d < sampler.patch_dim(); ++d)
      ASSERT_EQ(host(p, d), pixels[static_cast<size_t>(p) * sampler.patch_dim() + d])
          << "patch " << p << " element " << d;
  const AttentionSegments& segs = enc.segments;
  EXPECT_FALSE(segs.causal);
  ASSERT_EQ(segs.count(), static_cast<int>(patches.size()));
  const auto q_start = to_std(segs.q_start), q_len = to_std(segs.q_len);
  const auto k_start = to_std(segs.k_start), k_len = to_std(segs.k_len);
  int row = 0;
  for (size_t i = 0; i < patches.size(); ++i) {
    EXPECT_EQ(q_start[i], row) << "image " << i;
    EXPECT_EQ(q_len[i], patches[i]) << "image " << i;
    EXPECT_EQ(k_start[i], row) << "image " << i;
    EXPECT_EQ(k_len[i], patches[i]) << "image " << i;
    row += patches[i];
  }
}

// Whole samples: targets predict the next text token of the same sample only, and count the loss targets.
void check_whole_samples(const Sampler& sampler, const GlobalBatch& batch, const std::vector<int>& picks) {
  check_llm(sampler, batch, whole_samples(batch, picks));
  check_encoder(sampler, batch, images_of(batch, picks));
  const LlmInput llm = pack_llm(sampler, batch, whole_samples(batch, picks));
  const auto targets = to_std(llm.targets);
  std::int64_t loss_targets = 0;
  int row = 0;
  for (int s : picks) {
    loss_targets += batch.samples[s].loss_targets();
    row += batch.samples[s].tokens();
    EXPECT_EQ(targets[row - 1], -1) << "last row of sample " << s << " must predict nothing";
  }
  EXPECT_EQ(std::count_if(targets.begin(), targets.end(), [](int t) { return t >= 0; }), loss_targets);
  // Image rows, in LLM order, read the received rows 0, 1, ...: the encoder's rows for these images.
  const auto src = to_std(llm.image_src_rows);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(src[i], static_cast<int>(i));
  EXPECT_EQ(static_cast<int>(src.size()), pack_encoder(sampler, batch, images_of(batch, picks)).patches);
}

TEST(PackLlm, WholeSamplesMatchThePerSampleLayout) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(4);
  // A sample with an image first, one with images later, a text-only one, and the last sample.
  std::vector<int> picks;
  bool image_first = false, image_later = false, text_only = false;
  for (int i = 0; i < static_cast<int>(batch.samples.size()); ++i) {
    const SampleMeta& s = batch.samples[i];
    const bool first = !s.items.empty() && s.items.front().text_pos == 0;
    const bool later = !s.items.empty() && s.items.front().text_pos > 0;
    if ((first && !image_first) || (later && !image_later) || (s.items.empty() && !text_only))
      picks.push_back(i);
    image_first |= first;
    image_later |= later;
    text_only |= s.items.empty();
  }
  ASSERT_TRUE(image_first && image_later && text_only);
  picks.push_back(static_cast<int>(batch.samples.size()) - 1);
  {
    SCOPED_TRACE("picked samples");
    check_whole_samples(sampler, batch, picks);
  }
  {
    SCOPED_TRACE("picked samples reversed");
    std::reverse(picks.begin(), picks.end());
    check_whole_samples(sampler, batch, picks);
  }
  {
    SCOPED_TRACE("whole batch");
    std::vector<int> all(batch.samples.size());
    std::iota(all.begin(), all.end(), 0);
    check_whole_samples(sampler, batch, all);
    const auto targets = to_std(pack_llm(sampler, batch, whole_samples(batch, all)).targets);
    EXPECT_EQ(std::count_if(targets.begin(), targets.end(), [](int t) { return t >= 0; }),
              batch.loss_targets());
  }
}

TEST(PackLlm, ChunksOfASampleReassembleTheWholeSample) {
  // Context parallelism: a sample split into contiguous chunks on different ranks. Each chunk's rows are the
  // sample's rows [begin, end) with the same token ids and targets (the last row of a chunk still predicts
  // the first text token of the next chunk); its segment sees the whole sample's keys from causal offset
  // begin.
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(6);
  int checked = 0;
  for (int s = 0; s < static_cast<int>(batch.samples.size()); ++s) {
    const int n = batch.samples[s].tokens();
    if (batch.samples[s].items.empty() || n < 6) continue;
    SCOPED_TRACE("sample " + std::to_string(s));
    const std::vector<int> bounds = {0, n / 3, n / 3, 2 * n / 3 + 1, n};  // one empty chunk on purpose
    std::vector<int> ids, targets;
    int images = 0;
    for (size_t c = 0; c + 1 < bounds.size(); ++c) {
      const MicroBatchWork mb = micro_batch(batch, {{s, bounds[c], bounds[c + 1]}}, /*received_offset=*/5);
      check_llm(sampler, batch, mb);
      const LlmInput llm = pack_llm(sampler, batch, mb);
      const auto i = to_std(llm.text_ids), t = to_std(llm.targets);
      ids.insert(ids.end(), i.begin(), i.end());
      targets.insert(targets.end(), t.begin(), t.end());
      images += static_cast<int>(llm.image_rows.extent(0));
    }
    const LlmInput whole = pack_llm(sampler, batch, whole_samples(batch, {s}));
    EXPECT_EQ(ids, to_std(whole.text_ids));
    EXPECT_EQ(targets, to_std(whole.targets));
    EXPECT_EQ(images, static_cast<int>(whole.image_rows.extent(0)));
    ++checked;
  }
  EXPECT_GT(checked, 3);
}

TEST(PackLlm, HandMadeTextOnlyAndEmpty) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  SampleMeta a;  // images before the first token, in the middle and after the last token
  a.id = 0;
  a.text_len = 5;
  a.klass = 1;
  a.items = {{4, 8, 2, 0}, {8, 8, 4, 2}, {4, 4, 1, 5}};
  SampleMeta b;  // text only
  b.id = 1;
  b.text_len = 3;
  b.klass = 2;
  const GlobalBatch batch{2, {a, b, a}};
  {
    SCOPED_TRACE("hand-made");
    check_whole_samples(sampler, batch, {0, 1, 2});
    const LlmInput llm = pack_llm(sampler, batch, whole_samples(batch, {0}));
    // rows: img0 img0 | t0 | t1 | img1 x4 | t2 t3 t4 | img2
    EXPECT_EQ(to_std(llm.text_rows), (std::vector<int>{2, 3, 8, 9, 10}));
    EXPECT_EQ(to_std(llm.image_rows), (std::vector<int>{0, 1, 4, 5, 6, 7, 11}));
    const auto tokens = sampler.text_tokens(2, a);
    const auto targets = to_std(llm.targets);
    EXPECT_EQ(targets, (std::vector<int>{-1, tokens[0], tokens[1], -1, -1, -1, -1, tokens[2], tokens[3],
                                         tokens[4], -1, -1}));
  }
  {
    SCOPED_TRACE("text only");
    check_whole_samples(sampler, batch, {1});
    EXPECT_EQ(pack_encoder(sampler, batch, images_of(batch, {1})).patches, 0);
    const LlmInput llm = pack_llm(sampler, batch, whole_samples(batch, {1, 1}));
    EXPECT_EQ(llm.image_rows.extent(0), 0u);
    const auto targets = to_std(llm.targets);
    EXPECT_EQ(std::count_if(targets.begin(), targets.end(), [](int t) { return t >= 0; }), 4);
  }
  {
    SCOPED_TRACE("empty");
    const LlmInput llm = pack_llm(sampler, batch, whole_samples(batch, {}));
    EXPECT_EQ(llm.tokens, 0);
    EXPECT_EQ(llm.key_rows, 0);
    EXPECT_EQ(llm.segments.count(), 0);
    EXPECT_EQ(pack_encoder(sampler, batch, {}).patches, 0);
  }
}

TEST(PackEncoder, PacksAnySubsetOfImagesInTheGivenOrder) {
  const RunConfig config = make_config({});
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(8);
  std::vector<int> all(batch.samples.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> images = images_of(batch, all);
  ASSERT_GT(images.size(), 10u);
  {
    SCOPED_TRACE("all images");
    check_encoder(sampler, batch, images);
  }
  {
    SCOPED_TRACE("every third image, reversed");
    std::vector<int> some;
    for (size_t i = 0; i < images.size(); i += 3) some.push_back(images[i]);
    std::reverse(some.begin(), some.end());
    check_encoder(sampler, batch, some);
  }
}

}  // namespace
}  // namespace minimllm
