// kernels/cuda/cuda_backend.cu — CUDA runtime probing, the caching device allocator, host
// transfers, fill, strided copy with dtype conversion, and the kernel table.
//
// Invariants: every CUDA call is checked and a failure becomes heed::Error naming the call
// and the runtime's message; device memory is reused by size class, so steady-state steps
// do not call cudaMalloc/cudaFree; all work is on the default stream of device 0, so a freed
// block may be handed out again at once (later kernels run after earlier ones).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

// ---- error checks, launch geometry ------------------------------------------------------------

namespace {
bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("HEED_CUDA_SYNC");
    return v && *v && *v != '0';
  }();
  return sync;
}

int multiprocessors() {
  static const int count = [] {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
      cudaGetLastError();
      value = 108;
    }
    return std::max(value, 1);
  }();
  return count;
}
}  // namespace

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
  if (sync_after_launch()) check(cudaDeviceSynchronize(), kernel);
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_cuda_error(call, cublasGetStatusString(status), cublasGetStatusName(status));
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t wanted = (std::max<int64_t>(n, 1) + threads - 1) / threads;
  // Enough blocks to fill the device several times over; grid-stride loops do the rest.
  const int64_t cap = static_cast<int64_t>(multiprocessors()) * 32;
  return static_cast<unsigned>(std::min(wanted, cap));
}

size_t max_shared_bytes() {
  static const size_t bytes = [] {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess) {
      cudaGetLastError();
      value = 48 * 1024;
    }
    return static_cast<size_t>(value);
  }();
  return bytes;
}

bool tensor_cores_16bit() {
  static const bool present = [] {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major >= 8;
  }();
  return present;
}

void synchronize() { HEED_CUDA_CHECK(cudaDeviceSynchronize()); }

namespace {
std::atomic<bool> tf32_allowed{false};
}
void set_allow_tf32(bool allow) { tf32_allowed = allow; }
bool allow_tf32() { return tf32_allowed; }

// ---- the caching allocator ------------------------------------------------------------------

namespace {

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

}  // namespace

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
  if (status == cudaErrorMemoryAllocation) {  // give the cached blocks back and retry once
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

// ---- fill and copy ----------------------------------------------------------------------------

namespace {

template <typename T>
__global__ void fill_kernel(T* data, Geometry<1> g, int64_t n, T value) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[1];
    offsets_of(g, i, offset);
    data[offset[0]] = value;
  }
}

template <typename Dst, typename Src>
__global__ void copy_kernel(Dst* dst, const Src* src, Geometry<2> g, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[2];
    offsets_of(g, i, offset);
    if constexpr (std::is_same_v<Dst, Src>)
      dst[offset[0]] = src[offset[1]];
    else
      store(dst + offset[0], load(src + offset[1]));
  }
}

// Same-size element copies move raw bits (one instantiation per element size).
template <int kBytes>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = uint8_t;
};
template <>
struct BitsOf<2> {
  using type = uint16_t;
};
template <>
struct BitsOf<4> {
  using type = uint32_t;
};
template <>
struct BitsOf<8> {
  using type = uint64_t;
};

}  // namespace

void fill(const StridedView& dst, double value) {
  const int64_t n = numel_of(dst);
  if (n == 0) return;
  const StridedView* views[1] = {&dst};
  const Geometry<1> g = make_geometry(views);
  dispatch_all(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    using Bits = typename BitsOf<sizeof(T)>::type;
    Bits bits;
    static_assert(sizeof(Bits) == sizeof(T));
    std::memcpy(&bits, &v, sizeof(T));
    HEED_LAUNCH(grid_for(n), kThreads, 0, fill_kernel<Bits>)(static_cast<Bits*>(dst.data), g, n, bits);
  });
  check_launch("fill");
}

void copy(const StridedView& dst, const StridedView& src) {
  const int64_t n = numel_of(dst);
  if (n == 0) return;
  const StridedView* views[2] = {&dst, &src};
  const Geometry<2> g = make_geometry(views);
  if (dst.dtype == src.dtype) {
    dispatch_all(dst.dtype, [&](auto tag) {
      using Bits = typename BitsOf<sizeof(decltype(tag))>::type;
      HEED_LAUNCH(grid_for(n), kThreads, 0, copy_kernel<Bits, Bits>)
      (static_cast<Bits*>(dst.data), static_cast<const Bits*>(src.data), g, n);
    });
  } else {
    dispatch_all(dst.dtype, [&](auto dtag) {
      dispatch_all(src.dtype, [&](auto stag) {
        using D = decltype(dtag);
        using S = decltype(stag);
        if constexpr (!std::is_same_v<D, S>) HEED_LAUNCH(grid_for(n), kThreads, 0, copy_kernel<D, S>)
        (static_cast<D*>(dst.data), static_cast<const S*>(src.data), g, n);
      });
    });
  }
  check_launch("copy");
}

// ---- probing and the table ------------------------------------------------------------------

bool compiled() { return true; }

bool emulated() {
#if defined(HEED_CUDA_EMULATION)
  return true;
#else
  return false;
#endif
}

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
#define HEED_CUDA_KERNEL(name, type) t.name = &cuda::name;
    HEED_FOR_EACH_KERNEL(HEED_CUDA_KERNEL)
#undef HEED_CUDA_KERNEL
    return t;
  }();
  return table;
}

}  // namespace heed::kernels::cuda
