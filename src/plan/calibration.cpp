#include "minimllm/plan/calibration.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "minimllm/config/strict_yaml.hpp"

namespace minimllm {

// ---------------------------------------------------------------------------------------------------
// Fitting

namespace {

// Weighted least squares on the features in `active` (normal equations on columns scaled to unit
// norm, Gaussian elimination with partial pivoting). Returns false when the system is singular.
bool solve_subset(const std::vector<std::vector<double>>& rows, const std::vector<double>& y,
                  const std::vector<int>& active, std::vector<double>& b) {
  const size_t k = active.size();
  std::vector<double> scale(k, 0.0);
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < rows.size(); ++i) scale[j] += std::pow(rows[i][active[j]] / y[i], 2);
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0.0) return false;
  }
  // A (k x k+1): [X'X | X'y] of the weighted, scaled system (weights 1/y^2: rows divided by y).
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t p = 0; p < k; ++p) {
      const double xp = rows[i][active[p]] / y[i] / scale[p];
      for (size_t q = 0; q < k; ++q) a[p][q] += xp * rows[i][active[q]] / y[i] / scale[q];
      a[p][k] += xp;  // y_i / y_i
    }
  for (size_t c = 0; c < k; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    if (std::abs(a[pivot][c]) < 1e-12) return false;
    std::swap(a[c], a[pivot]);
    for (size_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t q = c; q <= k; ++q) a[r][q] -= f * a[c][q];
    }
  }
  b.assign(rows.empty() ? 0 : rows[0].size(), 0.0);
  for (size_t j = 0; j < k; ++j) b[active[j]] = a[j][k] / a[j][j] / scale[j];
  return true;
}

void relative_errors(const std::vector<std::vector<double>>& rows, const std::vector<double>& y,
                     LinearFit& fit) {
  double sum = 0.0;
  fit.max_relative_error = 0.0;
  for (size_t i = 0; i < rows.size(); ++i) {
    double predicted = 0.0;
    for (size_t j = 0; j < fit.coefficients.size(); ++j) predicted += fit.coefficients[j] * rows[i][j];
    const double e = (predicted - y[i]) / y[i];
    sum += e * e;
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(e));
  }
  fit.rms_relative_error = rows.empty() ? 0.0 : std::sqrt(sum / rows.size());
}

}  // namespace

