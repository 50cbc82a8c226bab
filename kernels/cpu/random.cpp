// kernels/cpu/random.cpp — Philox-based random fills and dropout masks.
//
// Invariant: element i depends only on (seed, offset + i) through heed::philox_uniform /
// philox_normal, so any thread split (and any device) gives the same numbers.
#include <cmath>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "heed/random.h"

namespace heed::kernels::cpu {

void random(RandomKind kind, DType dtype, void* out, int64_t n, double a, double b, PhiloxState state) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t index = state.offset + static_cast<uint64_t>(i);
        if (kind == RandomKind::Normal) {
          store(p + i, a + b * static_cast<double>(philox_normal(state.seed, index)));
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          // randint: low + (64 random bits mod span); the bias is below span / 2^64.
          const Philox4 r = philox4x32_10(index, state.seed);
          const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
          const auto span = static_cast<uint64_t>(static_cast<int64_t>(b) - static_cast<int64_t>(a));
          p[i] = static_cast<T>(static_cast<int64_t>(a) + static_cast<int64_t>(bits % span));
        } else {
          store(p + i, a + (b - a) * static_cast<double>(philox_uniform(state.seed, index)));
        }
      }
    });
  });
}

void dropout_mask(uint8_t* keep, int64_t n, double p, PhiloxState state) {
  const float threshold = static_cast<float>(p);
  parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      keep[i] = philox_uniform(state.seed, state.offset + static_cast<uint64_t>(i)) >= threshold ? 1 : 0;
  });
}

}  // namespace heed::kernels::cpu
