// Reading attributes of an HDF5 object in tests: a string (variable-length, as Hdf5RunWriter writes
// them) or a number; "(missing)" and a failed expectation when the attribute is absent.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>

namespace minimllm::testing_support {

inline std::string read_string_attribute(hid_t object, const char* name) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  if (attr < 0) return "(missing)";
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  char* data = nullptr;
  H5Aread(attr, type, &data);
  std::string value = data ? data : "";
  H5free_memory(data);
  H5Tclose(type), H5Aclose(attr);
  return value;
}

// The /run attribute of a file.
inline std::string read_string_attribute(const std::string& file, const char* name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  if (f < 0) return "(missing)";
  hid_t run = H5Gopen2(f, "/run", H5P_DEFAULT);
  std::string value = read_string_attribute(run, name);
  H5Gclose(run), H5Fclose(f);
  return value;
}

inline double read_number_attribute(hid_t object, const char* name) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  double value = 0.0;
  if (attr >= 0) H5Aread(attr, H5T_NATIVE_DOUBLE, &value), H5Aclose(attr);
  return value;
}

}  // namespace minimllm::testing_support
