// kernels/cuda/flash_attention.cu — flash-style scaled dot-product attention on the GPU, forward
// and backward, float32 and float64 on CUDA cores; float16/bfloat16 operands go to the
// tensor-core kernels of flash_attention_tc.cu (the op hands them over only where
// flash_attention_takes_16bit says so, else in float32). Masks, dropout and the parameter block
// live in flash_attention_common.cuh.
//
// Forward: one block of 256 threads (16 x 16) per (batch, head, tile of kTile queries). Q of
// the tile stays in shared memory; for every key tile that the causal/window/key-length masks
// leave visible: S = scale Q K^T (+ masks) in registers (each thread a (kTile/16)^2 micro-tile),
// an online softmax (running max m and sum l per row, partial row results combined in a fixed
// order in shared memory), the accumulator O = O * e^(m_old - m) + P V in shared memory. Only
// lse = m + log l per row is kept, never the T x S matrix.
// Backward recomputes P = exp(S - lse) tile by tile in two kernels so that no two blocks ever
// add into the same gradient element (no atomics, deterministic): one block per key tile for
// dK and dV (walking the query tiles in order), one block per query tile for dQ (walking the
// key tiles in order); delta = rowsum(dO * O) first.
// Invariants:
//  * Masks are those of kernels/cpu/flash_attention.cpp: causal bottom-right aligned (query i
//    at key position i + S - T), window, key lengths, a boolean keep view and an additive view
//    broadcast to (B,H,T,S); key tiles outside the visible range are skipped.
//  * A fully masked row gives output 0, lse -inf and zero gradients (never NaN).
//  * Dropout keeps element (b,h,i,j) when philox_uniform(seed, offset + ((b*H+h)*T+i)*S + j)
//    >= p — the CPU's and F::dropout's mask — and is regenerated, not stored, in backward.
//  * Operands may be strided (AttentionLayout; the feature dim contiguous); lse is contiguous
//    (B,H,T); key_lengths may be a host or a device pointer.
//  * Tiles are 64 x 64 when the shared memory they need fits the device, else 32 x 32; a head
//    dimension too large even for that raises heed::Error.
#include <memory>
#include <string>

#include "kernels/cuda/flash_attention_common.cuh"

namespace heed::kernels::cuda {

namespace {

constexpr int kFlashThreads = 256;  // 16 x 16
constexpr int kSide = 16;

// Copies rows [0, valid) of a (rows, width) operand into shared memory (leading dimension ld)
// and zero-fills the rows after them up to kTile.
template <typename T, int kTile>
__device__ void load_tile(T* dst, int ld, const T* src, int64_t row_stride, int64_t valid, int64_t width) {
  for (int64_t e = threadIdx.x; e < kTile * width; e += blockDim.x) {
    const int64_t r = e / width, c = e % width;
    dst[r * ld + c] = r < valid ? src[r * row_stride + c] : T(0);
  }
}

// acc[r][c] = sum_d A[(ty + 16r) * lda + d] * B[(tx + 16c) * ldb + d]
template <typename T, int R>
__device__ void tile_dot(const T* A, int lda, const T* Bm, int ldb, int64_t inner, int tx, int ty, T (&acc)[R][R]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < R; ++c) acc[r][c] = T(0);
  for (int64_t d = 0; d < inner; ++d) {
    T a[R], bv[R];
    for (int r = 0; r < R; ++r) a[r] = A[(ty + kSide * r) * lda + d];
    for (int c = 0; c < R; ++c) bv[c] = Bm[(tx + kSide * c) * ldb + d];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < R; ++c) acc[r][c] += a[r] * bv[c];
  }
}

// acc[r][q] = sum_p X[(ty + 16r) * x_row + p * x_inner] * Y[p * ldy + col_base + 16q] for
// p < inner, columns < width (zero beyond).
template <typename T, int R>
__device__ void tile_product(const T* X, int x_row, int x_inner, const T* Y, int ldy, int64_t inner, int ty,
                             int64_t col_base, int64_t width, T (&acc)[R][4]) {
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = T(0);
  for (int64_t p = 0; p < inner; ++p) {
    T x[R], y[4];
    for (int r = 0; r < R; ++r) x[r] = X[(ty + kSide * r) * x_row + p * x_inner];
    for (int q = 0; q < 4; ++q) {
      const int64_t col = col_base + kSide * q;
      y[q] = col < width ? Y[p * ldy + col] : T(0);
    }
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < 4; ++q) acc[r][q] += x[r] * y[q];
  }
}

