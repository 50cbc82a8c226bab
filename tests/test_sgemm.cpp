// tests/test_sgemm.cpp — heed's own float32 gemm kernels (kernels/cpu/sgemm.cpp, AVX-512 and
// AVX2) against a float64 reference for every transpose pair, ragged sizes, several KC slices and
// MC blocks, padded leading dimensions, alpha/beta (beta 0 never reads C), k = 0; their
// invariants bit for bit (an element's value does not depend on its tile position, its block,
// the kernel width or the thread count); the whole CPU gemm (epilogues included) under each
// CpuGemm choice; and the public choice API (heed/blas_info.h). Kernels the CPU lacks are
// reported as skipped, never as passed.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

using namespace heed;
using kernels::cpu::SgemmKernel;

namespace {

std::vector<SgemmKernel> kernels_here() {
  std::vector<SgemmKernel> out;
  for (SgemmKernel k : {SgemmKernel::Avx2, SgemmKernel::Avx512})
    if (kernels::cpu::heed_sgemm_supported(k)) out.push_back(k);
  return out;
}

const char* kernel_name(SgemmKernel k) { return k == SgemmKernel::Avx512 ? "AVX-512" : "AVX2"; }

// A stored matrix (rows, cols) with its rows `ld` apart, the padding NaN.
std::vector<float> padded(int64_t rows, int64_t cols, int64_t ld, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r * ld + c)] = uniform(rng);
  return m;
}

struct Problem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b;

  Problem(bool ta, bool tb, int64_t m_, int64_t n_, int64_t k_, std::mt19937& rng)
      : trans_a(ta), trans_b(tb), m(m_), n(n_), k(k_) {
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    lda = a_cols + 3;
    ldb = b_cols + 5;
    ldc = n + 2;
    a = padded(a_rows, a_cols, lda, rng);
    b = padded(b_rows, b_cols, ldb, rng);
  }
  double op_a(int64_t i, int64_t p) const { return trans_a ? a[p * lda + i] : a[i * lda + p]; }
  double op_b(int64_t p, int64_t j) const { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; }
  void run(SgemmKernel kernel, float alpha, float beta, float* c) const {
    kernels::cpu::heed_sgemm(kernel, trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c, ldc);
  }
};

}  // namespace

