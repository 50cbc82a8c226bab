// heed/random.h — the seedable random number generator.
//
// Invariants: numbers come from the counter-based Philox4x32-10 generator, keyed by the
// seed; each draw of n numbers takes the next n counters, reserved atomically (a generator may
// be shared between threads). The same seed therefore gives
// bit-identical numbers on every run, every thread count and (later) every device.
#pragma once

#include <cstdint>
#include <mutex>

#include "heed/philox.h"  // Philox4x32-10 and the streams every device computes

namespace heed {

// A Philox stream: a seed and the offset of the next unused counter. Thread-safe: every draw
// reserves its counters under the generator's lock, so threads sharing one generator (the
// default one included) never receive overlapping counters and never race. Which thread gets
// which counters then depends on their timing: a multi-threaded program that needs
// reproducible numbers gives each thread its own Generator (every random factory, dropout and
// nn::init function takes one, like PyTorch's generator= argument).
class Generator {
 public:
  // A seed and the first counter of a reservation.
  struct Draw {
    uint64_t seed;
    uint64_t first;
  };

  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& other) {
    const std::lock_guard<std::mutex> lock(other.mutex_);
    seed_ = other.seed_;
    offset_ = other.offset_;
  }
  Generator& operator=(const Generator& other) {
    if (this == &other) return *this;
    const Draw state = other.state();
    set_state(state.seed, state.first);
    return *this;
  }

  void manual_seed(uint64_t seed) { set_state(seed, 0); }
  uint64_t seed() const { return state().seed; }
  uint64_t offset() const { return state().first; }
  // The seed and the next unused counter, read together.
  Draw state() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return {seed_, offset_};
  }
  void set_state(uint64_t seed, uint64_t offset) {
    const std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `count` counters: the seed and the offset of the first, read and advanced in one
  // step (what every draw uses).
  Draw reserve(uint64_t count) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const Draw draw{seed_, offset_};
    offset_ += count;
    return draw;
  }
  // Reserves `count` counters and returns the offset of the first.
  uint64_t advance(uint64_t count) { return reserve(count).first; }

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator used by randn/rand/uniform/randint/dropout and the layer initialisers.
Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace heed
