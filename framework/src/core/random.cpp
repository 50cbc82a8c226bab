// framework/src/core/random.cpp — the default generator (Philox4x32-10 itself is heed/philox.h).
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

}  // namespace heed
