// kernels/cuda/softmax.cu — row-wise softmax/log-softmax (forward and backward) and the fused
// softmax-cross-entropy on the GPU.
//
// Invariants: one block per row (grid-stride over rows), row statistics combined in fixed
// shared-memory trees (deterministic); the per-element formulas, the float64 accumulation of
// sums and the compute types are those of kernels/cpu/softmax.cpp. The row maximum is
// subtracted before exp; a row whose maximum is -inf (every entry masked) gives softmax 0 /
// log-softmax -inf and a zero gradient, never NaN.
#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

// Scratch of one double per thread, reused (as doubles, compute values or flags) by every
// reduction of a row.
size_t row_scratch_bytes(int threads) { return static_cast<size_t>(threads) * sizeof(double); }

template <typename C>
struct MaxIgnoringNaN {  // the CPU's `mx = v > mx ? v : mx`
  __device__ C operator()(C a, C b) const { return b > a ? b : a; }
};
template <typename C>
struct MaxStickyNaN {  // the CPU's `mx = (v > mx || v != v) ? v : mx`
  __device__ C operator()(C a, C b) const { return (b > a || b != b) ? b : a; }
};
struct SumDouble {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct OrInt {
  __device__ int operator()(int a, int b) const { return a | b; }
};
struct AndInt {
  __device__ int operator()(int a, int b) const { return a & b; }
};

template <typename T>
__global__ void softmax_forward_kernel(const T* in, T* out, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  double* scratch = dynamic_shared<double>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    C mx = -positive_infinity<C>();
    int has_nan = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const C v = load(x + c);
      has_nan |= v != v;
      mx = v > mx ? v : mx;
    }
    mx = block_reduce(mx, reinterpret_cast<C*>(scratch), MaxIgnoringNaN<C>());
    has_nan = block_reduce(has_nan, reinterpret_cast<int*>(scratch), OrInt());
    if (mx == -positive_infinity<C>() && !has_nan) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store(y + c, log ? -positive_infinity<C>() : C(0));
      continue;
    }
    double total = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const C shifted = load(x + c) - mx;
      total += static_cast<double>(math_exp(shifted));
    }
    total = block_reduce(total, scratch, SumDouble());
    if (has_nan) total = quiet_nan<double>();
    if (log) {
      const C log_total = static_cast<C>(::log(total));
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const C shifted = load(x + c) - mx;
        store(y + c, shifted - log_total);
      }
    } else {
      const C inv = static_cast<C>(1.0 / total);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const C shifted = load(x + c) - mx;
        store(y + c, math_exp(shifted) * inv);
      }
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* g, T* gx, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  double* scratch = dynamic_shared<double>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* gr = g + r * cols;
    T* out = gx + r * cols;
    if (log) {
      int all_masked = 1;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) all_masked &= load(yr + c) == -positive_infinity<C>();
      all_masked = block_reduce(all_masked, reinterpret_cast<int*>(scratch), AndInt());
      if (cols > 0 && all_masked) {  // a fully masked row: no gradient
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store(out + c, C(0));
        continue;
      }
      double gsum = 0;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) gsum += static_cast<double>(load(gr + c));
      const C s = static_cast<C>(block_reduce(gsum, scratch, SumDouble()));
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        store(out + c, load(gr + c) - math_exp(load(yr + c)) * s);
    } else {
      double dot = 0;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        dot += static_cast<double>(load(gr + c)) * static_cast<double>(load(yr + c));
      const C d = static_cast<C>(block_reduce(dot, scratch, SumDouble()));
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store(out + c, load(yr + c) * (load(gr + c) - d));
    }
  }
}

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int64_t* targets, int64_t rows, int64_t classes,
                                             int64_t ignore_index, double smoothing, compute_t<T>* row_loss,
                                             compute_t<T>* row_lse) {
  using C = compute_t<T>;
  double* scratch = dynamic_shared<double>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    C mx = -positive_infinity<C>();
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const C v = load(x + c);
      mx = (v > mx || v != v) ? v : mx;
    }
    mx = block_reduce(mx, reinterpret_cast<C*>(scratch), MaxStickyNaN<C>());
    double total = 0, sum_x = 0;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const C v = load(x + c);
      total += static_cast<double>(math_exp(v - mx));
      sum_x += static_cast<double>(v);
    }
    total = block_reduce(total, scratch, SumDouble());
    sum_x = block_reduce(sum_x, scratch, SumDouble());
    if (threadIdx.x != 0) continue;
    const double lse = static_cast<double>(mx) + ::log(total);
    row_lse[r] = static_cast<C>(lse);
    const int64_t t = targets[r];
    if (t == ignore_index) {
      row_loss[r] = C(0);
      continue;
    }
    const double xt = static_cast<double>(load(x + t));
    // Terms enter only with a nonzero weight: a -inf logit must not make 0 * -inf = NaN.
    double loss = lse;
    if (smoothing < 1.0) loss -= (1.0 - smoothing) * xt;
    if (smoothing > 0.0) loss -= smoothing / static_cast<double>(classes) * sum_x;
    row_loss[r] = static_cast<C>(loss);
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const compute_t<T>* row_lse,
                                              int64_t rows, int64_t classes, int64_t ignore_index,
                                              compute_t<T> on_target, compute_t<T> off_target, compute_t<T> scale,
                                              T* grad) {
  using C = compute_t<T>;
  const int64_t n = rows * classes;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t r = i / classes, c = i % classes;
    const int64_t t = targets[r];
    if (t == ignore_index) {
      store(grad + i, C(0));
      continue;
    }
    const C p = math_exp(load(logits + i) - row_lse[r]);
    store(grad + i, scale * (p - (c == t ? on_target : off_target)));
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, grid_for(rows * kThreads))); }

}  // namespace

