#include "minimllm/planning/calibration.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <utility>

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
  const EncoderConfig& e = c.model.vision();
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
  if (c.encoder_forward_share > 0.0)
    o << "  # The forward's share of the encoder's forward + backward, over the sizes above.\n"
      << fmt::format("  forward_share: {}\n", number(c.encoder_forward_share));
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
  o << "# One message between two ranks (ping-pong): seconds = latency + bytes / bandwidth.\n";
  o << "point_to_point:\n";
  write_collective(o, "intra_node", c.point_to_point);
  write_collective(o, "inter_node", c.inter_point_to_point);
  o << "# The all-reduce of the tensor-parallel groups (parallel.tp consecutive ranks of a node).\n";
  o << fmt::format("tensor_parallel:\n  ranks: {}\n", c.tensor_parallel_ranks);
  write_collective(o, "all_reduce", c.tensor_parallel_all_reduce);
  if (!c.gemm_rates.empty()) {
    o << "# GEMM rates at the layout's shapes, C[m x n] += A[m x k] B[k x n], one column per point.\n";
    const auto column = [&](const char* key, auto field) {
      std::vector<std::string> values;
      for (const GemmRatePoint& p : c.gemm_rates) values.push_back(number(field(p)));
      o << fmt::format("  {}: [{}]\n", key, fmt::join(values, ", "));
    };
    o << "gemm_rates:\n";
    column("m", [](const GemmRatePoint& p) { return p.m; });
    column("n", [](const GemmRatePoint& p) { return p.n; });
    column("k", [](const GemmRatePoint& p) { return p.k; });
    column("gflops", [](const GemmRatePoint& p) { return p.gflops; });
  }
  if (!c.machine.empty()) {
    o << "# The machine as far as it was measured here; `minimllm simulate --machine <this file>` reads "
         "it.\n";
    for (const std::string& line : c.machine_notes) o << "# " << line << "\n";
    o << machine_to_yaml(c.machine);
  }
  return o.str();
}

// ---------------------------------------------------------------------------------------------------
// Reading: strict (config/strict_yaml.hpp), one-line errors naming the file and the key.

namespace {

using strict_yaml::above;
using strict_yaml::at_least;
using strict_yaml::closed;
using strict_yaml::Section;

constexpr const char* kFormat = "minimllm-calibration-1";
constexpr int kMaxSize = 1 << 24;  // model.*, provenance.ranks*

void require_all(const Section& s, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) s.require(key);
}

void read_points(const Section& s, FitPoints& p, const char* size_name) {
  s.read_real("rms_relative_error", p.rms_relative_error, at_least(0.0));
  s.read_real("max_relative_error", p.max_relative_error, at_least(0.0));
  s.read_real_list(size_name, p.sizes, at_least(0.0));
  s.read_real_list("seconds", p.seconds, at_least(0.0));
  if (p.sizes.size() != p.seconds.size())
    s.fail_at("seconds", fmt::format("must have as many values as {} ({}), not {}", s.path_of(size_name),
                                     p.sizes.size(), p.seconds.size()));
}

// forward_share: where the phase may give its forward's share (the encoder's), else null.
PhaseCalibration read_phase(const Section& top, const std::string& name, const char* size_name,
                            double* forward_share = nullptr) {
  std::vector<std::string> keys = {"a2",      "a1",     "c", "rms_relative_error", "max_relative_error",
                                   size_name, "seconds"};
  if (forward_share) keys.push_back("forward_share");
  const Section s = top.required_section(name, keys);
  if (forward_share) s.read_real("forward_share", *forward_share, closed(0.0, 1.0));
  PhaseCalibration phase;
  require_all(s, {"a2", "a1", "c"});
  s.read_real("a2", phase.cost.a2, at_least(0.0));
  s.read_real("a1", phase.cost.a1, at_least(0.0));
  s.read_real("c", phase.cost.c, at_least(0.0));
  if (phase.cost(1.0) <= 0.0) s.fail_at("c", "a2, a1 and c are all 0: an item would cost nothing");
  read_points(s, phase.points, size_name);
  return phase;
}

