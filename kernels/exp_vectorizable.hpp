// Internal to kernels/: an exp the compiler vectorises, shared by the attention host kernels, the loss and
// GELU, and the width those host loops block by.
// Vectorising it needs floorf vectorised: GCC does that only with -fno-trapping-math (kernels/CMakeLists.txt
// sets it on the files that use this).
#pragma once

#include <math.h>

#include <Kokkos_Core.hpp>

namespace minimllm::kernels_detail {

// Elements per block of the host loops (one 512-bit vector of floats): independent partial maxima and
// sums, since a running max or sum is one dependent chain the compiler cannot vectorise.
inline constexpr int kLanes = 16;

// exp(x) for x <= ~88 in a form the compiler vectorises (libm's expf is a scalar call): Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor polynomial (relative error < 2e-7).
KOKKOS_INLINE_FUNCTION float exp_vectorizable(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = floorf(x * 1.44269504f + 0.5f);
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    int i;
    float f;
  } two_to_n;
  // A NaN input stays NaN through r and p; its exponent bits must still come from a defined conversion
  // (the clamp lets NaN through: converting it to int is undefined), so 2^n uses n = 0 then.
  const float n_defined = n == n ? n : 0.0f;
  two_to_n.i = (static_cast<int>(n_defined) + 127) << 23;  // n in [-126, 127]: a positive shift
  return p * two_to_n.f;
}

}  // namespace minimllm::kernels_detail
