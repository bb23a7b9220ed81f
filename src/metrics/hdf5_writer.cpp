// Hdf5RunWriter: one HDF5 file per run with /run attributes and an extendible /steps table.
// Schema and reading recipes: docs/HDF5.md. Every append is followed by H5Fflush so a killed
// process leaves a readable file holding every appended row.
#include "minimllm/metrics/hdf5_writer.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

#include "minimllm/config/run_config.hpp"

namespace minimllm {
namespace {

constexpr hsize_t kRowsPerChunk = 64;
// Per-rank tables hold at most this many bytes per chunk (fewer rows when there are many ranks): every
// flush rewrites the chunk holding the new row, so a chunk of 64 rows x 1,024 ranks would cost 512 KiB
// per table per step.
constexpr hsize_t kTableChunkBytes = 64 * 1024;
constexpr long long kSchemaVersion = 1;

// The native HDF5 type of a StepRecord member, picked from its C++ type.
template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, std::int32_t>) {
    return H5T_NATIVE_INT32;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return H5T_NATIVE_INT64;
  } else {
    static_assert(std::is_same_v<T, double>, "add an HDF5 type for this StepRecord member type");
    return H5T_NATIVE_DOUBLE;
  }
}

struct Field {
  std::string name;
  std::size_t offset;
  hid_t type;
  const char* unit;  // "1" = dimensionless
};

template <typename T>
Field field(const char* name, std::size_t offset, const char* unit) {
  return {name, offset, native_type<T>(), unit};
}
#define MINIMLLM_FIELD(member, unit) \
  field<decltype(StepRecord::member)>(#member, offsetof(StepRecord, member), unit)

// One column per phase, "<phase>_seconds", in Phase order (core/phase.hpp).
std::vector<Field> phase_fields() {
  std::vector<Field> fields;
  for (Phase phase : kPhases)
    fields.push_back({seconds_column(phase),
                      offsetof(StepRecord, phase_seconds) + offsetof(PhaseTimes, seconds) +
                          static_cast<std::size_t>(phase) * sizeof(double),
                      H5T_NATIVE_DOUBLE, "s"});
  return fields;
}

// The /steps columns, in file order. Adding a StepRecord field is one line here (and docs/HDF5.md).
std::vector<Field> step_fields() {
  std::vector<Field> fields = {
      MINIMLLM_FIELD(step, "1"),
      MINIMLLM_FIELD(loss, "nat"),
      MINIMLLM_FIELD(grad_norm, "nat"),
      MINIMLLM_FIELD(text_tokens, "token"),
      MINIMLLM_FIELD(image_tokens, "token"),
      MINIMLLM_FIELD(loss_targets, "token"),
      MINIMLLM_FIELD(samples, "sample"),
      MINIMLLM_FIELD(step_seconds, "s"),
      MINIMLLM_FIELD(tokens_per_second, "token/s"),
      MINIMLLM_FIELD(model_flops, "FLOP"),
      MINIMLLM_FIELD(mfu, "1"),
      MINIMLLM_FIELD(predicted_seconds, "s"),
      MINIMLLM_FIELD(lower_bound_seconds, "s"),
      MINIMLLM_FIELD(boundary_bytes, "byte"),
      MINIMLLM_FIELD(llm_groups, "1"),
      MINIMLLM_FIELD(max_group_size, "rank"),
      MINIMLLM_FIELD(comm_hits, "1"),
      MINIMLLM_FIELD(comm_creations, "1"),
      MINIMLLM_FIELD(comm_evictions, "1"),
      MINIMLLM_FIELD(comm_creation_seconds, "s"),
      MINIMLLM_FIELD(output_seconds, "s"),
  };
  const std::vector<Field> phases = phase_fields();
  const auto first_phase =
      std::find_if(fields.begin(), fields.end(), [](const Field& f) { return f.name == "step_seconds"; }) + 1;
  fields.insert(first_phase, phases.begin(), phases.end());
  return fields;
}
#undef MINIMLLM_FIELD

// Why a file could not be created, judged from its directory (HDF5's own stack is silenced).
std::string create_failure_reason(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fmt::format("directory {} does not exist", dir.string());
  if (::access(dir.c_str(), W_OK) != 0) return fmt::format("directory {} is not writable", dir.string());
  return "HDF5 could not create it";
}

}  // namespace

