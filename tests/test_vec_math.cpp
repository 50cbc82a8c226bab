// tests/test_vec_math.cpp — the vectorised float math behind the CPU kernels
// (kernels/cpu/vec_math.h): the AVX-512 GELU loops give every element the bits of the 8-lane
// AVX2 loops (special values included), the scalar path gives them too, and GELU keeps its
// relative accuracy against float64 into the far negative tail;
// row_max is the exact maximum with NaNs skipped; exp_shifted_sum writes exp_shifted's values
// and returns their sum; the exp for x <= 0 behind GELU's derivative gives the full exp's
// bits. Paths the CPU or build lacks are reported as skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/vec_math.h"

using namespace heed::kernels::cpu;

namespace {
// Random normals scaled to cover GELU's whole range, and the values at the approximations' edges.
std::vector<float> gelu_inputs() {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          4.0f * std::sqrt(2.0f),
                          -4.0f * std::sqrt(2.0f),
                          13.0f,
                          -13.0f,
                          13.2f,
                          -13.2f,
                          40.0f,
                          -40.0f,
                          1e-20f,
                          -1e-20f,
                          3e38f,
                          -3e38f,
                          INFINITY,
                          -INFINITY,
                          std::nanf("")};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  while (x.size() < 4096 + 8 + 7) x.push_back(normal(rng));  // 16-lane loop, one 8-lane step, scalar tail
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// GELU in float64 through erfc, which keeps its relative accuracy where 1 + erf(x / sqrt 2)
// cancels (below about -8 even float64's erf is -1).
double gelu64(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_grad64(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}
}  // namespace

TEST_CASE("GELU (erf): the AVX-512 loops give the 8-lane loops' bits, and both are close to float64") {
#if !HEED_HAVE_AVX2
  MESSAGE("skipped: this build has no AVX2 paths (HEED_ARCH_FLAGS without AVX2 + FMA)");
#else
  if (!vec_has_avx512f())
    MESSAGE("the 16-lane loops are not run here (no AVX-512F, or HEED_VEC_WIDTH=8): only the 8-lane loops are checked");
  const std::vector<float> x = gelu_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> g(x.size());
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (float& v : g) v = uniform(rng);
  // Whole arrays take the widest loop; 8-element calls take the 8-lane loop (n < 16).
  std::vector<float> wide(x.size()), narrow(x.size()), wide_grad(x.size()), narrow_grad(x.size());
  gelu_erf_forward(x.data(), wide.data(), n);
  gelu_erf_backward(g.data(), x.data(), wide_grad.data(), n);
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    gelu_erf_forward(x.data() + i, narrow.data() + i, 8);
    gelu_erf_backward(g.data() + i, x.data() + i, narrow_grad.data() + i, 8);
  }
  int64_t differing = 0, far = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i < n / 8 * 8) differing += !same_bits(wide[i], narrow[i]) + !same_bits(wide_grad[i], narrow_grad[i]);
    if (std::isnan(x[i])) {
      far += !std::isnan(wide[i]) + !std::isnan(wide_grad[i]);
      continue;
    }
    if (std::isinf(x[i]) || std::abs(x[i]) > 1e30f) continue;  // checked below
    const double want = gelu64(x[i]), want_grad = g[i] * gelu_grad64(x[i]);
    far += std::abs(wide[i] - want) > 2e-6 * std::max(1.0, std::abs(want));
    far += std::abs(wide_grad[i] - want_grad) > 2e-6 * std::max(1.0, std::abs(want_grad));
  }
  CHECK(differing == 0);
  CHECK(far == 0);
  // The infinities as PyTorch's gelu gives them (1.13, checked by hand): gelu(+inf) = +inf,
  // gelu(-inf) = -inf * 0 = NaN, and both gradients NaN (inf * 0 in x * pdf(x)).
  CHECK(wide[14] == INFINITY);
  CHECK(std::isnan(wide[15]));
  CHECK(std::isnan(wide_grad[14]));
  CHECK(std::isnan(wide_grad[15]));

  // The scalar path (calls of fewer than 8 elements) gives the vector paths' bits; NaN stays NaN.
  std::vector<float> scalar(x.size()), scalar_grad(x.size());
  for (int64_t i = 0; i < n; i += 7) {
    const int64_t count = std::min<int64_t>(7, n - i);
    gelu_erf_forward(x.data() + i, scalar.data() + i, count);
    gelu_erf_backward(g.data() + i, x.data() + i, scalar_grad.data() + i, count);
  }
  int64_t scalar_differing = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      scalar_differing += !std::isnan(scalar[i]) + !std::isnan(scalar_grad[i]);
      continue;
    }
    scalar_differing += !same_bits(scalar[i], wide[i]) + !same_bits(scalar_grad[i], wide_grad[i]);
  }
  CHECK(scalar_differing == 0);