// ---- shared memory plans ------------------------------------------------------------------------

struct ForwardLayout {
  int ld_qk, ld_v, ld_s;
  size_t q, k, v, s, o, red, m, l, corr, total;  // offsets in elements
};

ForwardLayout forward_layout(int tile, int64_t D, int64_t Dv) {
  ForwardLayout f{};
  f.ld_qk = static_cast<int>(D) + 1;
  f.ld_v = static_cast<int>(Dv) + 1;
  f.ld_s = tile + 1;
  size_t at = 0;
  f.q = at, at += static_cast<size_t>(tile) * f.ld_qk;
  f.k = at, at += static_cast<size_t>(tile) * f.ld_qk;
  f.v = at, at += static_cast<size_t>(tile) * f.ld_v;
  f.s = at, at += static_cast<size_t>(tile) * f.ld_s;
  f.o = at, at += static_cast<size_t>(tile) * f.ld_v;
  f.red = at, at += static_cast<size_t>(tile) * (kSide + 1);
  f.m = at, at += tile;
  f.l = at, at += tile;
  f.corr = at, at += tile;
  f.total = at;
  return f;
}

struct BackwardLayout {
  int ld_qk, ld_v, ld_s;
  size_t q, k, v, go, s, lse, delta, total;
};

BackwardLayout backward_layout(int tile, int64_t D, int64_t Dv) {
  BackwardLayout f{};
  f.ld_qk = static_cast<int>(D) + 1;
  f.ld_v = static_cast<int>(Dv) + 1;
  f.ld_s = tile + 1;
  size_t at = 0;
  f.q = at, at += static_cast<size_t>(tile) * f.ld_qk;
  f.k = at, at += static_cast<size_t>(tile) * f.ld_qk;
  f.v = at, at += static_cast<size_t>(tile) * f.ld_v;
  f.go = at, at += static_cast<size_t>(tile) * f.ld_v;
  f.s = at, at += static_cast<size_t>(tile) * f.ld_s;
  f.lse = at, at += tile;
  f.delta = at, at += tile;
  f.total = at;
  return f;
}

// ---- forward --------------------------------------------------------------------------------------

