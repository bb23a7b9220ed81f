// Deck parsing: valid decks round-trip every field; every invalid deck gives one precise line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/printable.hpp"

namespace minimllm {
namespace {

const char* const kOrigin = "deck.yaml";

RunConfig parse(const std::string& text) { return parse_run_config(text, kOrigin); }

// The InputError message for a deck, or a marker when it parses (or throws something else).
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not an InputError) ") + e.what();
  }
  return "(no error)";
}

std::string temp_path(const std::string& leaf) {
  return (std::filesystem::path(::testing::TempDir()) / ("minimllm_test_config_" + leaf)).string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

const char* const kFullDeck = R"(# every key, none at its default
name: full_deck-1.0
seed: 42
steps: 7
model:
  init_std: 0.05
  encoder: {width: 48, heads: 3, layers: 2, mlp_ratio: 2, patch: 8, channels: 1}
  llm:
    width: 96
    heads: 6
    layers: 3
    mlp_ratio: 3
    vocab: 128
data:
  global_batch: 12
  text: {median: 30, sigma: 0.5, min: 3, max: 100}
  images: {mean_per_sample: 1.5, max_per_sample: 3, min_side: 16, max_side: 48, classes: 5}
  incoherence: 0.25
  noise: 0.05
optimizer: {lr: 1.0e-3, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.01, warmup_steps: 5}
runtime:
  peak_gflops_per_rank: 123.5
  blas_threads: 2
  precision: bf16
  recompute: selective
  collectives: mpi
  overlap_grad_sync: false
  grad_bucket_mb: 2.5
  gemm: portable
)";

TEST(Config, FullDeckRoundTripsEveryField) {
  const RunConfig c = parse(kFullDeck);
  EXPECT_EQ(c.name, "full_deck-1.0");
  EXPECT_EQ(c.deck_path, kOrigin);
  EXPECT_EQ(c.deck_text, kFullDeck);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.steps, 7);
  EXPECT_FLOAT_EQ(c.model.init_std, 0.05f);
  EXPECT_EQ(c.model.vision().width, 48);
  EXPECT_EQ(c.model.vision().heads, 3);
  EXPECT_EQ(c.model.vision().layers, 2);
  EXPECT_EQ(c.model.vision().mlp_ratio, 2);
  EXPECT_EQ(c.model.vision().patch, 8);
  EXPECT_EQ(c.model.vision().channels, 1);
  EXPECT_EQ(c.model.llm.width, 96);
  EXPECT_EQ(c.model.llm.heads, 6);
  EXPECT_EQ(c.model.llm.layers, 3);
  EXPECT_EQ(c.model.llm.mlp_ratio, 3);
  EXPECT_EQ(c.model.llm.vocab, 128);
  EXPECT_EQ(c.data.global_batch, 12);
  EXPECT_EQ(c.data.text.median, 30);
  EXPECT_DOUBLE_EQ(c.data.text.sigma, 0.5);
  EXPECT_EQ(c.data.text.min, 3);
  EXPECT_EQ(c.data.text.max, 100);
  EXPECT_DOUBLE_EQ(c.data.images.mean_per_sample, 1.5);
  EXPECT_EQ(c.data.images.max_per_sample, 3);
  EXPECT_EQ(c.data.images.min_side, 16);
  EXPECT_EQ(c.data.images.max_side, 48);
  EXPECT_EQ(c.data.images.classes, 5);
  EXPECT_DOUBLE_EQ(c.data.incoherence, 0.25);
  EXPECT_DOUBLE_EQ(c.data.noise, 0.05);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 1e-3f);
  EXPECT_FLOAT_EQ(c.optimizer.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.99f);
  EXPECT_FLOAT_EQ(c.optimizer.eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.01f);
  EXPECT_EQ(c.optimizer.warmup_steps, 5);
  EXPECT_DOUBLE_EQ(c.machine.peak_gflops, 123.5);
  EXPECT_EQ(c.runtime.blas_threads, 2);
  EXPECT_EQ(c.runtime.precision, "bf16");
  EXPECT_EQ(c.runtime.recompute, "selective");
  EXPECT_EQ(c.runtime.collectives, "mpi");
  EXPECT_FALSE(c.runtime.overlap_grad_sync);
  EXPECT_DOUBLE_EQ(c.runtime.grad_bucket_mb, 2.5);
  EXPECT_EQ(c.runtime.gemm, "portable");
}

// model.encoder is the model's one encoder module today: vision.
TEST(Config, TheDeckEncoderIsTheVisionModule) {
  const RunConfig c = parse("name: t\nmodel: {encoder: {width: 24, heads: 3, patch: 2}}\n");
  ASSERT_EQ(c.model.encoders.size(), 1u);
  EXPECT_EQ(c.model.encoders[0].modality, Modality::vision);
  EXPECT_EQ(c.model.module_of(Modality::vision), 0);
  EXPECT_EQ(c.model.vision().width, 24);
  EXPECT_EQ(c.model.vision().input_width(), 3.0 * 2 * 2);
  EXPECT_STREQ(to_string(Modality::vision), "vision");
  ModelConfig none;
  none.encoders.clear();
  EXPECT_THROW(none.module_of(Modality::vision), std::logic_error);
}