// Every id the writer owns; closed in reverse order of creation, also when the constructor throws.
struct Hdf5RunWriter::Handles {
  hid_t file = H5I_INVALID_HID;
  hid_t run = H5I_INVALID_HID;
  hid_t steps = H5I_INVALID_HID;
  hid_t mem_type = H5I_INVALID_HID;    // compound laid out like StepRecord
  hid_t steps_xfer = H5I_INVALID_HID;  // transfer properties of a /steps row: a small conversion buffer
  hsize_t rows = 0;
  struct Table {
    hid_t dataset = H5I_INVALID_HID;
    int rank = 2;  // 1: one value per row
    hsize_t rows = 0, columns = 0;
  };
  std::map<std::string, Table> tables;  // per-rank tables (/ranks/..., /plans/...), by path

  ~Handles() {
    for (auto& [path, table] : tables) H5Dclose(table.dataset);
    if (steps_xfer >= 0) H5Pclose(steps_xfer);
    if (mem_type >= 0) H5Tclose(mem_type);
    if (steps >= 0) H5Dclose(steps);
    if (run >= 0) H5Gclose(run);
    if (file >= 0) H5Fclose(file);
  }
};

namespace {

// Throws std::runtime_error naming the file and the operation when an HDF5 call failed.
template <typename Id>
Id check(Id result, const std::string& path, const char* what) {
  if (result < 0) throw std::runtime_error(fmt::format("{}: HDF5 failed to {}", path, what));
  return result;
}

// Closes an HDF5 id with the matching function at the end of a scope.
class Scoped {
 public:
  Scoped(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Scoped() {
    if (id_ >= 0) close_(id_);
  }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Writes a scalar attribute on obj, replacing an existing one of that name.
void write_attribute(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                     const std::string& path) {
  const std::string what = fmt::format("write attribute '{}'", name);
  if (check(H5Aexists(obj, name.c_str()), path, what.c_str()) > 0) {
    check(H5Adelete(obj, name.c_str()), path, what.c_str());
  }
  Scoped space(check(H5Screate(H5S_SCALAR), path, what.c_str()), H5Sclose);
  Scoped attr(check(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), path,
                    what.c_str()),
              H5Aclose);
  check(H5Awrite(attr.get(), mem_type, value), path, what.c_str());
}

void write_string_attribute(hid_t obj, const std::string& name, const std::string& value,
                            const std::string& path) {
  // Variable-length UTF-8: h5py returns it as str.
  Scoped type(check(H5Tcopy(H5T_C_S1), path, "create a string type"), H5Tclose);
  check(H5Tset_size(type.get(), H5T_VARIABLE), path, "create a string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "create a string type");
  const char* data = value.c_str();
  write_attribute(obj, name, type.get(), type.get(), &data, path);
}

void write_run_attribute(hid_t run, const RunAttribute& a, const std::string& path) {
  if (const auto* text = std::get_if<std::string>(&a.value)) {
    write_string_attribute(run, a.name, *text, path);
  } else if (const auto* real = std::get_if<double>(&a.value)) {
    write_attribute(run, a.name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, real, path);
  } else {
    write_attribute(run, a.name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &std::get<long long>(a.value), path);
  }
}

}  // namespace

Hdf5RunWriter::Hdf5RunWriter(const std::string& path, bool overwrite)
    : path_(path), h_(std::make_unique<Handles>()) {
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(path, ec)) {
    throw InputError(
        fmt::format("{}: output file exists; pass --overwrite to replace it or choose another --out", path));
  }
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failures surface only as our exceptions

