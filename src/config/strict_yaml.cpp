// Strict YAML reading (strict_yaml.hpp): loading, rendering values for messages, typed reads.
#include "minimllm/config/strict_yaml.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace minimllm {
namespace {

constexpr std::size_t kMaxNameLength = 128;  // read_name: names go into file names
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

// Runs a YAML load, turning the parser's exception into one InputError line.
template <class Load>
auto parse_yaml(const std::string& origin, Load load) {
  try {
    return load();
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) where = fmt::format("line {}, column {}: ", e.mark.line + 1, e.mark.column + 1);
    throw InputError(fmt::format("{}: {}invalid YAML: {}", origin, where, one_line(e.msg)));
  }
}

}  // namespace

std::string read_input_file(const std::string& path, const char* what) {
  // O_NONBLOCK: a FIFO must not block the open; only a regular file of at most kMaxInputFileBytes is read,
  // so that a device (/dev/zero, /dev/urandom) or a FIFO is refused at once instead of read without end.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot read {}: {}", path, what, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool directory = S_ISDIR(st.st_mode);
    ::close(fd);
    throw InputError(
        fmt::format("{}: cannot read {}: {}", path, what,
                    directory ? "is a directory" : "not a regular file (a device, FIFO or socket)"));
  }
  if (st.st_size > kMaxInputFileBytes) {
    ::close(fd);
    throw InputError(fmt::format("{}: cannot read {}: {} bytes, more than the {} MiB an input file may hold",
                                 path, what, static_cast<long long>(st.st_size), kMaxInputFileBytes >> 20));
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw InputError(fmt::format("{}: cannot read {}: {}", path, what, std::strerror(error)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (static_cast<long long>(text.size()) > kMaxInputFileBytes) {  // grew while being read
      ::close(fd);
      throw InputError(fmt::format("{}: cannot read {}: more than the {} MiB an input file may hold", path,
                                   what, kMaxInputFileBytes >> 20));
    }
  }
  ::close(fd);
  return text;
}

std::vector<YAML::Node> load_yaml_documents(const std::string& yaml_text, const std::string& origin) {
  return parse_yaml(origin, [&] { return YAML::LoadAll(yaml_text); });
}

YAML::Node load_yaml_document(const std::string& yaml_text, const std::string& origin) {
  return parse_yaml(origin, [&] { return YAML::Load(yaml_text); });
}

namespace strict_yaml {

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

[[noreturn]] void fail(const std::string& origin, const std::string& path, const std::string& value,
                       const std::string& what) {
  throw InputError(fmt::format("{}: {} = {}: {}", origin, path, value, what));
}

std::string Range::describe() const {
  if (hi == kInf) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

Range at_least(double lo) { return {lo, false, kInf, false}; }
Range above(double lo) { return {lo, true, kInf, false}; }
Range closed(double lo, double hi) { return {lo, false, hi, false}; }
Range half_open(double lo, double hi) { return {lo, false, hi, true}; }

// ---------------------------------------------------------------------------------------------------
// Section

Section::Section(const std::string& origin, const YAML::Node& node, std::string path,
                 std::vector<std::string> keys)
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

Section Section::section(const std::string& key, std::vector<std::string> keys) const {
  return Section(origin_, child(key), path_of(key), std::move(keys));
}

Section Section::required_section(const std::string& key, std::vector<std::string> keys) const {
  require(key);
  if (!child(key).IsMap()) fail_at(key, fmt::format("must be a map with keys {}", join(keys)));
  return section(key, std::move(keys));
}

void Section::read_int(const std::string& key, int& out, int lo, int hi) const {
  long long parsed = out;
  read_integer(key, parsed, lo, hi, std::numeric_limits<int>::min(), kIntMax, "32-bit int");
  out = static_cast<int>(parsed);
}

void Section::read_int(const std::string& key, long long& out, long long lo, long long hi) const {
  read_integer(key, out, lo, hi, std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max(),
               "64-bit integer");
}

void Section::read_integer(const std::string& key, long long& out, long long lo, long long hi,
                           long long type_min, long long type_max, const char* type_name) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  const std::string expected =
      hi == type_max ? fmt::format("an integer >= {}", lo) : fmt::format("an integer in [{}, {}]", lo, hi);
  long long parsed = 0;
  bool overflow = false;
  if (!value.IsScalar() || !parse_integer(value.Scalar(), parsed, overflow)) {
    fail_at(key, "must be " + expected);
  }
  if (overflow || parsed > type_max || parsed < type_min) {
    fail_at(key, fmt::format("must be {} that fits in a {}", expected, type_name));
  }
  if (parsed < lo || parsed > hi) fail_at(key, "must be " + expected);
  out = parsed;
}

void Section::read_uint64(const std::string& key, std::uint64_t& out) const {
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

void Section::read_real(const std::string& key, double& out, const Range& range) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  double parsed = 0.0;
  if (!value.IsScalar() || !parse_real(value.Scalar(), parsed) || !range.contains(parsed)) {
    fail_at(key, "must be a number " + range.describe());
  }
  out = parsed;
}

void Section::read_float(const std::string& key, float& out, const Range& range) const {
  double parsed = out;
  read_real(key, parsed, range);
  const float narrowed = static_cast<float>(parsed);
  if (!std::isfinite(narrowed) || (narrowed == 0.0f && parsed != 0.0) || !range.contains(narrowed)) {
    fail_at(key, fmt::format("must be a number {} representable as a 32-bit float", range.describe()));
  }
  out = narrowed;
}

void Section::read_string(const std::string& key, std::string& out) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  if (!value.IsScalar() || value.Scalar().empty()) fail_at(key, "must be a non-empty string");
  out = value.Scalar();
}

void Section::read_text(const std::string& key, std::string& out) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  if (!value.IsScalar()) fail_at(key, "must be a string");
  out = value.Scalar();
}