TEST_CASE("heed_sgemm: every kernel against float64 (transposes, ragged sizes, KC slices, MC blocks, alpha/beta)") {
  const std::vector<SgemmKernel> here = kernels_here();
  if (here.empty()) {
    MESSAGE("skipped: this build has no heed sgemm kernel (HEED_ARCH_FLAGS without AVX2 + FMA)");
    return;
  }
  if (here.size() == 1) MESSAGE("skipped the AVX-512 kernel: this CPU has no AVX-512F");
  std::mt19937 rng(7);
  // (m, n, k): one element; smaller than one tile; ragged against both tiles (14 x 32, 6 x 16);
  // k over three KC = 256 slices with the last one short; m over two or three MC blocks (168
  // rows for the AVX-512 kernel, 72 for the AVX2 one); n over two NC = 4096-column blocks; B read
  // in place by the AVX-512 kernel (at most two MC blocks of rows; the AVX2 kernel always packs
  // it) and packed (400 rows); A^T read in place by the AVX-512 kernel except beside B read in
  // place with rows 2 KiB apart (n = 507: Problem pads B's rows by 5 floats, so ldb = 512).
  const int64_t sizes[][3] = {{1, 1, 1},     {5, 9, 3},      {37, 70, 33},   {29, 45, 600}, {200, 40, 17},
                              {15, 33, 257}, {3, 4200, 300}, {400, 70, 300}, {45, 507, 300}};
  for (SgemmKernel kernel : here)
    for (const auto& size : sizes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          CAPTURE(kernel_name(kernel));
          CAPTURE(size[0]);
          CAPTURE(size[1]);
          CAPTURE(size[2]);
          CAPTURE(ta);
          CAPTURE(tb);
          const Problem p(ta, tb, size[0], size[1], size[2], rng);
          // Three updates of C: alpha 0.5 with beta 0 over NaN (never read), then beta 0.75
          // and beta 1 over that result.
          std::vector<float> c(static_cast<size_t>(p.m * p.ldc), std::numeric_limits<float>::quiet_NaN());
          int bad = 0;
          for (const float beta : {0.0f, 0.75f, 1.0f}) {
            const float alpha = beta == 0.0f ? 0.5f : -1.25f;
            std::vector<double> want(c.size()), tolerance(c.size());
            for (int64_t i = 0; i < p.m; ++i)
              for (int64_t j = 0; j < p.n; ++j) {
                double dot = 0.0, magnitude = 0.0;
                for (int64_t q = 0; q < p.k; ++q) {
                  dot += p.op_a(i, q) * p.op_b(q, j);
                  magnitude += std::abs(p.op_a(i, q) * p.op_b(q, j));
                }
                const size_t at = static_cast<size_t>(i * p.ldc + j);
                const double before = beta == 0.0f ? 0.0 : double(c[at]);
                want[at] = alpha * dot + beta * before;
                // float32 rounding (eps 6e-8) of k + 2 operations on at most these magnitudes.
                tolerance[at] = 2.0 * double(p.k + 2) * 6e-8 * (std::abs(alpha) * magnitude + std::abs(before) + 1e-3);
              }
            p.run(kernel, alpha, beta, c.data());
            for (int64_t i = 0; i < p.m; ++i) {
              for (int64_t j = 0; j < p.n; ++j) {
                const size_t at = static_cast<size_t>(i * p.ldc + j);
                if (!(std::abs(double(c[at]) - want[at]) <= tolerance[at])) ++bad;
              }
              for (int64_t j = p.n; j < p.ldc; ++j) bad += !std::isnan(c[static_cast<size_t>(i * p.ldc + j)]);
            }
          }
          CHECK(bad == 0);
        }
}

