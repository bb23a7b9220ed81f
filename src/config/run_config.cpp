// Deck parsing and validation: the only place that turns user YAML into a RunConfig.
//
// Every error is one line, `<origin>: <key.path> = <value>: <what is valid>`, so the driver can print
// what() as is. Reading is strict: unknown keys, wrong node kinds, wrong scalar types and values out of
// range are all errors, because a typo must never silently fall back to a default.
#include "minimllm/config/run_config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "minimllm/config/yaml_documents.hpp"
#include "minimllm/kernels/attention_limits.hpp"  // kMaxHeadDim

namespace minimllm {
namespace {

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
constexpr std::size_t kMaxNameLength = 128;           // name
constexpr long long kMaxTokensPerSample = 1LL << 30;  // worst-case image + text tokens of one sample
constexpr long long kMaxTokensPerStep = INT_MAX;      // worst-case tokens of one global batch
constexpr long long kMaxMatrixElements = INT_MAX;     // elements of one weight matrix
constexpr long long kMaxImageElements = INT_MAX;      // pixels * channels of one image
constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------------
// Rendering values for messages: one line, bounded length.

std::string one_line(std::string s) {
  constexpr std::size_t kMaxShown = 60;
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (out.size() > kMaxShown) out = out.substr(0, kMaxShown) + "...";
  return out;
}

std::string show(const YAML::Node& node) {
  if (!node.IsDefined()) return "(missing)";
  if (node.IsNull()) return "null";
  if (node.IsScalar()) return node.Scalar().empty() ? "\"\"" : one_line(node.Scalar());
  // Block-style nodes keep their style when emitted: copy into flow style to get one line.
  YAML::Node flow = YAML::Clone(node);
  flow.SetStyle(YAML::EmitterStyle::Flow);
  YAML::Emitter emitter;
  emitter.SetMapFormat(YAML::Flow);
  emitter.SetSeqFormat(YAML::Flow);
  emitter << flow;
  return one_line(emitter.c_str());
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Levenshtein distance, to suggest the intended key for a typo.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

[[noreturn]] void fail(const std::string& origin, const std::string& path, const std::string& value,
                       const std::string& what) {
  throw InputError(fmt::format("{}: {} = {}: {}", origin, path, value, what));
}

// ---------------------------------------------------------------------------------------------------
// Scalar parsing. Numbers are plain decimal: an optional sign, digits, and for reals a fraction and
// exponent; YAML's .inf / .nan and hexadecimal forms are rejected.

bool parse_integer(const std::string& text, long long& out, bool& overflow) {
  overflow = false;
  std::size_t i = (!text.empty() && (text[0] == '+' || text[0] == '-')) ? 1 : 0;
  if (i == text.size()) return false;
  for (std::size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9') return false;
  }
  errno = 0;
  out = std::strtoll(text.c_str(), nullptr, 10);
  overflow = errno == ERANGE;
  return true;
}

bool parse_real(const std::string& text, double& out) {
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  if (text.find_first_of("0123456789") == std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(out);
}

// A real interval with open or closed ends; infinite ends are unbounded.
struct Range {
  double lo = -kInf;
  bool lo_open = false;
  double hi = kInf;
  bool hi_open = false;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string describe() const {
    if (hi == kInf) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  }
};

Range at_least(double lo) { return {lo, false, kInf, false}; }
Range above(double lo) { return {lo, true, kInf, false}; }
Range closed(double lo, double hi) { return {lo, false, hi, false}; }
Range half_open(double lo, double hi) { return {lo, false, hi, true}; }

// ---------------------------------------------------------------------------------------------------
// One map level of the deck: construction rejects unknown and duplicate keys; the read_* members read
// one optional typed field each, leaving the default in place when the key is absent.

class Section {
 public:
  Section(const std::string& origin, const YAML::Node& node, std::string path, std::vector<std::string> keys)
      : origin_(origin), node_(node), path_(std::move(path)), keys_(std::move(keys)) {
    // An absent or empty (null) section means "all defaults".
    if (!node_.IsDefined() || node_.IsNull()) return;
    if (!node_.IsMap()) {
      fail(origin_, display_path(), show(node_), fmt::format("must be a map with keys {}", join(keys_)));
    }
    std::vector<std::string> seen;
    for (const auto& entry : node_) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        fail(origin_, path_of(show(key)), show(entry.second),
             fmt::format("keys must be plain names; valid keys{}: {}", where(), join(keys_)));
      }
      const std::string& name = key.Scalar();
      if (std::find(keys_.begin(), keys_.end(), name) == keys_.end()) {
        fail(origin_, path_of(name), show(entry.second),
             fmt::format("unknown key{}; valid keys{}: {}", suggestion(name), where(), join(keys_)));
      }
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
        fail(origin_, path_of(name), show(entry.second), "duplicate key: each key may appear once");
      }
      seen.push_back(name);
    }
  }

