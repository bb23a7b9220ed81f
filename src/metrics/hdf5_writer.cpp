// Hdf5RunWriter: one HDF5 file per run with /run attributes and an extendible /steps table.
// Schema and reading recipes: docs/HDF5.md. Every append is followed by H5Fflush so a killed
// process leaves a readable file holding every appended row.
#include "minimllm/metrics/hdf5_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

#include "hdf5_helpers.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/metrics/file_lock.hpp"
#include "minimllm/metrics/output_file.hpp"

namespace minimllm {
using hdf5::check;
using hdf5::full_disk_note;
using hdf5::Scoped;
using hdf5::write_attribute;
using hdf5::write_run_attribute;
using hdf5::write_string_attribute;

namespace {

constexpr hsize_t kRowsPerChunk = 64;
// Per-rank tables hold at most this many bytes per chunk (fewer rows when there are many ranks): every
// flush rewrites the chunk holding the new row, so a chunk of 64 rows x 1,024 ranks would cost 512 KiB
// per table per step.
constexpr hsize_t kTableChunkBytes = 64 * 1024;
// 3: /plans/policy, planner_source and solver_status are HDF5 enums (2: int32 codes named only by their
// attribute `names`, which 3 keeps). 2: /predicted and /simulation/<policy> are record tables with named
// fields (1: 2-D arrays whose column names were /run attributes).
constexpr long long kSchemaVersion = 3;
// Free space a step's output always leaves on the output's file system (check_free_space), so that a
// filling disk stops the run with a readable file instead of a failed write in the middle of a flush.
constexpr double kFreeSpaceReserve = 1 << 20;

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
      MINIMLLM_FIELD(intra_node_bytes, "byte"),
      MINIMLLM_FIELD(inter_node_bytes, "byte"),
      MINIMLLM_FIELD(movement_bytes, "byte"),
      MINIMLLM_FIELD(movement_seconds, "s"),
      MINIMLLM_FIELD(pipeline_bubble, "1"),
      MINIMLLM_FIELD(ideal_bubble, "1"),
      MINIMLLM_FIELD(llm_groups, "1"),
      MINIMLLM_FIELD(max_group_size, "rank"),
      MINIMLLM_FIELD(comm_hits, "1"),
      MINIMLLM_FIELD(comm_creations, "1"),
      MINIMLLM_FIELD(comm_evictions, "1"),
      MINIMLLM_FIELD(comm_creation_seconds, "s"),
      MINIMLLM_FIELD(planning_work_seconds, "s"),
      MINIMLLM_FIELD(output_seconds, "s"),
  };
  const std::vector<Field> phases = phase_fields();
  const auto first_phase =
      std::find_if(fields.begin(), fields.end(), [](const Field& f) { return f.name == "step_seconds"; }) + 1;
  fields.insert(first_phase, phases.begin(), phases.end());
  return fields;
}
#undef MINIMLLM_FIELD

// After a failed write (a full disk, an I/O error) HDF5 1.10 cannot close the file: H5Fclose fails half
// way and the file's id is left half destroyed, and HDF5's own clean-up at MPI_Finalize, exit or
// MPI_Abort then crashes on it (H5F__close_cb). So the writes HDF5 still has to make are sent elsewhere:
// the file's descriptor is replaced by an anonymous in-memory file holding a copy of the file (up to
// 64 MiB; beyond, an empty one), and the close succeeds. What is on disk stays as the last successful
// flush left it.
void redirect_writes(hid_t file) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) return;
  const int fd = *static_cast<int*>(handle);
#ifdef __linux__
  const int scratch = ::memfd_create("minimllm-abandoned-writes", MFD_CLOEXEC);
#else
  FILE* tmp = std::tmpfile();
  const int scratch = tmp ? ::dup(::fileno(tmp)) : -1;
  if (tmp) std::fclose(tmp);
#endif
  if (scratch < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size <= (64 << 20)) {
    std::vector<char> buffer(1 << 16);
    for (off_t at = 0; at < st.st_size;) {
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at);
      if (n <= 0 || ::pwrite(scratch, buffer.data(), static_cast<size_t>(n), at) != n) break;
      at += n;
    }
  }
  ::dup2(scratch, fd);  // fd now names the scratch file; HDF5 keeps using fd
  ::close(scratch);
}

