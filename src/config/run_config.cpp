// The deck schema: RunConfig's sections, their keys, ranges and defaults, and the rules that involve
// more than one key; also the benchmark reference file. Reading is strict (config/strict_yaml.hpp):
// unknown keys, wrong node kinds, wrong scalar types and values out of range are all errors.
#include "minimllm/config/run_config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <climits>
#include <stdexcept>
#include <vector>

#include "minimllm/config/strict_yaml.hpp"
#include "minimllm/kernels/attention_limits.hpp"  // kMaxHeadDim

namespace minimllm {
namespace {

using strict_yaml::above;
using strict_yaml::at_least;
using strict_yaml::closed;
using strict_yaml::fail;
using strict_yaml::half_open;
using strict_yaml::join;
using strict_yaml::Section;
using strict_yaml::show;

// Guards against sizes that would overflow the int arithmetic used for counts and offsets elsewhere.
constexpr int kMaxWidth = 1 << 16;                    // model.*.width, heads
constexpr int kMaxLayers = 4096;                      // model.*.layers
constexpr int kMaxMlpRatio = 1024;                    // model.*.mlp_ratio
constexpr int kMaxVocab = 1 << 24;                    // model.llm.vocab
constexpr int kMaxPatch = 4096;                       // model.encoder.patch
constexpr int kMaxChannels = 4096;                    // model.encoder.channels
constexpr int kMaxGlobalBatch = 1 << 24;              // data.global_batch
constexpr int kMaxTextLength = 1 << 30;               // data.text.{median,min,max}
constexpr int kMaxImagesPerSample = 1 << 20;          // data.images.max_per_sample
constexpr double kMaxMeanImages = 1 << 20;            // data.images.mean_per_sample
constexpr int kMaxSide = 1 << 16;                     // data.images.{min,max}_side
constexpr int kMaxThreads = 4096;                     // runtime.blas_threads
constexpr int kMaxRanks = 1 << 24;                    // parallel.group_sizes, encoder_ranks
constexpr int kMaxClasses = kMaxVocab;                // data.images.classes (also <= vocab)
constexpr long long kMaxTokensPerSample = 1LL << 30;  // worst-case image + text tokens of one sample
constexpr long long kMaxTokensPerStep = INT_MAX;      // worst-case tokens of one global batch
constexpr long long kMaxMatrixElements = INT_MAX;     // elements of one weight matrix
constexpr long long kMaxImageElements = INT_MAX;      // pixels * channels of one image

// ---------------------------------------------------------------------------------------------------
// Reading each level of the deck: one line per field.

void read_encoder(const Section& s, EncoderConfig& c) {
  s.read_int("width", c.width, 1, kMaxWidth);
  s.read_int("heads", c.heads, 1, kMaxWidth);
  s.read_int("layers", c.layers, 0, kMaxLayers);
  s.read_int("mlp_ratio", c.mlp_ratio, 1, kMaxMlpRatio);
  s.read_int("patch", c.patch, 1, kMaxPatch);
  s.read_int("channels", c.channels, 1, kMaxChannels);
}

void read_llm(const Section& s, LlmConfig& c) {
  s.read_int("width", c.width, 1, kMaxWidth);
  s.read_int("heads", c.heads, 1, kMaxWidth);
  s.read_int("layers", c.layers, 1, kMaxLayers);
  s.read_int("mlp_ratio", c.mlp_ratio, 1, kMaxMlpRatio);
  s.read_int("vocab", c.vocab, 8, kMaxVocab);
}

void read_model(const Section& s, ModelConfig& c) {
  s.read_float("init_std", c.init_std, above(0.0));
  read_encoder(s.section("encoder", {"width", "heads", "layers", "mlp_ratio", "patch", "channels"}),
               c.vision());
  read_llm(s.section("llm", {"width", "heads", "layers", "mlp_ratio", "vocab"}), c.llm);
}

void read_data(const Section& s, DataConfig& c) {
  s.read_int("global_batch", c.global_batch, 1, kMaxGlobalBatch);
  const Section text = s.section("text", {"median", "sigma", "min", "max"});
  text.read_int("median", c.text.median, 2, kMaxTextLength);
  text.read_real("sigma", c.text.sigma, at_least(0.0));
  text.read_int("min", c.text.min, 2, kMaxTextLength);
  text.read_int("max", c.text.max, 2, kMaxTextLength);
  const Section images =
      s.section("images", {"mean_per_sample", "max_per_sample", "min_side", "max_side", "classes"});
  images.read_real("mean_per_sample", c.images.mean_per_sample, closed(0.0, kMaxMeanImages));
  images.read_int("max_per_sample", c.images.max_per_sample, 0, kMaxImagesPerSample);
  images.read_int("min_side", c.images.min_side, 1, kMaxSide);
  images.read_int("max_side", c.images.max_side, 1, kMaxSide);
  images.read_int("classes", c.images.classes, 1, kMaxClasses);
  s.read_real("incoherence", c.incoherence, closed(0.0, 1.0));
  s.read_real("noise", c.noise, half_open(0.0, 1.0));
}

void read_optimizer(const Section& s, OptimizerConfig& c) {
  s.read_float("lr", c.lr, above(0.0));
  s.read_float("beta1", c.beta1, half_open(0.0, 1.0));
  s.read_float("beta2", c.beta2, half_open(0.0, 1.0));
  s.read_float("eps", c.eps, above(0.0));
  s.read_float("weight_decay", c.weight_decay, at_least(0.0));
  s.read_int("warmup_steps", c.warmup_steps, 0);
}

// A value given under two names (an older key and its machine.* name): both must agree; 0 = not given.
template <class T>
void merge_alias(const Section& s, const std::string& key, T value, const std::string& machine_key,
                 T& machine_value) {
  if (value == T(0)) return;
  if (machine_value != T(0) && machine_value != value)
    s.fail_at(key, fmt::format("is also given as {} = {}; give one (they are the same value)", machine_key,
                               machine_value));
  machine_value = value;
}

void read_runtime(const Section& s, RuntimeConfig& c, MachineConfig& machine) {
  double peak = 0.0;
  s.read_real("peak_gflops_per_rank", peak, at_least(0.0));
  merge_alias(s, "peak_gflops_per_rank", peak, "machine.peak_gflops", machine.peak_gflops);
  s.read_int("blas_threads", c.blas_threads, 1, kMaxThreads);
  s.read_choice("precision", c.precision, {"fp32", "bf16"});
  s.read_choice("recompute", c.recompute, {"none", "selective", "full"});
  s.read_choice("collectives", c.collectives, {"auto", "mpi", "nccl"});
  s.read_bool("calibrate", c.calibrate);
  s.read_real("stall_timeout", c.stall_timeout, at_least(0.0));
  s.read_bool("plan_ahead", c.plan_ahead);
  s.read_bool("overlap_grad_sync", c.overlap_grad_sync);
  s.read_real("grad_bucket_mb", c.grad_bucket_mb, closed(0.0, 1.0e6));
  s.read_choice("gemm", c.gemm, {"auto", "blas", "portable"});
}

void read_parallel(const Section& s, ParallelConfig& c, MachineConfig& machine) {
  s.read_string("policy", c.policy);  // a name of the policy registry (planning/policy_registry.hpp)
  s.read_int("cp", c.cp, 1, kMaxRanks);
  s.read_int("tokens_per_rank", c.tokens_per_rank, 0, 1 << 30);
  s.read_choice("cp_comm", c.cp_comm, {"p2p", "a2a", "all_gather"});
  s.read_real("flexsp_time_limit", c.flexsp_time_limit, closed(0.0, 3600.0));
  int ranks_per_node = 0;
  s.read_int("ranks_per_node", ranks_per_node, 0, kMaxRanks);
  merge_alias(s, "ranks_per_node", ranks_per_node, "machine.ranks_per_node", machine.ranks_per_node);
  s.read_int_list("group_sizes", c.group_sizes, 1, kMaxRanks);
  s.read_bool("rotate_groups", c.rotate_groups);
  s.read_int("micro_batches", c.micro_batches, 1, kMaxGlobalBatch);
  s.read_choice("placement", c.placement, {"colocated", "disaggregated"});
  s.read_int("encoder_ranks", c.encoder_ranks, 0, kMaxRanks);
  s.read_choice("encoder_layout", c.encoder_layout, {"follow", "round_robin"});
  s.read_choice("encoder_schedule", c.encoder_schedule, {"per_step", "per_micro_batch"});
  s.read_int("comm_pool_capacity", c.comm_pool_capacity, 1, 100000);
  s.read_choice("comm_precreate", c.comm_precreate, {"none", "powers_of_two"});
  s.read_bool("distributed_optimizer", c.distributed_optimizer);
  s.read_string("cost_model", c.cost_model);
  s.read_int("tp", c.tp, 1, kMaxWidth);
  s.read_int("pp", c.pp, 1, kMaxWidth);
  s.read_int_list("pp_layers", c.pp_layers, 1, kMaxWidth);
  s.read_int("encoder_tp", c.encoder_tp, 1, kMaxWidth);
  s.read_bool("encoder_stage", c.encoder_stage);
}

// ---------------------------------------------------------------------------------------------------
// Rules that involve more than one field; each message names every key involved.

class CrossChecker {
 public:
  explicit CrossChecker(const std::string& origin) : origin_(origin) {}

