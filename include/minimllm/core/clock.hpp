// Wall-clock time for phase timers: fences Kokkos first, so a timed region ends when its kernels have.
// host_seconds() does not fence.
#pragma once

#include <Kokkos_Core.hpp>
#include <chrono>

namespace minimllm {

// Wall-clock time with no fence: for host-only work, and for threads other than the one driving Kokkos.
inline double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double now_seconds() {
  Kokkos::fence();
  return host_seconds();
}

}  // namespace minimllm
