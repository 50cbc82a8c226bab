// kernels/cpu/softmax.cpp — row-wise softmax/log-softmax and the fused cross-entropy.
//
// Invariants: the row maximum is subtracted before exp; a row whose maximum is -inf (every
// entry masked) gives softmax 0 / log-softmax -inf and a zero gradient, never NaN; one row
// is handled by one thread in index order.
#include <type_traits>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {

template <typename T>
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
}

template <typename T>
void softmax_forward_typed(const T* in, T* out, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  parallel_for(rows, row_grain<T>(cols), [&](int64_t begin, int64_t end) {
    std::vector<C> shifted(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      const T* x = in + r * cols;
      T* y = out + r * cols;
      C mx = -std::numeric_limits<C>::infinity();
      bool has_nan = false;
      for (int64_t c = 0; c < cols; ++c) {
        const C v = load(x + c);
        has_nan = has_nan || v != v;
        mx = v > mx ? v : mx;
      }
      if (mx == -std::numeric_limits<C>::infinity() && !has_nan) {  // every key masked
        for (int64_t c = 0; c < cols; ++c) store(y + c, log ? -std::numeric_limits<C>::infinity() : C(0));
        continue;
      }
      double total = 0;
      for (int64_t c = 0; c < cols; ++c) {
        shifted[c] = load(x + c) - mx;
        total += static_cast<double>(std::exp(shifted[c]));
      }
      if (has_nan) total = std::numeric_limits<double>::quiet_NaN();
      if (log) {
        const C log_total = static_cast<C>(std::log(total));
        for (int64_t c = 0; c < cols; ++c) store(y + c, shifted[c] - log_total);
      } else {
        const C inv = static_cast<C>(1.0 / total);
        for (int64_t c = 0; c < cols; ++c) store(y + c, std::exp(shifted[c]) * inv);
      }
    }
  });
}

template <typename T>
void softmax_backward_typed(const T* y, const T* g, T* gx, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  parallel_for(rows, row_grain<T>(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* yr = y + r * cols;
      const T* gr = g + r * cols;
      T* out = gx + r * cols;
      if (log) {
        // Fully masked row (all -inf): no gradient.
        if (cols > 0 && load(yr) == -std::numeric_limits<C>::infinity()) {
          bool all_masked = true;
          for (int64_t c = 1; c < cols && all_masked; ++c)
            all_masked = load(yr + c) == -std::numeric_limits<C>::infinity();
          if (all_masked) {
            for (int64_t c = 0; c < cols; ++c) store(out + c, C(0));
            continue;
          }
        }
        double gsum = 0;
        for (int64_t c = 0; c < cols; ++c) gsum += static_cast<double>(load(gr + c));
        const C s = static_cast<C>(gsum);
        for (int64_t c = 0; c < cols; ++c) store(out + c, load(gr + c) - std::exp(load(yr + c)) * s);
      } else {
        double dot = 0;
        for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(load(gr + c)) * static_cast<double>(load(yr + c));
        const C d = static_cast<C>(dot);
        for (int64_t c = 0; c < cols; ++c) store(out + c, load(yr + c) * (load(gr + c) - d));
      }
    }
  });
}