  void require(bool ok, const std::string& path, long long value, const std::string& what) const {
    require(ok, path, std::to_string(value), what);
  }
  void require(bool ok, const std::string& path, const std::string& value, const std::string& what) const {
    if (!ok) fail(origin_, path, value, what);
  }

  // `count` = product or sum computed in 64 bits by the caller; must stay below `limit`.
  void require_size(long long count, long long limit, const std::string& path, long long value,
                    const std::string& formula, const std::string& unit) const {
    require(count <= limit, path, value,
            fmt::format("{} = {} {}; must be at most {} (int overflow guard)", formula, count, unit, limit));
  }

 private:
  const std::string& origin_;
};

void check_model(const CrossChecker& x, const ModelConfig& m) {
  const EncoderConfig& e = m.vision();
  const LlmConfig& l = m.llm;
  x.require(e.width % e.heads == 0, "model.encoder.width", e.width,
            fmt::format("must be divisible by model.encoder.heads (= {})", e.heads));
  x.require(l.width % l.heads == 0, "model.llm.width", l.width,
            fmt::format("must be divisible by model.llm.heads (= {})", l.heads));
  // The attention kernel keeps a head's row in fixed-size tiles of at most kMaxHeadDim floats.
  x.require(
      e.width / e.heads <= kMaxHeadDim, "model.encoder.width", e.width,
      fmt::format("head dimension width / model.encoder.heads (= {}) must be <= {}", e.heads, kMaxHeadDim));
  x.require(l.width / l.heads <= kMaxHeadDim, "model.llm.width", l.width,
            fmt::format("head dimension width / model.llm.heads (= {}) must be <= {}", l.heads, kMaxHeadDim));
  using ll = long long;
  x.require_size(ll(e.width) * e.width * e.mlp_ratio, kMaxMatrixElements, "model.encoder.width", e.width,
                 fmt::format("model.encoder.width^2 * model.encoder.mlp_ratio (= {})", e.mlp_ratio),
                 "weights per matrix");
  x.require_size(ll(l.width) * l.width * l.mlp_ratio, kMaxMatrixElements, "model.llm.width", l.width,
                 fmt::format("model.llm.width^2 * model.llm.mlp_ratio (= {})", l.mlp_ratio),
                 "weights per matrix");
  x.require_size(ll(l.vocab) * l.width, kMaxMatrixElements, "model.llm.vocab", l.vocab,
                 fmt::format("model.llm.vocab * model.llm.width (= {})", l.width), "embedding weights");
  x.require_size(ll(e.patch) * e.patch * e.channels * e.width, kMaxMatrixElements, "model.encoder.patch",
                 e.patch,
                 fmt::format("model.encoder.patch^2 * model.encoder.channels (= {}) * model.encoder.width "
                             "(= {})",
                             e.channels, e.width),
                 "patch-embedding weights");
}

void check_data(const CrossChecker& x, const DataConfig& d, const ModelConfig& m) {
  const TextConfig& t = d.text;
  const ImageConfig& im = d.images;
  const int patch = m.vision().patch;
  x.require(t.max >= t.min, "data.text.max", t.max, fmt::format("must be >= data.text.min (= {})", t.min));
  x.require(t.median >= t.min && t.median <= t.max, "data.text.median", t.median,
            fmt::format("must be in [data.text.min, data.text.max] = [{}, {}]", t.min, t.max));
  x.require(im.min_side >= patch && im.min_side % patch == 0, "data.images.min_side", im.min_side,
            fmt::format("must be a positive multiple of model.encoder.patch (= {})", patch));
  x.require(im.max_side >= im.min_side, "data.images.max_side", im.max_side,
            fmt::format("must be >= data.images.min_side (= {})", im.min_side));
  x.require(im.max_side % patch == 0, "data.images.max_side", im.max_side,
            fmt::format("must be a multiple of model.encoder.patch (= {})", patch));
  x.require(im.classes <= m.llm.vocab, "data.images.classes", im.classes,
            fmt::format("must be <= model.llm.vocab (= {})", m.llm.vocab));

  using ll = long long;
  const ll patches_per_side = im.max_side / patch;
  const ll tokens_per_sample = ll(im.max_per_sample) * patches_per_side * patches_per_side + t.max;
  x.require_size(ll(im.max_side) * im.max_side * m.vision().channels, kMaxImageElements,
                 "data.images.max_side", im.max_side,
                 fmt::format("data.images.max_side^2 * model.encoder.channels (= {})", m.vision().channels),
                 "values per image");
  x.require(tokens_per_sample < kMaxTokensPerSample, "data.images.max_side", im.max_side,
            fmt::format("data.images.max_per_sample (= {}) * (data.images.max_side / model.encoder.patch "
                        "(= {}))^2 + data.text.max (= {}) = {} tokens per sample; must be below 2^30",
                        im.max_per_sample, patch, t.max, tokens_per_sample));
  x.require_size(ll(d.global_batch) * tokens_per_sample, kMaxTokensPerStep, "data.global_batch",
                 d.global_batch,
                 fmt::format("data.global_batch * worst-case tokens per sample (= {})", tokens_per_sample),
                 "tokens per step");
}

// Tensor parallelism splits heads; pipeline parallelism splits layers (the rank grid is checked against
// the ranks where they are known: layout/model_parallel.hpp).
void check_model_parallel(const CrossChecker& x, const ParallelConfig& p, const ModelConfig& m) {
  x.require(
      m.llm.heads % p.tp == 0, "parallel.tp", p.tp,
      fmt::format("must divide model.llm.heads (= {}): tensor parallelism splits the heads", m.llm.heads));
  x.require(p.tp <= m.llm.vocab, "parallel.tp", p.tp,
            fmt::format("must be at most model.llm.vocab (= {}): the vocabulary is split over the group",
                        m.llm.vocab));
  for (const EncoderConfig& e : m.encoders)
    x.require(
        e.heads % p.encoder_tp == 0, "parallel.encoder_tp", p.encoder_tp,
        fmt::format("must divide model.encoder.heads (= {}): tensor parallelism splits the heads", e.heads));
  x.require(p.pp <= m.llm.layers, "parallel.pp", p.pp,
            fmt::format("must be at most model.llm.layers (= {}): every pipeline stage holds a layer",
                        m.llm.layers));
  if (p.pp_layers.empty()) return;
  std::string listed;
  for (int n : p.pp_layers) listed += (listed.empty() ? "[" : ", ") + std::to_string(n);
  listed += "]";
  x.require(static_cast<int>(p.pp_layers.size()) == p.pp, "parallel.pp_layers", listed,
            fmt::format("must list one layer count per pipeline stage (parallel.pp = {})", p.pp));
  long long layers = 0;
  for (int n : p.pp_layers) layers += n;
  x.require(layers == m.llm.layers, "parallel.pp_layers", listed,
            fmt::format("must sum to model.llm.layers (= {})", m.llm.layers));
}

}  // namespace

const char* to_string(Modality modality) {
  switch (modality) {
    case Modality::vision:
      return "vision";
  }
  return "unknown";
}

CpComm cp_comm_from_string(const std::string& name) {
  if (name == "p2p") return CpComm::p2p;
  if (name == "a2a") return CpComm::a2a;
  if (name == "all_gather") return CpComm::all_gather;
  throw std::invalid_argument("context-parallel mechanism '" + name +
                              "' is not one of: p2p, a2a, all_gather");
}

EncoderSchedule encoder_schedule_from_string(const std::string& name) {
  if (name == "per_step") return EncoderSchedule::per_step;
  if (name == "per_micro_batch") return EncoderSchedule::per_micro_batch;
  throw std::invalid_argument("encoder schedule '" + name + "' is not one of: per_step, per_micro_batch");
}

const char* to_string(CpComm mode) {
  switch (mode) {
    case CpComm::p2p:
      return "p2p";
    case CpComm::a2a:
      return "a2a";
    case CpComm::all_gather:
      return "all_gather";
  }
  return "unknown";
}

CpComm cp_comm_for_group(CpComm mode, int group_size, int heads_per_rank) {
  if (mode == CpComm::a2a && (group_size < 1 || heads_per_rank % group_size != 0)) return CpComm::p2p;
  return mode;
}

int ModelConfig::module_of(Modality modality) const {
  for (size_t m = 0; m < encoders.size(); ++m)
    if (encoders[m].modality == modality) return static_cast<int>(m);
  throw std::logic_error(std::string("the model has no ") + to_string(modality) + " encoder module");
}

const EncoderConfig& ModelConfig::vision() const { return encoders[module_of(Modality::vision)]; }

EncoderConfig& ModelConfig::vision() {
  return const_cast<EncoderConfig&>(static_cast<const ModelConfig&>(*this).vision());
}

// ---------------------------------------------------------------------------------------------------

RunConfig parse_run_config(const std::string& yaml_text, const std::string& origin) {
  const std::vector<YAML::Node> documents = load_yaml_documents(yaml_text, origin);
  const std::vector<std::string> top_keys = {"name",      "seed",    "steps",    "model",     "data",
                                             "optimizer", "runtime", "parallel", "benchmark", "machine"};
  const std::string expected_top =
      fmt::format("a deck must be a YAML map with keys {} ('name' is required)", join(top_keys));
  if (documents.size() > 1) {
    fail(origin, "(top level)", fmt::format("{} documents", documents.size()),
         "a deck must be a single YAML document (remove the extra '---')");
  }
  if (documents.empty() || documents[0].IsNull()) fail(origin, "(top level)", "(empty)", expected_top);
  const YAML::Node& root = documents[0];
  if (!root.IsMap()) fail(origin, "(top level)", show(root), expected_top);

  RunConfig cfg;
  cfg.deck_path = origin;
  cfg.deck_text = yaml_text;
  const Section top(origin, root, "", top_keys);
  top.read_name("name", cfg.name);
  top.read_uint64("seed", cfg.seed);
  top.read_int("steps", cfg.steps, 1);
  read_model(top.section("model", {"init_std", "encoder", "llm"}), cfg.model);
  read_data(top.section("data", {"global_batch", "text", "images", "incoherence", "noise"}), cfg.data);
  // The machine first: the older names under runtime and parallel are checked against it.
  cfg.machine = read_machine(top.section("machine", machine_keys()));
  read_optimizer(top.section("optimizer", {"lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps"}),
                 cfg.optimizer);
  read_runtime(top.section("runtime", {"peak_gflops_per_rank", "blas_threads", "precision", "recompute",
                                       "collectives", "calibrate", "stall_timeout", "plan_ahead",
                                       "overlap_grad_sync", "grad_bucket_mb", "gemm"}),
               cfg.runtime, cfg.machine);
  read_parallel(top.section("parallel", {"policy",
                                         "cp",
                                         "cp_comm",
                                         "tokens_per_rank",
                                         "flexsp_time_limit",
                                         "ranks_per_node",
                                         "group_sizes",
                                         "rotate_groups",
                                         "micro_batches",
                                         "placement",
                                         "encoder_ranks",
                                         "encoder_layout",
                                         "encoder_schedule",
                                         "comm_pool_capacity",
                                         "comm_precreate",
                                         "cost_model",
                                         "distributed_optimizer",
                                         "tp",
                                         "pp",
                                         "pp_layers",
                                         "encoder_tp",
                                         "encoder_stage"}),
                cfg.parallel, cfg.machine);
  top.section("benchmark", {"reference"}).read_string("reference", cfg.benchmark.reference);

  check_run_config(cfg, origin);
  return cfg;
}

void check_run_config(const RunConfig& config, const std::string& origin) {
  const CrossChecker cross(origin);
  check_model(cross, config.model);
  check_data(cross, config.data, config.model);
  check_model_parallel(cross, config.parallel, config.model);
}

RunConfig load_run_config(const std::string& path) {
  return parse_run_config(read_input_file(path, "deck"), path);
}

BenchmarkReference load_benchmark_reference(const std::string& path) {
  const std::string text = read_input_file(path, "benchmark reference");
  const YAML::Node root = load_yaml_document(text, path);
  const std::vector<std::string> required = {
      "problem", "step", "loss", "relative_tolerance", "invariance_steps", "invariance_relative_tolerance"};
  std::vector<std::string> keys = required;
  keys.insert(keys.end(), {"bf16_relative_tolerance", "problem_sha256", "min_timed_seconds"});
  if (!root.IsMap())
    fail(path, "(top level)", show(root), "a benchmark reference must be a YAML map with keys " + join(keys));
  const Section top(path, root, "", keys);
  BenchmarkReference ref;
  ref.path = path;
  for (const std::string& key : required) top.require(key);
  top.read_name("problem", ref.problem);
  top.read_int("step", ref.step, 0);
  top.read_real("loss", ref.loss, above(0.0));
  top.read_real("relative_tolerance", ref.relative_tolerance, half_open(0.0, 1.0));
  top.read_real("bf16_relative_tolerance", ref.bf16_relative_tolerance, half_open(0.0, 1.0));
  top.read_int("invariance_steps", ref.invariance_steps, 1);
  top.read_real("invariance_relative_tolerance", ref.invariance_relative_tolerance, half_open(0.0, 1.0));
  top.read_string("problem_sha256", ref.problem_sha256);
  if (!ref.problem_sha256.empty() &&
      (ref.problem_sha256.size() != 64 ||
       ref.problem_sha256.find_first_not_of("0123456789abcdef") != std::string::npos))
    top.fail_at("problem_sha256", "must be 64 lower-case hex digits (a SHA-256)");
  top.read_real("min_timed_seconds", ref.min_timed_seconds, at_least(0.0));
  return ref;
}

double loss_tolerance(const BenchmarkReference& ref, const std::string& precision) {
  return precision == "bf16" ? ref.bf16_relative_tolerance : ref.relative_tolerance;
}

}  // namespace minimllm
