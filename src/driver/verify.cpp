// `minimllm verify`: benchmark runs judged again from their files (docs/RUN_RULES.md), and the submission
// file that reports them (docs/SUBMISSION.md, docs/submission.schema.json).
#include "minimllm/driver/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <utility>

#include "minimllm/config/input_error.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/config/strict_yaml.hpp"  // read_input_file
#include "minimllm/core/printable.hpp"
#include "minimllm/core/sha256.hpp"
#include "minimllm/driver/benchmark.hpp"
#include "minimllm/driver/provenance.hpp"  // version_text, utc_now
#include "minimllm/driver/run_output.hpp"  // same_file
#include "minimllm/metrics/output_file.hpp"
#include "minimllm/metrics/run_file.hpp"

namespace minimllm {
namespace {

constexpr const char* kFormat = "minimllm submission";

// ----- JSON text -----

// The length of the well-formed UTF-8 sequence at text[i] (a lead byte >= 0x80), or 0 when it is not one
// (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short).
std::size_t utf8_sequence(const std::string& text, std::size_t i) {
  const auto byte = [&](std::size_t k) {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u;
  };
  const unsigned c = byte(0);
  std::size_t n = 0;
  unsigned low = 0x80, high = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) low = 0xa0;
    if (c == 0xed) high = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) low = 0x90;
    if (c == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  return n;
}

// A JSON string: quotes, backslashes and control characters escaped; bytes that are not UTF-8 (a file's
// string attribute may hold any) as U+FFFD.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence(text, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text, i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

// JSON written as it goes: each value in order, with the commas and a two-space indentation.
class Json {
 public:
  Json& begin_object() { return open('{'); }
  Json& end_object() { return close('}'); }
  Json& begin_array() { return open('['); }
  Json& end_array() { return close(']'); }
  Json& key(const std::string& name) {
    separate();
    text_ += quoted(name) + ": ";
    after_key_ = true;
    return *this;
  }
  Json& value(const std::string& text) { return item(quoted(text)); }
  Json& value(const char* text) { return item(quoted(text)); }
  // Shortest round-trip form; NaN and infinities (not JSON numbers) as null.
  Json& value(double x) { return item(std::isfinite(x) ? fmt::format("{}", x) : "null"); }
  Json& value(long long x) { return item(std::to_string(x)); }
  Json& value(int x) { return item(std::to_string(x)); }
  Json& value(bool x) { return item(x ? "true" : "false"); }
  Json& null() { return item("null"); }
  template <typename T>
  Json& field(const std::string& name, const T& x) {
    return key(name).value(x);
  }
  Json& strings(const std::string& name, const std::vector<std::string>& values) {
    key(name).begin_array();
    for (const std::string& v : values) value(v);
    return end_array();
  }
  std::string text() const { return text_ + "\n"; }

 private:
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) text_ += ",";
    text_ += "\n" + std::string(2 * first_.size(), ' ');
    first_.back() = false;
  }
  Json& item(const std::string& literal) {
    separate();
    text_ += literal;
    return *this;
  }
  Json& open(char bracket) {
    separate();
    text_ += bracket;
    first_.push_back(true);
    return *this;
  }
  Json& close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) text_ += "\n" + std::string(2 * first_.size(), ' ');
    text_ += bracket;
    return *this;
  }

  std::string text_;
  std::vector<bool> first_;  // per open object or array: nothing in it yet
  bool after_key_ = false;
};

// ----- the runs -----

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw InputError(fmt::format("{}: cannot read the run file", path));
  return sha256_hex(bytes);
}

struct Reference {
  BenchmarkReference values;
  std::string sha256;  // of the file
};

struct JudgedRun {
  RunFile file;
  std::string sha256;
  RunConfig config;
  const Reference* reference = nullptr;
  TrainResult recorded;  // the steps and rates the verdict is computed from
  BenchmarkVerdict verdict;
  std::vector<std::string> failures;  // the verdict's and the records' (empty: VALID)
};

// Newline-separated values (hostnames, devices) as a list.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool same_number(double a, double b) {
  return a == b || std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

const Reference& load_reference(const std::string& path, const std::string& run_path, bool recorded,
                                std::map<std::string, Reference>& references) {
  const auto found = references.find(path);
  if (found != references.end()) return found->second;
  const std::string named_by =
      recorded ? fmt::format(
                     "{}: its benchmark reference (/run/benchmark_reference, relative to the run's "
                     "working directory; else give --reference)",
                     run_path)
               : std::string("--reference");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(fmt::format("{} {}: no such file", named_by, path));
  Reference reference;
  try {
    reference.values = load_benchmark_reference(path);
    reference.sha256 = sha256_hex(read_input_file(path, "benchmark reference"));
  } catch (const InputError& e) {
    throw InputError(recorded ? fmt::format("{}: {}", run_path, e.what()) : std::string(e.what()));
  }
  return references.emplace(path, std::move(reference)).first->second;
}

