// Writes a run to HDF5: /run attributes (provenance) and an extendible /steps table, flushed every
// step so a killed job leaves every completed step readable. Only rank 0 holds a writer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "minimllm/metrics/step_record.hpp"

namespace minimllm {

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

  // Appends one row to /steps and flushes the file.
  void append_step(const StepRecord& record);

  // Appends one row to the 2-D table `name` (e.g. "/ranks/llm_seconds": one row per step, one column per
  // rank), created on first use with as many columns as values. Not flushed: call flush() after the step.
  void append_row(const std::string& name, const std::vector<double>& values);
  void append_row(const std::string& name, const std::vector<int>& values);
  void flush();

  struct Handles;  // HDF5 ids (defined in the .cpp)

  const std::string& path() const { return path_; }

 private:
  template <typename T>
  void append_row_impl(const std::string& name, const std::vector<T>& values);

  std::string path_;
  std::unique_ptr<Handles> h_;
};

}  // namespace minimllm
