// kernels/cpu/layer_norm.cpp — fused LayerNorm forward and backward over the last dim.
//
// Invariants: statistics are computed in double per row (two passes: mean, then centred
// sum of squares, so large offsets do not cancel), each sum over eight interleaved lanes added
// in a fixed tree (lane_sum: vectorised, and the order depends on the width only; float rows
// four at a time with the same bits, row_stats_rows); rows are
// independent in forward and in
// dx; dweight/dbias are summed over fixed blocks of rows whose partials are added in block
// order, so every result is independent of the thread count.
#include <type_traits>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kRowBlock = 64;
constexpr int kStatRows = 4;  // float rows whose statistics are computed together (row_stats_rows)
// y = xhat (* w) (+ b) over one row; the affine choices are template parameters so the loop
// has no branches.
template <typename T, bool kWeight, bool kBias>
void normalize_row(const T* __restrict xr, const T* __restrict w, const T* __restrict b, int64_t cols, compute_t<T> m,
                   compute_t<T> s, T* __restrict yr) {
  using C = compute_t<T>;
  // The adds as explicit fused multiply-adds (one rounding whatever a compiler contracts).
  for (int64_t c = 0; c < cols; ++c) {
    const C centred = load(xr + c) - m;
    C v;
    if constexpr (kWeight && kBias)
      v = std::fma(centred * s, load(w + c), load(b + c));
    else if constexpr (kWeight)
      v = centred * s * load(w + c);
    else if constexpr (kBias)
      v = std::fma(centred, s, load(b + c));
    else
      v = centred * s;
    store(yr + c, v);
  }
}

// The mean and 1 / sqrt(variance + eps) of one row, in double: the mean is lane_sum's, the
// centred sum of squares lane_fma_sum's (acc = fma(d, d, acc) per lane, lane_sum's order).
template <typename T>
void row_stats(const T* xr, int64_t cols, double eps, double* mean_out, double* rstd_out) {
  const double mean =
      lane_sum(cols, [&](int64_t c) { return static_cast<double>(load(xr + c)); }) / static_cast<double>(cols);
  const double ss = lane_fma_sum<double>(cols, [&](int64_t c) {
    const double d = static_cast<double>(load(xr + c)) - mean;
    return std::pair{d, d};
  });
  *mean_out = mean;
  *rstd_out = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
}

#if HEED_HAVE_AVX2
// row_stats of kStatRows float rows (cols apart) at once, each row with exactly row_stats' bits
// (its lane k is element k % 4 of ymm half k / 4, the tail goes to lane 0 after the vectors, the
// same tree). Why: one row's sums are chains of cols / 8 dependent adds, which left the core
// waiting on their latency; four rows' chains interleave.
void row_stats_rows(const float* x, int64_t cols, double eps, double* mean_out, double* rstd_out) {
  __m256d lo[kStatRows], hi[kStatRows];
  double mean[kStatRows];
  const int64_t vec_end = cols - cols % kSumLanes;
  for (int r = 0; r < kStatRows; ++r) lo[r] = hi[r] = _mm256_setzero_pd();
  for (int64_t c = 0; c < vec_end; c += kSumLanes)
    for (int r = 0; r < kStatRows; ++r) {
      const __m256 v = _mm256_loadu_ps(x + r * cols + c);
      lo[r] = _mm256_add_pd(lo[r], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi[r] = _mm256_add_pd(hi[r], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
  for (int r = 0; r < kStatRows; ++r) {
    double lanes[kSumLanes];
    _mm256_storeu_pd(lanes, lo[r]);
    _mm256_storeu_pd(lanes + 4, hi[r]);
    for (int64_t c = vec_end; c < cols; ++c) lanes[0] += static_cast<double>(x[r * cols + c]);
    mean[r] = lane_tree(lanes) / static_cast<double>(cols);
    lo[r] = hi[r] = _mm256_setzero_pd();
  }
  for (int64_t c = 0; c < vec_end; c += kSumLanes)
    for (int r = 0; r < kStatRows; ++r) {
      const __m256 v = _mm256_loadu_ps(x + r * cols + c);
      const __m256d m = _mm256_set1_pd(mean[r]);
      const __m256d d_lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m);
      const __m256d d_hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m);
      lo[r] = _mm256_fmadd_pd(d_lo, d_lo, lo[r]);
      hi[r] = _mm256_fmadd_pd(d_hi, d_hi, hi[r]);
    }
  for (int r = 0; r < kStatRows; ++r) {
    double lanes[kSumLanes];
    _mm256_storeu_pd(lanes, lo[r]);
    _mm256_storeu_pd(lanes + 4, hi[r]);
    for (int64_t c = vec_end; c < cols; ++c) {
      const double d = static_cast<double>(x[r * cols + c]) - mean[r];
      lanes[0] = std::fma(d, d, lanes[0]);
    }
    mean_out[r] = mean[r];
    rstd_out[r] = 1.0 / std::sqrt(lane_tree(lanes) / static_cast<double>(cols) + eps);
  }
}
#endif

template <typename T>
void forward_typed(const T* x, const T* w, const T* b, int64_t rows, int64_t cols, double eps, T* y,
                   compute_t<T>* mean_out, compute_t<T>* rstd_out) {
  using C = compute_t<T>;
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    double means[kStatRows], rstds[kStatRows];
    int64_t stats_begin = begin, stats_end = begin;  // rows whose statistics are in means / rstds
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      if (r == stats_end) {
        stats_begin = r;
#if HEED_HAVE_AVX2
        if constexpr (std::is_same_v<T, float>) {
          if (r + kStatRows <= end) {
            row_stats_rows(xr, cols, eps, means, rstds);
            stats_end = r + kStatRows;
          }
        }
#endif
        if (stats_end == r) {
          row_stats(xr, cols, eps, means, rstds);
          stats_end = r + 1;
        }
      }
      const C m = static_cast<C>(means[r - stats_begin]), s = static_cast<C>(rstds[r - stats_begin]);
      mean_out[r] = m;
      rstd_out[r] = s;
      if (w && b)
        normalize_row<T, true, true>(xr, w, b, cols, m, s, yr);
      else if (w)
        normalize_row<T, true, false>(xr, w, b, cols, m, s, yr);
      else if (b)
        normalize_row<T, false, true>(xr, w, b, cols, m, s, yr);
      else
        normalize_row<T, false, false>(xr, w, b, cols, m, s, yr);
    }
  });
}