template <typename T, int kTile>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(FlashParams<T> p, ForwardLayout L, int64_t q_tiles) {
  constexpr int R = kTile / kSide;
  T* smem = dynamic_shared<T>();
  T* Qs = smem + L.q;
  T* Ks = smem + L.k;
  T* Vs = smem + L.v;
  T* Ss = smem + L.s;
  T* Os = smem + L.o;
  T* red = smem + L.red;
  T* row_m = smem + L.m;
  T* row_l = smem + L.l;
  T* row_corr = smem + L.corr;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const T neg_inf = -positive_infinity<T>();

  for (int64_t task = blockIdx.x; task < p.B * p.H * q_tiles; task += gridDim.x) {
    const int64_t bh = task / q_tiles, qt = task % q_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qt * kTile;
    const int64_t rows = p.T_ - i0 < kTile ? p.T_ - i0 : kTile;
    const int64_t limit = key_limit(p, b);
    __syncthreads();  // the previous task is done with shared memory
    load_tile<T, kTile>(Qs, L.ld_qk, p.q + row_offset(p.lq, b, h, i0), p.lq.seq, rows, p.D);
    for (int64_t e = threadIdx.x; e < kTile * p.Dv; e += blockDim.x) Os[(e / p.Dv) * L.ld_v + e % p.Dv] = T(0);
    for (int64_t r = threadIdx.x; r < kTile; r += blockDim.x) {
      row_m[r] = neg_inf;
      row_l[r] = T(0);
    }
    int64_t lo, hi;
    key_range(p, b, i0, i0 + rows, &lo, &hi);
    for (int64_t j0 = lo - lo % kTile; j0 < hi; j0 += kTile) {
      const int64_t cols = p.S - j0 < kTile ? p.S - j0 : kTile;
      __syncthreads();  // Ks/Vs/Ss of the previous key tile are no longer read
      load_tile<T, kTile>(Ks, L.ld_qk, p.k + row_offset(p.lk, b, h, j0), p.lk.seq, cols, p.D);
      load_tile<T, kTile>(Vs, L.ld_v, p.v + row_offset(p.lv, b, h, j0), p.lv.seq, cols, p.Dv);
      __syncthreads();
      T s[R][R];
      tile_dot<T, R>(Qs, L.ld_qk, Ks, L.ld_qk, p.D, tx, ty, s);
      for (int r = 0; r < R; ++r) {
        T local_max = neg_inf;
        for (int c = 0; c < R; ++c) {
          s[r][c] = masked_score(p, b, h, i0 + ty + kSide * r, j0 + tx + kSide * c,
                                 j0 + cols < limit ? j0 + cols : limit, p.scale * s[r][c]);
          local_max = s[r][c] > local_max ? s[r][c] : local_max;
        }
        red[(ty + kSide * r) * (kSide + 1) + tx] = local_max;
      }
      __syncthreads();
      // Row owners: the new running maximum and the correction of the old accumulator.
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        T tile_max = neg_inf;
        for (int t = 0; t < kSide; ++t) {
          const T v = red[i * (kSide + 1) + t];
          tile_max = v > tile_max ? v : tile_max;
        }
        const T old_max = row_m[i];
        const T new_max = old_max > tile_max ? old_max : tile_max;
        if (new_max == neg_inf) {  // nothing visible in this row yet
          row_corr[i] = T(1);
        } else {
          row_corr[i] = old_max == neg_inf ? T(0) : math_exp(old_max - new_max);
          row_m[i] = new_max;
        }
      }
      __syncthreads();
      // P = exp(S - m) (undropped for the row sums; dropped in shared memory for P V).
      for (int r = 0; r < R; ++r) {
        const int i = ty + kSide * r;
        const T m = row_m[i];
        T partial = T(0);
        for (int c = 0; c < R; ++c) {
          const int j = tx + kSide * c;
          const T prob = m == neg_inf ? T(0) : math_exp(s[r][c] - m);
          partial += prob;
          T used = prob;
          if (p.dropout)
            used = (prob != T(0) && dropout_keeps(p, b, h, i0 + i, j0 + j)) ? prob * p.dropout_scale : T(0);
          Ss[i * L.ld_s + j] = used;
        }
        red[i * (kSide + 1) + tx] = partial;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        T row_sum = T(0);
        for (int t = 0; t < kSide; ++t) row_sum += red[i * (kSide + 1) + t];
        row_l[i] = row_l[i] * row_corr[i] + row_sum;
      }
      // O = O * corr + P V (row_corr is final; row_l is not read here).
      const int64_t groups = (p.Dv + kSide - 1) / kSide;
      for (int64_t g0 = 0; g0 < groups; g0 += 4) {
        T acc[R][4];
        tile_product<T, R>(Ss, L.ld_s, 1, Vs, L.ld_v, cols, ty, g0 * kSide + tx, p.Dv, acc);
        for (int r = 0; r < R; ++r) {
          const int i = ty + kSide * r;
          for (int q = 0; q < 4; ++q) {
            const int64_t col = g0 * kSide + tx + kSide * q;
            if (col < p.Dv) Os[i * L.ld_v + col] = Os[i * L.ld_v + col] * row_corr[i] + acc[r][q];
          }
        }
      }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < rows * p.Dv; e += blockDim.x) {
      const int64_t i = e / p.Dv, c = e % p.Dv;
      const T l = row_l[i];
      const T inv = l > T(0) ? T(1) / l : T(0);
      p.out[row_offset(p.lo, b, h, i0 + i) + c] = Os[i * L.ld_v + c] * inv;
    }
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
      const T l = row_l[i];
      p.lse[bh * p.T_ + i0 + i] = l > T(0) ? row_m[i] + math_log(l) : neg_inf;
    }
  }
}

// ---- backward -------------------------------------------------------------------------------------

// delta[b,h,i] = sum_c out[b,h,i,c] * grad_out[b,h,i,c], in order (as the CPU).
template <typename T>
__global__ void flash_delta_kernel(FlashParams<T> p, T* delta) {
  const int64_t rows = p.B * p.H * p.T_;
  for (int64_t row = global_thread_index(); row < rows; row += grid_stride()) {
    const int64_t bh = row / p.T_, i = row % p.T_, b = bh / p.H, h = bh % p.H;
    const T* o = p.out + row_offset(p.lo, b, h, i);
    const T* g = p.grad_out + row_offset(p.lgo, b, h, i);
    T sum = 0;
    for (int64_t c = 0; c < p.Dv; ++c) sum += o[c] * g[c];
    delta[row] = sum;
  }
}