TEST_CASE("heed_sgemm: k = 0 scales C by beta, and beta 0 writes zeros over NaN") {
  if (kernels_here().empty()) MESSAGE("skipped: this build has no heed sgemm kernel");
  for (SgemmKernel kernel : kernels_here()) {
    CAPTURE(kernel_name(kernel));
    std::vector<float> c = {1.0f, 2.0f, 3.0f, 4.0f};
    kernels::cpu::heed_sgemm(kernel, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
    CHECK(c == std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f});
    std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
    kernels::cpu::heed_sgemm(kernel, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
    CHECK(c == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
  }
}

TEST_CASE("heed_sgemm: a bias added in the first store gives the bits of filling C with it and beta = 1") {
  const std::vector<SgemmKernel> here = kernels_here();
  if (here.empty()) {
    MESSAGE("skipped: this build has no heed sgemm kernel");
    return;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  // Ragged tiles, one and three KC slices, two NC blocks (the bias offset per block), k = 0.
  const int64_t sizes[][3] = {{5, 9, 3}, {37, 70, 600}, {3, 4200, 300}, {4, 6, 0}};
  for (SgemmKernel kernel : here)
    for (const auto& size : sizes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          CAPTURE(kernel_name(kernel));
          CAPTURE(size[1]);
          CAPTURE(size[2]);
          CAPTURE(ta);
          CAPTURE(tb);
          const Problem p(ta, tb, size[0], size[1], size[2], rng);
          std::vector<float> bias(static_cast<size_t>(p.n));
          for (float& v : bias) v = uniform(rng);
          std::vector<float> filled(static_cast<size_t>(p.m * p.ldc), std::numeric_limits<float>::quiet_NaN());
          for (int64_t i = 0; i < p.m; ++i) std::copy(bias.begin(), bias.end(), filled.begin() + i * p.ldc);
          kernels::cpu::heed_sgemm(kernel, ta, tb, p.m, p.n, p.k, 0.7f, p.a.data(), p.lda, p.b.data(), p.ldb, 1.0f,
                                   filled.data(), p.ldc);
          std::vector<float> fused(filled.size(), std::numeric_limits<float>::quiet_NaN());  // never read
          kernels::cpu::heed_sgemm(kernel, ta, tb, p.m, p.n, p.k, 0.7f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                                   fused.data(), p.ldc, nullptr, bias.data());
          int64_t differing = 0;
          for (int64_t i = 0; i < p.m; ++i)
            differing += std::memcmp(fused.data() + i * p.ldc, filled.data() + i * p.ldc,
                                     static_cast<size_t>(p.n) * sizeof(float)) != 0;
          CHECK(differing == 0);
        }
  // The bias with beta != 0 is refused (it would be ambiguous which is added first).
  std::vector<float> c(4, 0.0f), bias(2, 1.0f), a(4, 1.0f), b(4, 1.0f);
  CHECK_THROWS_WITH_AS(kernels::cpu::heed_sgemm(here.front(), false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2,
                                                0.5f, c.data(), 2, nullptr, bias.data()),
                       doctest::Contains("bias with beta = 0 only"), Error);
}

TEST_CASE("heed_sgemm: an element's bits depend on its row, column and k only (tile, block and kernel width)") {
  const std::vector<SgemmKernel> here = kernels_here();
  if (here.empty()) {
    MESSAGE("skipped: this build has no heed sgemm kernel");
    return;
  }
  std::mt19937 rng(11);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const Problem p(ta, tb, 190, 75, 300, rng);  // two MC blocks, ragged tiles, two KC slices
      // C = 0.7 op(A) op(B), then C = 0.7 op(A) op(B) + 0.75 C: every store formula of the kernels
      // (first slice with and without beta, later slices) with an alpha that rounds.
      const auto run_twice = [&](SgemmKernel kernel, int64_t row0, int64_t rows, float* c) {
        const float* a = ta ? p.a.data() + row0 : p.a.data() + row0 * p.lda;
        for (const float beta : {0.0f, 0.75f})
          kernels::cpu::heed_sgemm(kernel, ta, tb, rows, p.n, p.k, 0.7f, a, p.lda, p.b.data(), p.ldb, beta, c, p.ldc);
      };
      std::vector<float> whole(static_cast<size_t>(p.m * p.ldc), 0.0f);
      run_twice(here.front(), 0, p.m, whole.data());
      // Every kernel width, rows alone (1-row problems: an edge tile) and runs of 2 to 15 rows
      // (the AVX-512 kernel's tiles of 1 to 13 rows for a last partial panel, a full one, and
      // a full one followed by a 1-row tile).
      int differing = 0;
      for (SgemmKernel kernel : here) {
        std::vector<float> again(whole.size(), 0.0f);
        run_twice(kernel, 0, p.m, again.data());
        differing += std::memcmp(again.data(), whole.data(), whole.size() * sizeof(float)) != 0;
        for (int64_t i = 0; i < p.m; i += 37) {
          std::vector<float> row(static_cast<size_t>(p.ldc), 0.0f);
          run_twice(kernel, i, 1, row.data());
          differing += std::memcmp(row.data(), whole.data() + i * p.ldc, static_cast<size_t>(p.n) * sizeof(float)) != 0;
        }
        for (int64_t rows = 2; rows <= 15; ++rows) {
          const int64_t i = (rows * 11) % (p.m - rows);
          std::vector<float> run(static_cast<size_t>(rows * p.ldc), 0.0f);
          run_twice(kernel, i, rows, run.data());
          for (int64_t r = 0; r < rows; ++r)
            differing += std::memcmp(run.data() + r * p.ldc, whole.data() + (i + r) * p.ldc,
                                     static_cast<size_t>(p.n) * sizeof(float)) != 0;
        }
      }
      CHECK(differing == 0);
    }
}

// Restores the L2 size heed_sgemm fits its MC blocks to when a test began.
struct KeepSgemmL2 {
  int64_t saved = kernels::cpu::heed_sgemm_l2_bytes();
  ~KeepSgemmL2() { kernels::cpu::set_heed_sgemm_l2_bytes(saved); }
};

TEST_CASE("heed_sgemm: MC blocks fitted to the L2 (fewer panels where a packed B slice then stays in L2)") {
  const KeepSgemmL2 keep;
  using kernels::cpu::heed_sgemm_mc_panels;
  using kernels::cpu::set_heed_sgemm_l2_bytes;
  constexpr int64_t MiB = 1 << 20;
  set_heed_sgemm_l2_bytes(0);  // unknown: the fixed 12 panels
  CHECK(heed_sgemm_mc_panels(14, 256 * 1024, 1024, 256) == 12);
  set_heed_sgemm_l2_bytes(2 * MiB);  // 3/4 of it is 393216 floats
  // the lm step's 1024 x 1024 x 256 block: (393216 - 262144) / ((1024 + 512) * 14) = 6.1
  CHECK(heed_sgemm_mc_panels(14, 256 * 1024, 1024, 256) == 6);
  CHECK(heed_sgemm_mc_panels(14, 256 * 768, 768, 256) == 10);    // 196608 / (1280 * 14) = 10.97
  CHECK(heed_sgemm_mc_panels(14, 256 * 256, 256, 256) == 12);    // room for more than 12: at most 12
  set_heed_sgemm_l2_bytes(1 * MiB);                              // 196608 floats
  CHECK(heed_sgemm_mc_panels(14, 256 * 1024, 1024, 256) == 12);  // the slice alone does not fit
  CHECK(heed_sgemm_mc_panels(14, 256 * 512, 512, 256) == 4);     // 65536 / (1024 * 14) = 4.57
  CHECK(heed_sgemm_mc_panels(14, 190000, 1024, 256) == 4);       // 6608 / 21504 = 0.3: at least 4

  // No element's bits depend on the blocks: every L2 size gives the fixed blocks' bits (400 rows:
  // B always packed; 700 columns, two KC slices; 1 MiB gives 4 panels on the first slice and 12
  // on the second, 1.5 MiB 6 and 12).
  const std::vector<SgemmKernel> here = kernels_here();
  if (here.empty()) {
    MESSAGE("skipped: this build has no heed sgemm kernel");
    return;
  }
  std::mt19937 rng(23);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Problem p(ta, tb, 400, 700, 300, rng);
      for (SgemmKernel kernel : here) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(kernel_name(kernel));
        set_heed_sgemm_l2_bytes(0);
        std::vector<float> fixed(static_cast<size_t>(p.m * p.ldc), 0.0f);
        p.run(kernel, 0.7f, 0.0f, fixed.data());
        for (const int64_t l2 : {1 * MiB, 3 * MiB / 2, 2 * MiB}) {
          CAPTURE(l2);
          set_heed_sgemm_l2_bytes(l2);
          std::vector<float> fitted(fixed.size(), 0.0f);
          p.run(kernel, 0.7f, 0.0f, fitted.data());
          CHECK(std::memcmp(fitted.data(), fixed.data(), fixed.size() * sizeof(float)) == 0);
        }
      }
    }
}

