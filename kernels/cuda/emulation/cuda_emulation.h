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
//  * A thread that exits while others of its block wait at __syncthreads aborts the run (a
//    hang or undefined behaviour on a GPU).
//  * Every cudaMalloc block is followed by a 256-byte guard zone of 0xFF bytes: reading past
//    the end gives NaN, and a write into it aborts at the end of the kernel (or copy, memset or
//    cudaFree) that made it, naming the block.
//  * Warps: the 32 threads of consecutive linear index form a warp. __syncwarp, __shfl_sync,
//    __shfl_xor_sync and the nvcuda::wmma operations are warp collectives: every thread of the
//    warp must reach the same one (full mask only), or the run aborts naming both places.
//  * nvcuda::wmma (16x16x16 tiles of __half or __nv_bfloat16, float accumulators): a fragment
//    holds 8 elements per lane; element e of lane l is element (r, c) = ((8l + e) / 16,
//    (8l + e) % 16) of the logical tile (row-major numbering whatever the memory layout), the
//    same mapping for load, store, fill and mma, so element-wise fragment code that relies on
//    a mapping would work here and not on a GPU only if it assumed another one; portable code
//    (as heed's) never does. mma_sync multiplies the exact 16-bit values and accumulates in
//    float32 in k order, starting from C. Loads and stores check the 32-byte alignment and the
//    leading dimension (a multiple of 16 bytes) that the hardware requires.
//  * The cuBLAS substitute accumulates float32 GEMMs in float32 (float64 ones in float64), in
//    k order; TF32 mode rounds the operands to 10 mantissa bits first. The cuBLASLt substitute
//    (cublasLtMatmul with the BIAS and BGRADB epilogues only) accumulates the same way and
//    checks its layouts, pointers and attributes as the cuBLAS one does.
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
  cudaDevAttrComputeCapabilityMajor = 75,
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

// ---- cuBLASLt subset (cublasLtMatmul with the BIAS, GELU_AUX(_BIAS) and BGRADB epilogues) ------
// Column-major as cuBLASLt: D (m, n) = alpha op(A) op(B) + beta C, accumulated as the cuBLAS
// substitute does (float32 in k order; float64 for CUBLAS_COMPUTE_64F); BIAS adds bias[i] to
// row i of alpha op(A) op(B) before D is rounded to its type; GELU_AUX(_BIAS) writes that value
// z to the auxiliary matrix (D's type, its own leading dimension, a multiple of 8 as cuBLASLt
// requires) and the tanh-form GELU of z (in the compute type) to D; BGRADB writes
// sum_p op(B)[p, j] (accumulated likewise) to the bias pointer, in D's type. C must be D (heed
// never passes another), every other epilogue is NOT_SUPPORTED, and the heuristic always offers
// one algorithm.

