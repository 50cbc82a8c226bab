// kernels/cuda/layer_norm.cu — fused LayerNorm forward and backward over the last dim.
//
// Invariants: one block per row for the row statistics (float64, two passes: mean, then the
// centred sum of squares) and for dx, combined in fixed shared-memory trees; dweight/dbias
// follow the CPU exactly: float64 partial sums over blocks of kRowBlock rows (rows in order),
// then the block partials added in block order — bit-identical to kernels/cpu/layer_norm.cpp
// for the same dy and xhat. No atomics: deterministic.
#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

constexpr int64_t kRowBlock = 64;

struct SumDouble {
  __device__ double operator()(double a, double b) const { return a + b; }
};

template <typename T>
__global__ void forward_kernel(const T* x, const T* w, const T* b, int64_t rows, int64_t cols, double eps, T* y,
                               compute_t<T>* mean_out, compute_t<T>* rstd_out) {
  using C = compute_t<T>;
  double* scratch = dynamic_shared<double>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += static_cast<double>(load(xr + c));
    const double mean = block_reduce(sum, scratch, SumDouble()) / static_cast<double>(cols);
    double ss = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = static_cast<double>(load(xr + c)) - mean;
      ss += d * d;
    }
    ss = block_reduce(ss, scratch, SumDouble());
    const double rstd = 1.0 / sqrt(ss / static_cast<double>(cols) + eps);
    const C m = static_cast<C>(mean), s = static_cast<C>(rstd);
    if (threadIdx.x == 0) {
      mean_out[r] = m;
      rstd_out[r] = s;
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      C v = (load(xr + c) - m) * s;
      if (w) v = v * load(w + c);
      if (b) v = v + load(b + c);
      store(yr + c, v);
    }
  }
}

template <typename T>
__global__ void backward_dx_kernel(const T* x, const T* w, const compute_t<T>* mean, const compute_t<T>* rstd,
                                   const T* dy, int64_t rows, int64_t cols, T* dx) {
  using C = compute_t<T>;
  double* scratch = dynamic_shared<double>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const C m = mean[r], s = rstd[r];
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const C xhat = (load(xr + c) - m) * s;
      const C g = load(dyr + c);
      const C dxhat = w ? mul_rn(g, load(w + c)) : g;  // unfused: see mul_rn
      sum_dxhat += static_cast<double>(dxhat);
      sum_dxhat_xhat += static_cast<double>(dxhat) * static_cast<double>(xhat);
    }
    sum_dxhat = block_reduce(sum_dxhat, scratch, SumDouble());
    sum_dxhat_xhat = block_reduce(sum_dxhat_xhat, scratch, SumDouble());
    const C mean_dxhat = static_cast<C>(sum_dxhat / static_cast<double>(cols));
    const C mean_dxhat_xhat = static_cast<C>(sum_dxhat_xhat / static_cast<double>(cols));
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const C xhat = (load(xr + c) - m) * s;
      const C g = load(dyr + c);
      const C dxhat = w ? mul_rn(g, load(w + c)) : g;  // unfused: see mul_rn
      store(dxr + c, s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// Thread per (row block, column): sums of dy * xhat and dy over the block's rows, in order.
template <typename T>
__global__ void backward_partial_kernel(const T* x, const compute_t<T>* mean, const compute_t<T>* rstd, const T* dy,
                                        int64_t rows, int64_t cols, int64_t blocks, double* partial_dw,
                                        double* partial_db) {
  using C = compute_t<T>;
  for (int64_t t = global_thread_index(); t < blocks * cols; t += grid_stride()) {
    const int64_t blk = t / cols, c = t % cols;
    const int64_t r_end = (blk + 1) * kRowBlock < rows ? (blk + 1) * kRowBlock : rows;
    double pdw = 0.0, pdb = 0.0;
    for (int64_t r = blk * kRowBlock; r < r_end; ++r) {
      const C xhat = (load(x + r * cols + c) - mean[r]) * rstd[r];
      const C g = load(dy + r * cols + c);
      pdw += static_cast<double>(g) * static_cast<double>(xhat);
      pdb += static_cast<double>(g);
    }
    partial_dw[t] = pdw;
    partial_db[t] = pdb;
  }
}

template <typename T>
__global__ void backward_params_kernel(const double* partial_dw, const double* partial_db, int64_t cols, int64_t blocks,
                                       T* dw, T* db) {
  for (int64_t c = global_thread_index(); c < cols; c += grid_stride()) {
    double sw = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sw += partial_dw[blk * cols + c];
      sb += partial_db[blk * cols + c];
    }
    if (dw) store(dw + c, sw);
    if (db) store(db + c, sb);
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, grid_for(rows * kThreads))); }

}  // namespace

void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, int64_t rows, int64_t cols,
                        double eps, void* y, void* mean, void* rstd) {
  if (rows <= 0) return;
  dispatch_floating(dtype, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const int threads = row_threads(cols);
    HEED_LAUNCH(row_blocks(rows), threads, threads * sizeof(double), forward_kernel<T>)
    (static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), rows, cols, eps,
     static_cast<T*>(y), static_cast<C*>(mean), static_cast<C*>(rstd));
  });
  check_launch("layer_norm_forward");
}

void layer_norm_backward(DType dtype, const void* x, const void* weight, const void* mean, const void* rstd,
                         const void* dy, int64_t rows, int64_t cols, void* dx, void* dweight, void* dbias) {
  if (cols <= 0) return;
  dispatch_floating(dtype, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if (rows > 0) {
      const int threads = row_threads(cols);
      HEED_LAUNCH(row_blocks(rows), threads, threads * sizeof(double), backward_dx_kernel<T>)
      (static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const C*>(mean),
       static_cast<const C*>(rstd), static_cast<const T*>(dy), rows, cols, static_cast<T*>(dx));
      check_launch("layer_norm_backward");
    }
    if (!dweight && !dbias) return;
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    DeviceBuffer partial(static_cast<size_t>(2 * std::max<int64_t>(blocks, 1) * cols) * sizeof(double));
    double* partial_dw = partial.as<double>();
    double* partial_db = partial_dw + std::max<int64_t>(blocks, 1) * cols;
    if (blocks > 0) {
      HEED_LAUNCH(grid_for(blocks * cols), kThreads, 0, backward_partial_kernel<T>)
      (static_cast<const T*>(x), static_cast<const C*>(mean), static_cast<const C*>(rstd), static_cast<const T*>(dy),
       rows, cols, blocks, partial_dw, partial_db);
      check_launch("layer_norm_backward");
    }
    HEED_LAUNCH(grid_for(cols), kThreads, 0, backward_params_kernel<T>)
    (partial_dw, partial_db, cols, blocks, static_cast<T*>(dweight), static_cast<T*>(dbias));
    check_launch("layer_norm_backward");
  });
}

}  // namespace heed::kernels::cuda
