// kernels/cpu/vec_math.h — fast vectorised float math for the hot kernels (AVX2 + FMA with
// a scalar path that evaluates the very same polynomial, and 16-lane AVX-512 loops for exp and
// GELU on CPUs that have AVX-512F, which give each element the 8-lane loops' bits;
// HEED_VEC_WIDTH=8 in the environment keeps the 8-lane loops).
//
// exp: Cephes' single-precision expf (range reduction by ln 2, degree-5 polynomial), about
// 1-2 ulp over [-86, 88.37]; inputs below -86 (including -inf) give exactly 0, inputs above
// 88.37 give +inf, NaN stays NaN. 2^n is applied as 2 * 2^(n-1) so n = 128 stays finite. The vector and scalar paths
// return identical bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cpu_kernels.h"  // heed_sgemm_supported: the build and CPU test for AVX-512F

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HEED_HAVE_AVX2 1
#endif

namespace heed::kernels::cpu {

namespace exp_detail {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                       kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
inline constexpr float kLow = -86.0f, kHigh = 88.37f;
}  // namespace exp_detail

inline float fast_exp(float x) {
  using namespace exp_detail;
  if (x != x) return x;
  if (x < kLow) return 0.0f;
  if (x > kHigh) return INFINITY;
  const float n = std::floor(std::fma(x, kLog2e, 0.5f));
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  const float z = r * r;
  float y = kP0;
  y = std::fma(y, r, kP1);
  y = std::fma(y, r, kP2);
  y = std::fma(y, r, kP3);
  y = std::fma(y, r, kP4);
  y = std::fma(y, r, kP5);
  y = std::fma(y, z, r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 126) << 23;  // 2^(n-1)
  float scale;
  std::memcpy(&scale, &bits, 4);
  return (y * 2.0f) * scale;
}

#if HEED_HAVE_AVX2
// kNonPositive: for callers whose x is <= 0 or NaN (gelu'(v) = Phi(v) + v phi(v) takes
// exp(-v^2 / 2); a softmax takes exp(x - max)): skips the clamp at kHigh and the two blends
// that only x > kHigh and NaN need, the same bits for every x <= 0 (test_vec_math); GELU with
// its derivative ran 15% faster on a Zen 3. A NaN still gives NaN: the clamp at kLow is
// max(kLow, x), which passes a NaN x through (vmaxps returns its second operand then).
template <bool kNonPositive = false>
inline __m256 fast_exp8(__m256 x) {
  using namespace exp_detail;
  const __m256 too_low = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ);
  __m256 xc = _mm256_max_ps(_mm256_set1_ps(kLow), x);  // NaN stays NaN (see above)
  if constexpr (!kNonPositive) xc = _mm256_min_ps(xc, _mm256_set1_ps(kHigh));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 y = _mm256_set1_ps(kP0);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP1));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP2));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP3));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP4));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP5));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  __m256 result = _mm256_mul_ps(_mm256_add_ps(y, y), _mm256_castsi256_ps(bits));
  result = _mm256_andnot_ps(too_low, result);
  if constexpr (kNonPositive) return result;
  const __m256 too_high = _mm256_cmp_ps(x, _mm256_set1_ps(kHigh), _CMP_GT_OQ);
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  result = _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), too_high);
  return _mm256_blendv_ps(result, x, is_nan);
}
#endif

#if HEED_HAVE_AVX2
// Transposes the 8 x 8 block held in r[0..7] (row i in r[i]) in place: pairs, quads, then
// 128-bit halves (the packings of sgemm.cpp and flash attention's key/value blocks).
inline void transpose_8x8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

