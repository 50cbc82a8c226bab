// framework/src/random.cpp — Philox4x32-10 and the default generator.
//
// Invariant: element i of a draw at (seed, offset) is a pure function of
// (seed, offset + i); kernels on every device compute exactly these functions.
#include "heed/random.h"

#include <cmath>

namespace heed {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Philox4 philox4x32_10(uint64_t counter, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// Each Philox block (counter c) gives four 24-bit uniforms: indices 4c .. 4c+3.
float philox_uniform(uint64_t seed, uint64_t index) {
  const Philox4 r = philox4x32_10(index >> 2, seed);
  return static_cast<float>(r.v[index & 3] >> 8) * (1.0f / 16777216.0f);  // [0, 1)
}

void philox_uniform_fill(uint64_t seed, uint64_t first, int64_t n, float* out) {
  int64_t j = 0;
  while (j < n) {
    const uint64_t index = first + static_cast<uint64_t>(j);
    const Philox4 r = philox4x32_10(index >> 2, seed);
    for (uint64_t lane = index & 3; lane < 4 && j < n; ++lane, ++j)
      out[j] = static_cast<float>(r.v[lane] >> 8) * (1.0f / 16777216.0f);
  }
}

// Box-Muller on one Philox block per pair of normals: indices 2c (cosine) and 2c+1 (sine).
float philox_normal(uint64_t seed, uint64_t index) {
  const Philox4 r = philox4x32_10(index >> 1, seed);
  const double u1 = (static_cast<double>(r.v[0] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
  const double u2 = static_cast<double>(r.v[1] >> 8) * (1.0 / 16777216.0);          // [0, 1)
  const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 6.283185307179586 * u2;
  return static_cast<float>(radius * ((index & 1) ? std::sin(angle) : std::cos(angle)));
}

}  // namespace heed