// For the tile (queries i0.., keys j0..) already in shared memory: this thread's P (undropped)
// and dS = P * (dP * mask - delta), with dP = dO V^T. Writes the dropped P into Ss first when
// `store_dropped_p` (for dV), synchronising so every thread can read it, and leaves dS in Ss.
template <typename T, int kTile, int R, typename AfterP>
__device__ void tile_probabilities_and_ds(const FlashParams<T>& p, const BackwardLayout& L, T* smem, int64_t b,
                                          int64_t h, int64_t i0, int64_t j0, int64_t cols, int64_t limit, int tx,
                                          int ty, AfterP after_p) {
  const T neg_inf = -positive_infinity<T>();
  T* Qs = smem + L.q;
  T* Ks = smem + L.k;
  T* Vs = smem + L.v;
  T* dOs = smem + L.go;
  T* Ss = smem + L.s;
  const T* lse_s = smem + L.lse;
  const T* delta_s = smem + L.delta;
  T prob[R][R];
  bool kept[R][R];
  tile_dot<T, R>(Qs, L.ld_qk, Ks, L.ld_qk, p.D, tx, ty, prob);
  const int64_t key_end = j0 + cols < limit ? j0 + cols : limit;
  for (int r = 0; r < R; ++r) {
    const int i = ty + kSide * r;
    const T lse = lse_s[i];
    for (int c = 0; c < R; ++c) {
      const int j = tx + kSide * c;
      const T s = masked_score(p, b, h, i0 + i, j0 + j, key_end, p.scale * prob[r][c]);
      prob[r][c] = lse == neg_inf ? T(0) : math_exp(s - lse);
      kept[r][c] = !p.dropout || dropout_keeps(p, b, h, i0 + i, j0 + j);
      Ss[i * L.ld_s + j] = kept[r][c] ? (p.dropout ? prob[r][c] * p.dropout_scale : prob[r][c]) : T(0);
    }
  }
  __syncthreads();
  after_p();  // e.g. dV += P_dropped^T dO (reads Ss)
  T dp[R][R];
  tile_dot<T, R>(dOs, L.ld_v, Vs, L.ld_v, p.Dv, tx, ty, dp);
  __syncthreads();  // everyone is done reading the dropped P
  for (int r = 0; r < R; ++r) {
    const int i = ty + kSide * r;
    const T delta = delta_s[i];
    for (int c = 0; c < R; ++c) {
      const int j = tx + kSide * c;
      const T dpm = kept[r][c] ? (p.dropout ? dp[r][c] * p.dropout_scale : dp[r][c]) : T(0);
      Ss[i * L.ld_s + j] = prob[r][c] * (dpm - delta);
    }
  }
  __syncthreads();
}

// Loads query rows [i0, i0 + rows) with their dO, lse and delta into shared memory.
template <typename T, int kTile>
__device__ void load_query_side(const FlashParams<T>& p, const BackwardLayout& L, T* smem, int64_t b, int64_t h,
                                int64_t i0, int64_t rows) {
  load_tile<T, kTile>(smem + L.q, L.ld_qk, p.q + row_offset(p.lq, b, h, i0), p.lq.seq, rows, p.D);
  load_tile<T, kTile>(smem + L.go, L.ld_v, p.grad_out + row_offset(p.lgo, b, h, i0), p.lgo.seq, rows, p.Dv);
  const int64_t bh = b * p.H + h;
  for (int64_t i = threadIdx.x; i < kTile; i += blockDim.x) {
    smem[L.lse + i] = i < rows ? p.lse[bh * p.T_ + i0 + i] : -positive_infinity<T>();
    smem[L.delta + i] = i < rows ? p.delta[bh * p.T_ + i0 + i] : T(0);
  }
}

