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

// Fences Kokkos's own execution space instance, where every kernel of minimllm runs, not the device: a
// device-wide fence would also wait for collectives in flight on a communicator's side stream (the
// overlapped gradient all-reduce under NCCL) and serialise what they overlap.
inline double now_seconds() {
  Kokkos::DefaultExecutionSpace().fence();
  return host_seconds();
}

}  // namespace minimllm