#if HEED_HAVE_AVX2
// The float part of one eight-column step of backward_row's vector loops (both widths): xhat =
// (x - mean) * rstd and dxhat = dy (* w), stored in the row buffers, and dy.
struct FloatStep {
  __m256 xh, g, dxh;
};
template <bool kWeight>
inline FloatStep float_step(const float* xr, const float* w, const float* dyr, int64_t c, __m256 mv, __m256 sv,
                            float* xhat, float* dxhat) {
  FloatStep f;
  f.xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + c), mv), sv);
  f.g = _mm256_loadu_ps(dyr + c);
  f.dxh = f.g;
  if constexpr (kWeight) f.dxh = _mm256_mul_ps(f.g, _mm256_loadu_ps(w + c));
  _mm256_storeu_ps(xhat + c, f.xh);
  _mm256_storeu_ps(dxhat + c, f.dxh);
  return f;
}

// backward_row's vector loop over float rows, eight columns at a time, for CPUs without
// AVX-512F (or with HEED_VEC_WIDTH=8); returns the first column it left (to the scalar loop).
template <bool kWeight, bool kParams>
int64_t backward_row_avx2(const float* __restrict xr, const float* __restrict w, const float* __restrict dyr,
                          int64_t cols, float m, float s, float* __restrict xhat, float* __restrict dxhat,
                          double* __restrict pdw, double* __restrict pdb, double* sum_dxhat, double* sum_dxhat_xhat) {
  // backward_row's sums eight columns at a time: lane k of the two 4-double halves is lane k of its
  // scalar loop. Every product of two floats is exact in double, so fused or not, the sums are the
  // scalar ones.
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  __m256d prod_lo = _mm256_setzero_pd(), prod_hi = _mm256_setzero_pd();
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
  int64_t c = 0;
  for (; c + kSumLanes <= cols; c += kSumLanes) {
    const FloatStep f = float_step<kWeight>(xr, w, dyr, c, mv, sv, xhat, dxhat);
    const __m256 xh = f.xh, g = f.g, dxh = f.dxh;
    const __m256d xh_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(xh));
    const __m256d xh_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(xh, 1));
    const __m256d dxh_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(dxh));
    const __m256d dxh_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(dxh, 1));
    if constexpr (kParams) {
      const __m256d g_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
      const __m256d g_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
      _mm256_storeu_pd(pdw + c, _mm256_fmadd_pd(g_lo, xh_lo, _mm256_loadu_pd(pdw + c)));
      _mm256_storeu_pd(pdw + c + 4, _mm256_fmadd_pd(g_hi, xh_hi, _mm256_loadu_pd(pdw + c + 4)));
      _mm256_storeu_pd(pdb + c, _mm256_add_pd(g_lo, _mm256_loadu_pd(pdb + c)));
      _mm256_storeu_pd(pdb + c + 4, _mm256_add_pd(g_hi, _mm256_loadu_pd(pdb + c + 4)));
    }
    sum_lo = _mm256_add_pd(sum_lo, dxh_lo);
    sum_hi = _mm256_add_pd(sum_hi, dxh_hi);
    prod_lo = _mm256_fmadd_pd(dxh_lo, xh_lo, prod_lo);
    prod_hi = _mm256_fmadd_pd(dxh_hi, xh_hi, prod_hi);
  }
  _mm256_storeu_pd(sum_dxhat, sum_lo);
  _mm256_storeu_pd(sum_dxhat + 4, sum_hi);
  _mm256_storeu_pd(sum_dxhat_xhat, prod_lo);
  _mm256_storeu_pd(sum_dxhat_xhat + 4, prod_hi);
  return c;
}

