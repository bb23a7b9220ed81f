#include "minimllm/metrics/checkpoint_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "hdf5_helpers.hpp"
#include "minimllm/config/input_error.hpp"
#include "minimllm/core/sha256.hpp"
#include "minimllm/metrics/output_file.hpp"

namespace minimllm {
namespace {

using hdf5::check;
using hdf5::Scoped;

constexpr const char* kFormat = "minimllm checkpoint";
// 2: every /state dataset carries the sha256 of its values, and /checkpoint the sha256 of its attributes
// (attributes_sha256); version 1 files (without them) are still read.
constexpr long long kFormatVersion = 2;
constexpr const char* kAttributesDigest = "attributes_sha256";

// The attributes as one text (sorted by name, each `name=type:value`, doubles in shortest round-trip form),
// whose sha256 is the attributes' digest: any changed bit of a value changes it.
std::string attributes_text(std::vector<RunAttribute> attributes) {
  std::sort(attributes.begin(), attributes.end(),
            [](const RunAttribute& a, const RunAttribute& b) { return a.name < b.name; });
  std::string text;
  for (const RunAttribute& a : attributes) {
    if (a.name == kAttributesDigest) continue;
    if (const auto* s = std::get_if<std::string>(&a.value))
      text += fmt::format("{}=s:{}:{}\n", a.name, s->size(), *s);
    else if (const auto* d = std::get_if<double>(&a.value))
      text += fmt::format("{}=d:{}\n", a.name, *d);
    else
      text += fmt::format("{}=i:{}\n", a.name, std::get<long long>(a.value));
  }
  return text;
}

// A stored digest as a message shows it: its first 12 hex digits, or what it is not (a damaged attribute
// may hold anything, a newline too).
std::string shown_digest(const std::string& digest) {
  const bool hex = digest.size() == 64 && digest.find_first_not_of("0123456789abcdef") == std::string::npos;
  return hex ? digest.substr(0, 12) : "(not a sha256)";
}

std::string values_digest(const std::vector<float>& values) {
  return sha256_hex(values.data(), values.size() * sizeof(float));
}

// The HDF5 image of contents, built in memory (core driver, no backing store).
std::vector<char> checkpoint_image(const std::string& path, const CheckpointContents& contents) {
  Scoped fapl(check(H5Pcreate(H5P_FILE_ACCESS), path, "create file access properties"), H5Pclose);
  check(H5Pset_fapl_core(fapl.get(), 1 << 20, 0), path, "select the in-memory driver");
  Scoped file(
      check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), path, "build the checkpoint"),
      H5Fclose);
  hdf5::write_string_attribute(file.get(), "format", kFormat, path);
  hdf5::write_attribute(file.get(), "format_version", H5T_STD_I64LE, H5T_NATIVE_LLONG, &kFormatVersion, path);
  Scoped group(check(H5Gcreate2(file.get(), "checkpoint", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
                     "create /checkpoint"),
               H5Gclose);
  for (const RunAttribute& a : contents.attributes) hdf5::write_run_attribute(group.get(), a, path);
  hdf5::write_string_attribute(group.get(), kAttributesDigest,
                               sha256_hex(attributes_text(contents.attributes)), path);
  Scoped state(
      check(H5Gcreate2(file.get(), "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path, "create /state"),
      H5Gclose);
  for (const auto& [name, values] : contents.arrays) {
    const std::string what = "write /state/" + name;
    const hsize_t dims[1] = {values.size()};
    Scoped space(check(H5Screate_simple(1, dims, nullptr), path, what.c_str()), H5Sclose);
    Scoped data(check(H5Dcreate2(state.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT),
                      path, what.c_str()),
                H5Dclose);
    check(H5Dwrite(data.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), path,
          what.c_str());
    hdf5::write_string_attribute(data.get(), "sha256", values_digest(values), path);
  }
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), path, "build the checkpoint");
  const ssize_t size = check(H5Fget_file_image(file.get(), nullptr, 0), path, "build the checkpoint");
  std::vector<char> image(static_cast<size_t>(size));
  check(H5Fget_file_image(file.get(), image.data(), image.size()), path, "build the checkpoint");
  return image;
}

// What read_array gathers: the arrays, and the first one whose stored sha256 differs from its values'.
struct ArraysRead {
  std::vector<std::pair<std::string, std::vector<float>>>& arrays;
  bool digests_required = false;
  std::string damaged;  // "/state/<name>: ..." when one fails its check
};

// The dataset's string attribute "sha256", or "" when it has none.
std::string stored_digest(hid_t data) {
  if (H5Aexists(data, "sha256") <= 0) return "";
  std::vector<RunAttribute> attributes;
  H5Aiterate2(data, H5_INDEX_NAME, H5_ITER_INC, nullptr, hdf5::collect_attribute, &attributes);
  for (const RunAttribute& a : attributes)
    if (a.name == "sha256")
      if (const auto* text = std::get_if<std::string>(&a.value)) return *text;
  return "";
}

herr_t read_array(hid_t group, const char* name, const H5L_info_t*, void* out) {
  auto& read = *static_cast<ArraysRead*>(out);
  const hid_t data = H5Dopen2(group, name, H5P_DEFAULT);
  if (data < 0) return -1;
  Scoped closing(data, H5Dclose);
  Scoped space(H5Dget_space(data), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0 || n > (hssize_t{1} << 32)) return -1;  // a damaged extent must not allocate without bound
  std::vector<float> values(static_cast<size_t>(n));
  if (H5Dread(data, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) return -1;
  const std::string digest = stored_digest(data);
  if (digest.empty() && read.digests_required) {
    read.damaged = fmt::format("/state/{} has no sha256 attribute", name);
    return 1;  // stops the iteration
  }
  if (!digest.empty() && digest != values_digest(values)) {
    read.damaged = fmt::format("/state/{} does not match its sha256 (stored {}, computed {})", name,
                               shown_digest(digest), values_digest(values).substr(0, 12));
    return 1;
  }
  read.arrays.emplace_back(name, std::move(values));
  return 0;
}

const RunAttribute& find_attribute(const CheckpointContents& c, const std::string& name,
                                   const std::string& path) {
  for (const RunAttribute& a : c.attributes)
    if (a.name == name) return a;
  throw InputError(
      fmt::format("{}: not a complete minimllm checkpoint (no /checkpoint attribute '{}')", path, name));
}

template <typename T>
const T& typed(const CheckpointContents& c, const std::string& name, const std::string& path) {
  const T* value = std::get_if<T>(&find_attribute(c, name, path).value);
  if (!value) throw InputError(fmt::format("{}: /checkpoint attribute '{}' has the wrong type", path, name));
  return *value;
}

}  // namespace

const std::string& CheckpointContents::text(const std::string& name, const std::string& path) const {
  return typed<std::string>(*this, name, path);
}
long long CheckpointContents::integer(const std::string& name, const std::string& path) const {
  return typed<long long>(*this, name, path);
}
double CheckpointContents::real(const std::string& name, const std::string& path) const {
  return typed<double>(*this, name, path);
}
const std::vector<float>& CheckpointContents::array(const std::string& name, const std::string& path) const {
  for (const auto& [n, values] : arrays)
    if (n == name) return values;
  throw InputError(fmt::format("{}: not a complete minimllm checkpoint (no /state/{})", path, name));
}

void write_checkpoint_file(const std::string& path, const CheckpointContents& contents) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failures surface only as our exceptions
  const std::vector<char> image = checkpoint_image(path, contents);
  write_file_atomically(path, image.data(), image.size(), "checkpoint", "--checkpoint", true);
}