template <typename T, int kTile>
__device__ void load_key_side(const FlashParams<T>& p, const BackwardLayout& L, T* smem, int64_t b, int64_t h,
                              int64_t j0, int64_t cols) {
  load_tile<T, kTile>(smem + L.k, L.ld_qk, p.k + row_offset(p.lk, b, h, j0), p.lk.seq, cols, p.D);
  load_tile<T, kTile>(smem + L.v, L.ld_v, p.v + row_offset(p.lv, b, h, j0), p.lv.seq, cols, p.Dv);
}

// grad[(row r of this thread), col] (+)= scale * sum_p X(r, p) Y(p, col) over a (kTile, width)
// gradient tile whose rows start at `base` (row stride `stride`), rows < valid.
template <typename T, int R>
__device__ void accumulate_gradient(T* base, int64_t stride, int64_t valid, int64_t width, const T* X, int x_row,
                                    int x_inner, const T* Y, int ldy, int64_t inner, T scale, int tx, int ty) {
  const int64_t groups = (width + kSide - 1) / kSide;
  for (int64_t g0 = 0; g0 < groups; g0 += 4) {
    T acc[R][4];
    tile_product<T, R>(X, x_row, x_inner, Y, ldy, inner, ty, g0 * kSide + tx, width, acc);
    for (int r = 0; r < R; ++r) {
      const int64_t row = ty + kSide * r;
      if (row >= valid) continue;
      for (int q = 0; q < 4; ++q) {
        const int64_t col = g0 * kSide + tx + kSide * q;
        if (col < width) base[row * stride + col] += scale * acc[r][q];
      }
    }
  }
}

// Zeroes rows [0, valid) x [0, width) of a gradient tile, with the thread mapping of
// accumulate_gradient (so each element is only ever touched by one thread).
template <typename T, int R>
__device__ void zero_gradient(T* base, int64_t stride, int64_t valid, int64_t width, int tx, int ty) {
  for (int r = 0; r < R; ++r) {
    const int64_t row = ty + kSide * r;
    if (row >= valid) continue;
    for (int64_t col = tx; col < width; col += kSide) base[row * stride + col] = T(0);
  }
}

// One block per (b, h, key tile): dK and dV of those keys, over the query tiles in order.
template <typename T, int kTile>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv_kernel(FlashParams<T> p, BackwardLayout L, int64_t q_tiles, int64_t k_tiles) {
  constexpr int R = kTile / kSide;
  T* smem = dynamic_shared<T>();
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  for (int64_t task = blockIdx.x; task < p.B * p.H * k_tiles; task += gridDim.x) {
    const int64_t bh = task / k_tiles, kt = task % k_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t j0 = kt * kTile;
    const int64_t cols = p.S - j0 < kTile ? p.S - j0 : kTile;
    const int64_t limit = key_limit(p, b);
    T* dk = p.grad_k + row_offset(p.lgk, b, h, j0);
    T* dv = p.grad_v + row_offset(p.lgv, b, h, j0);
    zero_gradient<T, R>(dk, p.lgk.seq, cols, p.D, tx, ty);
    zero_gradient<T, R>(dv, p.lgv.seq, cols, p.Dv, tx, ty);
    __syncthreads();  // the previous task is done with shared memory
    load_key_side<T, kTile>(p, L, smem, b, h, j0, cols);
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      const int64_t i0 = qt * kTile;
      const int64_t rows = p.T_ - i0 < kTile ? p.T_ - i0 : kTile;
      int64_t lo, hi;
      key_range(p, b, i0, i0 + rows, &lo, &hi);
      if (!(j0 < hi && j0 + cols > lo)) continue;  // the same decision in every thread
      __syncthreads();
      load_query_side<T, kTile>(p, L, smem, b, h, i0, rows);
      __syncthreads();
      const T* Ss = smem + L.s;
      tile_probabilities_and_ds<T, kTile, R>(p, L, smem, b, h, i0, j0, cols, limit, tx, ty, [&] {
        // dV[j][c] += sum_i P_dropped[i][j] dO[i][c]
        accumulate_gradient<T, R>(dv, p.lgv.seq, cols, p.Dv, Ss, 1, L.ld_s, smem + L.go, L.ld_v, rows, T(1), tx, ty);
      });
      // dK[j][d] += scale * sum_i dS[i][j] Q[i][d]
      accumulate_gradient<T, R>(dk, p.lgk.seq, cols, p.D, Ss, 1, L.ld_s, smem + L.q, L.ld_qk, rows, p.scale, tx, ty);
    }
  }
}