// The same loop in zmm registers (CPUs with AVX-512F): the eight double lanes of one zmm are
// lanes 0-7 of the ymm pair above, every operation the same, so every sum gets the same bits
// (the conversions in their zero-masked form with every lane set: GCC 12 warns that the plain
// form's undefined pass-through register may be used uninitialised).
template <bool kWeight, bool kParams>
__attribute__((target("avx512f,fma"))) int64_t backward_row_avx512(
    const float* __restrict xr, const float* __restrict w, const float* __restrict dyr, int64_t cols, float m, float s,
    float* __restrict xhat, float* __restrict dxhat, double* __restrict pdw, double* __restrict pdb, double* sum_dxhat,
    double* sum_dxhat_xhat) {
  __m512d sum = _mm512_setzero_pd(), prod = _mm512_setzero_pd();
  const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
  int64_t c = 0;
  for (; c + kSumLanes <= cols; c += kSumLanes) {
    const FloatStep f = float_step<kWeight>(xr, w, dyr, c, mv, sv, xhat, dxhat);
    const __m256 xh = f.xh, g = f.g, dxh = f.dxh;
    const __m512d xh_d = _mm512_maskz_cvtps_pd(0xFF, xh), dxh_d = _mm512_maskz_cvtps_pd(0xFF, dxh);
    if constexpr (kParams) {
      const __m512d g_d = _mm512_maskz_cvtps_pd(0xFF, g);
      _mm512_storeu_pd(pdw + c, _mm512_fmadd_pd(g_d, xh_d, _mm512_loadu_pd(pdw + c)));
      _mm512_storeu_pd(pdb + c, _mm512_add_pd(g_d, _mm512_loadu_pd(pdb + c)));
    }
    sum = _mm512_add_pd(sum, dxh_d);
    prod = _mm512_fmadd_pd(dxh_d, xh_d, prod);
  }
  _mm512_storeu_pd(sum_dxhat, sum);
  _mm512_storeu_pd(sum_dxhat_xhat, prod);
  return c;
}
#endif

// One row of backward: xhat and dxhat (= dy * w) into the row buffers, the dweight/dbias partial
// sums of the row's block (kParams), then dx from the two row means. The two means are summed in
// the same pass, lane by lane exactly as lane_sum orders them (lane k takes c = k mod kSumLanes, the
// tail goes to lane 0, the same tree), so the result is that of two lane_sum calls.
template <typename T, bool kWeight, bool kParams>
void backward_row(const T* __restrict xr, const T* __restrict w, const T* __restrict dyr, int64_t cols, compute_t<T> m,
                  compute_t<T> s, compute_t<T>* __restrict xhat, compute_t<T>* __restrict dxhat, double* __restrict pdw,
                  double* __restrict pdb, T* __restrict dxr) {
  using C = compute_t<T>;
  double sum_dxhat[kSumLanes] = {}, sum_dxhat_xhat[kSumLanes] = {};
  const auto visit = [&](int64_t c, int lane) {
    const C xh = (load(xr + c) - m) * s;
    const C g = load(dyr + c);
    C dxh = g;
    if constexpr (kWeight) dxh = g * load(w + c);
    xhat[c] = xh;
    dxhat[c] = dxh;
    if constexpr (kParams) {
      pdw[c] += static_cast<double>(g) * static_cast<double>(xh);
      pdb[c] += static_cast<double>(g);
    }
    sum_dxhat[lane] += static_cast<double>(dxh);
    sum_dxhat_xhat[lane] += static_cast<double>(dxh) * static_cast<double>(xh);
  };
  int64_t c = 0;
#if HEED_HAVE_AVX2
  if constexpr (std::is_same_v<T, float>) {
    c = vec_has_avx512f() ? backward_row_avx512<kWeight, kParams>(xr, w, dyr, cols, m, s, xhat, dxhat, pdw, pdb,
                                                                  sum_dxhat, sum_dxhat_xhat)
                          : backward_row_avx2<kWeight, kParams>(xr, w, dyr, cols, m, s, xhat, dxhat, pdw, pdb,
                                                                sum_dxhat, sum_dxhat_xhat);
  }
#endif
  for (; c + kSumLanes <= cols; c += kSumLanes)
    for (int k = 0; k < kSumLanes; ++k) visit(c + k, k);
  for (; c < cols; ++c) visit(c, 0);
  const C mean_dxhat = static_cast<C>(lane_tree(sum_dxhat) / static_cast<double>(cols));
  const C mean_dxhat_xhat = static_cast<C>(lane_tree(sum_dxhat_xhat) / static_cast<double>(cols));
  for (int64_t i = 0; i < cols; ++i) store(dxr + i, s * (dxhat[i] - mean_dxhat - xhat[i] * mean_dxhat_xhat));
}