void softmax_forward(DType dtype, const void* in, void* out, int64_t rows, int64_t cols, bool log) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const int threads = row_threads(cols);
    HEED_LAUNCH(row_blocks(rows), threads, row_scratch_bytes(threads), softmax_forward_kernel<T>)
    (static_cast<const T*>(in), static_cast<T*>(out), rows, cols, log);
  });
  check_launch("softmax_forward");
}

void softmax_backward(DType dtype, const void* y, const void* grad_out, void* grad_in, int64_t rows, int64_t cols,
                      bool log) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const int threads = row_threads(cols);
    HEED_LAUNCH(row_blocks(rows), threads, row_scratch_bytes(threads), softmax_backward_kernel<T>)
    (static_cast<const T*>(y), static_cast<const T*>(grad_out), static_cast<T*>(grad_in), rows, cols, log);
  });
  check_launch("softmax_backward");
}

void cross_entropy_forward(DType dtype, const void* logits, const int64_t* targets, int64_t rows, int64_t classes,
                           int64_t ignore_index, double smoothing, void* row_loss, void* row_lse) {
  if (rows <= 0) return;
  dispatch_floating(dtype, "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const int threads = row_threads(classes);
    HEED_LAUNCH(row_blocks(rows), threads, row_scratch_bytes(threads), cross_entropy_forward_kernel<T>)
    (static_cast<const T*>(logits), targets, rows, classes, ignore_index, smoothing, static_cast<C*>(row_loss),
     static_cast<C*>(row_lse));
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(DType dtype, const void* logits, const int64_t* targets, const void* row_lse, int64_t rows,
                            int64_t classes, int64_t ignore_index, double smoothing, double scale, void* grad_logits) {
  const int64_t n = rows * classes;
  if (n <= 0) return;
  dispatch_floating(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C off_target = static_cast<C>(smoothing / static_cast<double>(classes));
    const C on_target = static_cast<C>(1.0 - smoothing) + off_target;
    HEED_LAUNCH(grid_for(n), kThreads, 0, cross_entropy_backward_kernel<T>)
    (static_cast<const T*>(logits), targets, static_cast<const C*>(row_lse), rows, classes, ignore_index, on_target,
     off_target, static_cast<C>(scale), static_cast<T*>(grad_logits));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace heed::kernels::cuda
