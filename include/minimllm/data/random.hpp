// Counter-based randomness: a value is a pure function of its coordinates, so any rank can draw
// exactly the numbers another rank would, in any order.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace minimllm {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The hash of a tuple extended by one coordinate: hash_coords({a, b, c}) == hash_extend(hash_coords({a, b}),
// c), so draws that share leading coordinates (one sample's, one image's) hash them once.
inline std::uint64_t hash_extend(std::uint64_t h, std::uint64_t c) { return splitmix64(h ^ splitmix64(c)); }

// Hash of a coordinate tuple, e.g. (seed, stream, step, sample, index).
inline std::uint64_t hash_coords(std::initializer_list<std::uint64_t> coords) {
  std::uint64_t h = 0x6a09e667f3bcc909ULL;
  for (std::uint64_t c : coords) h = hash_extend(h, c);
  return h;
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// Standard normal from two hashes (Box-Muller).
inline double standard_normal(std::uint64_t h1, std::uint64_t h2) {
  const double u1 = 1.0 - uniform01(h1);  // in (0, 1]
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * uniform01(h2));
}

}  // namespace minimllm
