// View typedefs shared by every module: one place decides memory space and layout.
#pragma once

#include <Kokkos_Core.hpp>
#include <string>
#include <vector>

#include "minimllm/core/transfer.hpp"

namespace minimllm {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

// Matrices are row-major [rows, cols]; activations are [tokens, features], weights [in, out].
using t_mat = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;
using t_vec = Kokkos::View<float*, MemSpace>;
using t_ivec = Kokkos::View<int*, MemSpace>;
using t_mat_const = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace>;
// Column blocks of a matrix (Q, K and V out of one Q|K|V matrix; kernels/attention.hpp, columns()).
using t_mat_strided = Kokkos::View<float**, Kokkos::LayoutStride, MemSpace>;
using t_mat_strided_const = Kokkos::View<const float**, Kokkos::LayoutStride, MemSpace>;
using t_vec_const = Kokkos::View<const float*, MemSpace>;
using t_ivec_const = Kokkos::View<const int*, MemSpace>;

// Unmanaged views into the contiguous parameter / gradient buffers.
using t_mat_um = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using t_vec_um = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>;

using t_mat_host = t_mat::HostMirror;
using t_vec_host = t_vec::HostMirror;
using t_ivec_host = t_ivec::HostMirror;

// True when host code may dereference pointers of MemSpace (Serial, OpenMP; not CUDA device memory).
inline constexpr bool kMemSpaceIsHostAccessible = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

// A new MemSpace view holding a copy of a host vector (index lists built on the host).
inline t_ivec to_device(const std::vector<int>& host, const std::string& label) {
  t_ivec v(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), host.size());
  transfer(v, Kokkos::View<const int*, HostSpace, Kokkos::MemoryUnmanaged>(host.data(), host.size()));
  return v;
}

// A new MemSpace view holding 0, 1, ..., n - 1 (the row list of a copy that keeps rows in place).
inline t_ivec row_numbers(int n, const std::string& label) {
  std::vector<int> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i;
  return to_device(rows, label);
}

}  // namespace minimllm
