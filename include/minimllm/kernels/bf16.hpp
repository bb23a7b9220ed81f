// bfloat16 rounding, host and device alike: a bfloat16 is the upper 16 bits of a float (8 exponent bits,
// 8 significand bits counting the implicit one), so the unit roundoff is 2^-8 relative.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace minimllm {

// The bfloat16 nearest to x, ties to even (IEEE round-to-nearest-even, what cuda_bf16.h's
// __float2bfloat16 does). NaN stays NaN (quiet); values beyond the largest bfloat16 round to infinity.
KOKKOS_INLINE_FUNCTION std::uint16_t bf16_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);  // carries into the exponent where rounding must
  return static_cast<std::uint16_t>(u >> 16);
}

// The float value of a bfloat16.
KOKKOS_INLINE_FUNCTION float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float x = 0.0f;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest bfloat16, as a float.
KOKKOS_INLINE_FUNCTION float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

}  // namespace minimllm