void read_provenance(const Section& s, Calibration& c) {
  s.read_text("deck", c.deck);
  s.read_text("created", c.created);
  s.read_text("host", c.host);
  s.read_text("minimllm_version", c.minimllm_version);
  s.read_text("kokkos", c.kokkos);
  s.read_int("ranks", c.ranks, 1, kMaxSize);
  s.read_int("ranks_per_node", c.ranks_per_node, 1, kMaxSize);
  s.read_int("blas_threads", c.blas_threads, 1, 4096);
  s.read_int("rows_per_call", c.rows_per_call, 0, 1 << 30);
}

void read_model(const Section& s, ModelConfig& m) {
  const Section enc =
      s.required_section("encoder", {"width", "heads", "layers", "mlp_ratio", "patch", "channels"});
  const Section llm = s.required_section("llm", {"width", "heads", "layers", "mlp_ratio", "vocab"});
  require_all(enc, {"width", "heads", "layers", "mlp_ratio", "patch", "channels"});
  enc.read_int("width", m.vision().width, 1, kMaxSize);
  enc.read_int("heads", m.vision().heads, 1, kMaxSize);
  enc.read_int("layers", m.vision().layers, 0, kMaxSize);
  enc.read_int("mlp_ratio", m.vision().mlp_ratio, 1, kMaxSize);
  enc.read_int("patch", m.vision().patch, 1, kMaxSize);
  enc.read_int("channels", m.vision().channels, 1, kMaxSize);
  require_all(llm, {"width", "heads", "layers", "mlp_ratio", "vocab"});
  llm.read_int("width", m.llm.width, 1, kMaxSize);
  llm.read_int("heads", m.llm.heads, 1, kMaxSize);
  llm.read_int("layers", m.llm.layers, 1, kMaxSize);
  llm.read_int("mlp_ratio", m.llm.mlp_ratio, 1, kMaxSize);
  llm.read_int("vocab", m.llm.vocab, 1, kMaxSize);
}

void read_data(const Section& s, DataCalibration& d) {
  require_all(s, {"c", "per_image", "per_patch", "per_token"});
  s.read_real("c", d.c, at_least(0.0));
  s.read_real("per_image", d.per_image, at_least(0.0));
  s.read_real("per_patch", d.per_patch, at_least(0.0));
  s.read_real("per_token", d.per_token, at_least(0.0));
  s.read_real("rms_relative_error", d.rms_relative_error, at_least(0.0));
  s.read_real("max_relative_error", d.max_relative_error, at_least(0.0));
  s.read_real_list("images", d.images, at_least(0.0));
  s.read_real_list("patches", d.patches, at_least(0.0));
  s.read_real_list("tokens", d.tokens, at_least(0.0));
  s.read_real_list("seconds", d.seconds, at_least(0.0));
  const size_t points = d.seconds.size();
  if (d.images.size() != points || d.patches.size() != points || d.tokens.size() != points)
    s.fail_at("seconds", fmt::format("data.images, data.patches, data.tokens and data.seconds must have the "
                                     "same length (they have {}, {}, {} and {} values)",
                                     d.images.size(), d.patches.size(), d.tokens.size(), points));
}

bool not_measured(const Section& s, const std::string& key) {
  const YAML::Node value = s.child(key);
  return value.IsScalar() && value.Scalar() == "not measured";
}

// One link: absent, `not measured` or {latency, bandwidth > 0, fit error, bytes, seconds}.
void read_link(const Section& links, const std::string& key, CollectiveCalibration& out) {
  if (!links.has(key) || not_measured(links, key)) return;
  const Section s = links.required_section(
      key, {"latency", "bandwidth", "rms_relative_error", "max_relative_error", "bytes", "seconds"});
  require_all(s, {"latency", "bandwidth"});
  out.measured = true;
  s.read_real("latency", out.link.latency, at_least(0.0));
  s.read_real("bandwidth", out.link.bandwidth, above(0.0));
  read_points(s, out.points, "bytes");
}

// A section of links (absent or `not measured`: none measured), one per key.
void read_links(const Section& top, const std::string& name, const std::vector<std::string>& keys,
                const std::vector<CollectiveCalibration*>& out) {
  if (!top.has(name) || not_measured(top, name)) return;
  const Section links = top.required_section(name, keys);
  for (size_t i = 0; i < keys.size(); ++i) read_link(links, keys[i], *out[i]);
}

}  // namespace