typedef struct heed_emu_stream* cudaStream_t;
struct heed_emu_cublaslt_context;
typedef heed_emu_cublaslt_context* cublasLtHandle_t;
struct heed_emu_lt_desc;
typedef heed_emu_lt_desc* cublasLtMatmulDesc_t;
struct heed_emu_lt_layout;
typedef heed_emu_lt_layout* cublasLtMatrixLayout_t;
struct heed_emu_lt_preference;
typedef heed_emu_lt_preference* cublasLtMatmulPreference_t;
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum cublasLtEpilogue_t : int {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_BGRADB = 512,
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                                    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

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

// ---- warps ------------------------------------------------------------------------------------

namespace heed_emu {

// The calling thread's lane (0..31) within its warp.
unsigned lane_id();
// A warp collective named `what`: returns once every thread of the calling warp has reached a
// collective of the same name (aborts on divergence, or on a mask other than the whole warp).
void sync_warp(unsigned mask, const char* what);
// Deposits `value` for this lane, waits for the warp, returns the value lane `source` deposited.
uint64_t exchange_lane(unsigned mask, uint64_t value, unsigned source, const char* what);

// The per-warp scratch board that mma_sync uses (256 floats for each operand).
struct MmaBoard {
  float a[256], b[256], c[256];
};
MmaBoard& mma_board();

template <typename T>
T shuffle(unsigned mask, T value, unsigned source, const char* what) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  __builtin_memcpy(&bits, &value, sizeof(T));
  bits = exchange_lane(mask, bits, source, what);
  T out;
  __builtin_memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace heed_emu

inline void __syncwarp(unsigned mask = 0xffffffffu) { ::heed_emu::sync_warp(mask, "__syncwarp"); }
template <typename T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
  if (width != 32) ::heed_emu::sync_warp(0u, "__shfl_sync with a width other than 32 (not emulated)");
  return ::heed_emu::shuffle(mask, value, static_cast<unsigned>(source_lane) & 31u, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  if (width != 32) ::heed_emu::sync_warp(0u, "__shfl_xor_sync with a width other than 32 (not emulated)");
  return ::heed_emu::shuffle(mask, value, (::heed_emu::lane_id() ^ static_cast<unsigned>(lane_mask)) & 31u,
                             "__shfl_xor_sync");
}

// ---- 16-bit floats (cuda_fp16.h / cuda_bf16.h subset), rounded to nearest even ----------------

namespace heed_emu {
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bfloat16_bits(float f);
float bfloat16_bits_to_float(uint16_t b);
}  // namespace heed_emu

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __half __float2half(float f) { return __half{::heed_emu::float_to_half_bits(f)}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) { return ::heed_emu::half_bits_to_float(h.bits); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16{::heed_emu::float_to_bfloat16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return ::heed_emu::bfloat16_bits_to_float(b.bits); }

// ---- nvcuda::wmma (16x16x16, 16-bit operands, float accumulators) -----------------------------

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator models 16x16x16 wmma tiles only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>),
                "the emulator models __half / __nv_bfloat16 operands with float accumulators");
  static constexpr int num_elements = 8;
  T x[num_elements];
};

namespace detail {
// (row, column) in the logical 16x16 tile of element e of this lane's fragment.
inline void element_position(int e, int* row, int* col) {
  const int linear = static_cast<int>(::heed_emu::lane_id()) * 8 + e;
  *row = linear / 16;
  *col = linear % 16;
}
void check_access(const void* ptr, unsigned ldm, size_t element_bytes, const char* what);
inline float as_float(float v) { return v; }
inline float as_float(__half v) { return __half2float(v); }
inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
}  // namespace detail

template <typename T, typename Layout, typename Use>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* ptr, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "accumulator loads take a layout_t");
  detail::check_access(ptr, ldm, sizeof(T), "wmma::load_matrix_sync");
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element_position(e, &r, &c);
    f.x[e] = std::is_same_v<Layout, row_major> ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* ptr, unsigned ldm,
                             layout_t layout) {
  detail::check_access(ptr, ldm, sizeof(float), "wmma::load_matrix_sync");
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element_position(e, &r, &c);
    f.x[e] = layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

inline void store_matrix_sync(float* ptr, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::check_access(ptr, ldm, sizeof(float), "wmma::store_matrix_sync");
  for (int e = 0; e < 8; ++e) {
    int r, c;
    detail::element_position(e, &r, &c);
    (layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r]) = f.x[e];
  }
}

template <typename Use, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, V value) {
  for (int e = 0; e < 8; ++e) f.x[e] = static_cast<T>(value);
}

template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  ::heed_emu::MmaBoard& board = ::heed_emu::mma_board();
  for (int e = 0; e < 8; ++e) {
    int r, col;
    detail::element_position(e, &r, &col);
    board.a[r * 16 + col] = detail::as_float(a.x[e]);
    board.b[r * 16 + col] = detail::as_float(b.x[e]);
    board.c[r * 16 + col] = c.x[e];
  }
  ::heed_emu::sync_warp(0xffffffffu, "wmma::mma_sync");
  float out[8];
  for (int e = 0; e < 8; ++e) {
    int r, col;
    detail::element_position(e, &r, &col);
    float acc = board.c[r * 16 + col];
    for (int k = 0; k < 16; ++k) acc += board.a[r * 16 + k] * board.b[k * 16 + col];
    out[e] = acc;
  }
  ::heed_emu::sync_warp(0xffffffffu, "wmma::mma_sync (done)");
  for (int e = 0; e < 8; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma

#define threadIdx (::heed_emu::current_thread().thread_idx)
#define blockIdx (::heed_emu::current_thread().block_idx)
#define blockDim (::heed_emu::current_thread().block_dim)
#define gridDim (::heed_emu::current_thread().grid_dim)

inline void __syncthreads() { ::heed_emu::sync_threads(); }
