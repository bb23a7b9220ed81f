// A run's HDF5 file read back (docs/HDF5.md): its /run attributes and the /steps fields a benchmark verdict
// is computed from, for `minimllm verify`, which judges finished runs again from their files.
#pragma once

#include <string>
#include <vector>

#include "minimllm/metrics/hdf5_writer.hpp"  // RunAttribute
#include "minimllm/metrics/step_record.hpp"

namespace minimllm {

struct RunFile {
  std::string path;
  long long schema_version = 0;
  std::vector<RunAttribute> attributes;  // of /run, sorted by name
  // Every /steps row, with the fields read by name: step, loss, grad_norm, text_tokens, image_tokens,
  // loss_targets, samples, step_seconds, model_flops and mfu; the others stay 0.
  std::vector<StepRecord> steps;

  // The /run attribute of that name, or null.
  const RunAttribute* find(const std::string& name) const;
  // The attribute's value; throw InputError "<path>: /run/<name> is missing" (or "is not a string", ...).
  const std::string& text(const std::string& name) const;
  long long integer(const std::string& name) const;
  double real(const std::string& name) const;  // an int64 attribute is read as a number too
};

// Reads a file written by `minimllm run`. Throws InputError, one line naming path, when it is missing, not
// a regular file, being written by a running minimllm, not HDF5, not a run file (no /run or /steps, a
// /steps field missing), or holds an attribute of a type minimllm does not write.
RunFile read_run_file(const std::string& path);

}  // namespace minimllm