// One block per (b, h, query tile): dQ of those queries, over the visible key tiles in order.
template <typename T, int kTile>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(FlashParams<T> p, BackwardLayout L, int64_t q_tiles) {
  constexpr int R = kTile / kSide;
  T* smem = dynamic_shared<T>();
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  for (int64_t task = blockIdx.x; task < p.B * p.H * q_tiles; task += gridDim.x) {
    const int64_t bh = task / q_tiles, qt = task % q_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qt * kTile;
    const int64_t rows = p.T_ - i0 < kTile ? p.T_ - i0 : kTile;
    const int64_t limit = key_limit(p, b);
    T* dq = p.grad_q + row_offset(p.lgq, b, h, i0);
    zero_gradient<T, R>(dq, p.lgq.seq, rows, p.D, tx, ty);
    __syncthreads();
    load_query_side<T, kTile>(p, L, smem, b, h, i0, rows);
    int64_t lo, hi;
    key_range(p, b, i0, i0 + rows, &lo, &hi);
    for (int64_t j0 = lo - lo % kTile; j0 < hi; j0 += kTile) {
      const int64_t cols = p.S - j0 < kTile ? p.S - j0 : kTile;
      __syncthreads();
      load_key_side<T, kTile>(p, L, smem, b, h, j0, cols);
      __syncthreads();
      tile_probabilities_and_ds<T, kTile, R>(p, L, smem, b, h, i0, j0, cols, limit, tx, ty, [] {});
      // dQ[i][d] += scale * sum_j dS[i][j] K[j][d]
      accumulate_gradient<T, R>(dq, p.lgq.seq, rows, p.D, smem + L.s, L.ld_s, 1, smem + L.k, L.ld_qk, cols, p.scale, tx,
                                ty);
    }
  }
}

// ---- host side --------------------------------------------------------------------------------------

void check_args(const FlashAttentionArgs& a, const char* name) {
  if (a.batch < 0 || a.heads < 0 || a.queries < 0 || a.keys < 0 || a.head_dim < 0 || a.value_dim < 0)
    throw_error(name, "negative attention dimension");
  if (a.keep.data && a.keep.ndim != 4) throw_error(name, "the keep mask must be a 4-d view (B,H,T,S)");
  if (a.additive.data && a.additive.ndim != 4) throw_error(name, "the additive mask must be a 4-d view (B,H,T,S)");
  const bool sixteen = a.dtype == DType::Float16 || a.dtype == DType::BFloat16;
  if (a.additive.data && a.additive.dtype != (sixteen ? DType::Float32 : a.dtype))
    throw_error(name, "the additive mask must have the compute dtype (float32 for 16-bit operands)");
  if (sixteen && !flash_attention_takes_16bit(a.head_dim, a.value_dim)) {
    const std::string message = "16-bit operands need D == Dv in {64, 128}, got D=" + std::to_string(a.head_dim) +
                                ", Dv=" + std::to_string(a.value_dim) + " (pass them in float32)";
    throw_error(name, message.c_str());
  }
}

// 64 when its shared memory fits the device, else 32; raises when neither does.
template <typename Layout>
int choose_tile(Layout (*plan)(int, int64_t, int64_t), int64_t D, int64_t Dv, size_t element, const char* name) {
  for (int tile : {64, 32})
    if (plan(tile, D, Dv).total * element <= max_shared_bytes()) return tile;
  const std::string message = "head dims D=" + std::to_string(D) + ", Dv=" + std::to_string(Dv) +
                              " need more shared memory than the device has (" + std::to_string(max_shared_bytes()) +
                              " bytes per block); use the composed scaled_dot_product_attention path";
  throw_error(name, message.c_str());
}

unsigned task_grid(int64_t tasks) {
  return static_cast<unsigned>(std::min<int64_t>(tasks, grid_for(tasks * kFlashThreads, kFlashThreads)));
}

