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

// `floats` floats of the team's scratch at `level`, as the policy's set_scratch_size reserved them. (level
// is a copy: team_scratch takes a reference, which device code cannot bind to a constexpr global.)
KOKKOS_INLINE_FUNCTION float* team_floats(const TeamMember& team, int level, int floats) {
  return ScratchFloats(team.team_scratch(level), floats).data();
}

}  // namespace minimllm::kernels_detail
