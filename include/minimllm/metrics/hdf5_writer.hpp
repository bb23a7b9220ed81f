// Writes a run to HDF5: /run attributes (provenance) and an extendible /steps table, flushed every
// step so a killed job leaves every completed step readable. Only rank 0 holds a writer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "minimllm/metrics/file_lock.hpp"
#include "minimllm/metrics/step_record.hpp"

namespace minimllm {

// One float64 field of a record table: its name and unit ("1" = dimensionless; docs/HDF5.md).
struct Column {
  std::string name;
  std::string unit;
};

// One /run attribute: a UTF-8 string, a float64 or an int64 (docs/HDF5.md).
struct RunAttribute {
  std::string name;
  std::variant<std::string, double, long long> value;
};

class Hdf5RunWriter {
 public:
  // Creates path, holding the exclusive lock on `<path>.lock` until closed (docs/HDF5.md, "Output
  // safety"). Throws InputError if it exists and overwrite is false, or if another process holds the lock
  // ("<path> is being written by another running minimllm (pid N)"); nothing is touched then. Throws
  // std::runtime_error if HDF5 cannot create it. The file is made as `<path>.<pid>.part` and named path
  // once its layout is on disk (without overwrite with link(), which fails when path exists).
  Hdf5RunWriter(const std::string& path, bool overwrite);
  // Closes every HDF5 id (no fsync, no exception) and removes the lock file; call close() at the end.
  // A file destroyed by an exception before its first /steps row (a run that failed in set-up) is removed
  // (discard()).
  ~Hdf5RunWriter();
  Hdf5RunWriter(const Hdf5RunWriter&) = delete;
  Hdf5RunWriter& operator=(const Hdf5RunWriter&) = delete;

  // Attributes of /run.
  void set_run_attribute(const std::string& name, const std::string& value);
  void set_run_attribute(const std::string& name, double value);
  void set_run_attribute(const std::string& name, long long value);
  // Several at once, flushed once.
  void set_run_attributes(const std::vector<RunAttribute>& attributes);

  // Sets /run attributes of an existing run file, e.g. a verdict decided after its writer closed. Throws
  // std::runtime_error naming the path when the file cannot be opened or is not a minimllm run file.
  static void update_run_attributes(const std::string& path, const std::vector<RunAttribute>& attributes);

  // Appends one row to /steps and flushes the file.
  void append_step(const StepRecord& record);

  // Appends one row to the 2-D table `name` (e.g. "/ranks/llm_seconds": one row per step, one column per
  // rank), created on first use with as many columns as values. Not flushed: call flush() after the step.
  void append_row(const std::string& name, const std::vector<double>& values);
  void append_row(const std::string& name, const std::vector<int>& values);
  // Appends one value to the 1-D int32 (float64) table `name` (one value per step), created on first use.
  // Not flushed.
  void append_value(const std::string& name, int value);
  void append_value(const std::string& name, double value);
  // Appends one value to the 1-D enumerated table `name` (one value per step): an HDF5 enum over int32 whose
  // member i is members[i] (code i), created on first use with the attribute `names`, the members joined
  // by ", " (what readers of schema_version 2 decode codes with). Throws std::logic_error naming the value,
  // the table and the members when value is none of them, std::invalid_argument when members differ from
  // the table's. Not flushed.
  void append_enum(const std::string& name, const std::vector<std::string>& members,
                   const std::string& value);
  // Appends one record to the 1-D compound table `name` (one record per step, one named float64 field per
  // column, a `units` attribute "name: unit, ..." as on /steps), created on first use: readers find a
  // value by its field name, never by position. Throws std::invalid_argument when columns and values
  // differ in count, or the columns differ from the table's. Not flushed.
  void append_record(const std::string& name, const std::vector<Column>& columns,
                     const std::vector<double>& values);
  // A string attribute on a table created by append_row, append_value, append_enum or append_record (e.g.
  // its units).
  void set_table_attribute(const std::string& table, const std::string& name, const std::string& value);
  void flush();
  // Before a step's rows: throws std::runtime_error naming the path when its file system has less free
  // space than 1 MiB plus 4 times the largest growth of the file in one step so far, so that a filling
  // disk ends the run with every written row readable (a write failing half way may not).
  void check_free_space();
  // H5Fflush and fsync: what was written survives a crash of the node. set_run_attributes syncs too.
  void sync();
  // Flushes, fsyncs and closes the file, then removes the lock file; throws std::runtime_error when any
  // of it fails (e.g. a full disk). The writer can do nothing after it.
  void close();

  // Closes every HDF5 id and removes the file and its lock file: a run that failed during set-up leaves
  // no half-made file. The writer can do nothing after it.
  void discard() noexcept;

  struct Handles;  // HDF5 ids (defined in the .cpp)

  const std::string& path() const { return path_; }

 private:
  void create_layout();  // schema_version, /run, /steps
  template <typename T>
  void append_row_impl(const std::string& name, const std::vector<T>& values, int rank);

  std::string path_;
  std::unique_ptr<FileLock> lock_;  // on `<path>.lock`, held until closed
  std::unique_ptr<Handles> h_;
  int uncaught_at_creation_ = 0;  // std::uncaught_exceptions() when created: the destructor sees unwinding
};

}  // namespace minimllm
