// HDF5 helpers shared by the run writer and the checkpoint file (private to the metrics layer): errors
// that name the file and the operation, ids closed at the end of a scope, attributes of every type.
#pragma once

#include <fmt/format.h>
#include <hdf5.h>

#include <stdexcept>
#include <string>

#include "minimllm/metrics/hdf5_writer.hpp"  // RunAttribute

namespace minimllm::hdf5 {

// ": no space left on the device" when path's file system is full, else "": why a write failed.
std::string full_disk_note(const std::string& path);

// Throws std::runtime_error naming the file and the operation when an HDF5 call failed.
template <typename Id>
Id check(Id result, const std::string& path, const char* what) {
  if (result < 0)
    throw std::runtime_error(fmt::format("{}: HDF5 failed to {}{}", path, what, full_disk_note(path)));
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
                     const std::string& path);
// A variable-length UTF-8 string attribute (h5py returns it as str).
void write_string_attribute(hid_t obj, const std::string& name, const std::string& value,
                            const std::string& path);
// A string, float64 or int64 attribute, by the RunAttribute's type.
void write_run_attribute(hid_t obj, const RunAttribute& a, const std::string& path);

// An H5Aiterate2 callback appending attribute `name` of obj to the std::vector<RunAttribute> at out, as the
// writers write them: a variable-length string, a float64 or an int64 (any integer or float type is read
// as one); -1 (the iteration stops) for any other type or a failed read.
herr_t collect_attribute(hid_t obj, const char* name, const H5A_info_t* info, void* out);

}  // namespace minimllm::hdf5