  Section section(const std::string& key, std::vector<std::string> keys) const {
    return Section(origin_, child(key), path_of(key), std::move(keys));
  }

  void read_int(const std::string& key, int& out, int lo, int hi = kIntMax) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    const std::string expected =
        hi == kIntMax ? fmt::format("an integer >= {}", lo) : fmt::format("an integer in [{}, {}]", lo, hi);
    long long parsed = 0;
    bool overflow = false;
    if (!value.IsScalar() || !parse_integer(value.Scalar(), parsed, overflow)) {
      fail_at(key, "must be " + expected);
    }
    if (overflow || parsed > kIntMax || parsed < std::numeric_limits<int>::min()) {
      fail_at(key, fmt::format("must be {} that fits in a 32-bit int", expected));
    }
    if (parsed < lo || parsed > hi) fail_at(key, "must be " + expected);
    out = static_cast<int>(parsed);
  }

  void read_uint64(const std::string& key, std::uint64_t& out) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    const std::string expected = "must be a non-negative integer that fits in 64 bits (unsigned)";
    if (!value.IsScalar()) fail_at(key, expected);
    std::string text = value.Scalar();
    if (!text.empty() && text[0] == '+') text.erase(0, 1);
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) fail_at(key, expected);
    errno = 0;
    const unsigned long long parsed = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail_at(key, expected);
    out = parsed;
  }

  void read_real(const std::string& key, double& out, const Range& range) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    double parsed = 0.0;
    if (!value.IsScalar() || !parse_real(value.Scalar(), parsed) || !range.contains(parsed)) {
      fail_at(key, "must be a number " + range.describe());
    }
    out = parsed;
  }

  // As read_real, and the value must survive conversion to a 32-bit float (no overflow, no flush to 0).
  void read_float(const std::string& key, float& out, const Range& range) const {
    double parsed = out;
    read_real(key, parsed, range);
    const float narrowed = static_cast<float>(parsed);
    if (!std::isfinite(narrowed) || (narrowed == 0.0f && parsed != 0.0) || !range.contains(narrowed)) {
      fail_at(key, fmt::format("must be a number {} representable as a 32-bit float", range.describe()));
    }
    out = narrowed;
  }

  // A non-empty string (e.g. a file name).
  void read_string(const std::string& key, std::string& out) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    if (!value.IsScalar() || value.Scalar().empty()) fail_at(key, "must be a non-empty string");
    out = value.Scalar();
  }

  // One of a fixed set of words.
  void read_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    if (!value.IsScalar() || std::find(choices.begin(), choices.end(), value.Scalar()) == choices.end()) {
      fail_at(key, "must be one of " + join(choices));
    }
    out = value.Scalar();
  }

  void read_bool(const std::string& key, bool& out) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    if (!value.IsScalar() || (value.Scalar() != "true" && value.Scalar() != "false")) {
      fail_at(key, "must be true or false");
    }
    out = value.Scalar() == "true";
  }

  // A YAML list of integers in [lo, hi], e.g. [3, 1].
  void read_int_list(const std::string& key, std::vector<int>& out, int lo, int hi) const {
    const YAML::Node value = child(key);
    if (!value.IsDefined()) return;
    const std::string expected = fmt::format("must be a list of integers in [{}, {}], e.g. [3, 1]", lo, hi);
    if (!value.IsSequence()) fail_at(key, expected);
    std::vector<int> parsed;
    for (const auto& item : value) {
      long long v = 0;
      bool overflow = false;
      if (!item.IsScalar() || !parse_integer(item.Scalar(), v, overflow) || overflow || v < lo || v > hi) {
        fail_at(key, expected);
      }
      parsed.push_back(static_cast<int>(v));
    }
    out = parsed;
  }

  // A name used in file names: non-empty, at most kMaxNameLength characters of [A-Za-z0-9_.-].
  void read_name(const std::string& key, std::string& out) const {
    const YAML::Node value = child(key);
    const std::string expected = fmt::format(
        "must be a non-empty string of at most {} letters, digits, '_', '.' or '-' (it is used in file "
        "names)",
        kMaxNameLength);
    if (!value.IsDefined()) fail_at(key, "required key; " + expected);
    if (!value.IsScalar()) fail_at(key, expected);
    const std::string& text = value.Scalar();
    const bool valid_chars = std::all_of(text.begin(), text.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
             c == '.' || c == '-';
    });
    if (text.empty() || text.size() > kMaxNameLength || !valid_chars) fail_at(key, expected);
    out = text;
  }

  void require(const std::string& key) const {
    if (!child(key).IsDefined()) fail_at(key, fmt::format("required key{}", where()));
  }

  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  YAML::Node child(const std::string& key) const {
    if (!node_.IsDefined() || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    // Look up without inserting: operator[] on a const node never modifies it.
    const YAML::Node& const_node = node_;
    return const_node[key];
  }

  [[noreturn]] void fail_at(const std::string& key, const std::string& what) const {
    fail(origin_, path_of(key), show(child(key)), what);
  }

  std::string display_path() const { return path_.empty() ? "(top level)" : path_; }
  std::string where() const { return path_.empty() ? " at the top level" : " in " + path_; }

  std::string suggestion(const std::string& name) const {
    for (const auto& key : keys_) {
      if (edit_distance(name, key) <= 2) return fmt::format(" (did you mean '{}'?)", key);
    }
    return "";
  }

  const std::string& origin_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> keys_;
};

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
               c.encoder);
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