// GELU's Phi(v) = 0.5 erfc(-v / sqrt 2), in the form of Abramowitz & Stegun 7.1.26:
// erfc(y) ~= t G(t) e^(-y^2), t = 1 / (1 + p y), y = |v| / sqrt 2 >= 0, with A&S's p and our own
// degree-7 G (tools/fit_gelu_phi.py: a weighted minimax fit against mpmath's erfc over
// |v| <= 13.5, beyond which exp(-v^2 / 2) is 0 in float: G within 5e-8 relative for |v| <= 4, 2.4e-7 beyond;
// A&S's degree 4 is 1.5e-7 absolute but 2e-2 relative in the tail).
// e^(-y^2) = exp(-v^2 / 2) is also the exp of gelu'(v) = Phi(v) + v exp(-v^2 / 2) / sqrt(2 pi):
// one exp per element serves both. Phi(-|v|) = 0.5 t G(t) e^(-y^2) keeps its relative accuracy in
// the tail, where 0.5 (1 + erf(v / sqrt 2)) cancels (gelu(-5) from a float erf is 10% off, and 0
// below -5.66); Phi(|v|) = 1 - Phi(-|v|). Measured against float64 (test_vec_math states
// the bounds it checks).
namespace phi_detail {
inline constexpr float kP = 0.3275911f * 0.70710678118654752f;  // A&S's p, times 1 / sqrt 2 (y = |v| / sqrt 2)
// G's coefficients, halved (exactly): t G(t) / 2 e^(-y^2) is Phi(-|v|) directly.
inline constexpr float kG0 = 0.5f * 1.850629601e-01f, kG1 = 0.5f * 1.805413589e-01f, kG2 = 0.5f * 2.072568653e-01f,
                       kG3 = 0.5f * 2.037538608e-02f, kG4 = 0.5f * 4.636822341e-01f, kG5 = 0.5f * -4.180733328e-01f,
                       kG6 = 0.5f * 5.041596802e-01f, kG7 = 0.5f * -1.430051999e-01f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143268f;
}  // namespace phi_detail

// Phi(v), with *gauss = exp(-v^2 / 2); NaN for a NaN v (gauss then unspecified). One element.
inline float gelu_phi(float v, float* gauss) {
  using namespace phi_detail;
  const float e = fast_exp(-0.5f * (v * v));
  const float t = 1.0f / std::fma(kP, std::fabs(v), 1.0f);
  float q = kG7;
  q = std::fma(q, t, kG6);
  q = std::fma(q, t, kG5);
  q = std::fma(q, t, kG4);
  q = std::fma(q, t, kG3);
  q = std::fma(q, t, kG2);
  q = std::fma(q, t, kG1);
  q = std::fma(q, t, kG0);
  const float h = q * t;
  *gauss = e;
  return v < 0.0f ? h * e : std::fma(-h, e, 1.0f);  // Phi(-|v|) = h e, Phi(|v|) = 1 - h e in one rounding
}

// gelu'(v) = Phi(v) + v exp(-v^2 / 2) / sqrt(2 pi) from gelu_phi's phi and gauss: the factor
// gelu_erf_backward multiplies g by (gelu_factor8 / gelu_factor16: the same steps per lane).
inline float gelu_factor(float v, float phi, float gauss) { return std::fma(v, phi_detail::kInvSqrt2Pi * gauss, phi); }

#if HEED_HAVE_AVX2
// gelu_phi for eight lanes (the same operations per lane, so the same bits).
inline __m256 gelu_phi8(__m256 v, __m256* gauss) {
  using namespace phi_detail;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = fast_exp8<true>(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(v, v)));
  const __m256 t =
      _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(kP), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), one));
  __m256 q = _mm256_set1_ps(kG7);
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG6));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG5));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG4));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG3));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG2));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG1));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kG0));
  const __m256 h = _mm256_mul_ps(q, t);
  *gauss = e;
  const __m256 negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(_mm256_fnmadd_ps(h, e, one), _mm256_mul_ps(h, e), negative);
}
inline __m256 gelu_factor8(__m256 v, __m256 phi, __m256 gauss) {
  return _mm256_fmadd_ps(v, _mm256_mul_ps(_mm256_set1_ps(phi_detail::kInvSqrt2Pi), gauss), phi);
}
#endif

#if HEED_HAVE_AVX2
// 16-lane AVX-512 versions of fast_exp8 / gelu_phi8 and the GELU loops, for CPUs that have it
// (vec_has_avx512f). Each step is the 8-lane step at twice the width (the same operations in
// the same order, masks for the compares), so every element gets the same bits.
namespace avx512 {
#define HEED_AVX512 __attribute__((target("avx512f,fma")))
// max / min (and below floor, the conversion and the shift) through their zero-masked forms with
// every lane set: GCC 12 warns that the plain forms' undefined pass-through register may be used
// uninitialised.
HEED_AVX512 inline __m512 max16(__m512 a, __m512 b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
HEED_AVX512 inline __m512 min16(__m512 a, __m512 b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }
template <bool kNonPositive = false>  // as fast_exp8's
HEED_AVX512 inline __m512 fast_exp16(__m512 x) {
  using namespace exp_detail;
  const __mmask16 too_low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  __m512 xc = max16(_mm512_set1_ps(kLow), x);  // NaN stays NaN (as fast_exp8)
  if constexpr (!kNonPositive) xc = min16(xc, _mm512_set1_ps(kHigh));
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
                                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 y = _mm512_set1_ps(kP0);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP1));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP2));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP3));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP4));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP5));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, z, r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_maskz_slli_epi32(
      0xFFFF, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(0xFFFF, n), _mm512_set1_epi32(126)), 23);
  __m512 result = _mm512_mul_ps(_mm512_add_ps(y, y), _mm512_castsi512_ps(bits));
  result = _mm512_maskz_mov_ps(static_cast<__mmask16>(~too_low), result);
  if constexpr (kNonPositive) return result;
  const __mmask16 too_high = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kHigh), _CMP_GT_OQ);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  result = _mm512_mask_blend_ps(too_high, result, _mm512_set1_ps(INFINITY));
  return _mm512_mask_blend_ps(is_nan, result, x);
}

