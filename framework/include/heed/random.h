// heed/random.h — the seedable random number generator.
//
// Invariants: numbers come from the counter-based Philox4x32-10 generator, keyed by the
// seed; each draw of n numbers takes the next n counters. The same seed therefore gives
// bit-identical numbers on every run, every thread count and (later) every device.
#pragma once

#include <cstdint>

namespace heed {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `count` counters and returns the offset of the first.
  uint64_t advance(uint64_t count) {
    const uint64_t first = offset_;
    offset_ += count;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator used by randn/rand/uniform/randint/dropout and the layer initialisers.
Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

// Philox4x32-10 of (counter, key): four 32-bit outputs. Exposed for tests and kernels.
struct Philox4 {
  uint32_t v[4];
};
Philox4 philox4x32_10(uint64_t counter, uint64_t key);
// The i-th uniform float in [0, 1) of a seed's stream, as every kernel computes it: 24 bits
// of lane i % 4 of Philox block i / 4.
float philox_uniform(uint64_t seed, uint64_t index);
// out[j] = philox_uniform(seed, first + j) for j < n, one Philox evaluation per four values.
void philox_uniform_fill(uint64_t seed, uint64_t first, int64_t n, float* out);
// The i-th standard normal of a seed's stream: Box-Muller on lanes 0 and 1 of Philox block
// i / 2, the cosine for even i and the sine for odd i.
float philox_normal(uint64_t seed, uint64_t index);

}  // namespace heed
