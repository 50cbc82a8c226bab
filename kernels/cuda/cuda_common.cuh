// kernels/cuda/cuda_common.cuh — what every CUDA kernel file shares: the runtime (real, or the
// CPU emulator of kernels/cuda/emulation when HEED_CUDA_EMULATION is defined), error checks,
// launch helpers, element types with the CPU's exact conversions, strided geometry, block
// reductions and the Philox4x32-10 generator.
//
// Invariants:
//  * Element conversions are bit-for-bit those of kernels/cpu (cpu_common.h, heed/dtype.h):
//    16-bit floats compute in float32 and round to nearest even; float -> integer saturates
//    and NaN gives 0.
//  * Every reduction combines values in an order fixed by the problem shape (block size,
//    chunking), never by timing: results are deterministic run to run.
//  * philox4x32_10 / philox_uniform / philox_normal are the HEED_HD functions of heed/philox.h,
//    the same code the CPU runs: same seed, same numbers.
//  * Kernels are launched through HEED_LAUNCH (the emulator cannot parse <<< >>>), use
//    dynamic shared memory only (dynamic_shared<T>(), 128-byte aligned), and __syncthreads as
//    their only cross-thread synchronisation, except the warp collectives (__syncwarp,
//    shuffles, wmma) of the tensor-core kernels, which the emulator models too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(HEED_CUDA_EMULATION)
#include "kernels/cuda/emulation/cuda_emulation.h"
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#include "heed/hd.h"
#include "heed/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

#if defined(HEED_CUDA_EMULATION)
#define HEED_LAUNCH(grid, block, shared_bytes, ...) \
  ::heed_emu::Launcher((grid), (block), (shared_bytes), #__VA_ARGS__).bind(__VA_ARGS__)
#else
#define HEED_LAUNCH(grid, block, shared_bytes, ...) __VA_ARGS__<<<(grid), (block), (shared_bytes)>>>
#endif

namespace heed::kernels::cuda {

// ---- unfused products -----------------------------------------------------------------------

// a * b rounded to the type, never fused into a following addition. nvcc (and GCC for the
// emulator) contract a * b + c into one fma by default; where the same product is also used
// rounded elsewhere (a mean subtracted from it), contraction would leave a rounding residue
// instead of an exact zero.
HEED_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float r = a * b;
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(r));  // the product leaves the optimiser's sight: no fma across this point
#else
  volatile float v = r;
  r = v;
#endif
  return r;
#endif
}
HEED_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double r = a * b;
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(r));
#else
  volatile double v = r;
  r = v;
#endif
  return r;
#endif
}

// ---- error checks (host) --------------------------------------------------------------------

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error state where it is not sticky
    throw_cuda_error(call, cudaGetErrorString(status), cudaGetErrorName(status));
  }
}
#define HEED_CUDA_CHECK(call) ::heed::kernels::cuda::check((call), #call)

// After a launch: reports launch errors at once; with HEED_CUDA_SYNC=1 in the environment
// also waits for the kernel so an execution error names the kernel that caused it.
void check_launch(const char* kernel);

void check_cublas(cublasStatus_t status, const char* call);
#define HEED_CUBLAS_CHECK(call) ::heed::kernels::cuda::check_cublas((call), #call)

// Device memory from the caching allocator, for kernel scratch space (stream-ordered reuse is
// safe: everything runs on the default stream).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t nbytes) : nbytes_(nbytes), data_(nbytes ? allocate(nbytes) : nullptr) {}
  ~DeviceBuffer() {
    if (data_) deallocate(data_, nbytes_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  size_t nbytes_;
  void* data_;
};

// Threads per block of the element-wise kernels, and a grid for n elements (grid-stride loops
// cover whatever the grid does not).
inline constexpr int kThreads = 256;
unsigned grid_for(int64_t n, int threads = kThreads);
// The largest dynamic shared memory a block may use (opt-in limit) on the current device.
size_t max_shared_bytes();
// Whether the device has float16 and bfloat16 tensor cores with wmma (compute capability 8.0+).
bool tensor_cores_16bit();

// ---- element types ---------------------------------------------------------------------------

// 16-bit float storage, converted exactly as heed/dtype.h does (portable code, no intrinsics).
struct HalfBits {
  uint16_t bits;
};
struct BFloat16Bits {
  uint16_t bits;
};

HEED_HD float bits_as_float(uint32_t bits) {
  union {
    uint32_t u;
    float f;
  } v{bits};
  return v.f;
}
HEED_HD uint32_t float_as_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v{f};
  return v.u;
}