LinearFit fit_nonnegative(const std::vector<std::vector<double>>& rows, const std::vector<double>& y) {
  if (rows.empty() || rows.size() != y.size()) throw std::invalid_argument("fit_nonnegative: no points");
  const int features = static_cast<int>(rows[0].size());
  if (features < 1 || features > 8) throw std::invalid_argument("fit_nonnegative: 1 to 8 features");
  for (size_t i = 0; i < y.size(); ++i)
    if (!(y[i] > 0.0) || rows[i].size() != static_cast<size_t>(features))
      throw std::invalid_argument("fit_nonnegative: every y must be > 0 and every row complete");
  // The non-negative optimum is the unconstrained optimum on its set of non-zero coefficients, so the
  // best non-negative solution over all subsets is the answer (2^features subsets).
  LinearFit best;
  best.coefficients.assign(features, 0.0);
  relative_errors(rows, y, best);  // all zero: every error is 100%
  double best_sse = rows.size() * best.rms_relative_error * best.rms_relative_error;
  for (unsigned mask = 1; mask < (1u << features); ++mask) {
    std::vector<int> active;
    for (int j = 0; j < features; ++j)
      if (mask & (1u << j)) active.push_back(j);
    if (active.size() > rows.size()) continue;
    std::vector<double> b;
    if (!solve_subset(rows, y, active, b)) continue;
    if (std::any_of(b.begin(), b.end(), [](double v) { return v < 0.0 || !std::isfinite(v); })) continue;
    LinearFit candidate{b};
    relative_errors(rows, y, candidate);
    const double sse = rows.size() * candidate.rms_relative_error * candidate.rms_relative_error;
    if (sse < best_sse * (1.0 - 1e-12)) best = candidate, best_sse = sse;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------------
// Writing

namespace {

// Shortest text that reads back as the same double: the file round-trips exactly.
std::string number(double v) { return fmt::format("{}", v); }

std::string list(const std::vector<double>& v) {
  std::vector<std::string> items;
  for (double x : v) items.push_back(number(x));
  return fmt::format("[{}]", fmt::join(items, ", "));
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void write_points(std::ostringstream& o, const FitPoints& p, const char* size_name) {
  o << fmt::format("  rms_relative_error: {}\n  max_relative_error: {}\n", number(p.rms_relative_error),
                   number(p.max_relative_error));
  o << fmt::format("  {}: {}\n  seconds: {}\n", size_name, list(p.sizes), list(p.seconds));
}

void write_collective(std::ostringstream& o, const char* name, const CollectiveCalibration& c) {
  if (!c.measured) {
    o << fmt::format("  {}: not measured\n", name);
    return;
  }
  o << fmt::format("  {}:\n    latency: {}\n    bandwidth: {}\n", name, number(c.link.latency),
                   number(c.link.bandwidth));
  o << fmt::format("    rms_relative_error: {}\n    max_relative_error: {}\n",
                   number(c.points.rms_relative_error), number(c.points.max_relative_error));
  o << fmt::format("    bytes: {}\n    seconds: {}\n", list(c.points.sizes), list(c.points.seconds));
}

}  // namespace

std::string calibration_to_yaml(const Calibration& c) {
  std::ostringstream o;
  o << "# minimllm cost-model calibration, written by `minimllm calibrate` (docs/INPUT.md, \"Calibration\n"
       "# file\"). A deck uses it with `parallel: {cost_model: <this file>}`; its model must match.\n"
       "# Times in seconds, bandwidths in bytes per second, one rank unless said otherwise.\n";
  o << "format: minimllm-calibration-1\n";
  o << "provenance:\n";
  o << fmt::format("  deck: {}\n  created: {}\n  host: {}\n  minimllm_version: {}\n  kokkos: {}\n",
                   quoted(c.deck), quoted(c.created), quoted(c.host), quoted(c.minimllm_version),
                   quoted(c.kokkos));
  o << fmt::format("  ranks: {}\n  ranks_per_node: {}\n  blas_threads: {}\n  rows_per_call: {}\n", c.ranks,
                   c.ranks_per_node, c.blas_threads, c.rows_per_call);
  const EncoderConfig& e = c.model.encoder;
  const LlmConfig& l = c.model.llm;
  o << "model:\n";
  o << fmt::format(
      "  encoder: {{width: {}, heads: {}, layers: {}, mlp_ratio: {}, patch: {}, channels: {}}}\n", e.width,
      e.heads, e.layers, e.mlp_ratio, e.patch, e.channels);
  o << fmt::format("  llm: {{width: {}, heads: {}, layers: {}, mlp_ratio: {}, vocab: {}}}\n", l.width,
                   l.heads, l.layers, l.mlp_ratio, l.vocab);
  o << "# Forward + backward of one image of s patches: a2 s^2 + a1 s + c.\n";
  o << fmt::format("encoder:\n  a2: {}\n  a1: {}\n  c: {}\n", number(c.encoder.cost.a2),
                   number(c.encoder.cost.a1), number(c.encoder.cost.c));
  write_points(o, c.encoder.points, "patches");
  o << "# Forward + backward of one sample of s tokens: a2 s^2 + a1 s + c.\n";
  o << fmt::format("llm:\n  a2: {}\n  a1: {}\n  c: {}\n", number(c.llm.cost.a2), number(c.llm.cost.a1),
                   number(c.llm.cost.c));
  write_points(o, c.llm.points, "tokens");
  o << "# Generating and packing one rank's inputs:\n"
       "# c + per_image * images + per_patch * patches + per_token * LLM rows.\n";
  o << fmt::format("data:\n  c: {}\n  per_image: {}\n  per_patch: {}\n  per_token: {}\n", number(c.data.c),
                   number(c.data.per_image), number(c.data.per_patch), number(c.data.per_token));
  o << fmt::format("  rms_relative_error: {}\n  max_relative_error: {}\n", number(c.data.rms_relative_error),
                   number(c.data.max_relative_error));
  o << fmt::format("  images: {}\n  patches: {}\n  tokens: {}\n  seconds: {}\n", list(c.data.images),
                   list(c.data.patches), list(c.data.tokens), list(c.data.seconds));
  o << fmt::format("optimizer: {{seconds: {}, parameters: {}}}\n", number(c.optimizer_seconds), c.parameters);
  o << "# The gradient buffer's all-reduce on the calibrating ranks, as measured (the model uses\n"
       "# collectives.all_reduce).\n";
  o << fmt::format("grad_sync: {{seconds: {}, bytes: {}, ranks: {}}}\n", number(c.grad_sync_seconds),
                   4 * c.parameters, c.ranks);
  o << "# seconds = latency + bus bytes / bandwidth; bytes: buffer per rank.\n";
  o << "collectives:\n";
  write_collective(o, "all_gather", c.all_gather);
  write_collective(o, "all_reduce", c.all_reduce);
  write_collective(o, "all_to_all", c.all_to_all);
  o << "inter_node:\n";
  write_collective(o, "all_gather", c.inter_all_gather);
  write_collective(o, "all_reduce", c.inter_all_reduce);
  write_collective(o, "all_to_all", c.inter_all_to_all);
  return o.str();
}

// ---------------------------------------------------------------------------------------------------
// Reading: strict, one-line errors naming the file and the key.

namespace {

std::string show(const YAML::Node& node) {
  if (!node.IsDefined()) return "(missing)";
  if (node.IsNull()) return "null";
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    for (char& ch : s)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    return s.size() > 60 ? s.substr(0, 60) + "..." : s.empty() ? "\"\"" : s;
  }
  return node.IsMap() ? "(a map)" : "(a list)";
}

// One map of the file: unknown and duplicate keys are errors; readers fail with the full key path.
class Reader {
 public:
  Reader(const std::string& origin, const YAML::Node& node, std::string path, std::vector<std::string> keys)
      : origin_(origin), node_(node), path_(std::move(path)) {
    if (!node_.IsMap())
      fail(path_.empty() ? "(top level)" : path_, show(node_),
           fmt::format("must be a map with keys {}", fmt::join(keys, ", ")));
    std::vector<std::string> seen;
    for (const auto& entry : node_) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : show(entry.first);
      if (std::find(keys.begin(), keys.end(), name) == keys.end())
        fail(key(name), show(entry.second),
             fmt::format("unknown key; valid keys{}: {}", path_.empty() ? "" : " in " + path_,
                         fmt::join(keys, ", ")));
      if (std::find(seen.begin(), seen.end(), name) != seen.end())
        fail(key(name), show(entry.second), "duplicate key");
      seen.push_back(name);
    }
  }

  bool has(const std::string& name) const { return child(name).IsDefined(); }
  YAML::Node child(const std::string& name) const {
    const YAML::Node& n = node_;
    return n[name];
  }
  std::string key(const std::string& name) const { return path_.empty() ? name : path_ + "." + name; }
  Reader section(const std::string& name, std::vector<std::string> keys) const {
    require(name);
    return Reader(origin_, child(name), key(name), std::move(keys));
  }

  void require(const std::string& name) const {
    if (!has(name)) fail(key(name), "(missing)", "required key");
  }

  // A finite real >= lo (> lo when open).
  double real(const std::string& name, double lo = 0.0, bool open = false) const {
    require(name);
    double v = 0.0;
    if (!parse_real(child(name), v) || (open ? v <= lo : v < lo))
      fail(key(name), show(child(name)), fmt::format("must be a finite number {} {}", open ? ">" : ">=", lo));
    return v;
  }
  double real_or(const std::string& name, double fallback) const { return has(name) ? real(name) : fallback; }

  int integer(const std::string& name, int lo, int hi) const {
    require(name);
    const YAML::Node n = child(name);
    long long v = 0;
    if (!n.IsScalar() || !parse_integer(n.Scalar(), v) || v < lo || v > hi)
      fail(key(name), show(n), fmt::format("must be an integer in [{}, {}]", lo, hi));
    return static_cast<int>(v);
  }
  long long integer64(const std::string& name) const {
    require(name);
    const YAML::Node n = child(name);
    long long v = 0;
    if (!n.IsScalar() || !parse_integer(n.Scalar(), v) || v < 0)
      fail(key(name), show(n), "must be a non-negative integer");
    return v;
  }
  std::string text_or(const std::string& name) const {
    if (!has(name)) return "";
    if (!child(name).IsScalar()) fail(key(name), show(child(name)), "must be a string");
    return child(name).Scalar();
  }
  std::vector<double> reals_or_empty(const std::string& name) const {
    if (!has(name)) return {};
    const YAML::Node n = child(name);
    std::vector<double> out;
    const std::string expected = "must be a list of finite numbers >= 0";
    if (!n.IsSequence()) fail(key(name), show(n), expected);
    for (const auto& item : n) {
      double v = 0.0;
      if (!parse_real(item, v) || v < 0.0) fail(key(name), show(item), expected);
      out.push_back(v);
    }
    return out;
  }

  [[noreturn]] void fail(const std::string& key_path, const std::string& value,
                         const std::string& what) const {
    throw InputError(fmt::format("{}: {} = {}: {}", origin_, key_path, value, what));
  }

 private:
  static bool parse_real(const YAML::Node& n, double& out) {
    if (!n.IsScalar()) return false;
    const std::string& t = n.Scalar();
    if (t.empty() || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() && errno != ERANGE && std::isfinite(out);
  }
  static bool parse_integer(const std::string& t, long long& out) {
    if (t.empty() || t.find_first_not_of("0123456789+-") != std::string::npos) return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtoll(t.c_str(), &end, 10);
    return end == t.c_str() + t.size() && errno != ERANGE;
  }

  const std::string& origin_;
  YAML::Node node_;
  std::string path_;
};

void read_points(const Reader& r, FitPoints& p, const char* size_name) {
  p.rms_relative_error = r.real_or("rms_relative_error", 0.0);
  p.max_relative_error = r.real_or("max_relative_error", 0.0);
  p.sizes = r.reals_or_empty(size_name);
  p.seconds = r.reals_or_empty("seconds");
  if (p.sizes.size() != p.seconds.size())
    r.fail(r.key("seconds"), fmt::format("({} values)", p.seconds.size()),
           fmt::format("must have as many values as {} ({})", r.key(size_name), p.sizes.size()));
}

PhaseCalibration read_phase(const Reader& top, const std::string& name, const char* size_name) {
  const Reader r =
      top.section(name, {"a2", "a1", "c", "rms_relative_error", "max_relative_error", size_name, "seconds"});
  PhaseCalibration phase;
  phase.cost = {r.real("a2"), r.real("a1"), r.real("c")};
  if (phase.cost(1.0) <= 0.0) r.fail(r.key("c"), "0", "a2, a1 and c are all 0: an item would cost nothing");
  read_points(r, phase.points, size_name);
  return phase;
}

}  // namespace

Calibration parse_calibration(const std::string& yaml_text, const std::string& origin) {
  const std::vector<YAML::Node> documents = load_yaml_documents(yaml_text, origin);
  const std::vector<std::string> top_keys = {"format",      "provenance", "model",     "encoder",
                                             "llm",         "data",       "optimizer", "grad_sync",
                                             "collectives", "inter_node"};
  if (documents.size() != 1 || !documents[0].IsMap())
    throw InputError(fmt::format(
        "{}: (top level) = {}: a calibration file is one YAML map with keys {} (see docs/INPUT.md)", origin,
        documents.empty() ? "(empty)" : show(documents[0]), fmt::join(top_keys, ", ")));
  const Reader top(origin, documents[0], "", top_keys);
  top.require("format");
  if (top.text_or("format") != "minimllm-calibration-1")
    top.fail("format", show(top.child("format")),
             "must be minimllm-calibration-1 (a file from minimllm calibrate)");

  Calibration c;
  if (top.has("provenance")) {
    const Reader p = top.section("provenance", {"deck", "created", "host", "minimllm_version", "kokkos",
                                                "ranks", "ranks_per_node", "blas_threads", "rows_per_call"});
    c.deck = p.text_or("deck"), c.created = p.text_or("created"), c.host = p.text_or("host");
    c.minimllm_version = p.text_or("minimllm_version"), c.kokkos = p.text_or("kokkos");
    if (p.has("ranks")) c.ranks = p.integer("ranks", 1, 1 << 24);
    if (p.has("ranks_per_node")) c.ranks_per_node = p.integer("ranks_per_node", 1, 1 << 24);
    if (p.has("blas_threads")) c.blas_threads = p.integer("blas_threads", 1, 4096);
    if (p.has("rows_per_call")) c.rows_per_call = p.integer("rows_per_call", 0, 1 << 30);
  }
  const Reader model = top.section("model", {"encoder", "llm"});
  const Reader enc = model.section("encoder", {"width", "heads", "layers", "mlp_ratio", "patch", "channels"});
  const Reader llm = model.section("llm", {"width", "heads", "layers", "mlp_ratio", "vocab"});
  constexpr int kMax = 1 << 24;
  c.model.encoder = {enc.integer("width", 1, kMax),  enc.integer("heads", 1, kMax),
                     enc.integer("layers", 0, kMax), enc.integer("mlp_ratio", 1, kMax),
                     enc.integer("patch", 1, kMax),  enc.integer("channels", 1, kMax)};
  c.model.llm = {llm.integer("width", 1, kMax), llm.integer("heads", 1, kMax), llm.integer("layers", 1, kMax),
                 llm.integer("mlp_ratio", 1, kMax), llm.integer("vocab", 1, kMax)};
  c.encoder = read_phase(top, "encoder", "patches");
  c.llm = read_phase(top, "llm", "tokens");

  const Reader data = top.section("data", {"c", "per_image", "per_patch", "per_token", "rms_relative_error",
                                           "max_relative_error", "images", "patches", "tokens", "seconds"});
  c.data.c = data.real("c"), c.data.per_image = data.real("per_image");
  c.data.per_patch = data.real("per_patch"), c.data.per_token = data.real("per_token");
  c.data.rms_relative_error = data.real_or("rms_relative_error", 0.0);
  c.data.max_relative_error = data.real_or("max_relative_error", 0.0);
  c.data.images = data.reals_or_empty("images");
  c.data.patches = data.reals_or_empty("patches");
  c.data.tokens = data.reals_or_empty("tokens");
  c.data.seconds = data.reals_or_empty("seconds");
  const size_t points = c.data.seconds.size();
  if (c.data.images.size() != points || c.data.patches.size() != points || c.data.tokens.size() != points)
    data.fail(data.key("seconds"), fmt::format("({} values)", points),
              "data.images, data.patches, data.tokens and data.seconds must have the same length");

  const Reader opt = top.section("optimizer", {"seconds", "parameters"});
  c.optimizer_seconds = opt.real("seconds");
  c.parameters = opt.has("parameters") ? opt.integer64("parameters") : 0;
  if (top.has("grad_sync")) {
    const Reader g = top.section("grad_sync", {"seconds", "bytes", "ranks"});
    c.grad_sync_seconds = g.real_or("seconds", 0.0);
  }

  // Collectives: `not measured` or {latency, bandwidth > 0, fit error, bytes, seconds}.
  const std::vector<std::string> ops = {"all_gather", "all_reduce", "all_to_all"};
  const auto read_links = [&](const std::string& section, CollectiveCalibration* out[3]) {
    if (!top.has(section)) return;
    const YAML::Node node = top.child(section);
    if (node.IsScalar() && node.Scalar() == "not measured") return;
    const Reader links = top.section(section, ops);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!links.has(ops[i])) continue;
      const YAML::Node n = links.child(ops[i]);
      if (n.IsScalar() && n.Scalar() == "not measured") continue;
      const Reader r = links.section(
          ops[i], {"latency", "bandwidth", "rms_relative_error", "max_relative_error", "bytes", "seconds"});
      out[i]->measured = true;
      out[i]->link = {r.real("latency"), r.real("bandwidth", 0.0, /*open=*/true)};
      read_points(r, out[i]->points, "bytes");
    }
  };
  CollectiveCalibration* intra[3] = {&c.all_gather, &c.all_reduce, &c.all_to_all};
  CollectiveCalibration* inter[3] = {&c.inter_all_gather, &c.inter_all_reduce, &c.inter_all_to_all};
  read_links("collectives", intra);
  read_links("inter_node", inter);
  return c;
}

