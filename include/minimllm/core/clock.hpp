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

// The one fence of the step's path: Kokkos's own execution space instance, where every kernel of minimllm
// runs, not the device. A device-wide fence (Kokkos::fence(): cudaDeviceSynchronize) would also wait for
// collectives in flight on a communicator's side stream (the overlapped gradient all-reduce under NCCL)
// and serialise what they overlap. scripts/check-format.sh rejects any other fence under src/step and
// src/parallel.
inline void step_fence() { Kokkos::DefaultExecutionSpace().fence(); }

// Fenced wall-clock time (step_fence, then host_seconds): a timed region ends when its kernels have.
inline double now_seconds() {
  step_fence();
  return host_seconds();
}

}  // namespace minimllm
