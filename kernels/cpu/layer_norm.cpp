// kernels/cpu/layer_norm.cpp — fused LayerNorm forward and backward over the last dim.
//
// Invariants: statistics are computed in double per row (two passes: mean, then centred
// sum of squares, so large offsets do not cancel); rows are independent in forward and in
// dx; dweight/dbias are summed over fixed blocks of rows whose partials are added in block
// order, so every result is independent of the thread count.
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kRowBlock = 64;

template <typename T>
void forward_typed(const T* x, const T* w, const T* b, int64_t rows, int64_t cols, double eps, T* y,
                   compute_t<T>* mean_out, compute_t<T>* rstd_out) {
  using C = compute_t<T>;
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(load(xr + c));
      const double mean = sum / static_cast<double>(cols);
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(load(xr + c)) - mean;
        ss += d * d;
      }
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
      const C m = static_cast<C>(mean), s = static_cast<C>(rstd);
      mean_out[r] = m;
      rstd_out[r] = s;
      for (int64_t c = 0; c < cols; ++c) {
        C v = (load(xr + c) - m) * s;
        if (w) v = v * load(w + c);
        if (b) v = v + load(b + c);
        store(yr + c, v);
      }
    }
  });
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
    std::vector<C> dxhat(static_cast<size_t>(cols));
    for (int64_t blk = block_begin; blk < block_end; ++blk) {
      double* pdw = want_params ? partial_dw.data() + blk * cols : nullptr;
      double* pdb = want_params ? partial_db.data() + blk * cols : nullptr;
      if (want_params)
        for (int64_t c = 0; c < cols; ++c) pdw[c] = pdb[c] = 0.0;
      const int64_t r_end = std::min(rows, (blk + 1) * kRowBlock);
      for (int64_t r = blk * kRowBlock; r < r_end; ++r) {
        const T* xr = x + r * cols;
        const T* dyr = dy + r * cols;
        const C m = mean[r], s = rstd[r];
        double sum_dxhat = 0, sum_dxhat_xhat = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const C xhat = (load(xr + c) - m) * s;
          const C g = load(dyr + c);
          dxhat[c] = w ? g * load(w + c) : g;
          sum_dxhat += static_cast<double>(dxhat[c]);
          sum_dxhat_xhat += static_cast<double>(dxhat[c]) * static_cast<double>(xhat);
          if (want_params) {
            pdw[c] += static_cast<double>(g) * static_cast<double>(xhat);
            pdb[c] += static_cast<double>(g);
          }
        }
        const C mean_dxhat = static_cast<C>(sum_dxhat / static_cast<double>(cols));
        const C mean_dxhat_xhat = static_cast<C>(sum_dxhat_xhat / static_cast<double>(cols));
        T* dxr = dx + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          const C xhat = (load(xr + c) - m) * s;
          store(dxr + c, s * (dxhat[c] - mean_dxhat - xhat * mean_dxhat_xhat));
        }
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