  // Default (serial) access: only rank 0 writes. EXCL closes the race with a file appearing now.
  h_->file = H5Fcreate(path.c_str(), overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (h_->file < 0) {
    throw std::runtime_error(
        fmt::format("{}: cannot create HDF5 output file: {}", path, create_failure_reason(path)));
  }
  write_attribute(h_->file, "schema_version", H5T_STD_I64LE, H5T_NATIVE_LLONG, &kSchemaVersion, path);
  h_->run = check(H5Gcreate2(h_->file, "run", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path, "create /run");

  // Memory type mirrors StepRecord; the file type is the same members packed without padding.
  const std::vector<Field> fields = step_fields();
  h_->mem_type = check(H5Tcreate(H5T_COMPOUND, sizeof(StepRecord)), path, "create the step type");
  std::string units;
  for (const Field& f : fields) {
    check(H5Tinsert(h_->mem_type, f.name.c_str(), f.offset, f.type), path, "create the step type");
    units += fmt::format("{}{}: {}", units.empty() ? "" : ", ", f.name, f.unit);
  }
  // Writing a row converts StepRecord to the packed file type through a buffer; HDF5's default is 1 MiB,
  // allocated and cleared on every write (page faults: ~1 ms per row), so give it one chunk of rows.
  h_->steps_xfer = check(H5Pcreate(H5P_DATASET_XFER), path, "create the step transfer properties");
  check(H5Pset_buffer(h_->steps_xfer, kRowsPerChunk * sizeof(StepRecord), nullptr, nullptr), path,
        "create the step transfer properties");
  Scoped file_type(check(H5Tcopy(h_->mem_type), path, "create the step type"), H5Tclose);
  check(H5Tpack(file_type.get()), path, "create the step type");

  const hsize_t dims[1] = {0};
  const hsize_t max_dims[1] = {H5S_UNLIMITED};
  const hsize_t chunk[1] = {kRowsPerChunk};
  Scoped space(check(H5Screate_simple(1, dims, max_dims), path, "create /steps"), H5Sclose);
  Scoped dcpl(check(H5Pcreate(H5P_DATASET_CREATE), path, "create /steps"), H5Pclose);
  check(H5Pset_chunk(dcpl.get(), 1, chunk), path, "create /steps");
  h_->steps =
      check(H5Dcreate2(h_->file, "steps", file_type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
            path, "create /steps");
  write_string_attribute(h_->steps, "units", units, path);
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path, "flush");
}

Hdf5RunWriter::~Hdf5RunWriter() = default;  // Handles closes every id

void Hdf5RunWriter::set_run_attribute(const std::string& name, const std::string& value) {
  write_string_attribute(h_->run, name, value, path_);
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush");
}

void Hdf5RunWriter::set_run_attribute(const std::string& name, double value) {
  write_attribute(h_->run, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, path_);
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush");
}

void Hdf5RunWriter::set_run_attribute(const std::string& name, long long value) {
  write_attribute(h_->run, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &value, path_);
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush");
}

void Hdf5RunWriter::set_run_attributes(const std::vector<RunAttribute>& attributes) {
  for (const RunAttribute& a : attributes) write_run_attribute(h_->run, a, path_);
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush");
}

void Hdf5RunWriter::update_run_attributes(const std::string& path,
                                          const std::vector<RunAttribute>& attributes) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Scoped file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0)
    throw std::runtime_error(fmt::format("{}: cannot open the run file to update it", path));
  Scoped run(H5Gopen2(file.get(), "run", H5P_DEFAULT), H5Gclose);
  if (run.get() < 0)
    throw std::runtime_error(fmt::format("{}: not a minimllm run file (no /run group)", path));
  for (const RunAttribute& a : attributes) write_run_attribute(run.get(), a, path);
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), path, "flush");
}

void Hdf5RunWriter::append_step(const StepRecord& record) {
  const hsize_t new_rows[1] = {h_->rows + 1};
  check(H5Dset_extent(h_->steps, new_rows), path_, "extend /steps");
  Scoped file_space(check(H5Dget_space(h_->steps), path_, "append to /steps"), H5Sclose);
  const hsize_t start[1] = {h_->rows};
  const hsize_t count[1] = {1};
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path_,
        "append to /steps");
  Scoped mem_space(check(H5Screate_simple(1, count, nullptr), path_, "append to /steps"), H5Sclose);
  check(H5Dwrite(h_->steps, h_->mem_type, mem_space.get(), file_space.get(), h_->steps_xfer, &record), path_,
        "append to /steps");
  h_->rows += 1;
  check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush");
}

