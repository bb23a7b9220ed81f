// Strict reading of YAML inputs (decks, benchmark references, calibration files): loading text with the
// parser's error turned into one InputError line, and map levels that reject unknown and duplicate keys
// and read typed values. Every error is one line, `<origin>: <key.path> = <value>: <what is valid>`, so
// the driver can print what() as is: a typo must never silently fall back to a default.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"

namespace minimllm {

// The most bytes an input file (a deck, a calibration, a machine file, a benchmark reference) may hold.
constexpr long long kMaxInputFileBytes = 64LL << 20;

// The whole file at `path`, a regular file (links followed) of at most kMaxInputFileBytes; throws
// InputError "<path>: cannot read <what>: <reason>" at once for anything else (a directory, a device, a
// FIFO: opened without blocking), or when it cannot be read.
std::string read_input_file(const std::string& path, const char* what);

// Every document of yaml_text; throws InputError "<origin>: line L, column C: invalid YAML: ...".
std::vector<YAML::Node> load_yaml_documents(const std::string& yaml_text, const std::string& origin);
// The first document only (YAML::Load), with the same error.
YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& origin);

namespace strict_yaml {

// A node rendered for a message: one line, bounded length ("(missing)", "null", "\"\"" for the empty
// string, flow style for maps and lists).
std::string show(const YAML::Node& node);
// "a, b, c".
std::string join(const std::vector<std::string>& items);
// Throws InputError "<origin>: <path> = <value>: <what>".
[[noreturn]] void fail(const std::string& origin, const std::string& path, const std::string& value,
                       const std::string& what);

// A real interval with open or closed ends; infinite ends are unbounded.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string describe() const;  // ">= 0", "> 0", "in [0, 1)"
};
Range at_least(double lo);
Range above(double lo);
Range closed(double lo, double hi);
Range half_open(double lo, double hi);

// One map level of an input: construction rejects unknown and duplicate keys (suggesting the intended
// key for a typo); the read_* members read one optional typed field each, leaving the default in place
// when the key is absent. Numbers are plain decimal: an optional sign, digits, and for reals a fraction
// and exponent; YAML's .inf / .nan and hexadecimal forms are rejected.
class Section {
 public:
  // An absent or empty (null) node means "all defaults". `path`: the map's key path ("" at the top).
  Section(const std::string& origin, const YAML::Node& node, std::string path, std::vector<std::string> keys);

  Section section(const std::string& key, std::vector<std::string> keys) const;
  // As section, but the key is required and must hold a map (absent or empty is an error).
  Section required_section(const std::string& key, std::vector<std::string> keys) const;

  void read_int(const std::string& key, int& out, int lo, int hi = std::numeric_limits<int>::max()) const;
  void read_int(const std::string& key, long long& out, long long lo,
                long long hi = std::numeric_limits<long long>::max()) const;
  // A non-negative integer that fits in 64 bits.
  void read_uint64(const std::string& key, std::uint64_t& out) const;
  void read_real(const std::string& key, double& out, const Range& range) const;
  // As read_real, and the value must survive conversion to a 32-bit float (no overflow, no flush to 0).
  void read_float(const std::string& key, float& out, const Range& range) const;
  // A non-empty string (e.g. a file name).
  void read_string(const std::string& key, std::string& out) const;
  // Any string, possibly empty (free text).
  void read_text(const std::string& key, std::string& out) const;
  // One of a fixed set of words.
  void read_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices) const;
  void read_bool(const std::string& key, bool& out) const;
  // A YAML list of integers in [lo, hi], e.g. [3, 1].
  void read_int_list(const std::string& key, std::vector<int>& out, int lo, int hi) const;
  // A YAML list of numbers in `range`, e.g. [0.5, 2].
  void read_real_list(const std::string& key, std::vector<double>& out, const Range& range) const;
  // Required: a name used in file names, non-empty, at most 128 characters of [A-Za-z0-9_.-].
  void read_name(const std::string& key, std::string& out) const;

  void require(const std::string& key) const;
  bool has(const std::string& key) const { return child(key).IsDefined(); }
  // The value at `key` (undefined when absent), for what the read_* members do not cover.
  YAML::Node child(const std::string& key) const;
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // Throws InputError "<origin>: <path.key> = <value at key>: <what>", e.g. for a rule across keys.
  [[noreturn]] void fail_at(const std::string& key, const std::string& what) const;

 private:
  void read_integer(const std::string& key, long long& out, long long lo, long long hi, long long type_min,
                    long long type_max, const char* type_name) const;
  std::string display_path() const { return path_.empty() ? "(top level)" : path_; }
  std::string where() const { return path_.empty() ? " at the top level" : " in " + path_; }
  std::string suggestion(const std::string& name) const;

  const std::string& origin_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> keys_;
};

}  // namespace strict_yaml
}  // namespace minimllm
