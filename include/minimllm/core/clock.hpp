// Wall-clock time for phase timers: fences Kokkos first, so a timed region ends when its kernels have.
#pragma once

#include <Kokkos_Core.hpp>
#include <chrono>

namespace minimllm {

inline double now_seconds() {
  Kokkos::fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace minimllm