template <typename T>
void backward_typed(const T* x, const T* w, const compute_t<T>* mean, const compute_t<T>* rstd, const T* dy,
                    int64_t rows, int64_t cols, T* dx, T* dw, T* db) {
  using C = compute_t<T>;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool want_params = dw || db;
  // Per-block partial sums of dy*xhat and dy for dweight/dbias: (blocks, cols) each.
  std::vector<double> partial_dw(want_params ? static_cast<size_t>(blocks * cols) : 0);
  std::vector<double> partial_db(want_params ? static_cast<size_t>(blocks * cols) : 0);
  parallel_for(blocks, 1, [&](int64_t block_begin, int64_t block_end) {
    std::vector<C> xhat(static_cast<size_t>(cols)), dxhat(static_cast<size_t>(cols));
    for (int64_t blk = block_begin; blk < block_end; ++blk) {
      double* pdw = want_params ? partial_dw.data() + blk * cols : nullptr;
      double* pdb = want_params ? partial_db.data() + blk * cols : nullptr;
      if (want_params)
        for (int64_t c = 0; c < cols; ++c) pdw[c] = pdb[c] = 0.0;
      const int64_t r_end = std::min(rows, (blk + 1) * kRowBlock);
      for (int64_t r = blk * kRowBlock; r < r_end; ++r) {
        const T* xr = x + r * cols;
        const T* dyr = dy + r * cols;
        T* dxr = dx + r * cols;
        if (w && want_params)
          backward_row<T, true, true>(xr, w, dyr, cols, mean[r], rstd[r], xhat.data(), dxhat.data(), pdw, pdb, dxr);
        else if (w)
          backward_row<T, true, false>(xr, w, dyr, cols, mean[r], rstd[r], xhat.data(), dxhat.data(), pdw, pdb, dxr);
        else if (want_params)
          backward_row<T, false, true>(xr, w, dyr, cols, mean[r], rstd[r], xhat.data(), dxhat.data(), pdw, pdb, dxr);
        else
          backward_row<T, false, false>(xr, w, dyr, cols, mean[r], rstd[r], xhat.data(), dxhat.data(), pdw, pdb, dxr);
      }
    }
  });
  if (!want_params) return;
  parallel_for(cols, 256, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double sw = 0, sb = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sw += partial_dw[static_cast<size_t>(blk * cols + c)];
        sb += partial_db[static_cast<size_t>(blk * cols + c)];
      }
      if (dw) store(dw + c, sw);
      if (db) store(db + c, sb);
    }
  });
}

}  // namespace

void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, int64_t rows, int64_t cols,
                        double eps, void* y, void* mean, void* rstd) {
  dispatch_floating(dtype, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    forward_typed(static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), rows, cols, eps,
                  static_cast<T*>(y), static_cast<C*>(mean), static_cast<C*>(rstd));
  });
}

void layer_norm_backward(DType dtype, const void* x, const void* weight, const void* mean, const void* rstd,
                         const void* dy, int64_t rows, int64_t cols, void* dx, void* dweight, void* dbias) {
  dispatch_floating(dtype, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    backward_typed(static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const C*>(mean),
                   static_cast<const C*>(rstd), static_cast<const T*>(dy), rows, cols, static_cast<T*>(dx),
                   static_cast<T*>(dweight), static_cast<T*>(dbias));
  });
}

}  // namespace heed::kernels::cpu