// What a run's own file says about it, checked against what its steps and the reference give: a file
// altered after the run, or judged against other reference values, is INVALID.
std::vector<std::string> record_failures(const JudgedRun& run) {
  const RunFile& file = run.file;
  const BenchmarkReference& ref = run.reference->values;
  const BenchmarkVerdict& v = run.verdict;
  std::vector<std::string> failures;
  if (sha256_hex(run.config.deck_text) != file.text("deck_sha256"))
    failures.push_back("altered file: /run/deck_sha256 is not the SHA-256 of /run/deck_text");
  const std::pair<const char*, double> foms[] = {{"fom_tokens_per_second", v.tokens_per_second},
                                                 {"fom_samples_per_second", v.samples_per_second},
                                                 {"fom_mfu", v.mfu},
                                                 {"fom_timed_steps", static_cast<double>(v.timed_steps)}};
  for (const auto& [name, recomputed] : foms)
    if (!same_number(file.real(name), recomputed))
      failures.push_back(
          fmt::format("altered file: /run/{} is {}, but its /steps and /run/fom_timed_seconds give {}", name,
                      file.real(name), recomputed));
  const std::pair<const char*, double> tolerances[] = {
      {"reference_step", static_cast<double>(ref.step)},
      {"reference_loss", ref.loss},
      {"reference_relative_tolerance", ref.relative_tolerance},
      {"invariance_relative_tolerance", ref.invariance_relative_tolerance}};
  for (const auto& [name, expected] : tolerances)
    if (file.real(name) != expected)
      failures.push_back(fmt::format(
          "rule 2 (the shipped reference): the run was judged with {} = {}, the reference {} has {}", name,
          file.real(name), ref.path, expected));
  // Files from before references had a bf16 tolerance judged every run at the fp32 one.
  const double bf16_recorded =
      file.find("reference_bf16_relative_tolerance") ? file.real("reference_bf16_relative_tolerance") : 0.0;
  if (bf16_recorded != ref.bf16_relative_tolerance)
    failures.push_back(fmt::format(
        "rule 2 (the shipped reference): the run was judged with reference_bf16_relative_tolerance = {}, the "
        "reference {} has {}",
        bf16_recorded, ref.path, ref.bf16_relative_tolerance));
  const int invariance_steps =
      std::max(1, std::min<int>(ref.invariance_steps, static_cast<int>(file.steps.size())));
  if (v.invariance_steps < invariance_steps)
    failures.push_back(
        fmt::format("layout invariance: the run re-ran {} step(s) under static, the reference {} asks for {}",
                    v.invariance_steps, ref.path, invariance_steps));
  return failures;
}

JudgedRun judge_file(const std::string& path, const VerifyRequest& request,
                     std::map<std::string, Reference>& references) {
  JudgedRun run;
  run.file = read_run_file(path);
  const RunFile& file = run.file;
  if (!file.find("verdict")) {
    const RunAttribute* stopped = file.find("stopped");
    const std::string* why = stopped ? std::get_if<std::string>(&stopped->value) : nullptr;
    throw InputError(
        why ? fmt::format("{}: not a judged benchmark run: it stopped early ({})", path, *why)
            : fmt::format("{}: not a judged benchmark run (no /run/verdict: run with --reference, or a deck "
                          "with benchmark.reference)",
                          path));
  }
  run.sha256 = file_sha256(path);
  try {
    run.config = parse_run_config(file.text("deck_text"), file.text("deck_path"));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: /run/deck_text: {}", path, e.what()));
  }
  RunConfig& config = run.config;
  config.steps = static_cast<int>(file.integer("steps"));
  config.data.global_batch = static_cast<int>(file.integer("global_batch"));
  config.parallel.policy = file.text("policy");

  const bool recorded_reference = request.reference.empty();
  run.reference = &load_reference(recorded_reference ? file.text("benchmark_reference") : request.reference,
                                  path, recorded_reference, references);
  const BenchmarkReference& ref = run.reference->values;
  if (ref.problem != config.name)
    throw InputError(
        fmt::format("{}: problem = {}: this reference belongs to problem {}, but the run {} is "
                    "problem {}",
                    ref.path, ref.problem, ref.problem, path, config.name));

  TrainResult& r = run.recorded;
  r.steps = file.steps;
  r.timed_seconds = file.real("fom_timed_seconds");
  r.peak_gflops_per_rank = file.real("peak_gflops_per_rank");
  r.peak_source = file.text("peak_source");
  r.attainable_gflops_per_rank = file.real("attainable_gflops_per_rank");
  r.attainable_source = file.text("attainable_source");
  const InvarianceResult invariance{static_cast<int>(file.integer("invariance_steps")),
                                    file.real("invariance_max_relative_difference")};
  run.verdict = judge_recorded(config, ref, r, static_cast<int>(file.integer("ranks")), invariance);
  run.verdict.nodes = static_cast<int>(file.integer("nodes"));

  if (file.text("verdict") != "VALID")
    run.failures.push_back(
        fmt::format("rule 1 (every repetition VALID): the run was judged {} when it ran{}",
                    printable(file.text("verdict")),
                    run.verdict.valid ? ": " + printable(file.text("verdict_reason")) : std::string()));
  run.failures.insert(run.failures.end(), run.verdict.failures.begin(), run.verdict.failures.end());
  const std::vector<std::string> records = record_failures(run);
  run.failures.insert(run.failures.end(), records.begin(), records.end());
  return run;
}