Calibration load_calibration(const std::string& path, std::string* text) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read calibration file: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read calibration file: {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  if (text) *text = s.str();
  return parse_calibration(s.str(), path);
}

std::string resolve_against_deck(const std::string& deck_path, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute() || deck_path.empty() || deck_path.front() == '<') return path;
  return (std::filesystem::path(deck_path).parent_path() / p).lexically_normal().string();
}

CostModel apply_calibration(CostModel cost, const Calibration& c, const ModelConfig& model,
                            const std::string& origin) {
  const auto check = [&](const char* key, int calibrated, int deck) {
    if (calibrated != deck)
      throw InputError(fmt::format(
          "{}: model.{} = {}: calibrated for another model (the deck has {}); run minimllm calibrate on "
          "this deck",
          origin, key, calibrated, deck));
  };
  const EncoderConfig &ce = c.model.encoder, &de = model.encoder;
  const LlmConfig &cl = c.model.llm, &dl = model.llm;
  check("encoder.width", ce.width, de.width), check("encoder.heads", ce.heads, de.heads);
  check("encoder.layers", ce.layers, de.layers), check("encoder.mlp_ratio", ce.mlp_ratio, de.mlp_ratio);
  check("encoder.patch", ce.patch, de.patch), check("encoder.channels", ce.channels, de.channels);
  check("llm.width", cl.width, dl.width), check("llm.heads", cl.heads, dl.heads);
  check("llm.layers", cl.layers, dl.layers), check("llm.mlp_ratio", cl.mlp_ratio, dl.mlp_ratio);
  check("llm.vocab", cl.vocab, dl.vocab);

  cost.encoder = c.encoder.cost;
  cost.llm = c.llm.cost;
  cost.step.data_c = c.data.c, cost.step.data_per_image = c.data.per_image;
  cost.step.data_per_patch = c.data.per_patch;
  cost.step.data_per_token = c.data.per_token;
  cost.step.optimizer = c.optimizer_seconds;
  // Context parallelism all-gathers K|V and the boundary is an all-to-all: the all-gather's link stands
  // for both (the model has one link per side of the node boundary).
  if (c.all_gather.measured) cost.intra_node = c.all_gather.link;
  if (c.inter_all_gather.measured) cost.inter_node = c.inter_all_gather.link;
  if (c.all_reduce.measured) cost.step.allreduce_intra = c.all_reduce.link;
  if (c.inter_all_reduce.measured) cost.step.allreduce_inter = c.inter_all_reduce.link;
  return cost;
}

}  // namespace minimllm
