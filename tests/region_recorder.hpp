// The Kokkos Tools regions pushed while a RegionRecorder lives: what a connector (space-time stack, NVTX)
// would be told. The callback is reset when the recorder goes away, also when a test throws.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>
#include <vector>

namespace minimllm::testing_support {

class RegionRecorder {
 public:
  RegionRecorder() {
    active() = this;
    Kokkos::Tools::Experimental::set_push_region_callback(record);
  }
  ~RegionRecorder() {
    Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
    active() = nullptr;
  }
  RegionRecorder(const RegionRecorder&) = delete;
  RegionRecorder& operator=(const RegionRecorder&) = delete;

  bool pushed(const std::string& region) const {
    return std::find(regions_.begin(), regions_.end(), region) != regions_.end();
  }

 private:
  static RegionRecorder*& active() {
    static RegionRecorder* recorder = nullptr;
    return recorder;
  }
  static void record(const char* name) { active()->regions_.push_back(name); }

  std::vector<std::string> regions_;
};

}  // namespace minimllm::testing_support
