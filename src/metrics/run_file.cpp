#include "minimllm/metrics/run_file.hpp"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "hdf5_helpers.hpp"
#include "minimllm/config/input_error.hpp"
#include "minimllm/metrics/file_lock.hpp"

namespace minimllm {
namespace {

using hdf5::Scoped;

// A /steps field a verdict needs: its name and where it goes in a StepRecord.
struct StepField {
  const char* name;
  std::size_t offset;
  hid_t type;
};

#define MINIMLLM_STEP_FIELD(member, type) \
  StepField { #member, offsetof(StepRecord, member), type }

std::vector<StepField> step_fields() {
  return {
      MINIMLLM_STEP_FIELD(step, H5T_NATIVE_INT32),
      MINIMLLM_STEP_FIELD(loss, H5T_NATIVE_DOUBLE),
      MINIMLLM_STEP_FIELD(grad_norm, H5T_NATIVE_DOUBLE),
      MINIMLLM_STEP_FIELD(text_tokens, H5T_NATIVE_INT64),
      MINIMLLM_STEP_FIELD(image_tokens, H5T_NATIVE_INT64),
      MINIMLLM_STEP_FIELD(loss_targets, H5T_NATIVE_INT64),
      MINIMLLM_STEP_FIELD(samples, H5T_NATIVE_INT32),
      MINIMLLM_STEP_FIELD(step_seconds, H5T_NATIVE_DOUBLE),
      MINIMLLM_STEP_FIELD(model_flops, H5T_NATIVE_DOUBLE),
      MINIMLLM_STEP_FIELD(mfu, H5T_NATIVE_DOUBLE),
  };
}
#undef MINIMLLM_STEP_FIELD

std::vector<StepRecord> read_steps(hid_t file, const std::string& path) {
  if (H5Lexists(file, "steps", H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("{}: not a minimllm run file (no /steps table)", path));
  Scoped data(H5Dopen2(file, "steps", H5P_DEFAULT), H5Dclose);
  Scoped file_type(data.get() < 0 ? -1 : H5Dget_type(data.get()), H5Tclose);
  if (file_type.get() < 0 || H5Tget_class(file_type.get()) != H5T_COMPOUND)
    throw InputError(fmt::format("{}: /steps is not a table of records (not a minimllm run file)", path));
  Scoped mem_type(H5Tcreate(H5T_COMPOUND, sizeof(StepRecord)), H5Tclose);
  for (const StepField& f : step_fields()) {
    if (H5Tget_member_index(file_type.get(), f.name) < 0)
      throw InputError(fmt::format("{}: /steps has no field {} (not a minimllm run file)", path, f.name));
    H5Tinsert(mem_type.get(), f.name, f.offset, f.type);
  }
  Scoped space(H5Dget_space(data.get()), H5Sclose);
  if (space.get() < 0 || H5Sget_simple_extent_ndims(space.get()) != 1)
    throw InputError(fmt::format("{}: /steps is not a 1-D table (not a minimllm run file)", path));
  hsize_t rows = 0;
  H5Sget_simple_extent_dims(space.get(), &rows, nullptr);
  std::vector<StepRecord> steps(rows);
  if (rows > 0 && H5Dread(data.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, steps.data()) < 0)
    throw InputError(fmt::format("{}: cannot read /steps", path));
  return steps;
}

}  // namespace

const RunAttribute* RunFile::find(const std::string& name) const {
  const auto found = std::lower_bound(attributes.begin(), attributes.end(), name,
                                      [](const RunAttribute& a, const std::string& n) { return a.name < n; });
  return found != attributes.end() && found->name == name ? &*found : nullptr;
}

namespace {

template <typename T>
const T& value_of(const RunFile& file, const std::string& name, const char* what) {
  const RunAttribute* a = file.find(name);
  if (!a) throw InputError(fmt::format("{}: /run/{} is missing", file.path, name));
  const T* value = std::get_if<T>(&a->value);
  if (!value) throw InputError(fmt::format("{}: /run/{} is not {}", file.path, name, what));
  return *value;
}

}  // namespace

const std::string& RunFile::text(const std::string& name) const {
  return value_of<std::string>(*this, name, "a string");
}

long long RunFile::integer(const std::string& name) const {
  return value_of<long long>(*this, name, "an integer");
}

double RunFile::real(const std::string& name) const {
  const RunAttribute* a = find(name);
  if (a)
    if (const long long* i = std::get_if<long long>(&a->value)) return static_cast<double>(*i);
  return value_of<double>(*this, name, "a number");
}

RunFile read_run_file(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failures surface only as our exceptions
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(fmt::format("{}: no such run file", path));
  if (!std::filesystem::is_regular_file(path, ec))  // a FIFO or device would block or read without end
    throw InputError(
        fmt::format("{}: not a regular file (a run file is one, written by minimllm run)", path));
  FileLock::check_not_busy(path);  // a run still writing it: its verdict is not there yet
  Scoped file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw InputError(fmt::format("{}: not an HDF5 file (not a minimllm run file)", path));
  RunFile run;
  run.path = path;
  std::vector<RunAttribute> root;
  if (H5Aiterate2(file.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, hdf5::collect_attribute, &root) < 0)
    throw InputError(fmt::format("{}: an attribute of / of a type minimllm does not write", path));
  for (const RunAttribute& a : root)
    if (const long long* version = std::get_if<long long>(&a.value); version && a.name == "schema_version")
      run.schema_version = *version;
  if (H5Lexists(file.get(), "run", H5P_DEFAULT) <= 0)
    throw InputError(fmt::format("{}: not a minimllm run file (no /run group)", path));
  Scoped group(H5Gopen2(file.get(), "run", H5P_DEFAULT), H5Gclose);
  if (group.get() < 0 || H5Aiterate2(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
                                     hdf5::collect_attribute, &run.attributes) < 0)
    throw InputError(
        fmt::format("{}: cannot read the /run attributes (one of a type minimllm does not write)", path));
  std::sort(run.attributes.begin(), run.attributes.end(),
            [](const RunAttribute& a, const RunAttribute& b) { return a.name < b.name; });
  run.steps = read_steps(file.get(), path);
  return run;
}

}  // namespace minimllm
