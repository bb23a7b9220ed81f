// Reading a record table (Hdf5RunWriter::append_record, e.g. /simulation/<policy>) in tests: one field
// by its name, never by position; a failed expectation and no values when the table or field is absent.
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

}  // namespace minimllm::testing_support