#endif
}

TEST_CASE("GELU (erf): relative accuracy against float64 from the far negative tail to the top, gelu' too") {
  // gelu(v) = v Phi(v) relative to float64 on a dense grid: within 1e-6 for v >= -4 and 1e-5 down
  // to -12.5 (below that Phi(v) < 1e-35 nears float's subnormals). 0.5 v (1 + erf(v / sqrt 2))
  // in float cancels there: it was 10% off at -5 and 0 below -5.66 (relative error 1). gelu'(v)
  // within 5e-7 absolute everywhere and 1e-5 relative below -2 (where it is a small tail too).
  // The same bounds for the value with its derivative (the feed-forward epilogue's call) and the
  // backward's factor; every vector width and the scalar tail run (n % 8 == 5).
  std::vector<float> x;
  for (float v = -12.5f; v <= 12.5f; v += 0.000977f) x.push_back(v);
  while (x.size() % 8 != 5) x.push_back(0.5f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), y_with(x.size()), derivative(x.size()), ones(x.size(), 1.0f), factor(x.size());
  gelu_erf_forward(x.data(), y.data(), n);
  gelu_erf_forward(x.data(), y_with.data(), n, derivative.data());
  gelu_erf_backward(ones.data(), x.data(), factor.data(), n);
  double worst_core = 0.0, worst_tail = 0.0, worst_grad_abs = 0.0, worst_grad_tail = 0.0;
  int64_t differing = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], want = gelu64(v), want_grad = gelu_grad64(v);
    const double relative = std::abs(y[i] - want) / std::abs(want == 0.0 ? 1.0 : want);
    (v >= -4.0 ? worst_core : worst_tail) = std::max(v >= -4.0 ? worst_core : worst_tail, relative);
    worst_grad_abs = std::max(worst_grad_abs, std::abs(derivative[i] - want_grad));
    if (v < -2.0)
      worst_grad_tail = std::max(worst_grad_tail, std::abs(derivative[i] - want_grad) / std::abs(want_grad));
    differing += !same_bits(y[i], y_with[i]) + !same_bits(derivative[i], factor[i]);
  }
  CAPTURE(worst_core);
  CAPTURE(worst_tail);
  CAPTURE(worst_grad_abs);
  CAPTURE(worst_grad_tail);
  CHECK(worst_core <= 1e-6);
  CHECK(worst_tail <= 1e-5);
  CHECK(worst_grad_abs <= 5e-7);
  CHECK(worst_grad_tail <= 1e-5);
  CHECK(differing == 0);  // the value alone and with its derivative agree; the derivative is g = 1's gradient
}

TEST_CASE("row_max: the exact maximum, NaNs skipped, for every length and position") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int64_t n : {1, 5, 8, 9, 16, 31, 64, 100}) {
    CAPTURE(n);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    for (int64_t at = 0; at < n; at += std::max<int64_t>(1, n / 7)) {
      std::vector<float> y = x;
      y[static_cast<size_t>(at)] = 1e6f;  // the maximum, at every lane and in the tail
      if (n > 1) y[static_cast<size_t>((at + 1) % n)] = std::nanf("");
      CHECK(row_max(y.data(), n) == 1e6f);
    }
    std::vector<float> all_masked(static_cast<size_t>(n), -INFINITY), all_nan(static_cast<size_t>(n), std::nanf(""));
    CHECK(row_max(all_masked.data(), n) == -INFINITY);
    CHECK(row_max(all_nan.data(), n) == -INFINITY);
  }
}

TEST_CASE("exp_shifted_sum: exp_shifted's values, and their sum in the 8-lane order on every path") {
  if (!vec_has_avx512f())
    MESSAGE("the 16-lane loop is not run here (no AVX-512F, or HEED_VEC_WIDTH=8): only the 8-lane order is checked");
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 13, 16, 24, 31, 64, 100, 256, 1000}) {
    CAPTURE(n);
    std::vector<float> x(static_cast<size_t>(n)), want(x.size()), got(x.size());
    // Short rows spread widely; long ones within a factor e, where a changed order of additions
    // shows in the last bits.
    for (float& v : x) v = n <= 100 ? normal(rng) : uniform(rng);
    x[0] = -INFINITY;  // a masked key: exp gives exactly 0
    exp_shifted(x.data(), want.data(), n, 1.5f);
    const float sum = exp_shifted_sum(x.data(), got.data(), n, 1.5f);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    CHECK(got[0] == 0.0f);
    double sum64 = 0.0;
    for (float v : want) sum64 += v;
    CHECK(std::abs(sum - sum64) <= 1e-6 * sum64);
#if HEED_HAVE_AVX2
    // The specified order, whatever the vector width (the 16-lane loop adds each half in turn):
    // lane l sums elements l, l + 8, ... of the whole 8-blocks in float, the lanes in order, then
    // the tail one by one.
    if (n >= 8) {
      float lanes[8] = {};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += want[static_cast<size_t>(i + l)];
      float ordered = 0.0f;
      for (float lane : lanes) ordered += lane;
      for (; i < n; ++i) ordered += want[static_cast<size_t>(i)];
      CHECK(std::memcmp(&ordered, &sum, sizeof sum) == 0);
    }
#endif
  }
}