// The /run attributes that make a configuration (docs/RUN_RULES.md): its repetitions must agree on them.
// Hosts may differ (a cluster gives each job its nodes); a file without an attribute is not compared on it.
const char* const kConfigurationKeys[] = {"name",       "ranks",        "nodes",     "ranks_per_node",
                                          "policy",     "git_revision", "git_dirty", "compiler",
                                          "build_type", "cxx_flags",    "kokkos",    "mpi_library",
                                          "blas",       "devices",      "cpus",      "precision"};

std::string shown(const RunAttribute& a) {
  if (const auto* s = std::get_if<std::string>(&a.value)) return printable(*s);
  if (const auto* d = std::get_if<double>(&a.value)) return fmt::format("{}", *d);
  return std::to_string(std::get<long long>(a.value));
}

// The rules over the repetitions together: separate runs, of one configuration, at least 3 of them.
std::vector<std::string> repetition_failures(const std::vector<JudgedRun>& runs) {
  std::vector<std::string> failures;
  std::map<std::string, std::string> seen;  // sha256 -> file
  for (const JudgedRun& run : runs) {
    const auto [it, inserted] = seen.emplace(run.sha256, run.file.path);
    if (!inserted)
      failures.push_back(fmt::format("rule 6 (separate runs): {} is the same file as {} (sha256 {})",
                                     run.file.path, it->second, run.sha256.substr(0, 12)));
  }
  const RunFile& first = runs.front().file;
  for (const JudgedRun& run : runs) {
    if (&run == &runs.front()) continue;
    for (const char* key : kConfigurationKeys) {
      const RunAttribute* a = first.find(key);
      const RunAttribute* b = run.file.find(key);
      if (a && b && a->value != b->value)
        failures.push_back(fmt::format("rule 6 (repetitions of one configuration): {} has {} = {}, {} has {}",
                                       run.file.path, key, shown(*b), first.path, shown(*a)));
    }
  }
  if (static_cast<int>(seen.size()) < kMinimumRepetitions)
    failures.push_back(fmt::format("rule 6 (at least {} repetitions): {} separate run(s)",
                                   kMinimumRepetitions, seen.size()));
  return failures;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// An attribute as text, or null when the file does not record it (files of older versions).
void optional_text(Json& json, const std::string& name, const RunFile& file, const std::string& attribute) {
  json.key(name);
  const RunAttribute* a = file.find(attribute);
  const std::string* text = a ? std::get_if<std::string>(&a->value) : nullptr;
  if (text)
    json.value(*text);
  else
    json.null();
}

std::vector<std::string> union_of_lines(const std::vector<JudgedRun>& runs, const std::string& attribute) {
  std::set<std::string> all;
  for (const JudgedRun& run : runs) {
    const RunAttribute* a = run.file.find(attribute);
    if (const std::string* text = a ? std::get_if<std::string>(&a->value) : nullptr)
      for (const std::string& line : lines_of(*text)) all.insert(line);
  }
  return std::vector<std::string>(all.begin(), all.end());
}

struct Fom {
  double median = 0.0, min = 0.0, max = 0.0;
  int n = 0;
};

std::string submission_json(const std::vector<JudgedRun>& runs, const Fom& fom, bool valid,
                            const std::vector<std::string>& failures) {
  const RunFile& first = runs.front().file;
  const Reference& reference = *runs.front().reference;
  const BenchmarkReference& ref = reference.values;
  const std::vector<std::string> version = lines_of(version_text());
  Json json;
  json.begin_object();
  json.field("format", kFormat);
  json.field("schema_version", kSubmissionSchemaVersion);
  json.field("created_utc", utc_now());
  json.field("verified_by", version.size() > 1 ? version[0] + ", " + version[1] : version_text());
  json.field("problem", runs.front().config.name);

  json.key("reference").begin_object();
  json.field("path", ref.path);
  json.field("sha256", reference.sha256);
  json.field("step", ref.step);
  json.field("loss", ref.loss);
  json.field("relative_tolerance", ref.relative_tolerance);
  json.field("bf16_relative_tolerance", ref.bf16_relative_tolerance);
  json.field("invariance_steps", ref.invariance_steps);
  json.field("invariance_relative_tolerance", ref.invariance_relative_tolerance);
  json.key("problem_sha256");
  if (ref.problem_sha256.empty())
    json.null();
  else
    json.value(ref.problem_sha256);
  json.field("min_timed_seconds", ref.min_timed_seconds);
  json.end_object();

  json.key("machine").begin_object();
  json.strings("hostnames", union_of_lines(runs, "hostnames"));
  json.field("nodes", first.integer("nodes"));
  json.field("ranks", first.integer("ranks"));
  json.field("ranks_per_node", first.integer("ranks_per_node"));
  json.strings("cpus", union_of_lines(runs, "cpus"));
  json.strings("devices", union_of_lines(runs, "devices"));
  json.strings("slurm_job_ids", union_of_lines(runs, "slurm_job_id"));
  json.end_object();

  json.key("build").begin_object();
  json.field("minimllm_version", first.text("minimllm_version"));
  json.field("git_revision", first.text("git_revision"));
  json.field("git_dirty", first.integer("git_dirty"));
  json.field("compiler", first.text("compiler"));
  json.field("build_type", first.text("build_type"));
  json.field("cxx_flags", first.text("cxx_flags"));
  json.field("kokkos", first.text("kokkos"));
  json.field("mpi_library", first.text("mpi_library"));
  optional_text(json, "blas", first, "blas");
  optional_text(json, "gemm_backend", first, "gemm_backend");
  optional_text(json, "precision", first, "precision");
  optional_text(json, "cuda_runtime_version", first, "cuda_runtime_version");
  optional_text(json, "nccl_version", first, "nccl_version");
  json.end_object();

  json.key("runs").begin_array();
  for (const JudgedRun& run : runs) {
    const BenchmarkVerdict& v = run.verdict;
    json.begin_object();
    json.field("file", run.file.path);
    json.field("sha256", run.sha256);
    json.field("problem", run.config.name);
    json.field("policy", run.config.parallel.policy);
    json.field("ranks", run.file.integer("ranks"));
    json.field("start_time_utc", run.file.text("start_time_utc"));
    json.strings("hostnames", lines_of(run.file.text("hostnames")));
    json.field("steps", static_cast<long long>(run.file.steps.size()));
    json.field("timed_steps", v.timed_steps);
    json.field("timed_seconds", v.timed_seconds);
    json.field("loss_at_reference_step", v.reached ? v.loss : std::nan(""));
    json.key("fom").begin_object();
    json.field("tokens_per_second", v.tokens_per_second);
    json.field("samples_per_second", v.samples_per_second);
    json.field("mfu", v.mfu);
    json.field("attainable_fraction", v.attainable_fraction);
    json.end_object();
    json.field("peak_gflops_per_rank", run.recorded.peak_gflops_per_rank);
    json.field("peak_source", run.recorded.peak_source);
    json.field("attainable_gflops_per_rank", run.recorded.attainable_gflops_per_rank);
    json.field("attainable_source", run.recorded.attainable_source);
    json.field("verdict", run.failures.empty() ? "VALID" : "INVALID");
    json.strings("failures", run.failures);
    json.end_object();
  }
  json.end_array();

  json.key("fom").begin_object();
  json.field("metric", "validated training tokens per second");
  json.field("median", fom.median);
  json.field("min", fom.min);
  json.field("max", fom.max);
  json.field("n", fom.n);
  json.key("score");
  if (valid)
    json.value(fom.median);
  else
    json.null();
  json.end_object();
  json.field("repetitions_required", kMinimumRepetitions);
  json.field("verdict", valid ? "VALID" : "INVALID");
  json.strings("failures", failures);
  json.end_object();
  return json.text();
}

// A file `minimllm verify` wrote: it begins with the format line.
bool is_submission_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string expected = std::string("{\n  \"format\": ") + quoted(kFormat) + ",";
  std::string head(expected.size(), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in.gcount() == static_cast<std::streamsize>(head.size()) && head == expected;
}

// The submission path, checked before any file is read: never a link, device, FIFO or directory, never a
// run file or the reference, and an existing file only with --overwrite and only a submission file.
void check_submission_path(const VerifyRequest& request) {
  const std::string& out = request.out;
  if (out.empty()) throw InputError("--out \"\": an empty path; name a file");
  check_replaceable(out, "--out");
  for (const std::string& file : request.files)
    if (same_file(out, file))
      throw InputError(fmt::format(
          "{}: the submission file would replace the run file {}; choose another --out", out, file));
  if (!request.reference.empty() && same_file(out, request.reference))
    throw InputError(
        fmt::format("{}: the submission file would replace the benchmark reference {}; choose another --out",
                    out, request.reference));
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return;
  if (!request.overwrite)
    throw InputError(fmt::format(
        "{}: submission file exists; pass --overwrite to replace it or choose another --out", out));
  if (!is_submission_file(out))
    throw InputError(fmt::format(
        "{}: not a minimllm submission file; --overwrite replaces only a submission file minimllm wrote: "
        "choose another --out",
        out));
}

}  // namespace

