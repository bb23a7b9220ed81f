#include "hdf5_helpers.hpp"

#include <sys/statvfs.h>

#include <filesystem>
#include <vector>

namespace minimllm::hdf5 {

std::string full_disk_note(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct statvfs fs_stat {};
  return ::statvfs(dir.c_str(), &fs_stat) == 0 && fs_stat.f_bavail == 0 ? ": no space left on the device"
                                                                        : "";
}

void write_attribute(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value,
                     const std::string& path) {
  const std::string what = fmt::format("write attribute '{}'", name);
  if (check(H5Aexists(obj, name.c_str()), path, what.c_str()) > 0) {
    check(H5Adelete(obj, name.c_str()), path, what.c_str());
  }
  Scoped space(check(H5Screate(H5S_SCALAR), path, what.c_str()), H5Sclose);
  Scoped attr(check(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), path,
                    what.c_str()),
              H5Aclose);
  check(H5Awrite(attr.get(), mem_type, value), path, what.c_str());
}

void write_string_attribute(hid_t obj, const std::string& name, const std::string& value,
                            const std::string& path) {
  Scoped type(check(H5Tcopy(H5T_C_S1), path, "create a string type"), H5Tclose);
  check(H5Tset_size(type.get(), H5T_VARIABLE), path, "create a string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "create a string type");
  const char* data = value.c_str();
  write_attribute(obj, name, type.get(), type.get(), &data, path);
}

void write_run_attribute(hid_t obj, const RunAttribute& a, const std::string& path) {
  if (const auto* text = std::get_if<std::string>(&a.value)) {
    write_string_attribute(obj, a.name, *text, path);
  } else if (const auto* real = std::get_if<double>(&a.value)) {
    write_attribute(obj, a.name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, real, path);
  } else {
    write_attribute(obj, a.name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &std::get<long long>(a.value), path);
  }
}

herr_t collect_attribute(hid_t obj, const char* name, const H5A_info_t*, void* out) {
  auto& attributes = *static_cast<std::vector<RunAttribute>*>(out);
  const hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  Scoped closing(attr, H5Aclose);
  Scoped type(H5Aget_type(attr), H5Tclose);
  switch (H5Tget_class(type.get())) {
    case H5T_STRING: {
      if (H5Tis_variable_str(type.get()) <= 0) return -1;
      char* text = nullptr;
      if (H5Aread(attr, type.get(), &text) < 0) return -1;
      attributes.push_back({name, std::string(text ? text : "")});
      H5free_memory(text);
      return 0;
    }
    case H5T_FLOAT: {
      double value = 0.0;
      if (H5Aread(attr, H5T_NATIVE_DOUBLE, &value) < 0) return -1;
      attributes.push_back({name, value});
      return 0;
    }
    case H5T_INTEGER: {
      long long value = 0;
      if (H5Aread(attr, H5T_NATIVE_LLONG, &value) < 0) return -1;
      attributes.push_back({name, value});
      return 0;
    }
    default:
      return -1;
  }
}

}  // namespace minimllm::hdf5