void Section::read_choice(const std::string& key, std::string& out,
                          const std::vector<std::string>& choices) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  if (!value.IsScalar() || std::find(choices.begin(), choices.end(), value.Scalar()) == choices.end()) {
    fail_at(key, "must be one of " + join(choices));
  }
  out = value.Scalar();
}

void Section::read_bool(const std::string& key, bool& out) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  if (!value.IsScalar() || (value.Scalar() != "true" && value.Scalar() != "false")) {
    fail_at(key, "must be true or false");
  }
  out = value.Scalar() == "true";
}

void Section::read_int_list(const std::string& key, std::vector<int>& out, int lo, int hi) const {
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

void Section::read_real_list(const std::string& key, std::vector<double>& out, const Range& range) const {
  const YAML::Node value = child(key);
  if (!value.IsDefined()) return;
  const std::string expected = "must be a list of numbers " + range.describe();
  if (!value.IsSequence()) fail_at(key, expected);
  std::vector<double> parsed;
  for (const auto& item : value) {
    double v = 0.0;
    if (!item.IsScalar() || !parse_real(item.Scalar(), v) || !range.contains(v)) fail_at(key, expected);
    parsed.push_back(v);
  }
  out = parsed;
}

void Section::read_name(const std::string& key, std::string& out) const {
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

void Section::require(const std::string& key) const {
  if (!child(key).IsDefined()) fail_at(key, fmt::format("required key{}", where()));
}

YAML::Node Section::child(const std::string& key) const {
  if (!node_.IsDefined() || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  // Look up without inserting: operator[] on a const node never modifies it.
  const YAML::Node& const_node = node_;
  return const_node[key];
}

void Section::fail_at(const std::string& key, const std::string& what) const {
  fail(origin_, path_of(key), show(child(key)), what);
}

std::string Section::suggestion(const std::string& name) const {
  for (const auto& key : keys_) {
    if (edit_distance(name, key) <= 2) return fmt::format(" (did you mean '{}'?)", key);
  }
  return "";
}

}  // namespace strict_yaml
}  // namespace minimllm