int verify(const VerifyRequest& request, std::ostream& out, std::ostream& err) {
  if (request.files.empty()) throw InputError("verify: name at least one run file");
  check_submission_path(request);
  std::map<std::string, Reference> references;
  std::vector<JudgedRun> runs;
  for (const std::string& path : request.files) runs.push_back(judge_file(path, request, references));
  // The run files may not be the reference a run named either (a file given twice is rule 6's).
  for (const JudgedRun& run : runs)
    if (same_file(request.out, run.reference->values.path))
      throw InputError(fmt::format(
          "{}: the submission file would replace the benchmark reference {}; choose another --out",
          request.out, run.reference->values.path));

  std::vector<std::string> failures;
  std::vector<double> rates;
  out << fmt::format("verify: {} run file(s) of problem {}\n", runs.size(), runs.front().config.name);
  for (const JudgedRun& run : runs) {
    const BenchmarkVerdict& v = run.verdict;
    for (const std::string& f : run.failures) failures.push_back(run.file.path + ": " + f);
    rates.push_back(v.tokens_per_second);
    std::string reason;
    for (const std::string& f : run.failures) reason += (reason.empty() ? "" : "; ") + f;
    out << printable(fmt::format("  {}: {:.1f} tokens/s, {:.3f} samples/s, MFU {:.2f}% ({} ranks, {}, {} "
                                 "steps timed in {:.3f} s, "
                                 "reference {}): {}",
                                 run.file.path, v.tokens_per_second, v.samples_per_second, 100.0 * v.mfu,
                                 run.file.integer("ranks"), run.config.parallel.policy, v.timed_steps,
                                 v.timed_seconds, run.reference->values.path,
                                 run.failures.empty() ? "VALID" : "INVALID: " + reason))
        << "\n";
  }
  const std::vector<std::string> repetitions = repetition_failures(runs);
  failures.insert(failures.end(), repetitions.begin(), repetitions.end());
  const bool valid = failures.empty();

  Fom fom;
  fom.median = median(rates);
  fom.min = *std::min_element(rates.begin(), rates.end());
  fom.max = *std::max_element(rates.begin(), rates.end());
  fom.n = static_cast<int>(rates.size());
  out << fmt::format(
      "FOM {}: median {:.1f} {} training tokens/s, min {:.1f}, max {:.1f} over {} run(s) ({} ranks on {} "
      "node(s)){}\n",
      runs.front().config.name, fom.median, valid ? "validated" : "NOT validated", fom.min, fom.max, fom.n,
      runs.front().file.integer("ranks"), runs.front().file.integer("nodes"),
      valid
          ? ""
          : fmt::format(": no score (a score needs at least {} repetitions of one configuration, all VALID)",
                        kMinimumRepetitions));

  const std::string text = submission_json(runs, fom, valid, failures);
  write_file_atomically(request.out, text.data(), text.size(), "submission file", "--out", request.overwrite);
  out << "submission written to " << printable(request.out) << "\n";

  std::string reason;
  for (const std::string& f : failures) reason += (reason.empty() ? "" : "; ") + f;
  out << (valid ? std::string("VALID") : printable("INVALID: " + reason)) << std::endl;
  if (!valid) err << printable("minimllm: INVALID: " + reason) + "\n" << std::flush;
  return valid ? 0 : 3;
}

}  // namespace minimllm