CheckpointContents read_checkpoint_file(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(fmt::format("{}: no such checkpoint file (written by run --checkpoint-every)", path));
  if (!std::filesystem::is_regular_file(path, ec))  // a FIFO or device would block or read without end
    throw InputError(
        fmt::format("{}: not a regular file (a checkpoint is one, written by run "
                    "--checkpoint-every)",
                    path));
  Scoped file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw InputError(fmt::format("{}: not an HDF5 file (not a minimllm checkpoint)", path));
  std::vector<RunAttribute> root;
  H5Aiterate2(file.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, hdf5::collect_attribute, &root);
  CheckpointContents format{root, {}};
  const bool is_checkpoint = [&] {
    for (const RunAttribute& a : root)
      if (a.name == "format") {
        const std::string* text = std::get_if<std::string>(&a.value);
        return text && *text == kFormat;
      }
    return false;
  }();
  if (!is_checkpoint)
    throw InputError(fmt::format("{}: not a minimllm checkpoint (no format attribute '{}')", path, kFormat));
  const long long version = format.integer("format_version", path);
  if (version != 1 && version != kFormatVersion)
    throw InputError(fmt::format("{}: checkpoint format version {}; this minimllm reads version {}", path,
                                 version, kFormatVersion));
  CheckpointContents contents;
  ArraysRead arrays{contents.arrays, version >= 2, ""};
  Scoped group(H5Gopen2(file.get(), "checkpoint", H5P_DEFAULT), H5Gclose);
  Scoped state(H5Gopen2(file.get(), "state", H5P_DEFAULT), H5Gclose);
  if (group.get() < 0 || state.get() < 0 ||
      H5Aiterate2(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, hdf5::collect_attribute,
                  &contents.attributes) < 0 ||
      H5Literate(state.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, read_array, &arrays) < 0)
    throw InputError(
        fmt::format("{}: cannot read the checkpoint (damaged, or not written by minimllm)", path));
  if (!arrays.damaged.empty())
    throw InputError(
        fmt::format("{}: damaged checkpoint: {}; restart from an intact one", path, arrays.damaged));
  if (version >= 2) {
    const std::string stored = contents.text(kAttributesDigest, path);
    const std::string computed = sha256_hex(attributes_text(contents.attributes));
    if (stored != computed)
      throw InputError(fmt::format(
          "{}: damaged checkpoint: the /checkpoint attributes do not match their sha256 (stored {}, computed "
          "{}); restart from an intact one",
          path, shown_digest(stored), computed.substr(0, 12)));
  }
  return contents;
}

}  // namespace minimllm