namespace {
// Counts, per element of C, the epilogue calls that covered it, and keeps the values C held then.
struct EpilogueLog {
  int64_t ldc = 0;
  const float* c = nullptr;
  std::vector<int> calls;
  std::vector<float> seen;
  static void run(void* context, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    auto& log = *static_cast<EpilogueLog*>(context);
    for (int64_t i = r0; i < r0 + rows; ++i)
      for (int64_t j = c0; j < c0 + cols; ++j) {  // blocks of one call are disjoint from others'
        const size_t at = static_cast<size_t>(i * log.ldc + j);
        ++log.calls[at];
        log.seen[at] = log.c[at];
      }
  }
};
}  // namespace

TEST_CASE(
    "heed_sgemm_team: one product shared by 2, 3 and 5 threads gives heed_sgemm's bits, epilogue once each (every "
    "kernel)") {
  if (!kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx2)) {
    MESSAGE("skipped: this build or CPU has no heed AVX2 sgemm kernel");
    return;
  }
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  // (m, n, k). Shared out by rows (op(B)'s slices packed for the team): 389 rows (ragged panels),
  // 70 x 37 (m >= n), 300 x 4200 (two NC blocks). By columns (op(A)'s slices packed for the
  // team, at most 256 rows and fewer rows than columns): 128 x 512 (charlm's weight gradient
  // shape), 37 x 70, 3 x 4200 (two NC blocks), 250 x 300. k: one, two and three KC slices.
  const int64_t sizes[][3] = {{389, 128, 600}, {70, 37, 33},   {300, 4200, 40}, {128, 512, 600},
                              {37, 70, 257},   {3, 4200, 300}, {250, 300, 513}};
  for (SgemmKernel kernel : kernels_here())
    for (const auto& size : sizes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          CAPTURE(kernel_name(kernel));
          CAPTURE(size[0]);
          CAPTURE(size[1]);
          CAPTURE(size[2]);
          CAPTURE(ta);
          CAPTURE(tb);
          const Problem p(ta, tb, size[0], size[1], size[2], rng);
          std::vector<float> bias(static_cast<size_t>(p.n));
          for (float& v : bias) v = uniform(rng);
          const float nan = std::numeric_limits<float>::quiet_NaN();
          // Single-threaded heed_sgemm: C = 0.7 op(A) op(B) + bias over NaN, then
          // C = -1.25 op(A) op(B) + 0.75 C; row sums of op(A) = A^T with the first product.
          std::vector<float> want_first(static_cast<size_t>(p.m * p.ldc), nan);
          std::vector<double> want_sums(static_cast<size_t>(p.m), 0.0);
          kernels::cpu::heed_sgemm(kernel, ta, tb, p.m, p.n, p.k, 0.7f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                                   want_first.data(), p.ldc, ta ? want_sums.data() : nullptr, bias.data());
          std::vector<float> want_second = want_first;
          kernels::cpu::heed_sgemm(kernel, ta, tb, p.m, p.n, p.k, -1.25f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.75f,
                                   want_second.data(), p.ldc);
          for (int threads : {2, 3, 5}) {
            CAPTURE(threads);
            std::vector<float> c(want_first.size(), nan);
            std::vector<double> sums(static_cast<size_t>(p.m), 0.0);
            EpilogueLog log{p.ldc, c.data(), std::vector<int>(c.size(), 0), std::vector<float>(c.size(), nan)};
            const kernels::cpu::SgemmEpilogue epilogue{&EpilogueLog::run, &log};
            kernels::cpu::heed_sgemm_team(kernel, ta, tb, p.m, p.n, p.k, 0.7f, p.a.data(), p.lda, p.b.data(), p.ldb,
                                          0.0f, c.data(), p.ldc, threads, ta ? sums.data() : nullptr, bias.data(),
                                          epilogue);
            CHECK(std::memcmp(c.data(), want_first.data(), c.size() * sizeof(float)) == 0);  // padding stays NaN too
            CHECK(std::memcmp(sums.data(), want_sums.data(), sums.size() * sizeof(double)) == 0);
            // Every element of C exactly once, after its last KC slice; the padding never.
            int64_t wrong_calls = 0, early = 0;
            for (int64_t i = 0; i < p.m; ++i)
              for (int64_t j = 0; j < p.ldc; ++j) {
                const size_t at = static_cast<size_t>(i * p.ldc + j);
                wrong_calls += log.calls[at] != (j < p.n ? 1 : 0);
                early += j < p.n && std::memcmp(&log.seen[at], &want_first[at], sizeof(float)) != 0;
              }
            CHECK(wrong_calls == 0);
            CHECK(early == 0);
            kernels::cpu::heed_sgemm_team(kernel, ta, tb, p.m, p.n, p.k, -1.25f, p.a.data(), p.lda, p.b.data(), p.ldb,
                                          0.75f, c.data(), p.ldc, threads);
            CHECK(std::memcmp(c.data(), want_second.data(), c.size() * sizeof(float)) == 0);
          }
        }
  // Refused: row sums of op(A) = A (not transposed), a bias with beta != 0.
  std::vector<float> c(4, 0.0f), bias(2, 1.0f), a(4, 1.0f), b(4, 1.0f);
  std::vector<double> sums(2, 0.0);
  CHECK_THROWS_WITH_AS(kernels::cpu::heed_sgemm_team(SgemmKernel::Avx2, false, false, 2, 2, 2, 1.0f, a.data(), 2,
                                                     b.data(), 2, 0.0f, c.data(), 2, 2, sums.data()),
                       doctest::Contains("rows of op(A) = A^T only"), Error);
  CHECK_THROWS_WITH_AS(kernels::cpu::heed_sgemm_team(SgemmKernel::Avx2, false, false, 2, 2, 2, 1.0f, a.data(), 2,
                                                     b.data(), 2, 0.5f, c.data(), 2, 2, nullptr, bias.data()),
                       doctest::Contains("bias with beta = 0 only"), Error);
}

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.detach().to(kFloat64), b.detach().to(kFloat64)))).item<double>();
}

