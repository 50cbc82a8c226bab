// kernels/cuda/cuda_backend.cu — CUDA runtime probing, the caching device allocator, host
// transfers, and the first kernels (fill, strided copy with dtype conversion).
//
// Invariants: every CUDA call is checked and a failure becomes heed::Error naming the call
// and the runtime's message; device memory is reused by size class, so steady-state steps
// do not call cudaMalloc/cudaFree; all work is on the default stream of device 0 for now.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_backend.h"

namespace heed::kernels::cuda {

namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state where possible
    throw_cuda_error(call, cudaGetErrorString(status), cudaGetErrorName(status));
  }
}
#define HEED_CUDA_CHECK(call) check((call), #call)

size_t size_class(size_t n) {
  if (n <= 4096) return n <= 512 ? 512 : (n + 511) / 512 * 512;
  size_t power = 1;
  while (power < n) power <<= 1;
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

struct DeviceCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
};

DeviceCache& cache() {
  static DeviceCache* instance = new DeviceCache();
  return *instance;
}

void* allocate(size_t nbytes) {
  const size_t cls = size_class(nbytes);
  {
    DeviceCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(cls);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, cls);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    DeviceCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto& [size, list] : c.free_blocks)
      for (void* q : list) cudaFree(q);
    c.free_blocks.clear();
    status = cudaMalloc(&p, cls);
  }
  check(status, "cudaMalloc");
  return p;
}

void deallocate(void* ptr, size_t nbytes) {
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.free_blocks[size_class(nbytes)].push_back(ptr);
}

void copy_host(void* dst, const void* src, size_t nbytes, bool to_host) {
  if (nbytes == 0) return;
  HEED_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
}

// ---- element kernels ------------------------------------------------------------------------

struct Geometry {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

Geometry geometry_of(const StridedView& v) {
  Geometry g{};
  g.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    g.shape[i] = v.shape[i];
    g.strides[i] = v.strides[i];
  }
  return g;
}

__device__ int64_t element_offset(const Geometry& g, int64_t linear) {
  int64_t offset = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t coord = linear % g.shape[d];
    linear /= g.shape[d];
    offset += coord * g.strides[d];
  }
  return offset;
}

template <typename T> __device__ float to_float(T v) { return static_cast<float>(v); }
template <> __device__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ double to_double(T v) { return static_cast<double>(to_float(v)); }
template <> __device__ double to_double<double>(double v) { return v; }
template <> __device__ double to_double<int64_t>(int64_t v) { return static_cast<double>(v); }
template <> __device__ double to_double<int32_t>(int32_t v) { return static_cast<double>(v); }
template <> __device__ double to_double<bool>(bool v) { return v ? 1.0 : 0.0; }

template <typename T> __device__ T from_double(double v) { return static_cast<T>(v); }
template <> __device__ __half from_double<__half>(double v) { return __float2half_rn(static_cast<float>(v)); }
template <> __device__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <> __device__ bool from_double<bool>(double v) { return v != 0.0; }
template <> __device__ int64_t from_double<int64_t>(double v) {
  if (v != v) return 0;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  return static_cast<int64_t>(v);
}
template <> __device__ int32_t from_double<int32_t>(double v) {
  if (v != v) return 0;
  if (v <= -2147483648.0) return INT32_MIN;
  if (v >= 2147483647.0) return INT32_MAX;
  return static_cast<int32_t>(v);
}

template <typename T>
__global__ void fill_kernel(T* data, Geometry g, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[element_offset(g, i)] = value;
}

template <typename Dst, typename Src>
__global__ void copy_kernel(Dst* dst, Geometry gd, const Src* src, Geometry gs, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[element_offset(gd, i)] = from_double<Dst>(to_double(src[element_offset(gs, i)]));
}

template <typename F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Float16: f(__half{}); return;
    case DType::BFloat16: f(__nv_bfloat16{}); return;
    case DType::Int32: f(int32_t{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::Bool: f(bool{}); return;
  }
}

int64_t numel_of(const StridedView& v) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  return n;
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
}

void fill(const StridedView& dst, double value) {
  const int64_t n = numel_of(dst);
  if (n == 0) return;
  dispatch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, __half>) v = __float2half_rn(static_cast<float>(value));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) v = __float2bfloat16_rn(static_cast<float>(value));
    else v = static_cast<T>(value);
    fill_kernel<T><<<blocks_for(n), 256>>>(static_cast<T*>(dst.data), geometry_of(dst), n, v);
  });
  HEED_CUDA_CHECK(cudaGetLastError());
}

void copy(const StridedView& dst, const StridedView& src) {
  const int64_t n = numel_of(dst);
  if (n == 0) return;
  dispatch(dst.dtype, [&](auto dtag) {
    dispatch(src.dtype, [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      copy_kernel<D, S><<<blocks_for(n), 256>>>(static_cast<D*>(dst.data), geometry_of(dst),
                                                static_cast<const S*>(src.data), geometry_of(src), n);
    });
  });
  HEED_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool compiled() { return true; }

int device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (reason) *reason = cudaGetErrorString(status);
    cudaGetLastError();
    return 0;
  }
  if (count == 0 && reason) *reason = "no CUDA device found";
  return count;
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.allocate = &allocate;
    t.deallocate = &deallocate;
    t.copy_host = &copy_host;
    t.fill = &fill;
    t.copy = &copy;
    return t;
  }();
  return table;
}

}  // namespace heed::kernels::cuda
