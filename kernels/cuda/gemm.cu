// kernels/cuda/gemm.cu — gemm through cuBLAS (cublasGemmStridedBatchedEx).
//
// Row-major C = alpha op(A) op(B) + beta C is computed as the column-major product
// C^T = op(B)^T op(A)^T: a row-major matrix read column-major is its transpose, so B goes
// first with trans_b's flag and A second with trans_a's, dimensions (n, m, k), leading
// dimensions unchanged.
// Invariants: float32 accumulates in float32 (TF32 tensor cores only after
// heed::cuda::set_allow_tf32(true)); float64 in float64; float16/bfloat16 operands and results
// with float32 accumulation. Batches larger than INT_MAX are split. One cuBLAS handle for the
// process, on the default stream; every status is checked.
#include <climits>
#include <mutex>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    HEED_CUBLAS_CHECK(cublasCreate(&created));
    return created;
  }();
  return h;
}

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    const std::string message = std::string(what) + " " + std::to_string(v) + " does not fit cuBLAS's 32-bit int";
    throw_error("gemm", message.c_str());
  }
  return static_cast<int>(v);
}

}  // namespace

void gemm(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  cudaDataType type;
  cublasComputeType_t compute;
  switch (g.dtype) {
    case DType::Float32:
      type = CUDA_R_32F;
      compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::Float64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::Float16:
      type = CUDA_R_16F;
      compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::BFloat16:
      type = CUDA_R_16BF;
      compute = CUBLAS_COMPUTE_32F;
      break;
    default:
      unsupported_dtype("gemm", g.dtype);
  }
  const int m = checked_int(g.m, "m"), n = checked_int(g.n, "n"), k = checked_int(g.k, "k");
  const int lda = checked_int(g.lda, "lda"), ldb = checked_int(g.ldb, "ldb"), ldc = checked_int(g.ldc, "ldc");
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const double alpha64 = g.alpha, beta64 = g.beta;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64) : &beta32;
  const size_t element = dtype_size(g.dtype);
  for (int64_t first = 0; first < g.batch; first += INT_MAX) {
    const int count = static_cast<int>(std::min<int64_t>(g.batch - first, INT_MAX));
    const char* a = static_cast<const char*>(g.a) + static_cast<size_t>(first * g.batch_stride_a) * element;
    const char* b = static_cast<const char*>(g.b) + static_cast<size_t>(first * g.batch_stride_b) * element;
    char* c = static_cast<char*>(g.c) + static_cast<size_t>(first * g.batch_stride_c) * element;
    HEED_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle(), g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, alpha, b, type, ldb,
                                                 g.batch_stride_b, a, type, lda, g.batch_stride_a, beta, c, type, ldc,
                                                 g.batch_stride_c, count, compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace heed::kernels::cuda