// Restores the CPU gemm choice in effect when a test began.
struct KeepCpuGemm {
  CpuGemm saved = cpu_gemm();
  ~KeepCpuGemm() { set_cpu_gemm(saved); }
};

// The CPU gemm's arguments for C (m x n, contiguous) = op(A) op(B) with contiguous operands.
kernels::GemmArgs contiguous_gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                                  float* c) {
  kernels::GemmArgs g;
  g.trans_a = trans_a;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = trans_a ? m : k;
  g.b = b;
  g.ldb = n;
  g.c = c;
  g.ldc = n;
  return g;
}

std::vector<CpuGemm> choices_here() {
  std::vector<CpuGemm> out = {CpuGemm::Openblas};
  if (kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx2)) out.push_back(CpuGemm::HeedAvx2);
  if (kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx512)) out.push_back(CpuGemm::HeedAvx512);
  return out;
}
}  // namespace

TEST_CASE(
    "CPU gemm under each choice: Linear with its epilogues against float64, the same bits on 1, 2, 3, 5 and 8 "
    "threads") {
  KeepCpuGemm keep;
  manual_seed(3);
  // Products big enough for several gemm tasks and KC slices (forward 600 x 384 x 520, input
  // gradient 600 x 520 x 384, weight gradient 384 x 520 x 600), with Linear's epilogues (bias,
  // GELU, the bias gradient in the weight gradient's gemm). Inputs scaled so z stays O(1).
  const TensorOptions f64 = TensorOptions().dtype(kFloat64);
  const Tensor x64 = randn({600, 520}, f64), w64 = randn({384, 520}, f64) * 0.05, b64 = randn({384}, f64);
  const Tensor upstream64 = randn({600, 384}, f64);
  const auto forward_backward = [&](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& upstream) {
    const Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_(), br = b.detach().requires_grad_();
    const Tensor y = F::linear_gelu(xr, wr, br);
    (y * upstream).sum().backward();
    return std::vector<Tensor>{y.detach(), xr.grad(), wr.grad(), br.grad()};
  };
  const std::vector<Tensor> want = forward_backward(x64, w64, b64, upstream64);  // OpenBLAS's dgemm
  const Tensor x = x64.to(kFloat32), w = w64.to(kFloat32), b = b64.to(kFloat32), upstream = upstream64.to(kFloat32);
  const char* names[] = {"y", "dx", "dw", "db"};
  for (CpuGemm choice : choices_here()) {
    CAPTURE(static_cast<int>(choice));
    set_cpu_gemm(choice);
    CHECK(cpu_gemm() == choice);
    CHECK(blas_info().sgemm == (choice == CpuGemm::Openblas   ? "openblas"
                                : choice == CpuGemm::HeedAvx2 ? "heed-avx2"
                                                              : "heed-avx512"));
    const std::vector<Tensor> got = forward_backward(x, w, b, upstream);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(names[i]);
      // float32 sums of up to 600 terms of magnitude O(1): relative to the largest value.
      const double scale = max(abs(want[i])).item<double>();
      CHECK(max_abs_diff(got[i], want[i]) <= 2e-5 * scale);
    }
    // The same bits for every thread count (heed's kernels split C by the thread count, OpenBLAS
    // by the shape only): 1, 3, 5 and 8 threads against the default.
    const int saved_threads = get_num_threads();
    for (int threads : {1, 3, 5, 8}) {
      CAPTURE(threads);
      set_num_threads(threads);
      const std::vector<Tensor> again = forward_backward(x, w, b, upstream);
      set_num_threads(saved_threads);
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(names[i]);
        CHECK(max_abs_diff(again[i], got[i]) == 0.0);
      }
    }
  }
}

