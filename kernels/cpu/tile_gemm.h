// kernels/cpu/tile_gemm.h — the float32 products inside one flash-attention tile (at most 64 x 64
// x head_dim), computed in registers (AVX2, and AVX-512 where the CPU has it) instead of BLAS.
//
// Why: OpenBLAS picks its kernels for the whole library at load time, and on CPUs it does not
// know (Debian 12's 0.3.21 on a recent Xeon, or on AMD's Zen 5) those are its generic SSE3 or
// its AVX2 kernels, which run these small products at a fraction of what the CPU can do. The
// attention tiles need only C (m x n) = alpha * A B + beta * C with A read through two strides
// (so A or A^T comes without a copy) and B row-major with unit column stride (B^T is transposed
// into a scratch buffer by the caller, see flash_attention.cpp), which a small register-blocked
// kernel does as fast as OpenBLAS's kernels of the same width or faster; flash attention uses it
// on every CPU with AVX2 (measured side by side in docs/performance-log.md, stop 33).
//
// Invariants: every C element is one float accumulator, fed p = 0, 1, ..., k-1 in order with
// fused multiply-adds, then alpha * acc (+ beta * C); the AVX-512, AVX2 and scalar paths
// evaluate that same sequence, so the result does not depend on where an element sits in the
// tile, on the vector width or on the thread that computes it. beta == 0 never reads C (it may hold garbage or NaN, as
// BLAS allows).
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu_kernels.h"  // heed_sgemm_supported: the same build and CPU test as heed's sgemm
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace tile_detail {

// Scalar path for any block: the same accumulation order as the vector kernels.
inline void scalar_block(int64_t rows, int64_t cols, int64_t k, float alpha, const float* a, int64_t a_row,
                         int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a[i * a_row + p * a_col], b[p * ldb + j], acc);
      float* out = c + i * ldc + j;
      *out = beta == 0.0f ? alpha * acc : std::fma(beta, *out, alpha * acc);
    }
}

#if HEED_HAVE_AVX2
// Stores one accumulator as alpha * acc (+ beta * out).
inline void store_scaled(float* out, __m256 acc, float alpha, float beta) {
  const __m256 scaled = _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
  _mm256_storeu_ps(out, beta == 0.0f ? scaled : _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(out), scaled));
}

// R rows x 16 columns of C in 2R accumulators (the loops are unrolled, so they stay in
// registers): R = 6 (12 independent chains of fused multiply-adds, the shape of heed's sgemm AVX2
// tile), 4 (8 chains, just what two FMA pipes of latency 4 need) and 1. On a Zen 3, 6-row blocks
// took 7-10% off causal attention fwd + bwd with head dim 128 (B2 H4 T2048 D128, B1 H8 T512
// D128) against 4-row blocks only; with head dims 32 and 64 the two read the same within 2%
// (docs/performance-log.md, stop 48).
template <int R>
inline void block_x16(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p, b += ldb) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    const float* ap = a + p * a_col;
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m256 x = _mm256_broadcast_ss(ap + i * a_row);
      acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    store_scaled(c + i * ldc, acc[i][0], alpha, beta);
    store_scaled(c + i * ldc + 8, acc[i][1], alpha, beta);
  }
}

// The rows of an m-row product that the 16-column loop runs in 6-row blocks: as many as leave a
// multiple of 4 rows for the 4-row blocks where one fewer block does (m = 32: 4 x 6 + 2 x 4, not
// 5 x 6 + 2 single rows, whose 2 chains each wait on the FMA latency).
inline int64_t rows_in_blocks_of_6(int64_t m) {
  int64_t blocks = m / 6;
  if ((m - 6 * blocks) % 4 != 0 && blocks > 0 && (m - 6 * (blocks - 1)) % 4 == 0) --blocks;
  return 6 * blocks;
}

// R rows x 8 columns of C in R accumulators (R = 4, and 1 for the rows left below a multiple of 4).
template <int R>
inline void block_x8(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                     float beta, float* c, int64_t ldc) {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p, b += ldb) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const float* ap = a + p * a_col;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + i * a_row), b0, acc[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) store_scaled(c + i * ldc, acc[i], alpha, beta);
}