Calibration parse_calibration(const std::string& yaml_text, const std::string& origin) {
  const std::vector<YAML::Node> documents = load_yaml_documents(yaml_text, origin);
  const std::vector<std::string> top_keys = {"format",      "provenance", "model",          "encoder",
                                             "llm",         "data",       "optimizer",      "grad_sync",
                                             "collectives", "inter_node", "point_to_point", "tensor_parallel",
                                             "machine",     "gemm_rates"};
  if (documents.size() != 1 || !documents[0].IsMap())
    strict_yaml::fail(origin, "(top level)", documents.empty() ? "(empty)" : strict_yaml::show(documents[0]),
                      fmt::format("a calibration file is one YAML map with keys {} (see docs/INPUT.md)",
                                  strict_yaml::join(top_keys)));
  const Section top(origin, documents[0], "", top_keys);
  top.require("format");
  std::string format;
  top.read_text("format", format);
  if (format != kFormat)
    top.fail_at("format", fmt::format("must be {} (a file from minimllm calibrate)", kFormat));

  Calibration c;
  if (top.has("provenance")) {
    read_provenance(
        top.required_section("provenance", {"deck", "created", "host", "minimllm_version", "kokkos", "ranks",
                                            "ranks_per_node", "blas_threads", "rows_per_call"}),
        c);
  }
  read_model(top.required_section("model", {"encoder", "llm"}), c.model);
  c.encoder = read_phase(top, "encoder", "patches", &c.encoder_forward_share);
  c.llm = read_phase(top, "llm", "tokens");
  read_data(top.required_section("data", {"c", "per_image", "per_patch", "per_token", "rms_relative_error",
                                          "max_relative_error", "images", "patches", "tokens", "seconds"}),
            c.data);

  const Section opt = top.required_section("optimizer", {"seconds", "parameters"});
  opt.require("seconds");
  opt.read_real("seconds", c.optimizer_seconds, at_least(0.0));
  opt.read_int("parameters", c.parameters, 0);
  if (top.has("grad_sync")) {
    top.required_section("grad_sync", {"seconds", "bytes", "ranks"})
        .read_real("seconds", c.grad_sync_seconds, at_least(0.0));
  }

  const std::vector<std::string> ops = {"all_gather", "all_reduce", "all_to_all"};
  read_links(top, "collectives", ops, {&c.all_gather, &c.all_reduce, &c.all_to_all});
  read_links(top, "inter_node", ops, {&c.inter_all_gather, &c.inter_all_reduce, &c.inter_all_to_all});
  // Files from before these were measured have neither section.
  read_links(top, "point_to_point", {"intra_node", "inter_node"},
             {&c.point_to_point, &c.inter_point_to_point});
  if (top.has("tensor_parallel")) {
    const Section tp = top.required_section("tensor_parallel", {"ranks", "all_reduce"});
    tp.read_int("ranks", c.tensor_parallel_ranks, 1);
    read_link(tp, "all_reduce", c.tensor_parallel_all_reduce);
  }
  c.machine = read_machine(top.section("machine", machine_keys()));
  if (top.has("gemm_rates")) {
    const Section rates = top.required_section("gemm_rates", {"m", "n", "k", "gflops"});
    std::vector<int> m, n, k;
    std::vector<double> gflops;
    for (const char* key : {"m", "n", "k", "gflops"}) rates.require(key);
    rates.read_int_list("m", m, 1, 1 << 30);
    rates.read_int_list("n", n, 1, 1 << 30);
    rates.read_int_list("k", k, 1, 1 << 30);
    rates.read_real_list("gflops", gflops, above(0.0));
    if (n.size() != m.size() || k.size() != m.size() || gflops.size() != m.size() || m.empty())
      rates.fail_at("gflops", fmt::format("m, n, k and gflops must be lists of the same length, at least one "
                                          "(here {}, {}, {}, {})",
                                          m.size(), n.size(), k.size(), gflops.size()));
    for (size_t i = 0; i < m.size(); ++i) c.gemm_rates.push_back({m[i], n[i], k[i], gflops[i]});
  }
  return c;
}