HEED_HD uint16_t float_to_half(float f) {
  const uint32_t x = float_as_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x38800000u) {
    const uint32_t exponent = (abs >> 23) - 127 + 15;
    const uint32_t mantissa = abs & 0x7fffffu;
    uint32_t h = (exponent << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);
  const uint32_t exponent = abs >> 23;
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;
  uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

HEED_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_as_float(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

HEED_HD uint16_t float_to_bfloat16(float f) {
  uint32_t x = float_as_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
HEED_HD float bfloat16_to_float(uint16_t b) { return bits_as_float(static_cast<uint32_t>(b) << 16); }

template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<HalfBits> {
  using type = float;
};
template <>
struct ComputeOf<BFloat16Bits> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

template <typename T>
inline constexpr bool is_half_storage_v = std::is_same_v<T, HalfBits> || std::is_same_v<T, BFloat16Bits>;
template <typename T>
inline constexpr bool is_float_storage_v = std::is_floating_point_v<T> || is_half_storage_v<T>;

template <typename T>
HEED_HD compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, HalfBits>)
    return half_to_float(p->bits);
  else if constexpr (std::is_same_v<T, BFloat16Bits>)
    return bfloat16_to_float(p->bits);
  else
    return *p;
}

template <typename I, typename F>
HEED_HD I saturating_cast(F v) {
  if (v != v) return 0;
  if (v <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// Any element value -> T, as cpu::convert does.
template <typename T, typename V>
HEED_HD T convert(V v) {
  if constexpr (std::is_same_v<T, HalfBits>)
    return HalfBits{float_to_half(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BFloat16Bits>)
    return BFloat16Bits{float_to_bfloat16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != V(0);
  else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<V>)
    return saturating_cast<T>(v);
  else
    return static_cast<T>(v);
}

template <typename T, typename V>
HEED_HD void store(T* p, V v) {
  *p = convert<T>(v);
}

template <typename C>
HEED_HD C positive_infinity() {
  return std::numeric_limits<C>::infinity();
}
template <typename C>
HEED_HD C quiet_nan() {
  return std::numeric_limits<C>::quiet_NaN();
}

// Math in the compute type (math_exp, math_log, ...) comes from heed/hd.h.

// ---- host dispatch ---------------------------------------------------------------------------

template <typename F>
void dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    case DType::Float16:
      f(HalfBits{});
      return;
    case DType::BFloat16:
      f(BFloat16Bits{});
      return;
    case DType::Int32:
      f(int32_t{});
      return;
    case DType::Int64:
      f(int64_t{});
      return;
    case DType::Bool:
      f(bool{});
      return;
  }
}

template <typename F>
void dispatch_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    case DType::Float16:
      f(HalfBits{});
      return;
    case DType::BFloat16:
      f(BFloat16Bits{});
      return;
    default:
      unsupported_dtype(kernel, dtype);
  }
}

// ---- strided geometry ------------------------------------------------------------------------

// Up to N operands of one logical shape, with size-1 dims dropped and dims merged where every
// operand is contiguous across them (as cpu::make_loop does), so most loops are 1-D.
template <int N>
struct Geometry {
  int ndim = 1;
  int64_t shape[kMaxDims] = {1};
  int64_t strides[N][kMaxDims] = {};
};

template <int N>
Geometry<N> make_geometry(const StridedView* const (&views)[N]) {
  Geometry<N> g;
  g.ndim = 0;
  const StridedView& first = *views[0];
  for (int d = 0; d < first.ndim; ++d) {
    if (first.shape[d] == 1) continue;
    const int i = g.ndim;
    bool mergeable = i > 0;
    for (int k = 0; k < N && mergeable; ++k) mergeable = g.strides[k][i - 1] == views[k]->strides[d] * first.shape[d];
    if (mergeable) {
      g.shape[i - 1] *= first.shape[d];
      for (int k = 0; k < N; ++k) g.strides[k][i - 1] = views[k]->strides[d];
      continue;
    }
    g.shape[i] = first.shape[d];
    for (int k = 0; k < N; ++k) g.strides[k][i] = views[k]->strides[d];
    ++g.ndim;
  }
  if (g.ndim == 0) {
    g.ndim = 1;
    g.shape[0] = 1;
    for (int k = 0; k < N; ++k) g.strides[k][0] = 0;
  }
  return g;
}

// Element offsets (in elements) of linear index `linear` for every operand.
template <int N>
HEED_HD void offsets_of(const Geometry<N>& g, int64_t linear, int64_t (&offsets)[N]) {
  for (int k = 0; k < N; ++k) offsets[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t size = g.shape[d];
    const int64_t coord = d == 0 ? linear : linear % size;
    linear = d == 0 ? 0 : linear / size;
    for (int k = 0; k < N; ++k) offsets[k] += coord * g.strides[k][d];
  }
}

inline int64_t numel_of(const StridedView& v) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  return n;
}

// ---- device helpers --------------------------------------------------------------------------

// The block's dynamic shared memory (sized at launch).
template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
#if defined(HEED_CUDA_EMULATION)
  return reinterpret_cast<T*>(::heed_emu::dynamic_shared_memory());
#else
  extern __shared__ __align__(128) unsigned char heed_dynamic_shared_memory[];
  return reinterpret_cast<T*>(heed_dynamic_shared_memory);
#endif
}

__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Sum over the block of one value per thread, in a fixed tree order; blockDim.x must be a
// power of two and `scratch` hold blockDim.x values. Every thread gets the total.
template <typename A>
__device__ A block_sum(A value, A* scratch) {
  const unsigned t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) scratch[t] = scratch[t] + scratch[t + s];
    __syncthreads();
  }
  const A total = scratch[0];
  __syncthreads();
  return total;
}

// Reduces over the block with `combine` (order-independent results need an associative and
// commutative rule) in a fixed tree; blockDim.x is a power of two and `scratch` holds
// blockDim.x values. Every thread gets the total.
template <typename Acc, typename Combine>
__device__ Acc block_reduce(Acc value, Acc* scratch, Combine combine) {
  const unsigned t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) scratch[t] = combine(scratch[t], scratch[t + s]);
    __syncthreads();
  }
  const Acc total = scratch[0];
  __syncthreads();
  return total;
}

// Threads for a block that works on one row of `cols` elements: a power of two in [32, 256].
inline int row_threads(int64_t cols) {
  int threads = 32;
  while (threads < 256 && threads < cols) threads *= 2;
  return threads;
}

// ---- Philox4x32-10: heed/philox.h (host and device, one copy) ----------------------------------

// philox4x32_10, philox_uniform and philox_normal are found in the enclosing namespace heed.

}  // namespace heed::kernels::cuda
