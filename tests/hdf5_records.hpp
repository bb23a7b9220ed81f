// Reading tables in tests: one field of a record table (Hdf5RunWriter::append_record, e.g.
// /simulation/<policy>) by its name, never by position; the members of an enumerated table
// (Hdf5RunWriter::append_enum, e.g. /plans/policy) by their codes. A failed expectation and no values when
// the table or field is absent.
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

namespace minimllm::testing_support {

inline std::vector<double> read_record_field(const std::string& file, const std::string& table,
                                             const std::string& field) {
  std::vector<double> values;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  if (f < 0) return values;
  hid_t dset = H5Dopen2(f, table.c_str(), H5P_DEFAULT);
  EXPECT_GE(dset, 0) << file << ": no " << table;
  if (dset >= 0) {
    hid_t file_type = H5Dget_type(dset);
    const bool has_field =
        H5Tget_class(file_type) == H5T_COMPOUND && H5Tget_member_index(file_type, field.c_str()) >= 0;
    EXPECT_TRUE(has_field) << file << ": " << table << " has no field " << field;
    if (has_field) {
      // A compound of the one field: HDF5 matches members by name.
      hid_t mem_type = H5Tcreate(H5T_COMPOUND, sizeof(double));
      H5Tinsert(mem_type, field.c_str(), 0, H5T_NATIVE_DOUBLE);
      hid_t space = H5Dget_space(dset);
      values.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
      EXPECT_GE(H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0) << table;
      H5Sclose(space), H5Tclose(mem_type);
    }
    H5Tclose(file_type), H5Dclose(dset);
  }
  H5Fclose(f);
  return values;
}

// The member names of the enumerated 1-D table `table` of an open file, in code order: element i is the
// name HDF5 gives code i (a failed expectation when the table is no enum of the codes 0..n-1).
inline std::vector<std::string> read_enum_members(hid_t file, const std::string& table) {
  std::vector<std::string> members;
  hid_t dset = H5Dopen2(file, table.c_str(), H5P_DEFAULT);
  EXPECT_GE(dset, 0) << "no " << table;
  if (dset < 0) return members;
  hid_t type = H5Dget_type(dset);
  EXPECT_EQ(H5Tget_class(type), H5T_ENUM) << table << " is not an HDF5 enum";
  if (H5Tget_class(type) == H5T_ENUM) {
    hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
    EXPECT_EQ(H5Tget_size(native), sizeof(int)) << table;
    const int count = H5Tget_nmembers(type);
    for (int code = 0; code < count && H5Tget_size(native) == sizeof(int); ++code) {
      char name[256] = "";
      EXPECT_GE(H5Tenum_nameof(native, &code, name, sizeof(name)), 0)
          << table << ": no member of code " << code;
      members.push_back(name);
    }
    H5Tclose(native);
  }
  H5Tclose(type), H5Dclose(dset);
  return members;
}

}  // namespace minimllm::testing_support