TEST(Config, MinimalDeckGetsDefaults) {
  const std::string text = "name: tiny\n";
  const RunConfig c = parse(text);
  const RunConfig d;  // the struct initialisers are the documented defaults
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.deck_text, text);
  EXPECT_EQ(c.deck_path, kOrigin);
  EXPECT_EQ(c.seed, d.seed);
  EXPECT_EQ(c.steps, d.steps);
  EXPECT_EQ(c.model.init_std, d.model.init_std);
  EXPECT_EQ(c.model.vision().width, d.model.vision().width);
  EXPECT_EQ(c.model.vision().heads, d.model.vision().heads);
  EXPECT_EQ(c.model.vision().layers, d.model.vision().layers);
  EXPECT_EQ(c.model.vision().mlp_ratio, d.model.vision().mlp_ratio);
  EXPECT_EQ(c.model.vision().patch, d.model.vision().patch);
  EXPECT_EQ(c.model.vision().channels, d.model.vision().channels);
  EXPECT_EQ(c.model.llm.width, d.model.llm.width);
  EXPECT_EQ(c.model.llm.heads, d.model.llm.heads);
  EXPECT_EQ(c.model.llm.layers, d.model.llm.layers);
  EXPECT_EQ(c.model.llm.mlp_ratio, d.model.llm.mlp_ratio);
  EXPECT_EQ(c.model.llm.vocab, d.model.llm.vocab);
  EXPECT_EQ(c.data.global_batch, d.data.global_batch);
  EXPECT_EQ(c.data.text.median, d.data.text.median);
  EXPECT_EQ(c.data.text.sigma, d.data.text.sigma);
  EXPECT_EQ(c.data.text.min, d.data.text.min);
  EXPECT_EQ(c.data.text.max, d.data.text.max);
  EXPECT_EQ(c.data.images.mean_per_sample, d.data.images.mean_per_sample);
  EXPECT_EQ(c.data.images.max_per_sample, d.data.images.max_per_sample);
  EXPECT_EQ(c.data.images.min_side, d.data.images.min_side);
  EXPECT_EQ(c.data.images.max_side, d.data.images.max_side);
  EXPECT_EQ(c.data.images.classes, d.data.images.classes);
  EXPECT_EQ(c.data.incoherence, d.data.incoherence);
  EXPECT_EQ(c.data.noise, d.data.noise);
  EXPECT_EQ(c.optimizer.lr, d.optimizer.lr);
  EXPECT_EQ(c.optimizer.beta1, d.optimizer.beta1);
  EXPECT_EQ(c.optimizer.beta2, d.optimizer.beta2);
  EXPECT_EQ(c.optimizer.eps, d.optimizer.eps);
  EXPECT_EQ(c.optimizer.weight_decay, d.optimizer.weight_decay);
  EXPECT_EQ(c.optimizer.warmup_steps, d.optimizer.warmup_steps);
  EXPECT_EQ(c.machine.peak_gflops, d.machine.peak_gflops);
  EXPECT_EQ(c.runtime.blas_threads, d.runtime.blas_threads);
  EXPECT_EQ(c.runtime.precision, "fp32");
  EXPECT_EQ(c.runtime.recompute, "none");
  EXPECT_EQ(c.runtime.gemm, "auto");
  EXPECT_EQ(c.runtime.collectives, "auto");
  EXPECT_TRUE(c.runtime.overlap_grad_sync);
  EXPECT_DOUBLE_EQ(c.runtime.grad_bucket_mb, 8.0);
}

TEST(Config, PartialSectionsKeepOtherDefaults) {
  const RunConfig c = parse("name: p\nmodel: {llm: {vocab: 256}}\noptimizer:\n");
  EXPECT_EQ(c.model.llm.vocab, 256);
  EXPECT_EQ(c.model.llm.width, LlmConfig{}.width);
  EXPECT_EQ(c.model.vision().width, EncoderConfig{}.width);
  EXPECT_EQ(c.optimizer.lr, OptimizerConfig{}.lr);  // an empty section means all defaults
}

TEST(Config, StaticContextParallelDegreeAndTokenBudget) {
  const RunConfig defaults = parse("name: x");
  EXPECT_EQ(defaults.parallel.cp, 1);
  EXPECT_EQ(defaults.parallel.tokens_per_rank, 0);  // derived from the longest sample
  const RunConfig c = parse("name: x\nparallel: {policy: megatron_dcp, cp: 2, tokens_per_rank: 512}");
  EXPECT_EQ(c.parallel.policy, "megatron_dcp");
  EXPECT_EQ(c.parallel.cp, 2);
  EXPECT_EQ(c.parallel.tokens_per_rank, 512);
}

