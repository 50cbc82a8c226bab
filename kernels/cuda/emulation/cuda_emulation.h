// kernels/cuda/emulation/cuda_emulation.h — a CPU emulator of the part of the CUDA runtime and
// cuBLAS that heed's kernels use, so kernels/cuda/*.cu compile as plain C++ and run on a
// machine without a GPU (configure with -DHEED_CUDA_EMULATION=ON; a test build, never a
// product: it is slow and single-threaded).
//
// What it checks, so that kernel bugs show up without a device:
//  * Every CUDA thread of a block runs as its own fiber; __syncthreads is a real barrier (the
//    fibers switch there), and between barriers the threads of a block run in an order that
//    alternates (forward, backward) so a missing barrier lets a reader see stale data.
//  * Dynamic shared memory and every cudaMalloc block start filled with 0xFF bytes (NaN for
//    floats, -1 for integers), so reading memory nobody wrote shows.
//  * Device memory lives in an arena that is inaccessible (PROT_NONE) outside kernels and
//    copies: host code that dereferences a device pointer crashes at once.
//  * Launches check the block size, the grid and the dynamic shared memory against the
//    device limits (more than 48 KiB needs cudaFuncSetAttribute first, as on a GPU); copies
//    check that their pointers are on the side their direction says; cuBLAS calls check
//    their leading dimensions and that matrices are in device memory.
// The emulated device reports 4 multiprocessors (grids stay small, so grid-stride loops are
// exercised) and H100 shared memory limits; HEED_CUDA_EMULATION_DEVICES=0 in the environment
// makes it report no device, HEED_CUDA_EMULATION_SMEM=<bytes> another shared memory limit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// ---- runtime API subset -----------------------------------------------------------------------

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorNoDevice = 100,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaMemoryType : int {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
enum cudaDeviceAttr : int {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaMalloc(void** ptr, size_t nbytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* ptr, int value, size_t nbytes);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);

namespace heed_emu {
using KernelKey = void (*)();
cudaError_t set_max_dynamic_shared(KernelKey kernel, int bytes);
}  // namespace heed_emu

template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return heed_emu::set_max_dynamic_shared(reinterpret_cast<heed_emu::KernelKey>(kernel), value);
}

// ---- cuBLAS subset ----------------------------------------------------------------------------

struct heed_emu_cublas_context;
typedef heed_emu_cublas_context* cublasHandle_t;
enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType_t cudaDataType;
enum cublasComputeType_t : int {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cublasGemmAlgo_t : int { CUBLAS_GEMM_DEFAULT = -1 };

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
const char* cublasGetStatusString(cublasStatus_t status);
const char* cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo);

// ---- kernels ----------------------------------------------------------------------------------

namespace heed_emu {

struct ThreadIndex {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The running emulated thread (aborts outside a kernel).
const ThreadIndex& current_thread();
void sync_threads();
unsigned char* dynamic_shared_memory();

using Body = void (*)(void* closure);
// Runs body(closure) once per thread of the grid; a bad configuration sets the last error.
void run_kernel(const char* name, KernelKey key, dim3 grid, dim3 block, size_t shared_bytes, Body body, void* closure);

template <typename... Params>
class BoundKernel {
 public:
  BoundKernel(const char* name, dim3 grid, dim3 block, size_t shared_bytes, void (*fn)(Params...))
      : name_(name), grid_(grid), block_(block), shared_bytes_(shared_bytes), fn_(fn) {}

  // Arguments convert to the parameter types as a kernel launch converts them.
  template <typename... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "wrong number of kernel arguments");
    using Values = std::tuple<std::decay_t<Params>...>;
    struct Closure {
      void (*fn)(Params...);
      const Values* values;
    };
    const Values values(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
    Closure closure{fn_, &values};
    run_kernel(
        name_, reinterpret_cast<KernelKey>(fn_), grid_, block_, shared_bytes_,
        [](void* p) {
          const Closure* c = static_cast<const Closure*>(p);
          std::apply(c->fn, *c->values);
        },
        &closure);
  }

 private:
  const char* name_;
  dim3 grid_, block_;
  size_t shared_bytes_;
  void (*fn_)(Params...);
};

class Launcher {
 public:
  Launcher(dim3 grid, dim3 block, size_t shared_bytes, const char* name)
      : grid_(grid), block_(block), shared_bytes_(shared_bytes), name_(name) {}
  template <typename... Params>
  BoundKernel<Params...> bind(void (*fn)(Params...)) const {
    return BoundKernel<Params...>(name_, grid_, block_, shared_bytes_, fn);
  }

 private:
  dim3 grid_, block_;
  size_t shared_bytes_;
  const char* name_;
};

}  // namespace heed_emu

#define threadIdx (::heed_emu::current_thread().thread_idx)
#define blockIdx (::heed_emu::current_thread().block_idx)
#define blockDim (::heed_emu::current_thread().block_dim)
#define gridDim (::heed_emu::current_thread().grid_dim)

inline void __syncthreads() { ::heed_emu::sync_threads(); }