// gelu_phi8 at twice the width.
HEED_AVX512 inline __m512 gelu_phi16(__m512 v, __m512* gauss) {
  using namespace phi_detail;
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = fast_exp16<true>(_mm512_mul_ps(_mm512_set1_ps(-0.5f), _mm512_mul_ps(v, v)));
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kP), _mm512_abs_ps(v), one));
  __m512 q = _mm512_set1_ps(kG7);
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG6));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG5));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG4));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG3));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG2));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG1));
  q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kG0));
  const __m512 h = _mm512_mul_ps(q, t);
  *gauss = e;
  const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(negative, _mm512_fnmadd_ps(h, e, one), _mm512_mul_ps(h, e));
}
HEED_AVX512 inline __m512 gelu_factor16(__m512 v, __m512 phi, __m512 gauss) {
  return _mm512_fmadd_ps(v, _mm512_mul_ps(_mm512_set1_ps(phi_detail::kInvSqrt2Pi), gauss), phi);
}

// The GELU loops over the first n - n % 16 elements; they return how many they did.
HEED_AVX512 inline int64_t gelu_erf_forward(const float* x, float* out, int64_t n, float* derivative) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 e;
    const __m512 phi = gelu_phi16(v, &e);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(v, phi));
    if (derivative != nullptr) _mm512_storeu_ps(derivative + i, gelu_factor16(v, phi, e));
  }
  return i;
}

HEED_AVX512 inline int64_t gelu_erf_backward(const float* g, const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 e;
    const __m512 phi = gelu_phi16(v, &e);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(g + i), gelu_factor16(v, phi, e)));
  }
  return i;
}
// exp(in - shift) over the first n - n % 16 elements (exp_shifted's 16-lane loop).
template <bool kNonPositive>
HEED_AVX512 inline int64_t exp_shifted(const float* in, float* out, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, fast_exp16<kNonPositive>(_mm512_sub_ps(_mm512_loadu_ps(in + i), s)));
  return i;
}
// exp_shifted, each 16 results also added to the 8-lane running sum `partial` as two 8-lane adds
// (the low half, then the high half): the 8-lane loop's order of additions, so its bits.
template <bool kNonPositive>
HEED_AVX512 inline int64_t exp_shifted_sum(const float* in, float* out, int64_t n, float shift, __m256* partial) {
  const __m512 s = _mm512_set1_ps(shift);
  __m256 sum = *partial;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = fast_exp16<kNonPositive>(_mm512_sub_ps(_mm512_loadu_ps(in + i), s));
    _mm512_storeu_ps(out + i, e);
    sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(e), 0)));
    sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(e), 1)));
  }
  *partial = sum;
  return i;
}
#undef HEED_AVX512
}  // namespace avx512
#endif

// Whether the 16-lane paths run (the CPU has AVX-512F; checked once). HEED_VEC_WIDTH=8 in the
// environment keeps the 8-lane paths (for side-by-side measurements and tests).
inline bool vec_has_avx512f() {
#if HEED_HAVE_AVX2
  static const bool has = [] {
    const char* width = std::getenv("HEED_VEC_WIDTH");
    if (width != nullptr && std::strcmp(width, "8") == 0) return false;
    return heed_sgemm_supported(SgemmKernel::Avx512);  // the one CPU test for AVX-512F
  }();
  return has;
#else
  return false;
#endif
}

