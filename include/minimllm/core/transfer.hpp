// Host<->device copies, counted. One transfer is one Kokkos deep copy, made through transfer() or
// copy_to_host(), between memory spaces that cannot access each other (host and CUDA device memory):
// packing a step's inputs, index lists, staging buffers for MPI, reading results back. On host backends
// nothing crosses, so the counts stay zero (the NCCL backend's own cudaMemcpy calls are not counted).
// Totals are per process and cumulative: a step's count is a difference. One host thread drives Kokkos,
// so plain integers suffice.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>

namespace minimllm {

struct TransferCounts {
  std::int64_t to_device = 0;  // deep copies host -> device
  std::int64_t to_host = 0;    // deep copies device -> host
  std::int64_t bytes = 0;      // both directions
};

inline TransferCounts operator-(const TransferCounts& a, const TransferCounts& b) {
  return {a.to_device - b.to_device, a.to_host - b.to_host, a.bytes - b.bytes};
}

inline TransferCounts& transfer_counts() {
  static TransferCounts counts;
  return counts;
}

namespace detail {
// The counting rule, on its own so that host-only builds can test it: a copy counts when exactly one
// side is host-accessible memory and it moves at least one byte.
inline void count_transfer(bool dst_on_host, bool src_on_host, std::size_t bytes) {
  if (dst_on_host == src_on_host || bytes == 0) return;
  TransferCounts& counts = transfer_counts();
  ++(dst_on_host ? counts.to_host : counts.to_device);
  counts.bytes += static_cast<std::int64_t>(bytes);
}

template <class DstSpace, class SrcSpace>
void count_transfer(std::size_t bytes) {
  count_transfer(Kokkos::SpaceAccessibility<Kokkos::HostSpace, DstSpace>::accessible,
                 Kokkos::SpaceAccessibility<Kokkos::HostSpace, SrcSpace>::accessible, bytes);
}
}  // namespace detail

// Kokkos::deep_copy(dst, src), counted when it moves data between host and device memory.
template <class Dst, class Src>
void transfer(const Dst& dst, const Src& src) {
  detail::count_transfer<typename Dst::memory_space, typename Src::memory_space>(
      dst.size() * sizeof(typename Dst::value_type));
  Kokkos::deep_copy(dst, src);
}

// Kokkos::create_mirror_view_and_copy(HostSpace(), src): src itself where the host can read it, else a
// host copy, counted.
template <class View>
auto copy_to_host(const View& src) {
  detail::count_transfer<Kokkos::HostSpace, typename View::memory_space>(src.size() *
                                                                         sizeof(typename View::value_type));
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), src);
}

}  // namespace minimllm
