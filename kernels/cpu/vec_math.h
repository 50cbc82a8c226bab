// kernels/cpu/vec_math.h — fast vectorised float math for the hot kernels (AVX2 + FMA with
// a scalar path that evaluates the very same polynomial).
//
// exp: Cephes' single-precision expf (range reduction by ln 2, degree-5 polynomial), about
// 1-2 ulp over [-86, 88.37]; inputs below -86 (including -inf) give exactly 0, inputs above
// 88.37 give +inf, NaN stays NaN. 2^n is applied as 2 * 2^(n-1) so n = 128 stays finite. The vector and scalar paths return identical bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HEED_HAVE_AVX2 1
#endif

namespace heed::kernels::cpu {

namespace exp_detail {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
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
inline __m256 fast_exp8(__m256 x) {
  using namespace exp_detail;
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 too_low = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ);
  const __m256 too_high = _mm256_cmp_ps(x, _mm256_set1_ps(kHigh), _CMP_GT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLow)), _mm256_set1_ps(kHigh));
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
  result = _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), too_high);
  return _mm256_blendv_ps(result, x, is_nan);
}
#endif

// out[i] = exp(in[i] - shift) for n floats (in and out may alias).
inline void exp_shifted(const float* in, float* out, int64_t n, float shift) {
  int64_t i = 0;
#if HEED_HAVE_AVX2
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, fast_exp8(_mm256_sub_ps(_mm256_loadu_ps(in + i), s)));
#endif
  for (; i < n; ++i) out[i] = fast_exp(in[i] - shift);
}

inline void exp_shifted(const double* in, double* out, int64_t n, double shift) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i] - shift);
}

}  // namespace heed::kernels::cpu
