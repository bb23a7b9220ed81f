// Internal to kernels/: the team policy shared by row-wise kernels, and team scratch as floats.
#pragma once

#include <type_traits>

#include "minimllm/core/types.hpp"

namespace minimllm::kernels_detail {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;
using ScratchFloats = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

inline constexpr bool kHostExec = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

// One team per row. Host teams have one thread, so a row's reduction order never depends on the
// thread count (bitwise-deterministic results on Serial and OpenMP alike).
inline TeamPolicy row_teams(int league_size) {
  return kHostExec ? TeamPolicy(league_size, 1) : TeamPolicy(league_size, Kokkos::AUTO);
}

}  // namespace minimllm::kernels_detail
