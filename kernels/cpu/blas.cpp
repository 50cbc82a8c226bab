// kernels/cpu/blas.cpp — gemm on OpenBLAS (the OpenMP build, sharing heed's thread pool).
//
// Invariants: operands are passed with transpose flags and leading dimensions, never
// copied here. OpenBLAS itself always runs single-threaded (blas_call.h); heed parallelises
// by splitting C into blocks whose sizes depend on the problem shape only, one
// single-threaded gemm per block, so the result is bit-identical for every thread count.
#include "blas_call.h"
#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {
// Rows and columns of C per task.
constexpr int64_t kBlockRows = 192;
constexpr int64_t kBlockCols = 512;
}  // namespace

void set_threads(int n) { omp_set_num_threads(n); }

namespace {
template <typename T>
void gemm_one(const GemmArgs& g, int64_t m, int64_t n, const T* a, const T* b, T* c) {
  blas_gemm<T>(g.trans_a, g.trans_b, m, n, g.k, static_cast<T>(g.alpha), a, g.lda, b, g.ldb, static_cast<T>(g.beta), c,
               g.ldc);
}

template <typename T>
void gemm_typed(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  // Split C into row blocks, and into column blocks too when there are few rows.
  const int64_t row_blocks = (g.m + kBlockRows - 1) / kBlockRows;
  const int64_t col_block = row_blocks >= 4 ? g.n : std::min<int64_t>(g.n, kBlockCols);
  const int64_t col_blocks = (g.n + col_block - 1) / std::max<int64_t>(col_block, 1);
  const int64_t tasks_per_batch = row_blocks * col_blocks;
  const double flops_per_task = 2.0 * static_cast<double>(std::min(g.m, kBlockRows)) *
                                static_cast<double>(col_block) * static_cast<double>(g.k);
  // Group tiny tasks so each parallel chunk has real work (the grouping never changes what a
  // task computes).
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(2e6 / std::max(flops_per_task, 1.0)));
  parallel_for(g.batch * tasks_per_batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / tasks_per_batch, t = task % tasks_per_batch;
      const int64_t r0 = (t / col_blocks) * kBlockRows, c0 = (t % col_blocks) * col_block;
      const int64_t rows = std::min(kBlockRows, g.m - r0), cols = std::min(col_block, g.n - c0);
      const T* ai = a + i * g.batch_stride_a + (g.trans_a ? r0 : r0 * g.lda);
      const T* bi = b + i * g.batch_stride_b + (g.trans_b ? c0 * g.ldb : c0);
      T* ci = c + i * g.batch_stride_c + r0 * g.ldc + c0;
      gemm_one(g, rows, cols, ai, bi, ci);
    }
  });
}
}  // namespace

void gemm(const GemmArgs& args) {
  constexpr int64_t kMaxBlasInt = 2147483647;
  HEED_CHECK(args.m <= kMaxBlasInt && args.n <= kMaxBlasInt && args.k <= kMaxBlasInt, "gemm",
             "matrix sizes ({}, {}, {}) exceed the 32-bit BLAS interface", args.m, args.n, args.k);
  if (args.m == 0 || args.n == 0) return;
  if (args.dtype == kFloat32) return gemm_typed<float>(args);
  if (args.dtype == kFloat64) return gemm_typed<double>(args);
  fail("gemm", "the CPU gemm has no {} version (16-bit operands are widened by matmul)", dtype_name(args.dtype));
}

}  // namespace heed::kernels::cpu