TEST(Config, DistributedOptimizerIsOffUnlessAsked) {
  EXPECT_FALSE(parse("name: x").parallel.distributed_optimizer);
  EXPECT_TRUE(parse("name: x\nparallel: {distributed_optimizer: true}").parallel.distributed_optimizer);
  EXPECT_FALSE(parse("name: x\nparallel: {distributed_optimizer: false}").parallel.distributed_optimizer);
}

TEST(Config, BoundaryValuesAreAccepted) {
  const RunConfig c = parse(
      "name: b\nseed: 18446744073709551615\nsteps: 1\n"
      "model: {encoder: {layers: 0, width: 1, heads: 1, patch: 1}, llm: {width: 32768, heads: 32768, "
      "mlp_ratio: 1, vocab: 8}}\n"
      "data: {text: {min: 2, max: 2, median: 2, sigma: 0}, images: {mean_per_sample: 0, max_per_sample: 0, "
      "min_side: 1, max_side: 1, classes: 8}, incoherence: 1, noise: 0}\n"
      "optimizer: {beta1: 0, beta2: 0, weight_decay: 0, warmup_steps: 0}\n"
      "runtime: {peak_gflops_per_rank: 0, blas_threads: 1}\n");
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(c.model.vision().layers, 0);
  EXPECT_EQ(c.model.llm.width, 32768);
  EXPECT_EQ(c.data.images.max_per_sample, 0);
  EXPECT_EQ(c.data.incoherence, 1.0);
  EXPECT_EQ(c.data.noise, 0.0);
  EXPECT_EQ(c.optimizer.beta1, 0.0f);
}

TEST(Config, LoadReadsFileAndRecordsPathAndText) {
  const std::string path = temp_path("full.yaml");
  write_file(path, kFullDeck);
  const RunConfig c = load_run_config(path);
  EXPECT_EQ(c.deck_path, path);
  EXPECT_EQ(c.deck_text, kFullDeck);
  EXPECT_EQ(c.name, "full_deck-1.0");
  std::remove(path.c_str());
}

void expect_one_line_from(const std::string& message, const std::string& origin) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind(origin + ": ", 0), 0u) << message;
}

