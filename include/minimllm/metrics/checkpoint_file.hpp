// The checkpoint file's HDF5 I/O (schema: docs/HDF5.md, "Checkpoint files"): scalar attributes of
// /checkpoint and float32 arrays in /state. What they mean is the driver's (driver/checkpoint.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "minimllm/metrics/hdf5_writer.hpp"  // RunAttribute

namespace minimllm {

struct CheckpointContents {
  std::vector<RunAttribute> attributes;                            // of /checkpoint
  std::vector<std::pair<std::string, std::vector<float>>> arrays;  // /state/<name>

  // The attribute or array of that name; throw InputError naming path and what is missing or mistyped.
  const std::string& text(const std::string& name, const std::string& path) const;
  long long integer(const std::string& name, const std::string& path) const;
  double real(const std::string& name, const std::string& path) const;
  const std::vector<float>& array(const std::string& name, const std::string& path) const;
};

// Writes contents to path atomically: the file is built in memory (HDF5's core driver), written to
// `<path>.tmp.<pid>` beside it, fsynced, renamed over path and the directory fsynced, so path holds either
// the previous checkpoint or this one, whole, whatever happens (a kill, a full disk). Throws
// std::runtime_error naming path and the reason; the temporary file is removed then.
void write_checkpoint_file(const std::string& path, const CheckpointContents& contents);

// Reads a file written by write_checkpoint_file. Throws InputError naming path when it cannot be read or
// is not a minimllm checkpoint (or of another format version).
CheckpointContents read_checkpoint_file(const std::string& path);

}  // namespace minimllm
