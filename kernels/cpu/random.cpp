// kernels/cpu/random.cpp — Philox-based random fills and dropout masks.
//
// Invariants: element i depends only on (seed, offset + i) through heed::philox_uniform /
// philox_normal, so any thread split (and any device) gives the same numbers. Uniform draws
// lie in [low, high): a value that rounds up to `high` in the storage dtype is replaced by
// the largest representable value below it.
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "heed/philox.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kChunk = 4096;

// The largest value of T strictly below `high` (for a value of T that compares >= high).
template <typename T>
T value_below(double high) {
  if constexpr (std::is_same_v<T, float>) {
    const float h = static_cast<float>(high);
    return static_cast<double>(h) >= high ? std::nextafter(h, -INFINITY) : h;
  } else if constexpr (std::is_same_v<T, double>) {
    return std::nextafter(high, -INFINITY);
  } else {  // 16-bit floats: step the bit pattern down by one ulp
    T h = convert<T>(high);
    if (static_cast<double>(load(&h)) < high) return h;
    const bool negative = (h.bits & 0x8000u) != 0;
    const uint16_t magnitude = h.bits & 0x7fffu;
    if (magnitude == 0)
      h.bits = 0x8001u;  // below +-0: the smallest negative subnormal
    else
      h.bits = static_cast<uint16_t>(negative ? h.bits + 1 : h.bits - 1);
    return h;
  }
}

}  // namespace

void random(RandomKind kind, DType dtype, void* out, int64_t n, double a, double b, PhiloxState state) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    parallel_for(n, kChunk, [&](int64_t begin, int64_t end) {
      if (kind == RandomKind::Normal) {
        for (int64_t i = begin; i < end; ++i)
          store(p + i, a + b * static_cast<double>(philox_normal(state.seed, state.offset + static_cast<uint64_t>(i))));
        return;
      }
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // randint: low + (64 random bits mod span); the bias is below span / 2^64.
        const int64_t low = static_cast<int64_t>(a);
        const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(b) - low);
        for (int64_t i = begin; i < end; ++i) {
          const Philox4 r = philox4x32_10(state.offset + static_cast<uint64_t>(i), state.seed);
          const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
          p[i] = static_cast<T>(low + static_cast<int64_t>(bits % span));
        }
      } else {
        float u[kChunk];
        for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
          const int64_t count = std::min(kChunk, end - c0);
          philox_uniform_fill(state.seed, state.offset + static_cast<uint64_t>(c0), count, u);
          for (int64_t j = 0; j < count; ++j) {
            store(p + c0 + j, a + (b - a) * static_cast<double>(u[j]));
            if constexpr (!std::is_same_v<T, bool>) {
              if (b > a && static_cast<double>(load(p + c0 + j)) >= b) p[c0 + j] = value_below<T>(b);
            }
          }
        }
      }
    });
  });
}

void dropout_mask(uint8_t* keep, int64_t n, double p, PhiloxState state) {
  const float threshold = static_cast<float>(p);
  parallel_for(n, kChunk, [&](int64_t begin, int64_t end) {
    float u[kChunk];
    for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
      const int64_t count = std::min(kChunk, end - c0);
      philox_uniform_fill(state.seed, state.offset + static_cast<uint64_t>(c0), count, u);
      for (int64_t j = 0; j < count; ++j) keep[c0 + j] = u[j] >= threshold ? 1 : 0;
    }
  });
}

}  // namespace heed::kernels::cpu