template <typename T>
void forward_typed(const FlashAttentionArgs& a) {
  const KeyLengths lengths = device_key_lengths(a.key_lengths, a.batch);
  const FlashParams<T> p = make_params<T>(a, lengths.device);
  const int tile = choose_tile(&forward_layout, p.D, p.Dv, sizeof(T), "flash_attention_forward");
  const ForwardLayout L = forward_layout(tile, p.D, p.Dv);
  const size_t bytes = L.total * sizeof(T);
  const int64_t q_tiles = (p.T_ + tile - 1) / tile;
  const int64_t tasks = p.B * p.H * q_tiles;
  if (tasks == 0) return;
  if (tile == 64) {
    allow_shared(flash_forward_kernel<T, 64>, bytes);
    HEED_LAUNCH(task_grid(tasks), kFlashThreads, bytes, flash_forward_kernel<T, 64>)(p, L, q_tiles);
  } else {
    allow_shared(flash_forward_kernel<T, 32>, bytes);
    HEED_LAUNCH(task_grid(tasks), kFlashThreads, bytes, flash_forward_kernel<T, 32>)(p, L, q_tiles);
  }
  check_launch("flash_attention_forward");
}

template <typename T>
void backward_typed(const FlashAttentionArgs& a) {
  const KeyLengths lengths = device_key_lengths(a.key_lengths, a.batch);
  FlashParams<T> p = make_params<T>(a, lengths.device);
  const int64_t rows = p.B * p.H * p.T_;
  DeviceBuffer delta(static_cast<size_t>(std::max<int64_t>(rows, 1)) * sizeof(T));
  p.delta = delta.as<const T>();
  if (rows > 0) {
    HEED_LAUNCH(grid_for(rows), kThreads, 0, flash_delta_kernel<T>)(p, delta.as<T>());
    check_launch("flash_attention_backward");
  }
  const int tile = choose_tile(&backward_layout, p.D, p.Dv, sizeof(T), "flash_attention_backward");
  const BackwardLayout L = backward_layout(tile, p.D, p.Dv);
  const size_t bytes = L.total * sizeof(T);
  const int64_t q_tiles = (p.T_ + tile - 1) / tile, k_tiles = (p.S + tile - 1) / tile;
  const int64_t kv_tasks = p.B * p.H * k_tiles, q_tasks = p.B * p.H * q_tiles;
  if (tile == 64) {
    allow_shared(flash_backward_kv_kernel<T, 64>, bytes);
    allow_shared(flash_backward_q_kernel<T, 64>, bytes);
    if (kv_tasks > 0)
      HEED_LAUNCH(task_grid(kv_tasks), kFlashThreads, bytes, flash_backward_kv_kernel<T, 64>)(p, L, q_tiles, k_tiles);
    check_launch("flash_attention_backward");
    if (q_tasks > 0)
      HEED_LAUNCH(task_grid(q_tasks), kFlashThreads, bytes, flash_backward_q_kernel<T, 64>)(p, L, q_tiles);
  } else {
    allow_shared(flash_backward_kv_kernel<T, 32>, bytes);
    allow_shared(flash_backward_q_kernel<T, 32>, bytes);
    if (kv_tasks > 0)
      HEED_LAUNCH(task_grid(kv_tasks), kFlashThreads, bytes, flash_backward_kv_kernel<T, 32>)(p, L, q_tiles, k_tiles);
    check_launch("flash_attention_backward");
    if (q_tasks > 0)
      HEED_LAUNCH(task_grid(q_tasks), kFlashThreads, bytes, flash_backward_q_kernel<T, 32>)(p, L, q_tiles);
  }
  check_launch("flash_attention_backward");
}

}  // namespace

void flash_attention_forward(const FlashAttentionArgs& args) {
  check_args(args, "flash_attention_forward");
  switch (args.dtype) {
    case DType::Float32:
      return forward_typed<float>(args);
    case DType::Float64:
      return forward_typed<double>(args);
    case DType::Float16:
    case DType::BFloat16:
      return flash_attention_forward_16bit(args);
    default:
      unsupported_dtype("flash_attention_forward", args.dtype);
  }
}

void flash_attention_backward(const FlashAttentionArgs& args) {
  check_args(args, "flash_attention_backward");
  switch (args.dtype) {
    case DType::Float32:
      return backward_typed<float>(args);
    case DType::Float64:
      return backward_typed<double>(args);
    case DType::Float16:
    case DType::BFloat16:
      return flash_attention_backward_16bit(args);
    default:
      unsupported_dtype("flash_attention_backward", args.dtype);
  }
}

}  // namespace heed::kernels::cuda