TEST_CASE("exp: the 16-lane loop gives the 8-lane loop's bits over the whole range, specials included") {
#if !HEED_HAVE_AVX2
  MESSAGE("skipped: this build has no AVX2 paths");
#else
  if (!vec_has_avx512f()) MESSAGE("the 16-lane loop is not run here (no AVX-512F, or HEED_VEC_WIDTH=8)");
  std::vector<float> x = {0.0f,    -0.0f,  88.37f,   88.38f,    89.0f,        -86.0f,
                          -86.01f, -87.0f, INFINITY, -INFINITY, std::nanf("")};
  for (float v = -100.0f; v <= 100.0f; v += 0.0137f) x.push_back(v);
  while (x.size() % 8 != 0) x.push_back(1.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> wide(x.size()), narrow(x.size());
  exp_shifted(x.data(), wide.data(), n, 0.0f);
  for (int64_t i = 0; i < n; i += 8) exp_shifted(x.data() + i, narrow.data() + i, 8, 0.0f);
  int64_t differing = 0, far = 0;
  for (int64_t i = 0; i < n; ++i) {
    differing += !same_bits(wide[i], narrow[i]);
    const double want = std::exp(static_cast<double>(x[i]));
    if (std::isnan(x[i]))
      far += !std::isnan(wide[i]);
    else if (x[i] > 88.37f)
      far += wide[i] != INFINITY;
    else if (x[i] < -86.0f)
      far += wide[i] != 0.0f;
    else
      far += std::abs(wide[i] - want) > 4e-7 * want;  // the header's 1-2 ulp, with room
  }
  CHECK(differing == 0);
  CHECK(far == 0);
#endif
}

#if HEED_HAVE_AVX2
namespace {
// The lanes where the 16-lane exp for x <= 0 differs from the full 16-lane exp (x.size() % 16 == 0).
__attribute__((target("avx512f,fma"))) int64_t exp16_non_positive_differing(const std::vector<float>& x) {
  int64_t differing = 0;
  for (size_t i = 0; i < x.size(); i += 16) {
    alignas(64) float full[16], non_positive[16];
    const __m512 v = _mm512_loadu_ps(x.data() + i);
    _mm512_store_ps(full, avx512::fast_exp16(v));
    _mm512_store_ps(non_positive, avx512::fast_exp16<true>(v));
    for (int lane = 0; lane < 16; ++lane) differing += !same_bits(full[lane], non_positive[lane]);
  }
  return differing;
}
}  // namespace
#endif

TEST_CASE("exp for non-positive arguments (GELU's derivative): the full function's bits for every x <= 0") {
#if !HEED_HAVE_AVX2
  MESSAGE("skipped: this build has no AVX2 paths");
#else
  // Every exponent of every x <= 0 down to -inf: -0, denormals, the edge at -86, 2^k steps.
  std::vector<float> x = {-0.0f, 0.0f, -86.0f, -86.01f, -87.0f, -1e-45f, -1e-38f, -3e38f, -INFINITY};
  for (float v = -200.0f; v <= 0.0f; v += 0.00731f) x.push_back(v);
  for (float v = -1e-30f; v > -1e30f; v *= 1.37f) x.push_back(v);
  while (x.size() % 16 != 0) x.push_back(-1.0f);
  int64_t differing = 0;
  for (size_t i = 0; i < x.size(); i += 8) {
    alignas(32) float full[8], non_positive[8];
    const __m256 v = _mm256_loadu_ps(x.data() + i);
    _mm256_store_ps(full, fast_exp8(v));
    _mm256_store_ps(non_positive, fast_exp8<true>(v));
    for (int lane = 0; lane < 8; ++lane) differing += !same_bits(full[lane], non_positive[lane]);
  }
  if (vec_has_avx512f()) {
    differing += exp16_non_positive_differing(x);
  } else {
    MESSAGE("the 16-lane exp is not run here (no AVX-512F, or HEED_VEC_WIDTH=8)");
  }
  CHECK(differing == 0);
#endif
}
