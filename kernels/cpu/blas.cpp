// kernels/cpu/blas.cpp — gemm on OpenBLAS (the OpenMP build, sharing heed's thread pool).
//
// Invariants: operands are passed with transpose flags and leading dimensions, never
// copied here; many small batched products run one per thread (OpenBLAS then runs
// single-threaded inside the parallel region), large ones use OpenBLAS's own threads.
#include <cblas.h>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

void set_blas_threads(int n) { openblas_set_num_threads(n); }

namespace {
template <typename T>
void gemm_one(const GemmArgs& g, const T* a, const T* b, T* c) {
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const auto m = static_cast<blasint>(g.m), n = static_cast<blasint>(g.n), k = static_cast<blasint>(g.k);
  const auto lda = static_cast<blasint>(g.lda), ldb = static_cast<blasint>(g.ldb), ldc = static_cast<blasint>(g.ldc);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(g.alpha), a, lda, b, ldb,
                static_cast<float>(g.beta), c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, g.alpha, a, lda, b, ldb, g.beta, c, ldc);
  }
}

template <typename T>
void gemm_typed(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  const bool per_thread = g.batch > 1 && flops < 2.0 * 192 * 192 * 192 && max_threads() > 1;
  if (per_thread) {
    parallel_for(g.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        gemm_one(g, a + i * g.batch_stride_a, b + i * g.batch_stride_b, c + i * g.batch_stride_c);
    });
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i)
    gemm_one(g, a + i * g.batch_stride_a, b + i * g.batch_stride_b, c + i * g.batch_stride_c);
}
}  // namespace

void gemm(const GemmArgs& args) {
  constexpr int64_t kMaxBlasInt = 2147483647;
  HEED_CHECK(args.m <= kMaxBlasInt && args.n <= kMaxBlasInt && args.k <= kMaxBlasInt, "gemm",
             "matrix sizes ({}, {}, {}) exceed the 32-bit BLAS interface", args.m, args.n, args.k);
  if (args.dtype == kFloat32) return gemm_typed<float>(args);
  if (args.dtype == kFloat64) return gemm_typed<double>(args);
  fail("gemm", "the CPU gemm has no {} version (16-bit operands are widened by matmul)", dtype_name(args.dtype));
}

}  // namespace heed::kernels::cpu
