// Host staging of MemSpace buffers for MPI (private to src/parallel), shared by the MPI backend's
// collectives and both backends' point-to-point messages: no CUDA-aware MPI is assumed, so device data
// goes through host copies, counted as transfers (core/transfer.hpp).
#pragma once

#include <fmt/format.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/types.hpp"

namespace minimllm::detail {

using HostUnmanaged = Kokkos::View<float*, HostSpace, Kokkos::MemoryUnmanaged>;
using MemUnmanaged = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>;
template <class Space>
using ConstUnmanaged = Kokkos::View<const float*, Space, Kokkos::MemoryUnmanaged>;

// MPI counts and displacements are int; larger buffers would need chunking, which minimllm never needs.
inline int to_int(std::size_t count, const char* op) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw std::overflow_error(
        fmt::format("MPI communicator {}: {} floats exceed MPI's int count limit ({}); "
                    "split the buffer into smaller collectives",
                    op, count, INT_MAX));
  }
  return static_cast<int>(count);
}

// Host address of `count` floats of MemSpace data for MPI: the data itself when MemSpace is host
// accessible, else `stage` (holding a copy of the data when copy_in).
template <class T>
T* on_host(T* data, std::size_t count, std::vector<float>& stage, bool copy_in) {
  if (copy_in) step_fence();  // MPI must read the finished results of kernels still in flight
  if constexpr (kMemSpaceIsHostAccessible) {
    return data;
  } else {
    stage.resize(count);
    if (copy_in && count > 0) {
      transfer(HostUnmanaged(stage.data(), count), ConstUnmanaged<MemSpace>(data, count));
    }
    return stage.data();
  }
}

// Copies a staged result back into MemSpace; nothing to do when MPI wrote the data in place.
inline void to_mem_space(const float* host, float* data, std::size_t count) {
  if (host != data && count > 0) transfer(MemUnmanaged(data, count), ConstUnmanaged<HostSpace>(host, count));
}

}  // namespace minimllm::detail
