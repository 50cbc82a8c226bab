// kernels/cpu/blas_call.h — one single-threaded BLAS gemm call.
//
// Invariant: OpenBLAS's OpenMP build follows omp_get_max_threads() on every call and its
// multi-threaded sgemm rounds differently for different thread counts, so every call goes
// through here: inside a parallel region OpenBLAS is single-threaded already; outside, the
// OpenMP thread count is set to 1 for the call and restored after.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <type_traits>

namespace heed::kernels::cpu {

// C (m,n) = alpha * op(A) op(B) + beta * C, row-major.
template <typename T>
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const bool outside = !omp_in_parallel();
  const int saved = outside ? omp_get_max_threads() : 1;
  if (outside && saved != 1) omp_set_num_threads(1);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  if (outside && saved != 1) omp_set_num_threads(saved);
}

}  // namespace heed::kernels::cpu