TEST_CASE(
    "CPU gemm row-sum epilogue: heed's kernels sum op(A) = A^T while packing or reading it, the same bits as the "
    "separate pass") {
  KeepCpuGemm keep;
  // The weight-gradient shape: op(A) = A^T with A (k, m), k = 600 over three KC slices. m = 389
  // and 200 leave a partial panel for both kernels (14- and 6-row); n = 128 splits C by rows on
  // two or more threads (so tasks start at rows other than 0), n = 4200 by columns and, on one
  // thread, over two NC blocks (the rows summed in the first only). The AVX-512 kernel reads A^T
  // in place (its full panels summed after their first tile) except beside B read in place with
  // rows 2 KiB apart: m = 200, n = 512 (its blocks then have at most two MC blocks of rows), where
  // A^T is packed and summed while copied, as the AVX2 kernel always does, and except when A's own
  // rows are 4 KiB apart (m = 1024); B's rows 4 KiB apart (n = 1024) are packed even beside few
  // rows of C (m = 200).
  const int64_t k = 600;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{389, 128}, {389, 4200}, {200, 512}, {1024, 64}, {200, 1024}}) {
    std::vector<float> a(static_cast<size_t>(k * m));
    for (float& v : a) v = normal(rng);
    std::vector<double> want(static_cast<size_t>(m), 0.0);  // in p order, in double, as specified
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < m; ++i) want[static_cast<size_t>(i)] += a[static_cast<size_t>(p * m + i)];
    std::vector<float> b(static_cast<size_t>(k * n));
    for (float& v : b) v = normal(rng);
    std::vector<float> separate;
    for (CpuGemm choice : choices_here()) {
      for (int threads : {1, 2, 3, 5, 8}) {
        CAPTURE(n);
        CAPTURE(static_cast<int>(choice));
        CAPTURE(threads);
        set_cpu_gemm(choice);
        const int saved_threads = get_num_threads();
        set_num_threads(threads);
        std::vector<float> c(static_cast<size_t>(m * n)), sums(static_cast<size_t>(m), std::nanf(""));
        kernels::GemmArgs g = contiguous_gemm(true, m, n, k, a.data(), b.data(), c.data());
        g.a_row_sums = sums.data();
        kernels::cpu::gemm(g);
        set_num_threads(saved_threads);
        int64_t wrong = 0;
        for (int64_t i = 0; i < m; ++i)
          wrong += sums[static_cast<size_t>(i)] != static_cast<float>(want[static_cast<size_t>(i)]);
        CHECK(wrong == 0);
        if (separate.empty())
          separate = sums;  // OpenBLAS's choice: the rows summed in a pass of their own
        else
          CHECK(std::memcmp(sums.data(), separate.data(), sums.size() * sizeof(float)) == 0);
        // And the product itself, spot-checked against float64.
        int64_t far = 0;
        for (int64_t i = 0; i < m; i += 41)
          for (int64_t j = 0; j < n; j += 37) {
            double dot = 0.0;
            for (int64_t p = 0; p < k; ++p)
              dot += static_cast<double>(a[static_cast<size_t>(p * m + i)]) * b[static_cast<size_t>(p * n + j)];
            far += std::abs(c[static_cast<size_t>(i * n + j)] - dot) > 1e-4 * std::sqrt(static_cast<double>(k));
          }
        CHECK(far == 0);
      }
    }
  }
}

