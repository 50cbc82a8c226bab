// kernels/cuda/random.cu — Philox random fills and dropout masks on the GPU.
//
// Invariants: element i depends only on (seed, offset + i) through the device ports of
// heed::philox_uniform / philox_normal / philox4x32_10 (cuda_common.cuh), with the CPU's
// formulas and conversions, so a seed gives the same numbers and the same dropout masks on
// both devices (uniforms, masks and integers bit-identical; normals go through double
// log/sqrt/sin/cos, whose last-bit differences between the device and host math libraries
// very rarely change the float result). Uniform draws lie in [low, high).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

// The largest value of T strictly below `high` (cpu/random.cpp's value_below).
template <typename T>
T value_below(double high) {
  if constexpr (std::is_same_v<T, float>) {
    const float h = static_cast<float>(high);
    return static_cast<double>(h) >= high ? std::nextafter(h, -INFINITY) : h;
  } else if constexpr (std::is_same_v<T, double>) {
    return std::nextafter(high, -INFINITY);
  } else if constexpr (is_half_storage_v<T>) {
    T h = convert<T>(high);
    if (static_cast<double>(load(&h)) < high) return h;
    const bool negative = (h.bits & 0x8000u) != 0;
    const uint16_t magnitude = h.bits & 0x7fffu;
    if (magnitude == 0)
      h.bits = 0x8001u;
    else
      h.bits = static_cast<uint16_t>(negative ? h.bits + 1 : h.bits - 1);
    return h;
  } else {
    return T{};
  }
}

template <typename T>
__global__ void normal_kernel(T* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    store(out + i, mean + stddev * static_cast<double>(philox_normal(seed, offset + static_cast<uint64_t>(i))));
}

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, double low, double high, T below_high, uint64_t seed,
                               uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float u = philox_uniform(seed, offset + static_cast<uint64_t>(i));
    store(out + i, low + (high - low) * static_cast<double>(u));
    if constexpr (!std::is_same_v<T, bool>) {
      if (high > low && static_cast<double>(load(out + i)) >= high) out[i] = below_high;
    }
  }
}

template <typename T>
__global__ void randint_kernel(T* out, int64_t n, int64_t low, uint64_t span, uint64_t seed, uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i), seed);
    const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    out[i] = static_cast<T>(low + static_cast<int64_t>(bits % span));
  }
}

__global__ void dropout_mask_kernel(uint8_t* keep, int64_t n, float threshold, uint64_t seed, uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    keep[i] = philox_uniform(seed, offset + static_cast<uint64_t>(i)) >= threshold ? 1 : 0;
}

}  // namespace

void random(RandomKind kind, DType dtype, void* out, int64_t n, double a, double b, PhiloxState state) {
  if (n <= 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    if (kind == RandomKind::Normal) {
      HEED_LAUNCH(grid_for(n), kThreads, 0, normal_kernel<T>)(p, n, a, b, state.seed, state.offset);
      return;
    }
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const int64_t low = static_cast<int64_t>(a);
      const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(b) - low);
      if (span == 0) throw_error("random", "randint needs high > low");
      HEED_LAUNCH(grid_for(n), kThreads, 0, randint_kernel<T>)(p, n, low, span, state.seed, state.offset);
    } else {
      HEED_LAUNCH(grid_for(n), kThreads, 0, uniform_kernel<T>)(p, n, a, b, value_below<T>(b), state.seed, state.offset);
    }
  });
  check_launch("random");
}

void dropout_mask(uint8_t* keep, int64_t n, double p, PhiloxState state) {
  if (n <= 0) return;
  HEED_LAUNCH(grid_for(n), kThreads, 0, dropout_mask_kernel)(keep, n, static_cast<float>(p), state.seed, state.offset);
  check_launch("dropout_mask");
}

}  // namespace heed::kernels::cuda