// GELU with erf, forward: out = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), Phi from gelu_phi. With a
// derivative array it also writes derivative = gelu'(x) = Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi),
// the factor gelu_erf_backward multiplies g by, with the bits of that backward (the same
// operations per element): g * derivative is its result. For a backward that keeps gelu'(z)
// instead of z (F::feed_forward); the exp is Phi's own, so the derivative costs a multiply-add.
// x and out may be the same array (each element is read before its results are stored). The
// 16-, 8-lane and scalar paths give every element the same bits.
inline void gelu_erf_forward(const float* x, float* out, int64_t n, float* derivative = nullptr) {
  int64_t i = 0;
#if HEED_HAVE_AVX2
  if (n >= 16 && vec_has_avx512f()) i = avx512::gelu_erf_forward(x, out, n, derivative);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 e;
    const __m256 phi = gelu_phi8(v, &e);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, phi));
    if (derivative != nullptr) _mm256_storeu_ps(derivative + i, gelu_factor8(v, phi, e));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];  // x and out may be one array
    float e;
    const float phi = gelu_phi(v, &e);
    out[i] = v * phi;
    if (derivative != nullptr) derivative[i] = gelu_factor(v, phi, e);
  }
}

// GELU with erf, backward: grad_in = g * (Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi)).
inline void gelu_erf_backward(const float* g, const float* x, float* out, int64_t n) {
  int64_t i = 0;
#if HEED_HAVE_AVX2
  if (n >= 16 && vec_has_avx512f()) i = avx512::gelu_erf_backward(g, x, out, n);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 e;
    const __m256 phi = gelu_phi8(v, &e);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), gelu_factor8(v, phi, e)));
  }
#endif
  for (; i < n; ++i) {
    float e;
    const float phi = gelu_phi(x[i], &e);
    out[i] = g[i] * gelu_factor(x[i], phi, e);
  }
}

// out[i] = exp(in[i] - shift) for n floats (in and out may alias). kNonPositive (fast_exp8's) for
// callers whose in[i] - shift is <= 0 or NaN, as where shift is at least every in[i]: the same bits.
template <bool kNonPositive = false>
inline void exp_shifted(const float* in, float* out, int64_t n, float shift) {
  int64_t i = 0;
#if HEED_HAVE_AVX2
  if (n >= 16 && vec_has_avx512f()) i = avx512::exp_shifted<kNonPositive>(in, out, n, shift);
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, fast_exp8<kNonPositive>(_mm256_sub_ps(_mm256_loadu_ps(in + i), s)));
#endif
  for (; i < n; ++i) out[i] = fast_exp(in[i] - shift);
}

inline void exp_shifted(const double* in, double* out, int64_t n, double shift) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i] - shift);
}

// The largest of n >= 1 floats (-inf when all are NaN or -inf); NaNs are skipped as by
// `x > best ? x : best`. The exact maximum, so the lane order does not matter (up to the sign of
// a zero maximum, which no caller can tell: it is subtracted, and exp(x - 0) = exp(x + 0)).
inline float row_max(const float* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#if HEED_HAVE_AVX2
  if (n >= 8) {
    __m256 v = _mm256_set1_ps(best);
    for (; i + 8 <= n; i += 8) v = _mm256_max_ps(_mm256_loadu_ps(x + i), v);  // a NaN load keeps v
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (float lane : lanes) best = lane > best ? lane : best;
  }
#endif
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

inline double row_max(const double* x, int64_t n) {
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

// out[i] = exp(in[i] - shift) as exp_shifted, and returns their sum (in 8 lane-wise partial
// sums, then the lanes in order and the tail: a fixed order for a given n; the 16-lane loop adds
// in that same order). kNonPositive as exp_shifted's.
template <bool kNonPositive = false>
inline float exp_shifted_sum(const float* in, float* out, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#if HEED_HAVE_AVX2
  if (n >= 8) {
    const __m256 s = _mm256_set1_ps(shift);
    __m256 partial = _mm256_setzero_ps();
    if (n >= 16 && vec_has_avx512f()) i = avx512::exp_shifted_sum<kNonPositive>(in, out, n, shift, &partial);
    for (; i + 8 <= n; i += 8) {
      const __m256 e = fast_exp8<kNonPositive>(_mm256_sub_ps(_mm256_loadu_ps(in + i), s));
      _mm256_storeu_ps(out + i, e);
      partial = _mm256_add_ps(partial, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, partial);
    for (float lane : lanes) sum += lane;
  }
#endif
  for (; i < n; ++i) {
    out[i] = fast_exp(in[i] - shift);
    sum += out[i];
  }
  return sum;
}

inline double exp_shifted_sum(const double* in, double* out, int64_t n, double shift) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - shift);
    sum += out[i];
  }
  return sum;
}

}  // namespace heed::kernels::cpu