// Closes file and the ids opened in it (closes: in order, the objects, e.g. H5Dclose); a file whose flush
// fails has its remaining writes redirected first (redirect_writes), so the close cannot fail half way.
void close_file(hid_t file, const std::vector<std::pair<hid_t, herr_t (*)(hid_t)>>& objects) {
  if (file >= 0 && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) {
    redirect_writes(file);
    // HDF5 1.10 leaves a failed flush's error state behind: flush again (the first may fail, on the
    // failed entries) so the close starts from a clean cache.
    for (int attempt = 0; attempt < 3 && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0; ++attempt) {
    }
  }
  for (const auto& [id, close] : objects)
    if (id >= 0) close(id);
  if (file >= 0) H5Fclose(file);
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
  double last_size = 0, largest_growth = 0;  // bytes of the file at the last step, its largest growth
  struct Table {
    hid_t dataset = H5I_INVALID_HID;
    hid_t mem_type = H5I_INVALID_HID;  // a record table's compound type, an enum table's enum type
    int rank = 2;                      // 1: one value (or record) per row
    hsize_t rows = 0, columns = 0;
    std::vector<std::string> fields;  // a record table's field names, an enum table's members
  };
  std::map<std::string, Table> tables;  // per-rank tables (/ranks/..., /plans/...), by path

  ~Handles() {
    std::vector<std::pair<hid_t, herr_t (*)(hid_t)>> objects;
    for (auto& [path, table] : tables) {
      objects.emplace_back(table.dataset, H5Dclose);
      objects.emplace_back(table.mem_type, H5Tclose);
    }
    objects.emplace_back(steps_xfer, H5Pclose);
    objects.emplace_back(mem_type, H5Tclose);
    objects.emplace_back(steps, H5Dclose);
    objects.emplace_back(run, H5Gclose);
    close_file(file, objects);
  }
};

namespace {

// Names the file made as `part` `path`: with overwrite a rename, which replaces path; else a link, which
// fails (EEXIST) when path exists, so of two runs that both did not see the file only one gets it; on a
// file system without hard links, path is claimed with O_EXCL and renamed over. Returns 0 or an errno.
int give_name(const std::string& part, const std::string& path, bool overwrite) {
  if (overwrite) {
    check_replaceable(path, "--out");  // a link, device or FIFO planted since the first check is refused
    return ::rename(part.c_str(), path.c_str()) == 0 ? 0 : errno;
  }
  if (::link(part.c_str(), path.c_str()) == 0) {
    ::unlink(part.c_str());
    return 0;
  }
  if (errno == EEXIST) return EEXIST;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  if (::rename(part.c_str(), path.c_str()) == 0) return 0;
  const int error = errno;
  ::unlink(path.c_str());
  return error;
}

// `<path>.<pid>.XXXXXX.part`, XXXXXX random letters and digits: a name no other user can guess.
std::string part_name(const std::string& path) {
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device device;
  std::string suffix(6, 'x');
  for (char& c : suffix) c = kChars[device() % (sizeof(kChars) - 1)];
  return fmt::format("{}.{}.{}.part", path, ::getpid(), suffix);
}

}  // namespace

Hdf5RunWriter::Hdf5RunWriter(const std::string& path, bool overwrite)
    : path_(path), h_(std::make_unique<Handles>()), uncaught_at_creation_(std::uncaught_exceptions()) {
  const auto exists_message = [&] {
    return fmt::format("{}: output file exists; pass --overwrite to replace it or choose another --out",
                       path);
  };
  // Only a regular file is ever replaced (a link is not followed): InputError naming anything else.
  if (check_replaceable(path, "--out") && !overwrite) throw InputError(exists_message());
  // Before the file is touched: a running writer of path holds this lock, and --overwrite respects it.
  lock_ = std::make_unique<FileLock>(path, "HDF5 output file");
  if (lock_->held()) remove_stale_temporaries(path, ".", ".part");  // a killed writer's .part files
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);                      // failures surface only as our exceptions

  // The file is made as `<path>.<pid>.XXXXXX.part` beside path and given its name only once its layout is
  // flushed and fsynced: a run killed while creating it (kill -9, a node crash) leaves no unreadable file at
  // path (at most the .part file), and --overwrite replaces the old file only then. The name cannot be
  // guessed, and HDF5 creates it exclusively (O_CREAT | O_EXCL, which never follows a link): a name planted
  // there is never written through; another random name is tried.
  std::string part;
  const auto abandon = [&] {  // the .part file and the lock go; path is untouched
    h_.reset();
    ::unlink(part.c_str());
    lock_.reset();
  };
  // Default (serial) access: only rank 0 writes.
  for (int attempt = 0; attempt < 8 && h_->file < 0; ++attempt) {
    part = part_name(path);
    h_->file = H5Fcreate(part.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    struct stat st {};
    if (h_->file < 0 && ::lstat(part.c_str(), &st) != 0) break;  // not a name taken: a real failure
  }
  if (h_->file < 0) {
    const std::string reason = create_failure_reason(path, "HDF5 could not create it");
    part.clear();  // not ours: nothing to remove
    abandon();
    throw std::runtime_error(fmt::format("{}: cannot create HDF5 output file: {}", path, reason));
  }
  try {
    create_layout();
    sync();
  } catch (...) {
    abandon();  // e.g. a full disk: no half-made file is left behind
    throw;
  }
  const int error = give_name(part, path, overwrite);
  if (error != 0) {
    abandon();
    if (error == EEXIST) throw InputError(exists_message());
    throw std::runtime_error(
        fmt::format("{}: cannot create HDF5 output file: {}", path, std::strerror(error)));
  }
}