Calibration load_calibration(const std::string& path, std::string* text) {
  const std::string yaml_text = read_input_file(path, "calibration file");
  if (text) *text = yaml_text;
  return parse_calibration(yaml_text, path);
}

std::string resolve_against_deck(const std::string& deck_path, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute() || deck_path.empty() || deck_path.front() == '<') return path;
  return (std::filesystem::path(deck_path).parent_path() / p).lexically_normal().string();
}

LinkCost per_step(const LinkCost& measured, CollectiveAlgorithm algorithm, int ranks, int rounds) {
  const double steps = rounds * collective_steps(algorithm, ranks);
  return {steps > 0.0 ? measured.latency / steps : measured.latency, measured.bandwidth};
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
  const EncoderConfig &ce = c.model.vision(), &de = model.vision();
  const LlmConfig &cl = c.model.llm, &dl = model.llm;
  check("encoder.width", ce.width, de.width), check("encoder.heads", ce.heads, de.heads);
  check("encoder.layers", ce.layers, de.layers), check("encoder.mlp_ratio", ce.mlp_ratio, de.mlp_ratio);
  check("encoder.patch", ce.patch, de.patch), check("encoder.channels", ce.channels, de.channels);
  check("llm.width", cl.width, dl.width), check("llm.heads", cl.heads, dl.heads);
  check("llm.layers", cl.layers, dl.layers), check("llm.mlp_ratio", cl.mlp_ratio, dl.mlp_ratio);
  check("llm.vocab", cl.vocab, dl.vocab);

  // The file measures the vision module (its images and patches).
  EncoderCost& vision = cost.encoders.at(model.module_of(Modality::vision));
  vision.compute = c.encoder.cost;
  vision.data_per_item = c.data.per_image, vision.data_per_row = c.data.per_patch;
  cost.llm = c.llm.cost;
  cost.step.data_c = c.data.c;
  cost.step.data_per_token = c.data.per_token;
  cost.step.optimizer = c.optimizer_seconds;
  if (c.encoder_forward_share > 0.0) cost.step.encoder_forward_share = c.encoder_forward_share;
  if (c.machine.comm_creation_ms > 0.0) cost.step.comm_creation = 1e-3 * c.machine.comm_creation_ms;
  if (c.machine.cp_overlap >= 0.0) cost.cp_overlap = c.machine.cp_overlap;  // the ring's, measured
  // Context parallelism all-gathers K|V and the boundary is an all-to-all: the all-gather's link stands
  // for both (the model has one link per side of the node boundary). A fit's latency is that of the whole
  // collective on the calibrating ranks: per message step, it is that over the steps (cost_model.hpp).
  const int node_ranks = std::max(1, c.ranks_per_node), nodes = std::max(1, c.ranks / node_ranks);
  if (c.all_gather.measured) cost.intra_node = per_step(c.all_gather.link, cost.algorithm, node_ranks, 1);
  if (c.inter_all_gather.measured)
    cost.inter_node = per_step(c.inter_all_gather.link, cost.algorithm, nodes, 1);
  if (c.all_reduce.measured)
    cost.step.allreduce_intra = per_step(c.all_reduce.link, cost.algorithm, node_ranks, 2);
  if (c.inter_all_reduce.measured)
    cost.step.allreduce_inter = per_step(c.inter_all_reduce.link, cost.algorithm, nodes, 2);
  // Pipeline stages' messages; the tensor-parallel groups' all-reduce where it was measured on their size.
  if (c.point_to_point.measured) cost.step.point_to_point_intra = c.point_to_point.link;
  if (c.inter_point_to_point.measured) cost.step.point_to_point_inter = c.inter_point_to_point.link;
  if (c.tensor_parallel_all_reduce.measured) {
    cost.step.tensor_parallel_ranks = c.tensor_parallel_ranks;
    cost.step.tensor_parallel_allreduce =
        per_step(c.tensor_parallel_all_reduce.link, cost.algorithm, c.tensor_parallel_ranks, 2);
  }
  return cost;
}

}  // namespace minimllm