TEST_CASE("CPU gemm, batched products: against float64 and the same bits on 1, 2, 3 and 5 threads") {
  KeepCpuGemm keep;
  // Three products of (70 x 40) (40 x 90): heed's kernels make batch x blocks a multiple of the
  // thread count, OpenBLAS splits by the shape only.
  const int64_t batch = 3, m = 70, n = 90, k = 40;
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(batch * m * k)), b(static_cast<size_t>(batch * k * n));
  for (float& v : a) v = uniform(rng);
  for (float& v : b) v = uniform(rng);
  for (CpuGemm choice : choices_here()) {
    set_cpu_gemm(choice);
    std::vector<float> first;
    for (int threads : {1, 2, 3, 5}) {
      CAPTURE(static_cast<int>(choice));
      CAPTURE(threads);
      const int saved_threads = get_num_threads();
      set_num_threads(threads);
      std::vector<float> c(static_cast<size_t>(batch * m * n), std::nanf(""));
      kernels::GemmArgs g = contiguous_gemm(false, m, n, k, a.data(), b.data(), c.data());
      g.batch = batch;
      g.batch_stride_a = m * k;
      g.batch_stride_b = k * n;
      g.batch_stride_c = m * n;
      kernels::cpu::gemm(g);
      set_num_threads(saved_threads);
      int64_t far = 0;
      for (int64_t q = 0; q < batch; ++q)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int64_t p = 0; p < k; ++p)
              dot += static_cast<double>(a[static_cast<size_t>(q * m * k + i * k + p)]) *
                     b[static_cast<size_t>(q * k * n + p * n + j)];
            far += !(std::abs(c[static_cast<size_t>(q * m * n + i * n + j)] - dot) <= 1e-5 * k);
          }
      CHECK(far == 0);
      if (first.empty())
        first = c;
      else
        CHECK(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("set_cpu_gemm: Auto resolves, a kernel the CPU lacks is refused") {
  KeepCpuGemm keep;
  set_cpu_gemm(CpuGemm::Auto);
  const CpuGemm resolved = cpu_gemm();
  CHECK(resolved != CpuGemm::Auto);
  // Auto: heed's AVX-512 kernel wherever the CPU has it; else heed's AVX2 kernel wherever it is
  // built (whatever set OpenBLAS runs); OpenBLAS otherwise.
  if (kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx512))
    CHECK(resolved == CpuGemm::HeedAvx512);
  else if (kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx2))
    CHECK(resolved == CpuGemm::HeedAvx2);
  else
    CHECK(resolved == CpuGemm::Openblas);
  if (!kernels::cpu::heed_sgemm_supported(SgemmKernel::Avx512))
    CHECK_THROWS_WITH_AS(set_cpu_gemm(CpuGemm::HeedAvx512), doctest::Contains("heed::set_cpu_gemm"), Error);
  else
    MESSAGE("this CPU has AVX-512F: the refusal of the AVX-512 kernel is not exercised here");
}
