// heed/philox.h — Philox4x32-10 and the uniform and normal streams built on it, one copy
// compiled for the host and the device (HEED_HD): the CPU kernels, the CUDA kernels and the
// framework's generator all call these functions, so a (seed, index) gives the same number on
// every device and thread count.
//
// Invariants: element i of a draw at (seed, offset) is a pure function of (seed, offset + i);
// a uniform is 24 bits of one Philox lane, in [0, 1); a normal is Box-Muller in double on two
// lanes. Part of the ground floor (base/): includes nothing from framework/ or kernels/.
#pragma once

#include <cmath>
#include <cstdint>

#include "heed/hd.h"

namespace heed {

// Philox4x32-10 of (counter, key): four 32-bit outputs.
struct Philox4 {
  uint32_t v[4];
};

HEED_HD Philox4 philox4x32_10(uint64_t counter, uint64_t key) {
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

// A uniform in [0, 1) from the top 24 bits of one Philox lane.
HEED_HD float philox_uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// The i-th uniform float in [0, 1) of a seed's stream: lane i % 4 of Philox block i / 4.
HEED_HD float philox_uniform(uint64_t seed, uint64_t index) {
  const Philox4 r = philox4x32_10(index >> 2, seed);
  return philox_uniform_from_bits(r.v[index & 3]);
}

// out[j] = philox_uniform(seed, first + j) for j < n, one Philox evaluation per four values.
HEED_HD void philox_uniform_fill(uint64_t seed, uint64_t first, int64_t n, float* out) {
  int64_t j = 0;
  while (j < n) {
    const uint64_t index = first + static_cast<uint64_t>(j);
    const Philox4 r = philox4x32_10(index >> 2, seed);
    for (uint64_t lane = index & 3; lane < 4 && j < n; ++lane, ++j) out[j] = philox_uniform_from_bits(r.v[lane]);
  }
}

// The i-th standard normal of a seed's stream: Box-Muller on lanes 0 and 1 of Philox block
// i / 2, the cosine for even i and the sine for odd i, computed in double.
HEED_HD float philox_normal(uint64_t seed, uint64_t index) {
  const Philox4 r = philox4x32_10(index >> 1, seed);
  const double u1 = (static_cast<double>(r.v[0] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
  const double u2 = static_cast<double>(r.v[1] >> 8) * (1.0 / 16777216.0);          // [0, 1)
  const double radius = ::sqrt(-2.0 * ::log(u1)), angle = 6.283185307179586 * u2;
  return static_cast<float>(radius * ((index & 1) ? ::sin(angle) : ::cos(angle)));
}

}  // namespace heed
