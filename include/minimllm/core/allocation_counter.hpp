// Counts Kokkos allocations (a Kokkos Tools callback) while it lives: in every memory space, or only in
// MemSpace, the execution space's memory (where, on CUDA, each allocation is a cudaMalloc). For tests
// and benchmarks that check a steady state allocates nothing; one counter at a time.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#include "minimllm/core/types.hpp"

namespace minimllm {

class AllocationCounter {
 public:
  enum class Spaces { all, mem_space };
  explicit AllocationCounter(Spaces spaces = Spaces::all) {
    state() = {0, spaces == Spaces::mem_space};
    Kokkos::Tools::Experimental::set_allocate_data_callback(&count);
  }
  ~AllocationCounter() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  std::int64_t count() const { return state().count; }

 private:
  struct State {
    std::int64_t count;
    bool mem_space_only;
  };
  static State& state() {
    static State s{0, false};
    return s;
  }
  static void count(const Kokkos::Profiling::SpaceHandle space, const char*, const void*, std::uint64_t) {
    if (!state().mem_space_only || std::strcmp(space.name, MemSpace::name()) == 0) ++state().count;
  }
};

}  // namespace minimllm