void read_runtime(const Section& s, RuntimeConfig& c) {
  s.read_real("peak_gflops_per_rank", c.peak_gflops_per_rank, at_least(0.0));
  s.read_int("blas_threads", c.blas_threads, 1, kMaxThreads);
  s.read_choice("precision", c.precision, {"fp32", "bf16"});
  s.read_choice("collectives", c.collectives, {"auto", "mpi", "nccl"});
  s.read_bool("calibrate", c.calibrate);
}

void read_parallel(const Section& s, ParallelConfig& c) {
  s.read_choice("policy", c.policy, policy_names());
  s.read_int("ranks_per_node", c.ranks_per_node, 0, kMaxRanks);
  s.read_int_list("group_sizes", c.group_sizes, 1, kMaxRanks);
  s.read_bool("rotate_groups", c.rotate_groups);
  s.read_int("micro_batches", c.micro_batches, 1, kMaxGlobalBatch);
  s.read_choice("placement", c.placement, {"colocated", "disaggregated"});
  s.read_int("encoder_ranks", c.encoder_ranks, 0, kMaxRanks);
  s.read_choice("encoder_layout", c.encoder_layout, {"follow", "round_robin"});
  s.read_int("comm_pool_capacity", c.comm_pool_capacity, 1, 100000);
  s.read_string("cost_model", c.cost_model);
}

// ---------------------------------------------------------------------------------------------------
// Rules that involve more than one field; each message names every key involved.