// ---- AVX-512 (run only where the CPU has it: tile_gemm_has_avx512) ----------------------------

__attribute__((target("avx512f"))) inline void store_scaled_512(float* out, __m512 acc, float alpha, float beta) {
  const __m512 scaled = _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
  _mm512_storeu_ps(out, beta == 0.0f ? scaled : _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(out), scaled));
}

// 8 rows x 32 columns of C in 16 accumulators (the loops are unrolled, so they stay in registers).
__attribute__((target("avx512f"))) inline void block_8x32(int64_t k, float alpha, const float* a, int64_t a_row,
                                                          int64_t a_col, const float* b, int64_t ldb, float beta,
                                                          float* c, int64_t ldc) {
  __m512 acc[8][2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p, b += ldb) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    const float* ap = a + p * a_col;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m512 x = _mm512_set1_ps(ap[i * a_row]);
      acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    store_scaled_512(c + i * ldc, acc[i][0], alpha, beta);
    store_scaled_512(c + i * ldc + 16, acc[i][1], alpha, beta);
  }
}

// 1 row x 32 columns (the rows left below a multiple of 8).
__attribute__((target("avx512f"))) inline void block_1x32(int64_t k, float alpha, const float* a, int64_t a_col,
                                                          const float* b, int64_t ldb, float beta, float* c) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0;
  for (int64_t p = 0; p < k; ++p, b += ldb) {
    const __m512 x = _mm512_set1_ps(a[p * a_col]);
    c0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b), c0);
    c1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 16), c1);
  }
  store_scaled_512(c, c0, alpha, beta);
  store_scaled_512(c + 16, c1, alpha, beta);
}

// Columns [0, n - n % 32) with the AVX-512 blocks; returns the first column left.
__attribute__((target("avx512f"))) inline int64_t columns_512(int64_t m, int64_t n, int64_t k, float alpha,
                                                              const float* a, int64_t a_row, int64_t a_col,
                                                              const float* b, int64_t ldb, float beta, float* c,
                                                              int64_t ldc) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    int64_t i = 0;
    for (; i + 8 <= m; i += 8)
      block_8x32(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
    for (; i < m; ++i) block_1x32(k, alpha, a + i * a_row, a_col, b + j, ldb, beta, c + i * ldc + j);
  }
  return j;
}
#endif

}  // namespace tile_detail

// Whether this build and CPU can run the AVX-512 blocks (checked once; tile_gemm's avx512 flag
// must only be set where this is true).
inline bool tile_gemm_has_avx512() { return heed_sgemm_supported(SgemmKernel::Avx512); }

// C (m x n, row stride ldc) = alpha * A B + beta * C, where A(i, p) = a[i * a_row + p * a_col]
// and B(p, j) = b[p * ldb + j]. `avx512` runs 32-column blocks in zmm registers first (only where
// tile_gemm_has_avx512()); the result is the same bits either way.
inline void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool avx512 = false) {
  if (m <= 0 || n <= 0) return;
  int64_t j = 0;
#if HEED_HAVE_AVX2
  using namespace tile_detail;
  if (avx512) j = columns_512(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
  for (; j + 16 <= n; j += 16) {
    int64_t i = 0;
    for (const int64_t six_rows = rows_in_blocks_of_6(m); i < six_rows; i += 6)
      block_x16<6>(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
    for (; i + 4 <= m; i += 4)
      block_x16<4>(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
    for (; i < m; ++i) block_x16<1>(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
  }
  for (; j + 8 <= n; j += 8) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      block_x8<4>(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
    for (; i < m; ++i) block_x8<1>(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta, c + i * ldc + j, ldc);
  }
#endif
  if (j < n) tile_detail::scalar_block(m, n - j, k, alpha, a, a_row, a_col, b + j, ldb, beta, c + j, ldc);
}

}  // namespace heed::kernels::cpu