void Hdf5RunWriter::create_layout() {
  const std::string& path = path_;
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

namespace {

// H5Fflush, then fsync of the file's own descriptor, so what was flushed survives a crash of the node.
void flush_and_sync(hid_t file, const std::string& path) {
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), path, "flush");
  void* handle = nullptr;
  check(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), path, "fsync");
  if (handle != nullptr && ::fsync(*static_cast<int*>(handle)) != 0 && errno != EINVAL)  // EINVAL: no sync
    throw std::runtime_error(fmt::format("{}: fsync failed: {}", path, std::strerror(errno)));
}

}  // namespace

Hdf5RunWriter::~Hdf5RunWriter() {
  // Unwinding from an exception (e.g. a failed write): a file without a step row holds nothing a reader
  // needs (and may be half written): it is removed. Else every id is closed quietly, then the lock file
  // is removed.
  if (h_ && h_->rows == 0 && std::uncaught_exceptions() > uncaught_at_creation_) {
    discard();
    return;
  }
  h_.reset();
  lock_.reset();
}

void Hdf5RunWriter::check_free_space() {
  struct stat st {};
  void* handle = nullptr;
  if (H5Fget_vfd_handle(h_->file, H5P_DEFAULT, &handle) < 0 || handle == nullptr ||
      ::fstat(*static_cast<int*>(handle), &st) != 0)
    return;
  const double size = static_cast<double>(st.st_size);
  if (h_->rows > 0) h_->largest_growth = std::max(h_->largest_growth, size - h_->last_size);
  h_->last_size = size;
  struct statvfs fs_stat {};
  if (::fstatvfs(*static_cast<int*>(handle), &fs_stat) != 0) return;
  const double free_bytes = static_cast<double>(fs_stat.f_bavail) * static_cast<double>(fs_stat.f_frsize);
  const double reserve = kFreeSpaceReserve + 4.0 * h_->largest_growth;
  if (free_bytes < reserve)
    throw std::runtime_error(fmt::format(
        "{}: stopped before writing step row {}: {:.0f} KiB free on its file system, less than the {:.0f} "
        "KiB a step row may need ({})",
        path_, h_->rows, free_bytes / 1024, reserve / 1024,
        h_->rows == 0 ? std::string("no file is left")
                      : fmt::format("the file keeps the {} rows written", h_->rows)));
}

void Hdf5RunWriter::discard() noexcept {
  if (!h_ && !lock_) return;
  h_.reset();
  if (lock_) ::unlink(path_.c_str());  // still ours: the lock is held until released below
  lock_.reset();
}

void Hdf5RunWriter::sync() { flush_and_sync(h_->file, path_); }

void Hdf5RunWriter::close() {
  if (!h_) return;
  flush_and_sync(h_->file, path_);
  const hid_t file = h_->file;
  h_->file = H5I_INVALID_HID;
  h_.reset();  // every other id
  const herr_t closed = H5Fclose(file);
  lock_.reset();
  if (closed < 0) throw std::runtime_error(fmt::format("{}: HDF5 failed to close the file", path_));
}

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
  flush_and_sync(h_->file, path_);
}

void Hdf5RunWriter::update_run_attributes(const std::string& path,
                                          const std::vector<RunAttribute>& attributes) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  check_replaceable(path, "--out");               // a link planted since the run is not followed
  const FileLock lock(path, "HDF5 output file");  // no other minimllm may be writing it
  Scoped file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), [](hid_t id) -> herr_t {
    close_file(id, {});
    return 0;
  });
  if (file.get() < 0)
    throw std::runtime_error(fmt::format("{}: cannot open the run file to update it", path));
  Scoped run(H5Gopen2(file.get(), "run", H5P_DEFAULT), H5Gclose);
  if (run.get() < 0)
    throw std::runtime_error(fmt::format("{}: not a minimllm run file (no /run group)", path));
  for (const RunAttribute& a : attributes) write_run_attribute(run.get(), a, path);
  flush_and_sync(file.get(), path);
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