class CrossChecker {
 public:
  explicit CrossChecker(const std::string& origin) : origin_(origin) {}

  void require(bool ok, const std::string& path, long long value, const std::string& what) const {
    if (!ok) fail(origin_, path, std::to_string(value), what);
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
  const EncoderConfig& e = m.encoder;
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
  const int patch = m.encoder.patch;
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
  x.require_size(ll(im.max_side) * im.max_side * m.encoder.channels, kMaxImageElements,
                 "data.images.max_side", im.max_side,
                 fmt::format("data.images.max_side^2 * model.encoder.channels (= {})", m.encoder.channels),
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

}  // namespace

// ---------------------------------------------------------------------------------------------------

std::vector<YAML::Node> load_yaml_documents(const std::string& yaml_text, const std::string& origin) {
  try {
    return YAML::LoadAll(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) where = fmt::format("line {}, column {}: ", e.mark.line + 1, e.mark.column + 1);
    throw InputError(fmt::format("{}: {}invalid YAML: {}", origin, where, one_line(e.msg)));
  }
}

RunConfig parse_run_config(const std::string& yaml_text, const std::string& origin) {
  const std::vector<YAML::Node> documents = load_yaml_documents(yaml_text, origin);
  const std::vector<std::string> top_keys = {"name",      "seed",    "steps",    "model",    "data",
                                             "optimizer", "runtime", "parallel", "benchmark"};
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
  read_optimizer(top.section("optimizer", {"lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps"}),
                 cfg.optimizer);
  read_runtime(top.section("runtime",
                           {"peak_gflops_per_rank", "blas_threads", "precision", "collectives", "calibrate"}),
               cfg.runtime);
  read_parallel(top.section("parallel", {"policy", "ranks_per_node", "group_sizes", "rotate_groups",
                                         "micro_batches", "placement", "encoder_ranks", "encoder_layout",
                                         "comm_pool_capacity", "cost_model"}),
                cfg.parallel);
  top.section("benchmark", {"reference"}).read_string("reference", cfg.benchmark.reference);

  check_run_config(cfg, origin);
  return cfg;
}

void check_run_config(const RunConfig& config, const std::string& origin) {
  const CrossChecker cross(origin);
  check_model(cross, config.model);
  check_data(cross, config.data, config.model);
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"deck", "static", "orch", "dhp", "flexsp", "disagg"};
  return names;
}

namespace {

std::string read_input_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{}: cannot read {}: is a directory", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(fmt::format("{}: cannot read {}: {}", path, what, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot read {}: read error", path, what));
  return text.str();
}

}  // namespace

RunConfig load_run_config(const std::string& path) {
  return parse_run_config(read_input_file(path, "deck"), path);
}

BenchmarkReference load_benchmark_reference(const std::string& path) {
  const std::string text = read_input_file(path, "benchmark reference");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) where = fmt::format("line {}, column {}: ", e.mark.line + 1, e.mark.column + 1);
    throw InputError(fmt::format("{}: {}invalid YAML: {}", path, where, one_line(e.msg)));
  }
  const std::vector<std::string> keys = {
      "problem", "step", "loss", "relative_tolerance", "invariance_steps", "invariance_relative_tolerance"};
  if (!root.IsMap())
    fail(path, "(top level)", show(root), "a benchmark reference must be a YAML map with keys " + join(keys));
  const Section top(path, root, "", keys);
  BenchmarkReference ref;
  ref.path = path;
  for (const std::string& key : keys) top.require(key);
  top.read_name("problem", ref.problem);
  top.read_int("step", ref.step, 0);
  top.read_real("loss", ref.loss, above(0.0));
  top.read_real("relative_tolerance", ref.relative_tolerance, half_open(0.0, 1.0));
  top.read_int("invariance_steps", ref.invariance_steps, 1);
  top.read_real("invariance_relative_tolerance", ref.invariance_relative_tolerance, half_open(0.0, 1.0));
  return ref;
}

}  // namespace minimllm
