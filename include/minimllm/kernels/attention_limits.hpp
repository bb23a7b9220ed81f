// The attention kernels' limits, without Kokkos: minimllm_config (Kokkos-free) validates decks against
// them; minimllm/kernels/attention.hpp includes this for the kernels' users.
#pragma once

namespace minimllm {

// Largest head dimension (width / heads) the attention kernels support: a thread keeps a head's row in
// fixed-size arrays of at most this many floats.
inline constexpr int kMaxHeadDim = 128;

}  // namespace minimllm