namespace {

// The table `name`, created on first use as an extendible dataset of `file_type`: [0, columns] for
// rank 2, [0] for rank 1 (columns = 1); intermediate groups are created too.
Hdf5RunWriter::Handles::Table& open_table(hid_t file,
                                          std::map<std::string, Hdf5RunWriter::Handles::Table>& tables,
                                          const std::string& name, int rank, hsize_t columns, hid_t file_type,
                                          const std::string& path) {
  auto found = tables.find(name);
  if (found != tables.end()) {
    if (found->second.columns != columns || found->second.rank != rank)
      throw std::invalid_argument(fmt::format("{}: {} has {} columns (rank {}), not {} (rank {})", path, name,
                                              found->second.columns, found->second.rank, columns, rank));
    return found->second;
  }
  const std::string what = "create " + name;
  const hsize_t dims[2] = {0, columns};
  const hsize_t max_dims[2] = {H5S_UNLIMITED, columns};
  const hsize_t width = columns > 0 ? columns : 1;
  const hsize_t chunk[2] = {
      std::clamp<hsize_t>(kTableChunkBytes / (width * H5Tget_size(file_type)), 1, kRowsPerChunk), width};
  Scoped space(check(H5Screate_simple(rank, dims, max_dims), path, what.c_str()), H5Sclose);
  Scoped dcpl(check(H5Pcreate(H5P_DATASET_CREATE), path, what.c_str()), H5Pclose);
  check(H5Pset_chunk(dcpl.get(), rank, chunk), path, what.c_str());
  Scoped lcpl(check(H5Pcreate(H5P_LINK_CREATE), path, what.c_str()), H5Pclose);
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), path, what.c_str());
  Hdf5RunWriter::Handles::Table table;
  table.rank = rank;
  table.columns = columns;
  table.dataset =
      check(H5Dcreate2(file, name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), path,
            what.c_str());
  return tables.emplace(name, table).first->second;
}

}  // namespace

template <typename T>
void Hdf5RunWriter::append_row_impl(const std::string& name, const std::vector<T>& values, int rank) {
  const bool is_double = std::is_same_v<T, double>;
  Handles::Table& table = open_table(h_->file, h_->tables, name, rank, values.size(),
                                     is_double ? H5T_IEEE_F64LE : H5T_STD_I32LE, path_);
  const std::string what = "append to " + name;
  const hsize_t new_dims[2] = {table.rows + 1, table.columns};
  check(H5Dset_extent(table.dataset, new_dims), path_, what.c_str());
  Scoped file_space(check(H5Dget_space(table.dataset), path_, what.c_str()), H5Sclose);
  const hsize_t start[2] = {table.rows, 0};
  const hsize_t count[2] = {1, table.columns};
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path_,
        what.c_str());
  Scoped mem_space(check(H5Screate_simple(rank, count, nullptr), path_, what.c_str()), H5Sclose);
  check(H5Dwrite(table.dataset, is_double ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT32, mem_space.get(),
                 file_space.get(), H5P_DEFAULT, values.data()),
        path_, what.c_str());
  table.rows += 1;
}

void Hdf5RunWriter::append_row(const std::string& name, const std::vector<double>& values) {
  append_row_impl(name, values, 2);
}
void Hdf5RunWriter::append_row(const std::string& name, const std::vector<int>& values) {
  append_row_impl(name, values, 2);
}
void Hdf5RunWriter::append_value(const std::string& name, int value) {
  append_row_impl(name, std::vector<int>{value}, 1);
}

void Hdf5RunWriter::set_table_attribute(const std::string& table, const std::string& name,
                                        const std::string& value) {
  const auto found = h_->tables.find(table);
  if (found == h_->tables.end())
    throw std::invalid_argument(fmt::format("{}: no table {} to set attribute {} on", path_, table, name));
  write_string_attribute(found->second.dataset, name, value, path_);
}

void Hdf5RunWriter::flush() { check(H5Fflush(h_->file, H5F_SCOPE_GLOBAL), path_, "flush"); }

}  // namespace minimllm
