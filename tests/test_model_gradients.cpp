// Whole-model gradient check: for every named parameter tensor, the analytic gradient of the mean loss
// (encoder forward -> LLM forward/backward -> encoder backward) against central differences of the fp32
// forward along a random direction. Plus: tensors that cannot affect the loss get exactly zero gradient,
// packing several samples equals running them one by one, and the loss at initialisation is ~ln(vocab).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/step/packing.hpp"
#include "whole_batch.hpp"

namespace minimllm {
namespace {

using testing_support::pack_whole_samples;
using testing_support::PackedBatch;
using testing_support::run_step;

constexpr std::uint64_t kModelSeed = 99;
constexpr int kVocab = 11;

// Tiny model; init_std is a parameter because the gradient check wants O(1) activations (see below).
RunConfig tiny_config(const std::string& init_std, const std::string& images =
                                                       "mean_per_sample: 1.5, "
                                                       "max_per_sample: 2") {
  const std::string deck =
      "name: gradcheck\n"
      "seed: 5\n"
      "model:\n"
      "  init_std: " +
      init_std +
      "\n"
      "  encoder: {width: 8, heads: 2, layers: 1, mlp_ratio: 2, patch: 2, channels: 1}\n"
      "  llm: {width: 8, heads: 2, layers: 2, mlp_ratio: 2, vocab: " +
      std::to_string(kVocab) +
      "}\n"
      "data:\n"
      "  global_batch: 3\n"
      "  text: {median: 6, sigma: 0.5, min: 3, max: 10}\n"
      "  images: {" +
      images +
      ", min_side: 2, max_side: 4, classes: 3}\n"
      "  incoherence: 0.0\n"
      "  noise: 0.1\n";
  return parse_run_config(deck, "<test_model_gradients>");
}

// Mean loss over the batch's loss targets; gradients of that mean are left in model.grads().
double loss_and_grads(Model& model, const PackedBatch& batch) {
  const float grad_scale = 1.0f / static_cast<float>(batch.loss_targets);
  return run_step(model, batch, grad_scale) * grad_scale;
}

// A named tensor as flat views of its parameters and gradients (the tensors are contiguous LayoutRight
// views into the model's buffers, so a 1-D view over their span aliases them exactly; no host access).
struct NamedTensor {
  std::string name;
  t_vec_um param, grad;
};

template <class View>
t_vec_um flat(const View& v) {
  return t_vec_um(v.data(), v.span());
}

std::vector<NamedTensor> named_tensors(const Model& model) {
  const ModelTensors& w = model.weights();
  const ModelTensors& g = model.weight_grads();
  std::vector<NamedTensor> out;
  const auto add = [&](const std::string& name, const auto& p, const auto& d) {
    out.push_back({name, flat(p), flat(d)});
  };
  const auto add_block = [&](const std::string& prefix, const BlockWeights& p, const BlockWeights& d) {
    add(prefix + ".norm1", p.norm1, d.norm1);
    add(prefix + ".norm2", p.norm2, d.norm2);
    add(prefix + ".qkv", p.qkv, d.qkv);
    add(prefix + ".attn_out", p.attn_out, d.attn_out);
    add(prefix + ".mlp_in", p.mlp_in, d.mlp_in);
    add(prefix + ".mlp_out", p.mlp_out, d.mlp_out);
  };
  add("patch_embed", w.patch_embed, g.patch_embed);
  for (size_t l = 0; l < w.encoder.size(); ++l)
    add_block("encoder[" + std::to_string(l) + "]", w.encoder[l], g.encoder[l]);
  add("encoder_norm", w.encoder_norm, g.encoder_norm);
  add("projector_in", w.projector_in, g.projector_in);
  add("projector_out", w.projector_out, g.projector_out);
  add("token_embed", w.token_embed, g.token_embed);
  for (size_t l = 0; l < w.llm.size(); ++l) add_block("llm[" + std::to_string(l) + "]", w.llm[l], g.llm[l]);
  add("final_norm", w.final_norm, g.final_norm);
  add("lm_head", w.lm_head, g.lm_head);
  return out;
}

bool is_encoder_tensor(const std::string& name) {
  return name == "patch_embed" || name.rfind("encoder", 0) == 0 || name.rfind("projector", 0) == 0;
}

std::vector<float> get_values(const t_vec_um& v) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<float>(host.data(), host.data() + host.extent(0));
}

void set_values(const t_vec_um& v, const std::vector<float>& values) {
  ASSERT_EQ(values.size(), v.extent(0));
  Kokkos::deep_copy(
      v, Kokkos::View<const float*, HostSpace, Kokkos::MemoryUnmanaged>(values.data(), values.size()));
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

// The step of the tiny config whose batch has images that can affect the loss (not all at the end of
// their sample) and a sample whose first fused row is an image.
int informative_step(const Sampler& sampler) {
  for (int step = 0; step < 200; ++step) {
    const GlobalBatch b = sampler.batch(step);
    bool image_first = false, image_inside = false;
    for (const auto& s : b.samples)
      for (const auto& im : s.items) {
        image_first |= im.text_pos == 0;
        image_inside |= im.text_pos < s.text_len;
      }
    if (image_first && image_inside) return step;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------------
// The gradient check

// Central differences in fp32 along a direction d ~ N(0,1) * rms(tensor), so every tensor moves in
// proportion to its own scale; both sides are derivatives along d. Error budget:
//  * truncation: a central difference with step h is off by h^2/6 * (third derivative along d), an error
//    set by the whole loss landscape, not by the (possibly small) derivative along d. Measured here with
//    h = 1e-2 it reaches 50% for a token_embed direction whose derivative is 10x below the typical one
//    (6% for the encoder's qkv), and it shrinks 10x per 3.2x smaller h: it is this term, not a gradient
//    bug. Richardson extrapolation, D = (4 D(h/2) - D(h)) / 3, cancels the h^2 term and leaves O(h^4):
//    with h = 4e-3 the observed relative error is <= 4e-4 on every tensor of both batches.
//  * rounding: each per-row loss is an fp32 log-sum-exp good to a few ulps (~1e-7 of L ~ 2.5), averaged
//    in double; a loss difference carries ~1e-7 absolute error, which the extrapolated derivative
//    amplifies by ~375 (= (4/h + 1/(2h)) / 3 with h = 4e-3) to a few 1e-5 (observed: at most 6e-5).
// Hence rtol 5e-3 (> 10x the observed truncation; a missing term, wrong sign or factor is an O(1) error)
// plus an absolute floor of 2e-4 (3x the worst observed rounding) for the few directions whose
// derivative is ~1e-3; typical derivatives are 1e-2..1, and each tensor must have one above 10x the floor.
// The analytic side uses the perturbations actually applied (fp32-rounded p+ minus p-), not h*d.
// init_std = 0.3 gives O(1) pre-activations: every GELU is exercised outside its linear region and the
// softmaxes are far from uniform, so errors in their derivatives cannot hide behind small inputs.
// MINIMLLM_GRADCHECK_VERBOSE=1 prints every comparison.
constexpr double kStep = 4e-3;
constexpr double kRelTol = 5e-3;
constexpr double kAbsTol = 2e-4;

struct DirectionalCheck {
  double finite_difference = 0.0;  // Richardson-extrapolated (L(p + h d) - L(p - h d)) / 2h
  double analytic = 0.0;           // g . (p+ - p-) / 2h, combined the same way
};

// One central difference with step h; returns {finite difference, analytic} as derivatives along d.
DirectionalCheck central_difference(Model& model, const PackedBatch& batch, const NamedTensor& t,
                                    const std::vector<float>& original, const std::vector<double>& direction,
                                    const std::vector<float>& grad, double h) {
  std::vector<float> plus(original.size()), minus(original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    plus[i] = static_cast<float>(original[i] + h * direction[i]);
    minus[i] = static_cast<float>(original[i] - h * direction[i]);
  }
  DirectionalCheck c;
  for (size_t i = 0; i < original.size(); ++i)
    c.analytic += static_cast<double>(grad[i]) * (static_cast<double>(plus[i]) - minus[i]) / (2.0 * h);
  set_values(t.param, plus);
  const double loss_plus = loss_and_grads(model, batch);
  set_values(t.param, minus);
  const double loss_minus = loss_and_grads(model, batch);
  set_values(t.param, original);
  c.finite_difference = (loss_plus - loss_minus) / (2.0 * h);
  return c;
}

DirectionalCheck check_direction(Model& model, const PackedBatch& batch, const NamedTensor& t,
                                 const std::vector<float>& grad, unsigned seed) {
  const std::vector<float> original = get_values(t.param);
  double sum_sq = 0.0;
  for (float x : original) sum_sq += static_cast<double>(x) * x;
  const double scale = std::sqrt(sum_sq / original.size());
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> direction(original.size());
  for (double& d : direction) d = scale * normal(gen);
  const DirectionalCheck coarse = central_difference(model, batch, t, original, direction, grad, kStep);
  const DirectionalCheck fine = central_difference(model, batch, t, original, direction, grad, kStep / 2);
  return {(4.0 * fine.finite_difference - coarse.finite_difference) / 3.0,
          (4.0 * fine.analytic - coarse.analytic) / 3.0};
}

struct GradientCase {
  const char* name;
  bool handmade;  // false: the sampler's batch; true: hand-made samples covering the layout's corners
};

class ModelGradient : public ::testing::TestWithParam<GradientCase> {};

PackedBatch gradient_batch(const Sampler& sampler, const RunConfig& config, bool handmade) {
  if (!handmade) {
    const int step = informative_step(sampler);
    EXPECT_GE(step, 0) << "no step with informative images";
    return pack_whole_samples(sampler, step, sampler.batch(std::max(step, 0)).samples);
  }
  // Sample 0: a non-square image first, text, two images at the same position, text, an image at the end.
  // Sample 1: text only. Sample 2: text then one 2x2 image (a single patch) then text.
  const int p = config.model.vision().patch;
  SampleMeta a, b, c;
  a.id = 0;
  a.klass = 0;
  a.text_len = 5;
  a.items = {{2 * p, p, 2, 0}, {p, p, 1, 2}, {2 * p, 2 * p, 4, 2}, {p, 2 * p, 2, 5}};
  b.id = 1;
  b.klass = 1;
  b.text_len = 4;
  c.id = 2;
  c.klass = 2;
  c.text_len = 4;
  c.items = {{p, p, 1, 2}};
  return pack_whole_samples(sampler, 3, {a, b, c});
}

TEST_P(ModelGradient, EveryTensorMatchesCentralDifferences) {
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  const PackedBatch batch = gradient_batch(sampler, config, GetParam().handmade);
  ASSERT_GT(batch.encoder.patches, 0);
  ASSERT_GT(batch.loss_targets, 0);

  Model model(config.model, kModelSeed);
  const std::vector<NamedTensor> tensors = named_tensors(model);
  // The list is complete: the tensors tile the parameter buffer.
  size_t total = 0;
  for (const auto& t : tensors) total += t.param.extent(0);
  ASSERT_EQ(total, model.parameter_count());
  ASSERT_EQ(tensors.size(), 1u + 6u * 1u + 3u + 1u + 6u * 2u + 2u);

  const double loss = loss_and_grads(model, batch);
  ASSERT_TRUE(std::isfinite(loss));
  std::vector<std::vector<float>> grads;
  for (const auto& t : tensors) grads.push_back(get_values(t.grad));

  for (size_t k = 0; k < tensors.size(); ++k) {
    const NamedTensor& t = tensors[k];
    SCOPED_TRACE("tensor " + t.name);
    double largest = 0.0;
    for (unsigned direction = 0; direction < 3; ++direction) {
      const DirectionalCheck c =
          check_direction(model, batch, t, grads[k], 1000u * direction + static_cast<unsigned>(k));
      EXPECT_NEAR(c.finite_difference, c.analytic, kRelTol * std::abs(c.analytic) + kAbsTol)
          << "direction " << direction << " (loss " << loss << ")";
      if (std::getenv("MINIMLLM_GRADCHECK_VERBOSE"))
        std::printf("%-20s direction %u analytic %+.6e finite difference %+.6e\n", t.name.c_str(), direction,
                    c.analytic, c.finite_difference);
      largest = std::max(largest, std::abs(c.analytic));
    }
    // Not vacuous: every tensor affects the loss of this batch well above the tolerance floor.
    EXPECT_GT(largest, 10 * kAbsTol);
  }
  // The checks restored every parameter: the loss is bitwise the same.
  EXPECT_EQ(loss_and_grads(model, batch), loss);
}

INSTANTIATE_TEST_SUITE_P(Batches, ModelGradient,
                         ::testing::Values(GradientCase{"sampled", false}, GradientCase{"handmade", true}),
                         [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------------
// Gradients that must be exactly zero, or must not be

TEST(ModelGradients, TextOnlyBatchLeavesEncoderGradientsZero) {
  const RunConfig config = tiny_config("0.3", "mean_per_sample: 0.0, max_per_sample: 0");
  const Sampler sampler(config);
  const PackedBatch batch = pack_whole_samples(sampler, 0, sampler.batch(0).samples);
  ASSERT_EQ(batch.encoder.patches, 0);
  Model model(config.model, kModelSeed);
  ASSERT_TRUE(std::isfinite(loss_and_grads(model, batch)));
  for (const auto& t : named_tensors(model)) {
    SCOPED_TRACE("tensor " + t.name);
    const double m = max_abs(get_values(t.grad));
    if (is_encoder_tensor(t.name)) {
      EXPECT_EQ(m, 0.0);
    } else {
      EXPECT_GT(m, 0.0);
    }
  }
}

TEST(ModelGradients, ImagesAfterTheLastTokenCannotAffectTheLoss) {
  // Images at text_pos == text_len are the last rows of their sample: nothing after them in the sample sees
  // them (causal attention) and their own rows predict nothing. Their gradient must be exactly zero; a
  // non-zero value means attention leaks across samples or looks ahead. Moving one of them to text_pos 0
  // must make the encoder matter.
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  const int p = config.model.vision().patch;
  SampleMeta a, b;
  a.id = 0;
  a.klass = 1;
  a.text_len = 4;
  a.items = {{p, 2 * p, 2, 4}, {2 * p, 2 * p, 4, 4}};
  b.id = 1;
  b.klass = 2;
  b.text_len = 6;
  b.items = {{2 * p, p, 2, 6}};
  Model model(config.model, kModelSeed);
  {
    const PackedBatch batch = pack_whole_samples(sampler, 1, {a, b, a});
    ASSERT_EQ(batch.encoder.patches, 2 * (2 + 4) + 2);
    EncoderActivations enc;
    model.zero_grads();
    model.encoder_forward(batch.encoder, enc);
    t_mat d_emb("d_emb", batch.encoder.patches, config.model.llm.width);
    model.llm_forward_backward(batch.llm, enc.embeddings, 1.0f / static_cast<float>(batch.loss_targets),
                               d_emb);
    auto d_host = Kokkos::create_mirror_view_and_copy(HostSpace(), d_emb);
    double d_max = 0.0;
    for (size_t i = 0; i < d_host.extent(0); ++i)
      for (size_t j = 0; j < d_host.extent(1); ++j) d_max = std::max(d_max, std::abs(double(d_host(i, j))));
    EXPECT_EQ(d_max, 0.0) << "gradient of image embeddings that nothing can see";
    model.encoder_backward(batch.encoder, enc, d_emb);
    for (const auto& t : named_tensors(model)) {
      if (is_encoder_tensor(t.name)) {
        EXPECT_EQ(max_abs(get_values(t.grad)), 0.0) << t.name;
      }
    }
  }
  {
    SampleMeta first = b;
    first.items[0].text_pos = 0;
    const PackedBatch batch = pack_whole_samples(sampler, 1, {a, first});
    loss_and_grads(model, batch);
    for (const auto& t : named_tensors(model)) {
      if (is_encoder_tensor(t.name)) {
        EXPECT_GT(max_abs(get_values(t.grad)), 0.0) << t.name;
      }
    }
  }
}

TEST(ModelGradients, EncoderGradientsAreNonZeroWhenImagesArePresent) {
  for (const char* init_std : {"0.02", "0.3"}) {
    SCOPED_TRACE(std::string("init_std ") + init_std);
    const RunConfig config = tiny_config(init_std);
    const Sampler sampler(config);
    const PackedBatch batch = gradient_batch(sampler, config, false);
    Model model(config.model, kModelSeed);
    loss_and_grads(model, batch);
    for (const auto& t : named_tensors(model)) EXPECT_GT(max_abs(get_values(t.grad)), 0.0) << t.name;
  }
}

// Copies a unit's gradients to the host as the backward reports it done, and records the order.
class UnitSnapshots final : public GradientListener {
 public:
  explicit UnitSnapshots(const Model& model) : model_(model) {}
  void gradients_ready(int unit) override {
    order.push_back(unit);
    snapshots.push_back(unit_values(model_, unit));
  }
  static std::vector<float> unit_values(const Model& model, int unit) {
    const auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), model.grads());
    std::vector<float> values;
    for (const TensorRange& t : model.gradient_units().at(unit).tensors)
      values.insert(values.end(), grads.data() + t.offset, grads.data() + t.offset + t.count);
    return values;
  }
  std::vector<int> order;
  std::vector<std::vector<float>> snapshots;

 private:
  const Model& model_;
};

// What the overlapped gradient all-reduce relies on: each unit is reported once, in the order of
// Model::gradient_units (the LLM's, then the encoder's), and when reported its gradients are final (the
// all-reduce starts from them at once); every tensor is in exactly one unit.
TEST(ModelGradients, BackwardReportsEachUnitOnceItsGradientsAreFinal) {
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  const PackedBatch batch = gradient_batch(sampler, config, false);
  Model model(config.model, kModelSeed);
  std::vector<int> in_units(model.tensor_ranges().size(), 0);
  for (const GradientUnit& unit : model.gradient_units())
    for (const TensorRange& t : unit.tensors)
      for (size_t i = 0; i < model.tensor_ranges().size(); ++i)
        in_units[i] += model.tensor_ranges()[i].name == t.name;
  for (size_t i = 0; i < in_units.size(); ++i) EXPECT_EQ(in_units[i], 1) << model.tensor_ranges()[i].name;

  UnitSnapshots listener(model);
  model.zero_grads();
  EncoderActivations enc;
  model.encoder_forward(batch.encoder, enc);
  t_mat d_emb("d_image_embeddings", batch.encoder.patches, model.config().llm.width);
  model.llm_forward_backward(batch.llm, enc.embeddings, 1.0f / batch.loss_targets, d_emb, nullptr, &listener);
  EXPECT_EQ(listener.order.size(), static_cast<size_t>(model.llm_gradient_units()));
  model.encoder_backward(batch.encoder, enc, d_emb, &listener);

  const int units = static_cast<int>(model.gradient_units().size());
  ASSERT_EQ(listener.order.size(), static_cast<size_t>(units));
  for (int u = 0; u < units; ++u) {
    const std::string& name = model.gradient_units()[u].name;
    EXPECT_EQ(listener.order[u], u) << name;
    const std::vector<float> final_values = UnitSnapshots::unit_values(model, u);
    EXPECT_EQ(listener.snapshots[u], final_values) << name << " changed after it was reported done";
    double largest = 0.0;
    for (float v : final_values) largest = std::max(largest, std::abs(double(v)));
    EXPECT_GT(largest, 0.0) << name << ": zero gradient, the check would be vacuous";
  }
}

TEST(ModelGradients, UnusedTokenEmbeddingRowsGetZeroGradient) {
  // A token id's embedding row gets gradient only from positions where that id is read and something
  // later in the sample depends on it: ids absent from the batch, and ids only seen as the last row of a
  // sample (whose output predicts nothing and which no other row attends to), get exactly zero.
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  SampleMeta s;
  s.id = 0;
  s.klass = 0;
  s.text_len = 4;
  s.items = {{2, 2, 1, 1}};  // rows: t0 | image | t1 t2 t3
  const auto tokens = sampler.text_tokens(0, s);
  const PackedBatch batch = pack_whole_samples(sampler, 0, {s});
  Model model(config.model, kModelSeed);
  loss_and_grads(model, batch);
  auto g = Kokkos::create_mirror_view_and_copy(HostSpace(), model.weight_grads().token_embed);
  int zero_rows = 0;
  for (int id = 0; id < kVocab; ++id) {
    const bool influential = std::find(tokens.begin(), tokens.end() - 1, id) != tokens.end() - 1;
    double m = 0.0;
    for (size_t j = 0; j < g.extent(1); ++j) m = std::max(m, std::abs(double(g(id, j))));
    if (influential) {
      EXPECT_GT(m, 0.0) << "token " << id;
    } else {
      EXPECT_EQ(m, 0.0) << "token " << id << (id == tokens.back() ? " (only last)" : " (absent)");
      ++zero_rows;
    }
  }
  EXPECT_GE(zero_rows, kVocab - 3);
}

// ---------------------------------------------------------------------------------------------------
// Packing, determinism, initial loss

TEST(ModelGradients, PackedBatchEqualsSamplesOneByOne) {
  // Segments isolate samples: the summed loss and gradients of a packed batch equal the sums over the
  // samples run alone (up to fp32 reassociation: relative 1e-5 of the largest gradient).
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  const int step = informative_step(sampler);
  ASSERT_GE(step, 0);
  const auto samples = sampler.batch(step).samples;
  Model model(config.model, kModelSeed);
  const double packed_loss = run_step(model, pack_whole_samples(sampler, step, samples), 1.0f);
  const std::vector<float> packed_grads = get_values(flat(model.grads()));
  double single_loss = 0.0;
  std::vector<double> single_grads(packed_grads.size(), 0.0);
  for (const auto& s : samples) {
    single_loss += run_step(model, pack_whole_samples(sampler, step, {s}), 1.0f);
    const std::vector<float> g = get_values(flat(model.grads()));
    for (size_t i = 0; i < g.size(); ++i) single_grads[i] += g[i];
  }
  EXPECT_NEAR(packed_loss, single_loss, 1e-5 * std::abs(single_loss));
  const double scale = max_abs(packed_grads);
  ASSERT_GT(scale, 0.0);
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < packed_grads.size(); ++i) {
    const double err = std::abs(packed_grads[i] - single_grads[i]);
    if (err > worst) worst = err, worst_i = i;
  }
  EXPECT_LE(worst, 1e-5 * scale) << "parameter " << worst_i << ": packed " << packed_grads[worst_i]
                                 << " vs sum of singles " << single_grads[worst_i];
}

TEST(ModelGradients, ForwardBackwardIsBitwiseReproducible) {
  const RunConfig config = tiny_config("0.3");
  const Sampler sampler(config);
  const PackedBatch batch = gradient_batch(sampler, config, false);
  Model model(config.model, kModelSeed);
  const double loss1 = loss_and_grads(model, batch);
  const std::vector<float> g1 = get_values(flat(model.grads()));
  const double loss2 = loss_and_grads(model, batch);  // zero_grads must reset, not accumulate
  EXPECT_EQ(loss1, loss2);
  EXPECT_TRUE(g1 == get_values(flat(model.grads())));
  Model same(config.model, kModelSeed);
  EXPECT_EQ(loss_and_grads(same, batch), loss1);
  EXPECT_TRUE(g1 == get_values(flat(same.grads())));
}

// Recomputation runs the forward's own operations on the same inputs: the loss and every gradient element
// are bitwise those of keeping every activation, in both GEMM precisions, on both batches (the handmade
// one has a single-patch image and images at a sample's edges). Several blocks per stack, so that kept
// block inputs chain.
TEST(ModelGradients, RecomputationGivesBitwiseTheSameLossAndGradients) {
  RunConfig config = tiny_config("0.3");
  config.model.vision().layers = 2;
  config.model.llm.layers = 3;
  const Sampler sampler(config);
  for (bool handmade : {false, true})
    for (GemmPrecision precision : {GemmPrecision::fp32, GemmPrecision::bf16}) {
      SCOPED_TRACE(std::string(handmade ? "handmade" : "sampled") + " " + to_string(precision));
      const PackedBatch batch = gradient_batch(sampler, config, handmade);
      Model keeping(config.model, kModelSeed, precision, Recompute::none);
      const double loss = loss_and_grads(keeping, batch);
      const std::vector<float> grads = get_values(flat(keeping.grads()));
      for (Recompute mode : {Recompute::selective, Recompute::full}) {
        SCOPED_TRACE(std::string("recompute ") + to_string(mode));
        Model recomputing(config.model, kModelSeed, precision, mode);
        EXPECT_EQ(loss_and_grads(recomputing, batch), loss);
        const std::vector<float> recomputed = get_values(flat(recomputing.grads()));
        ASSERT_EQ(recomputed.size(), grads.size());
        size_t differing = 0;
        for (size_t i = 0; i < grads.size(); ++i) differing += recomputed[i] != grads[i];
        EXPECT_EQ(differing, 0u) << "of " << grads.size() << " gradient elements";
      }
    }
}

TEST(ModelGradients, InitialLossIsNearLogVocab) {
  // init_std 0.02: logits are O(0.02 * sqrt(width)) ~ 0.06, so the predicted distribution is nearly uniform
  // and the loss is ln(vocab) up to ~var(logits)/2 ~ 1e-3; 5% would still catch a wrong normalisation.
  const RunConfig config = tiny_config("0.02");
  const Sampler sampler(config);
  for (int step = 0; step < 3; ++step) {
    const PackedBatch batch = pack_whole_samples(sampler, step, sampler.batch(step).samples);
    Model model(config.model, kModelSeed);
    const double loss = loss_and_grads(model, batch);
    EXPECT_NEAR(loss, std::log(static_cast<double>(kVocab)), 0.05 * std::log(static_cast<double>(kVocab)))
        << "step " << step;
  }
}

}  // namespace
}  // namespace minimllm