template <typename T>
void cross_entropy_forward_typed(const T* logits, const int64_t* targets, int64_t rows, int64_t classes,
                                 int64_t ignore_index, double smoothing, compute_t<T>* row_loss,
                                 compute_t<T>* row_lse) {
  using C = compute_t<T>;
  parallel_for(rows, row_grain<T>(classes), [&](int64_t begin, int64_t end) {
    std::vector<float> exps(std::is_same_v<T, float> ? static_cast<size_t>(classes) : 0);
    for (int64_t r = begin; r < end; ++r) {
      const T* x = logits + r * classes;
      double total = 0, sum_x = 0;
      C mx;
      if constexpr (std::is_same_v<T, float>) {
        // Vectorised (vec_math.h), summed in double as the scalar loop below: a confident row's
        // many tiny terms next to exp(0) = 1 must not round away. A NaN logit is skipped by
        // row_max but turns the sum into NaN, so the loss is NaN as below.
        mx = row_max(x, classes);
        exp_shifted(x, exps.data(), classes, mx);
        total = lane_sum(classes, [&](int64_t c) { return static_cast<double>(exps[static_cast<size_t>(c)]); });
      } else {
        mx = -std::numeric_limits<C>::infinity();
        for (int64_t c = 0; c < classes; ++c) {
          const C v = load(x + c);
          mx = (v > mx || v != v) ? v : mx;
        }
        for (int64_t c = 0; c < classes; ++c) total += static_cast<double>(std::exp(load(x + c) - mx));
      }
      if (smoothing > 0.0)
        for (int64_t c = 0; c < classes; ++c) sum_x += static_cast<double>(load(x + c));
      const double lse = static_cast<double>(mx) + std::log(total);
      row_lse[r] = static_cast<C>(lse);
      const int64_t t = targets[r];
      if (t == ignore_index) {
        row_loss[r] = C(0);
        continue;
      }
      const double xt = static_cast<double>(load(x + t));
      // The terms are added only when their weight is nonzero: a -inf logit (a masked class)
      // must not turn 0 * -inf into NaN.
      double loss = lse;
      if (smoothing < 1.0) loss -= (1.0 - smoothing) * xt;
      if (smoothing > 0.0) loss -= smoothing / static_cast<double>(classes) * sum_x;
      row_loss[r] = static_cast<C>(loss);
    }
  });
}

template <typename T>
void cross_entropy_backward_typed(const T* logits, const int64_t* targets, const compute_t<T>* row_lse, int64_t rows,
                                  int64_t classes, int64_t ignore_index, double smoothing, double scale, T* grad) {
  using C = compute_t<T>;
  const C off_target = static_cast<C>(smoothing / static_cast<double>(classes));
  const C on_target = static_cast<C>(1.0 - smoothing) + off_target;
  const C s = static_cast<C>(scale);
  parallel_for(rows, row_grain<T>(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = logits + r * classes;
      T* gr = grad + r * classes;
      const int64_t t = targets[r];
      if (t == ignore_index) {
        for (int64_t c = 0; c < classes; ++c) store(gr + c, C(0));
        continue;
      }
      const C lse = row_lse[r];
      if constexpr (std::is_same_v<T, float>) {  // p = exp(x - lse) vectorised into the gradient row first
        exp_shifted(x, gr, classes, lse);
        for (int64_t c = 0; c < classes; ++c) gr[c] = s * (gr[c] - (c == t ? on_target : off_target));
        continue;
      }
      for (int64_t c = 0; c < classes; ++c) {
        const C p = std::exp(load(x + c) - lse);
        store(gr + c, s * (p - (c == t ? on_target : off_target)));
      }
    }
  });
}

}  // namespace

void softmax_forward(DType dtype, const void* in, void* out, int64_t rows, int64_t cols, bool log) {
  dispatch_floating(dtype, "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_typed(static_cast<const T*>(in), static_cast<T*>(out), rows, cols, log);
  });
}

void softmax_backward(DType dtype, const void* y, const void* grad_out, void* grad_in, int64_t rows, int64_t cols,
                      bool log) {
  dispatch_floating(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_typed(static_cast<const T*>(y), static_cast<const T*>(grad_out), static_cast<T*>(grad_in), rows,
                           cols, log);
  });
}

void cross_entropy_forward(DType dtype, const void* logits, const int64_t* targets, int64_t rows, int64_t classes,
                           int64_t ignore_index, double smoothing, void* row_loss, void* row_lse) {
  dispatch_floating(dtype, "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    cross_entropy_forward_typed(static_cast<const T*>(logits), targets, rows, classes, ignore_index, smoothing,
                                static_cast<C*>(row_loss), static_cast<C*>(row_lse));
  });
}

void cross_entropy_backward(DType dtype, const void* logits, const int64_t* targets, const void* row_lse, int64_t rows,
                            int64_t classes, int64_t ignore_index, double smoothing, double scale, void* grad_logits) {
  dispatch_floating(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    cross_entropy_backward_typed(static_cast<const T*>(logits), targets, static_cast<const C*>(row_lse), rows, classes,
                                 ignore_index, smoothing, scale, static_cast<T*>(grad_logits));
  });
}

}  // namespace heed::kernels::cpu