TEST(Config, MissingFileIsAnInputError) {
  const std::string path = temp_path("does_not_exist.yaml");
  try {
    load_run_config(path);
    FAIL() << "no error";
  } catch (const InputError& e) {
    expect_one_line_from(e.what(), path);
    EXPECT_NE(std::string(e.what()).find("cannot read deck"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(Config, DirectoryIsAnInputError) {
  const std::string path = ::testing::TempDir();
  try {
    load_run_config(path);
    FAIL() << "no error";
  } catch (const InputError& e) {
    expect_one_line_from(e.what(), path);
    EXPECT_NE(std::string(e.what()).find("cannot read deck"), std::string::npos) << e.what();
  }
}

TEST(Config, EmptyFileIsAnInputError) {
  const std::string path = temp_path("empty.yaml");
  write_file(path, "");
  try {
    load_run_config(path);
    FAIL() << "no error";
  } catch (const InputError& e) {
    expect_one_line_from(e.what(), path);
    EXPECT_NE(std::string(e.what()).find("(empty)"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(Config, BenchmarkSectionNamesTheReference) {
  EXPECT_EQ(parse("name: t\n").benchmark.reference, "");
  EXPECT_EQ(parse("name: t\nbenchmark: {reference: ref/t.reference.yaml}\n").benchmark.reference,
            "ref/t.reference.yaml");
}

const char* const kReference =
    "problem: small\nstep: 29\nloss: 2.5\nrelative_tolerance: 1.0e-4\ninvariance_steps: 3\n"
    "invariance_relative_tolerance: 1.0e-5\n";

TEST(Config, BenchmarkReferenceReadsEveryKey) {
  const std::string path = temp_path("small.reference.yaml");
  write_file(path, kReference);
  const BenchmarkReference r = load_benchmark_reference(path);
  EXPECT_EQ(r.path, path);
  EXPECT_EQ(r.problem, "small");
  EXPECT_EQ(r.step, 29);
  EXPECT_DOUBLE_EQ(r.loss, 2.5);
  EXPECT_DOUBLE_EQ(r.relative_tolerance, 1e-4);
  EXPECT_EQ(r.invariance_steps, 3);
  EXPECT_DOUBLE_EQ(r.invariance_relative_tolerance, 1e-5);
  std::remove(path.c_str());
}

TEST(Config, BadBenchmarkReferenceIsOneLineNamingKey) {
  const std::string path = temp_path("bad.reference.yaml");
  const std::string full = kReference;
  const auto without = [&](const std::string& line) {
    std::string text = full;
    text.erase(text.find(line), line.size());
    return text;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {without("loss: 2.5\n"), {"loss = (missing)", "required key"}},
      {without("relative_tolerance: 1.0e-4\n"), {"relative_tolerance = (missing)", "required key"}},
      {full + "tolerance: 1\n", {"tolerance = 1", "unknown key"}},
      {std::string(kReference).replace(full.find("29"), 2, "-1"), {"step = -1", "integer >= 0"}},
      {std::string(kReference).replace(full.find("2.5"), 3, "abc"), {"loss = abc", "number > 0"}},
      {"- a list\n", {"(top level)", "must be a YAML map"}},
  };
  for (const auto& [text, fragments] : cases) {
    write_file(path, text);
    try {
      load_benchmark_reference(path);
      ADD_FAILURE() << "no error for\n" << text;
    } catch (const InputError& e) {
      expect_one_line_from(e.what(), path);
      for (const std::string& fragment : fragments)
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
            << e.what() << "\nmissing: " << fragment;
    }
  }
  std::remove(path.c_str());
  try {
    load_benchmark_reference(path);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read benchmark reference"), std::string::npos) << e.what();
  }
}

TEST(Config, CrossFieldMessageIsExact) {
  EXPECT_EQ(error_of("name: t\nmodel: {llm: {width: 65, heads: 4}}\n"),
            "deck.yaml: model.llm.width = 65: must be divisible by model.llm.heads (= 4)");
}

// A command-line override (--global-batch) goes through the same size guard as the deck's own value.
TEST(Config, OverriddenGlobalBatchIsCheckedAgain) {
  RunConfig c = parse("name: t\n");  // 4 images of (32/4)^2 patches + 256 text = 512 tokens per sample
  c.data.global_batch = (1 << 22) - 1;
  EXPECT_NO_THROW(check_run_config(c, "deck.yaml with --global-batch"));
  c.data.global_batch = 1 << 22;  // 2^31 tokens per step: one past the guard
  try {
    check_run_config(c, "deck.yaml with --global-batch");
    ADD_FAILURE() << "global_batch 2^22 passed the tokens-per-step guard";
  } catch (const InputError& e) {
    const std::string message = e.what();
    expect_one_line_from(message, "deck.yaml with --global-batch");
    EXPECT_NE(message.find("data.global_batch = 4194304"), std::string::npos) << message;
    EXPECT_NE(message.find("tokens per step"), std::string::npos) << message;
  }
}

TEST(Config, YamlSyntaxErrorGivesLineAndColumn) {
  const std::string message = error_of("name: t\nsteps: 3\nmodel: {llm: [}\n");
  expect_one_line_from(message, kOrigin);
  EXPECT_NE(message.find("deck.yaml: line 3, column "), std::string::npos) << message;
  EXPECT_NE(message.find("invalid YAML: "), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------------
// Every invalid deck: the message is one line starting with the origin and contains each fragment.

struct BadDeck {
  const char* label;                   // test name suffix
  std::string yaml;                    // the whole deck
  std::vector<std::string> fragments;  // substrings the message must contain
};

// Most cases are one line added to a valid minimal deck.
BadDeck with_name(const char* label, const std::string& line, std::vector<std::string> fragments) {
  return {label, "name: t\n" + line + "\n", std::move(fragments)};
}

std::vector<BadDeck> bad_decks() {
  return {
      // Structure: unknown keys, node kinds, documents.
      with_name(
          "UnknownTopLevelKey", "stepz: 3",
          {"stepz = 3", "unknown key", "did you mean 'steps'", "valid keys at the top level: name, seed"}),
      with_name("UnknownTopLevelSection", "trainer: {steps: 3}", {"trainer = {steps: 3}", "unknown key"}),
      with_name("UnknownNestedKey", "model: {encoder: {depth: 2}}",
                {"model.encoder.depth = 2", "unknown key",
                 "valid keys in model.encoder: width, heads, layers, mlp_ratio, patch, channels"}),
      with_name("TypoLlmWidht", "model: {llm: {widht: 64}}",
                {"model.llm.widht = 64", "did you mean 'width'", "valid keys in model.llm"}),
      with_name("UnknownDataKey", "data: {batch: 4}", {"data.batch = 4", "valid keys in data: global_batch"}),
      with_name("UnknownTextKey", "data: {text: {mean: 4}}", {"data.text.mean = 4", "unknown key"}),
      with_name("UnknownImagesKey", "data: {images: {count: 1}}", {"data.images.count = 1", "unknown key"}),
      with_name("UnknownOptimizerKey", "optimizer: {learning_rate: 0.1}",
                {"optimizer.learning_rate = 0.1", "valid keys in optimizer: lr, beta1"}),
      with_name("UnknownRuntimeKey", "runtime: {threads: 2}", {"runtime.threads = 2", "unknown key"}),
      with_name("DuplicateKey", "steps: 2\nsteps: 3", {"steps = ", "duplicate key"}),
      with_name("NonScalarKey", "[a, b]: 1",
                {"[a, b] = 1", "keys must be plain names", "valid keys at the top level"}),
      with_name("ScalarWhereMapExpected", "model: 5",
                {"model = 5", "must be a map with keys init_std, encoder, llm"}),
      with_name("ListWhereMapExpected", "data: [1, 2]", {"data = [1, 2]", "must be a map"}),
      with_name("NestedListWhereMapExpected", "model: {llm: [64, 4]}",
                {"model.llm = [64, 4]", "must be a map"}),
      with_name("ScalarWhereNestedMapExpected", "data: {images: 3}", {"data.images = 3", "must be a map"}),
      with_name("MapWhereScalarExpected", "steps: {n: 3}", {"steps = {n: 3}", "must be an integer"}),
      with_name("ListWhereScalarExpected", "optimizer: {lr: [1, 2]}",
                {"optimizer.lr = [1, 2]", "must be a number"}),
      {"TopLevelList", "- name: t\n- steps: 3\n", {"(top level) = ", "must be a YAML map"}},
      {"TopLevelScalar", "just words\n", {"(top level) = just words", "must be a YAML map"}},
      {"EmptyText", "", {"(top level) = (empty)", "'name' is required"}},
      {"OnlyComments", "# nothing here\n", {"(top level) = (empty)"}},
      {"TwoDocuments", "name: a\n---\nname: b\n", {"2 documents", "single YAML document"}},
      {"YamlSyntaxError", "name: t\nmodel: {llm: [}\n", {"line 2, column", "invalid YAML"}},
      {"YamlBadIndentation",
       "name: t\nmodel:\n  llm:\n    width: 64\n   heads: 4\n",
       {"line ", "invalid YAML"}},
      {"YamlUnclosedFlowList", "name: t\nsteps: [1, 2\n", {"invalid YAML"}},
      {"YamlTabIndentation", "name: t\nmodel:\n\tllm: {}\n", {"invalid YAML"}},

      // name: required, non-empty, file-name safe.
      {"MissingName", "steps: 3\n", {"name = (missing)", "required key"}},
      {"EmptyName", "name: \"\"\n", {"name = \"\"", "non-empty string"}},
      {"NameNull", "name:\n", {"name = null", "non-empty string"}},
      {"NameWithSlash", "name: a/b\n", {"name = a/b", "letters, digits, '_', '.' or '-'"}},
      {"NameWithSpace", "name: my run\n", {"name = my run", "used in file names"}},
      {"NameList", "name: [a]\n", {"name = [a]", "non-empty string"}},
      {"NameTooLong", "name: " + std::string(129, 'x') + "\n", {"at most 128"}},

      // Wrong scalar types.
      with_name("StepsWord", "steps: ten", {"steps = ten", "must be an integer >= 1"}),
      with_name("StepsFraction", "steps: 2.5", {"steps = 2.5", "must be an integer"}),
      with_name("StepsExponent", "steps: 1e3", {"steps = 1e3", "must be an integer"}),
      with_name("StepsBool", "steps: true", {"steps = true", "must be an integer"}),
      with_name("StepsNull", "steps:", {"steps = null", "must be an integer"}),
      with_name("StepsBeyondInt", "steps: 3000000000", {"steps = 3000000000", "32-bit int"}),
      with_name("StepsBeyondInt64", "steps: 99999999999999999999999", {"steps = 9999", "32-bit int"}),
      with_name("WidthBeyondIntNegative", "optimizer: {warmup_steps: -3000000000}",
                {"optimizer.warmup_steps = -3000000000", "32-bit int"}),
      with_name("LrWord", "optimizer: {lr: abc}", {"optimizer.lr = abc", "must be a number > 0"}),
      with_name("LrInf", "optimizer: {lr: .inf}", {"optimizer.lr = .inf", "must be a number"}),
      with_name("LrNan", "optimizer: {lr: .nan}", {"optimizer.lr = .nan", "must be a number"}),
      with_name("LrHex", "optimizer: {lr: 0x1p-3}", {"optimizer.lr = 0x1p-3", "must be a number"}),
      with_name("LrOverflowsFloat", "optimizer: {lr: 1e60}", {"optimizer.lr = 1e60", "32-bit float"}),
      with_name("LrOverflowsDouble", "optimizer: {lr: 1e999}", {"optimizer.lr = 1e999", "must be a number"}),
      with_name("EpsUnderflowsFloat", "optimizer: {eps: 1e-60}", {"optimizer.eps = 1e-60", "32-bit float"}),
      with_name("SigmaWord", "data: {text: {sigma: wide}}",
                {"data.text.sigma = wide", "must be a number >= 0"}),
      with_name("SeedNegative", "seed: -1", {"seed = -1", "non-negative integer"}),
      with_name("SeedFraction", "seed: 1.5", {"seed = 1.5", "non-negative integer"}),
      with_name("SeedWord", "seed: abc", {"seed = abc", "non-negative integer"}),
      with_name("SeedBeyondUint64", "seed: 18446744073709551616", {"seed = 18446744073709551616", "64 bits"}),

      // Ranges, one per rule.
      with_name("StepsZero", "steps: 0", {"steps = 0", "must be an integer >= 1"}),
      with_name("StepsNegative", "steps: -3", {"steps = -3", ">= 1"}),
      with_name("EncoderWidthZero", "model: {encoder: {width: 0}}",
                {"model.encoder.width = 0", "[1, 65536]"}),
      with_name("LlmWidthZero", "model: {llm: {width: 0}}", {"model.llm.width = 0", "[1, 65536]"}),
      with_name("LlmWidthHuge", "model: {llm: {width: 131072, heads: 1}}",
                {"model.llm.width = 131072", "[1, 65536]"}),
      with_name("EncoderHeadsZero", "model: {encoder: {heads: 0}}",
                {"model.encoder.heads = 0", "integer in [1,"}),
      with_name("LlmHeadsZero", "model: {llm: {heads: 0}}", {"model.llm.heads = 0", "integer in [1,"}),
      with_name("LlmLayersZero", "model: {llm: {layers: 0}}", {"model.llm.layers = 0", "integer in [1,"}),
      with_name("EncoderLayersNegative", "model: {encoder: {layers: -1}}",
                {"model.encoder.layers = -1", "[0,"}),
      with_name("EncoderMlpRatioZero", "model: {encoder: {mlp_ratio: 0}}",
                {"model.encoder.mlp_ratio = 0", "[1,"}),
      with_name("LlmMlpRatioZero", "model: {llm: {mlp_ratio: 0}}", {"model.llm.mlp_ratio = 0", "[1,"}),
      with_name("VocabTooSmall", "model: {llm: {vocab: 7}}",
                {"model.llm.vocab = 7", "integer in [8, 16777216]"}),
      with_name("VocabTooLarge", "model: {llm: {vocab: 16777217}}",
                {"model.llm.vocab = 16777217", "[8, 16777216]"}),
      with_name("PatchZero", "model: {encoder: {patch: 0}}", {"model.encoder.patch = 0", "[1,"}),
      with_name("ChannelsZero", "model: {encoder: {channels: 0}}", {"model.encoder.channels = 0", "[1,"}),
      with_name("InitStdZero", "model: {init_std: 0}", {"model.init_std = 0", "must be a number > 0"}),
      with_name("InitStdNegative", "model: {init_std: -0.1}", {"model.init_std = -0.1", "> 0"}),
      with_name("GlobalBatchZero", "data: {global_batch: 0}", {"data.global_batch = 0", "[1, 16777216]"}),
      with_name("GlobalBatchHuge", "data: {global_batch: 16777217}",
                {"data.global_batch = 16777217", "[1, 16777216]"}),
      with_name("TextMinOne", "data: {text: {min: 1, median: 4}}", {"data.text.min = 1", "[2,"}),
      with_name("TextMaxBelowMin", "data: {text: {min: 10, max: 9, median: 9}}",
                {"data.text.max = 9", "must be >= data.text.min (= 10)"}),
      with_name("TextMedianBelowMin", "data: {text: {min: 10, max: 20, median: 5}}",
                {"data.text.median = 5", "[data.text.min, data.text.max] = [10, 20]"}),
      with_name("TextMedianAboveMax", "data: {text: {min: 10, max: 20, median: 21}}",
                {"data.text.median = 21", "[data.text.min, data.text.max] = [10, 20]"}),
      with_name("TextSigmaNegative", "data: {text: {sigma: -0.1}}", {"data.text.sigma = -0.1", ">= 0"}),
      with_name("ImagesMeanNegative", "data: {images: {mean_per_sample: -1}}",
                {"data.images.mean_per_sample = -1", "in [0,"}),
      with_name("ImagesMaxNegative", "data: {images: {max_per_sample: -1}}",
                {"data.images.max_per_sample = -1", "[0,"}),
      with_name("MinSideBelowPatch",
                "model: {encoder: {patch: 8}}\ndata: {images: {min_side: 4, max_side: 32}}",
                {"data.images.min_side = 4", "multiple of model.encoder.patch (= 8)"}),
      with_name("MinSideNotMultipleOfPatch", "data: {images: {min_side: 10}}",
                {"data.images.min_side = 10", "multiple of model.encoder.patch (= 4)"}),
      with_name("MinSideZero", "data: {images: {min_side: 0}}", {"data.images.min_side = 0", "[1,"}),
      with_name("MaxSideBelowMinSide", "data: {images: {min_side: 16, max_side: 12}}",
                {"data.images.max_side = 12", "must be >= data.images.min_side (= 16)"}),
      with_name("MaxSideNotMultipleOfPatch", "data: {images: {max_side: 30}}",
                {"data.images.max_side = 30", "multiple of model.encoder.patch (= 4)"}),
      with_name("ClassesZero", "data: {images: {classes: 0}}", {"data.images.classes = 0", "[1,"}),
      with_name("ClassesAboveVocab", "model: {llm: {vocab: 16}}\ndata: {images: {classes: 17}}",
                {"data.images.classes = 17", "must be <= model.llm.vocab (= 16)"}),
      with_name("IncoherenceNegative", "data: {incoherence: -0.1}", {"data.incoherence = -0.1", "in [0, 1]"}),
      with_name("IncoherenceAboveOne", "data: {incoherence: 1.5}", {"data.incoherence = 1.5", "in [0, 1]"}),
      with_name("NoiseOne", "data: {noise: 1}", {"data.noise = 1", "in [0, 1)"}),
      with_name("NoiseNegative", "data: {noise: -0.01}", {"data.noise = -0.01", "in [0, 1)"}),
      with_name("LrZero", "optimizer: {lr: 0}", {"optimizer.lr = 0", "> 0"}),
      with_name("LrNegative", "optimizer: {lr: -1e-3}", {"optimizer.lr = -1e-3", "> 0"}),
      with_name("Beta1One", "optimizer: {beta1: 1.0}", {"optimizer.beta1 = 1.0", "in [0, 1)"}),
      with_name("Beta1Negative", "optimizer: {beta1: -0.1}", {"optimizer.beta1 = -0.1", "in [0, 1)"}),
      with_name("Beta2One", "optimizer: {beta2: 1}", {"optimizer.beta2 = 1", "in [0, 1)"}),
      with_name("Beta2RoundsToOneAsFloat", "optimizer: {beta2: 0.99999999999}",
                {"optimizer.beta2 = 0.99999999999", "32-bit float"}),
      with_name("EpsZero", "optimizer: {eps: 0}", {"optimizer.eps = 0", "> 0"}),
      with_name("WeightDecayNegative", "optimizer: {weight_decay: -0.1}",
                {"optimizer.weight_decay = -0.1", ">= 0"}),
      with_name("WarmupNegative", "optimizer: {warmup_steps: -1}", {"optimizer.warmup_steps = -1", ">= 0"}),
      with_name("PeakGflopsNegative", "runtime: {peak_gflops_per_rank: -5}",
                {"runtime.peak_gflops_per_rank = -5", ">= 0"}),
      with_name("BlasThreadsZero", "runtime: {blas_threads: 0}", {"runtime.blas_threads = 0", "[1,"}),
      with_name("PrecisionUnknown", "runtime: {precision: fp16}", {"runtime.precision = fp16", "fp32, bf16"}),
      with_name("RecomputeUnknown", "runtime: {recompute: attention}",
                {"runtime.recompute = attention", "none, selective, full"}),
      with_name("GemmUnknown", "runtime: {gemm: mkl}", {"runtime.gemm = mkl", "auto, blas, portable"}),
      with_name("CollectivesUnknown", "runtime: {collectives: gloo}",
                {"runtime.collectives = gloo", "auto, mpi, nccl"}),
      with_name("GradBucketNegative", "runtime: {grad_bucket_mb: -1}",
                {"runtime.grad_bucket_mb = -1", "[0,"}),
      with_name("OverlapGradSyncNotABool", "runtime: {overlap_grad_sync: maybe}",
                {"runtime.overlap_grad_sync = maybe"}),

      // Cross-field rules and overflow guards.
      with_name("LlmHeadDimAboveKernelLimit", "model: {llm: {width: 512, heads: 2}}",
                {"model.llm.width = 512", "head dimension", "<= 128"}),
      with_name("EncoderHeadDimAboveKernelLimit", "model: {encoder: {width: 256, heads: 1}}",
                {"model.encoder.width = 256", "head dimension", "<= 128"}),
      with_name("ParallelPlacementUnknown", "parallel: {placement: remote}",
                {"parallel.placement = remote", "colocated, disaggregated"}),
      with_name("ParallelGroupSizeZero", "parallel: {group_sizes: [2, 0]}",
                {"parallel.group_sizes = [2, 0]", "list of integers in [1,"}),
      with_name("ParallelGroupSizesScalar", "parallel: {group_sizes: 3}",
                {"parallel.group_sizes = 3", "list"}),
      with_name("ParallelRotateNotBool", "parallel: {rotate_groups: maybe}",
                {"parallel.rotate_groups = maybe", "true or false"}),
      with_name("ParallelMicroBatchesZero", "parallel: {micro_batches: 0}",
                {"parallel.micro_batches = 0", "[1, "}),
      with_name("DistributedOptimizerNotABool", "parallel: {distributed_optimizer: zero1}",
                {"parallel.distributed_optimizer = zero1", "true or false"}),
      with_name("ParallelPoolCapacityZero", "parallel: {comm_pool_capacity: 0}",
                {"parallel.comm_pool_capacity = 0", "[1, 100000]"}),
      with_name("ParallelEncoderLayoutUnknown", "parallel: {encoder_layout: random}",
                {"parallel.encoder_layout = random", "follow, round_robin"}),
      with_name("ParallelCpZero", "parallel: {cp: 0}", {"parallel.cp = 0", "[1, "}),
      with_name("ParallelTokensPerRankNegative", "parallel: {tokens_per_rank: -1}",
                {"parallel.tokens_per_rank = -1", "[0, "}),
      with_name("ParallelUnknownKey", "parallel: {groups: [2]}",
                {"parallel.groups", "valid keys in parallel"}),
      with_name(
          "BenchmarkUnknownKey", "benchmark: {refrence: r.yaml}",
          {"benchmark.refrence = r.yaml", "did you mean 'reference'", "valid keys in benchmark: reference"}),
      with_name("BenchmarkEmptyReference", "benchmark: {reference: \"\"}",
                {"benchmark.reference", "must be a non-empty string"}),
      with_name("LlmWidthNotDivisibleByHeads", "model: {llm: {width: 65, heads: 4}}",
                {"model.llm.width = 65", "divisible by model.llm.heads (= 4)"}),
      with_name("EncoderWidthNotDivisibleByHeads", "model: {encoder: {width: 30, heads: 4}}",
                {"model.encoder.width = 30", "divisible by model.encoder.heads (= 4)"}),
      with_name("HeadsAboveWidth", "model: {llm: {width: 4, heads: 8}}",
                {"model.llm.width = 4", "divisible by model.llm.heads (= 8)"}),
      with_name("TokensPerSampleOverflow",
                "model: {encoder: {patch: 1, channels: 1}}\ndata: {images: {min_side: 1, max_side: 32768}}",
                {"data.images.max_side = 32768", "tokens per sample", "2^30"}),
      with_name("PixelsPerImageOverflow", "data: {images: {max_side: 65536}}",
                {"data.images.max_side = 65536", "model.encoder.channels (= 3)", "values per image"}),
      with_name("TokensPerStepOverflow", "data: {global_batch: 16777216}",
                {"data.global_batch = 16777216", "tokens per step"}),
      with_name("WeightMatrixOverflow", "model: {llm: {width: 65536, heads: 512, mlp_ratio: 4}}",
                {"model.llm.width = 65536", "model.llm.mlp_ratio (= 4)", "weights per matrix"}),
      with_name("EmbeddingOverflow", "model: {llm: {width: 1024, heads: 8, vocab: 16777216}}",
                {"model.llm.vocab = 16777216", "model.llm.width (= 1024)", "embedding weights"}),
      with_name("PatchEmbeddingOverflow", "model: {encoder: {patch: 4096, width: 64}}",
                {"model.encoder.patch = 4096", "patch-embedding weights"}),
  };
}

class BadDeckTest : public ::testing::TestWithParam<BadDeck> {};

TEST_P(BadDeckTest, IsOneLineNamingKeyAndValue) {
  const BadDeck& c = GetParam();
  const std::string message = error_of(c.yaml);
  expect_one_line_from(message, kOrigin);
  for (const auto& fragment : c.fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message: " << message << "\nmissing: " << fragment << "\ndeck:\n"
        << c.yaml;
  }
}

INSTANTIATE_TEST_SUITE_P(Config, BadDeckTest, ::testing::ValuesIn(bad_decks()),
                         [](const ::testing::TestParamInfo<BadDeck>& info) { return info.param.label; });

}  // namespace
}  // namespace minimllm

namespace minimllm {
namespace {

// An error echoes input (a key, a path) on one line: control characters and Unicode line separators in it
// are escaped, so the message stays one printable line.
TEST(Printable, EscapesControlCharactersAndLineSeparators) {
  EXPECT_EQ(printable("data.images.mi\x1c_side = 8"), "data.images.mi\\x1c_side = 8");
  EXPECT_EQ(printable("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
  EXPECT_EQ(printable("x\xc2\x85y\xe2\x80\xa8z\xe2\x80\xa9"), "x\\xc2\\x85y\\xe2\\x80\\xa8z\\xe2\\x80\\xa9");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // other UTF-8 is kept
}

}  // namespace
}  // namespace minimllm