// Extends `table` by one row and writes `row` (one row of mem_type) into it.
void write_row(Hdf5RunWriter::Handles::Table& table, hid_t mem_type, const void* row, const std::string& name,
               const std::string& path) {
  const std::string what = "append to " + name;
  const hsize_t new_dims[2] = {table.rows + 1, table.columns};
  check(H5Dset_extent(table.dataset, new_dims), path, what.c_str());
  Scoped file_space(check(H5Dget_space(table.dataset), path, what.c_str()), H5Sclose);
  const hsize_t start[2] = {table.rows, 0};
  const hsize_t count[2] = {1, table.columns};
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path,
        what.c_str());
  Scoped mem_space(check(H5Screate_simple(table.rank, count, nullptr), path, what.c_str()), H5Sclose);
  check(H5Dwrite(table.dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, row), path,
        what.c_str());
  table.rows += 1;
}

}  // namespace

template <typename T>
void Hdf5RunWriter::append_row_impl(const std::string& name, const std::vector<T>& values, int rank) {
  const bool is_double = std::is_same_v<T, double>;
  Handles::Table& table = open_table(h_->file, h_->tables, name, rank, values.size(),
                                     is_double ? H5T_IEEE_F64LE : H5T_STD_I32LE, path_);
  if (!table.fields.empty())
    throw std::invalid_argument(
        fmt::format("{}: {} holds named fields or enum members, not plain values", path_, name));
  write_row(table, is_double ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT32, values.data(), name, path_);
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
void Hdf5RunWriter::append_value(const std::string& name, double value) {
  append_row_impl(name, std::vector<double>{value}, 1);
}

void Hdf5RunWriter::append_record(const std::string& name, const std::vector<Column>& columns,
                                  const std::vector<double>& values) {
  if (columns.size() != values.size() || columns.empty())
    throw std::invalid_argument(
        fmt::format("{}: {} has {} columns but {} values", path_, name, columns.size(), values.size()));
  std::vector<std::string> fields;
  for (const Column& c : columns) fields.push_back(c.name);
  const std::string what = "append to " + name;
  auto found = h_->tables.find(name);
  if (found == h_->tables.end()) {
    // Every field a float64, packed in column order: the file type is the memory type.
    Scoped type(check(H5Tcreate(H5T_COMPOUND, columns.size() * sizeof(double)), path_, what.c_str()),
                H5Tclose);
    std::string units;
    for (size_t i = 0; i < columns.size(); ++i) {
      check(H5Tinsert(type.get(), columns[i].name.c_str(), i * sizeof(double), H5T_NATIVE_DOUBLE), path_,
            what.c_str());
      units += fmt::format("{}{}: {}", units.empty() ? "" : ", ", columns[i].name, columns[i].unit);
    }
    Handles::Table& table = open_table(h_->file, h_->tables, name, 1, 1, type.get(), path_);
    table.mem_type = check(H5Tcopy(type.get()), path_, what.c_str());
    table.fields = fields;
    write_string_attribute(table.dataset, "units", units, path_);
    found = h_->tables.find(name);
  }
  Handles::Table& table = found->second;
  if (table.fields != fields)
    throw std::invalid_argument(fmt::format("{}: {} has fields {}, not {}", path_, name,
                                            fmt::join(table.fields, ", "), fmt::join(fields, ", ")));
  write_row(table, table.mem_type, values.data(), name, path_);
}

void Hdf5RunWriter::append_enum(const std::string& name, const std::vector<std::string>& members,
                                const std::string& value) {
  const auto member = std::find(members.begin(), members.end(), value);
  if (member == members.end())
    throw std::logic_error(fmt::format("{}: {} has no member \"{}\" (its members: {})", path_, name, value,
                                       fmt::join(members, ", ")));
  const std::int32_t code = static_cast<std::int32_t>(member - members.begin());
  const std::string what = "append to " + name;
  auto found = h_->tables.find(name);
  if (found == h_->tables.end()) {
    // The same type in memory and in the file: int32 codes, member i named members[i].
    Scoped type(check(H5Tenum_create(H5T_NATIVE_INT32), path_, what.c_str()), H5Tclose);
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(members.size()); ++i)
      check(H5Tenum_insert(type.get(), members[i].c_str(), &i), path_, what.c_str());
    Handles::Table& table = open_table(h_->file, h_->tables, name, 1, 1, type.get(), path_);
    table.mem_type = check(H5Tcopy(type.get()), path_, what.c_str());
    table.fields = members;
    write_string_attribute(table.dataset, "names", fmt::format("{}", fmt::join(members, ", ")), path_);
    found = h_->tables.find(name);
  }
  Handles::Table& table = found->second;
  if (table.fields != members)
    throw std::invalid_argument(fmt::format("{}: {} has members {}, not {}", path_, name,
                                            fmt::join(table.fields, ", "), fmt::join(members, ", ")));
  write_row(table, table.mem_type, &code, name, path_);
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
