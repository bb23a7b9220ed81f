// Writes a run to HDF5: /run attributes (provenance) and an extendible /steps table, flushed every
// step so a killed job leaves every completed step readable. Only rank 0 holds a writer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "minimllm/metrics/step_record.hpp"

namespace minimllm {

// One /run attribute: a UTF-8 string, a float64 or an int64 (docs/HDF5.md).
struct RunAttribute {
  std::string name;
  std::variant<std::string, double, long long> value;
};

class Hdf5RunWriter {
 public:
  // Creates path. Throws InputError if it exists and overwrite is false (nothing is touched then),
  // std::runtime_error if HDF5 cannot create it.
  Hdf5RunWriter(const std::string& path, bool overwrite);
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
  // Appends one value to the 1-D int32 table `name` (one value per step), created on first use. Not flushed.
  void append_value(const std::string& name, int value);
  // A string attribute on a table created by append_row or append_value (e.g. what its codes mean).
  void set_table_attribute(const std::string& table, const std::string& name, const std::string& value);
  void flush();

  struct Handles;  // HDF5 ids (defined in the .cpp)

  const std::string& path() const { return path_; }

 private:
  template <typename T>
  void append_row_impl(const std::string& name, const std::vector<T>& values, int rank);

  std::string path_;
  std::unique_ptr<Handles> h_;
};

}  // namespace minimllm
