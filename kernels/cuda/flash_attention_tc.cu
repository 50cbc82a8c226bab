// kernels/cuda/flash_attention_tc.cu — flash attention forward and backward on tensor cores for
// float16 and bfloat16 operands (nvcuda::wmma 16x16x16 tiles, float32 accumulation, float32
// log-sum-exp; the backward is described above its kernels).
//
// One block of 4 warps per (batch, head, tile of 64 queries); warp w owns query rows
// [16w, 16w + 16) of the tile from start to end, so after the block-wide loads of a key tile
// every step is warp-local (__syncwarp only):
//   S = Q K^T               wmma, 4 accumulators of 16 x 16 per warp -> shared float32 strip
//   online softmax          two lanes per row (shuffles combine their halves): scale, masks,
//                           running max m and sum l in registers, P = exp(S - m) rounded to the
//                           operand type (dropout applied) -> shared 16-bit strip, the float32
//                           output rows rescaled by e^(m_old - m)
//   O += P V                wmma, O kept in shared float32 (wmma does not say which lane holds
//                           which row, so the per-row rescale happens in shared memory)
// Only lse = m + log l per row is written besides the output, never the T x S matrix.
//
// Invariants:
//  * Requires D == Dv in {64, 128} (flash_attention_takes_16bit); masks, dropout and the
//    parameter block are those of flash_attention_common.cuh (float32 scale, additive mask and
//    lse), so visibility and the dropout mask match the CPU and the float32 kernels exactly.
//  * The row sum l adds the unrounded float32 probabilities; P V uses P rounded to the operand
//    type (as FlashAttention-2): outputs match a float32 reference within about one 16-bit
//    rounding of P and of the output.
//  * A fully masked row gives output 0 and lse -inf (never NaN).
//  * Shared tiles use leading dimensions padded by 16 bytes (bank spread) and start on 128-byte
//    boundaries, so every wmma pointer is 32-byte aligned as the hardware requires.
#include <string>

#if !defined(HEED_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

#include "kernels/cuda/flash_attention_common.cuh"

namespace heed::kernels::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kTcThreads = 32 * kWarps;
constexpr int kQueryTile = 16 * kWarps;  // 64 query rows per block
constexpr int kKeyTile = 64;
constexpr unsigned kFullWarp = 0xffffffffu;

template <typename T16>
__device__ __forceinline__ float widen(T16 v) {
  if constexpr (std::is_same_v<T16, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}
template <typename T16>
__device__ __forceinline__ T16 narrow(float v) {
  if constexpr (std::is_same_v<T16, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

// 16-bit operand pointers (the storage of heed's Float16 / BFloat16 tensors has the layout of
// __half / __nv_bfloat16).
template <typename T16>
struct Operands16 {
  const T16* q;
  const T16* k;
  const T16* v;
  T16* out;  // written by the forward, read by the backward
  // backward only
  const T16* grad_out;
  T16* grad_q;
  T16* grad_k;
  T16* grad_v;
};

// Shared memory plan in bytes; every part starts on a 128-byte boundary.
struct TcForwardLayout {
  int ld_x;  // Q, K, V tiles: D + 8 elements
  int ld_s;  // score strip: kKeyTile + 4 floats
  int ld_p;  // probability strip: kKeyTile + 8 elements
  int ld_o;  // output accumulator: D + 4 floats
  size_t q, k, v, s, p, o, total;
};

size_t align128(size_t n) { return (n + 127) / 128 * 128; }

TcForwardLayout tc_forward_layout(int64_t D) {
  TcForwardLayout f{};
  f.ld_x = static_cast<int>(D) + 8;
  f.ld_s = kKeyTile + 4;
  f.ld_p = kKeyTile + 8;
  f.ld_o = static_cast<int>(D) + 4;
  size_t at = 0;
  f.q = at, at = align128(at + size_t{kQueryTile} * f.ld_x * 2);
  f.k = at, at = align128(at + size_t{kKeyTile} * f.ld_x * 2);
  f.v = at, at = align128(at + size_t{kKeyTile} * f.ld_x * 2);
  f.s = at, at = align128(at + size_t{kQueryTile} * f.ld_s * 4);
  f.p = at, at = align128(at + size_t{kQueryTile} * f.ld_p * 2);
  f.o = at, at = align128(at + size_t{kQueryTile} * f.ld_o * 4);
  f.total = at;
  return f;
}

// Copies rows [0, valid) of a (rows, D) 16-bit operand into shared memory (leading dimension
// ld) and zero-fills the rows after them up to `tile`; 16-byte chunks when the rows allow.
template <typename T16>
__device__ void load_rows16(T16* dst, int ld, const T16* src, int64_t row_stride, int64_t valid, int tile, int D) {
  struct alignas(16) Chunk {
    uint32_t w[4];
  };
  const bool chunked = (reinterpret_cast<uintptr_t>(src) % 16 == 0) && row_stride % 8 == 0;
  if (chunked) {
    const int per_row = D / 8;
    for (int e = threadIdx.x; e < tile * per_row; e += blockDim.x) {
      const int r = e / per_row, c = e % per_row;
      Chunk value{{0u, 0u, 0u, 0u}};
      if (r < valid) value = reinterpret_cast<const Chunk*>(src + r * row_stride)[c];
      reinterpret_cast<Chunk*>(dst + r * ld)[c] = value;
    }
  } else {
    for (int e = threadIdx.x; e < tile * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      dst[r * ld + c] = r < valid ? src[r * row_stride + c] : narrow<T16>(0.0f);
    }
  }
}

// out (16 x 64 floats, row-major, leading dimension ld_out) = X (16 x D) . Y (64 x D)^T, with X
// and Y row-major 16-bit tiles in shared memory: one warp.
template <typename T16, int D>
__device__ void strip_times_transpose(const T16* x, int ldx, const T16* y, int ldy, float* out, int ld_out) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(acc[n], 0.0f);
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T16, wmma::row_major> a;
    wmma::load_matrix_sync(a, x + 16 * kk, ldx);
    for (int n = 0; n < 4; ++n) {
      // B(d, r) = Y[r][d]: column-major with leading dimension ldy.
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T16, wmma::col_major> b;
      wmma::load_matrix_sync(b, y + 16 * n * ldy + 16 * kk, ldy);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(out + 16 * n, acc[n], ld_out, wmma::mem_row_major);
}

// acc[n] += A (16 x 64, row-major 16-bit) . B (64 x D, row-major 16-bit)[:, 16n, 16n + 16) for
// n < D / 16: one warp.
template <typename T16, int D>
__device__ void strip_accumulate(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16], const T16* a,
                                 int lda, const T16* b, int ldb) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T16, wmma::row_major> fa[4];
  for (int kk = 0; kk < 4; ++kk) wmma::load_matrix_sync(fa[kk], a + 16 * kk, lda);
  for (int n = 0; n < D / 16; ++n)
    for (int kk = 0; kk < 4; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T16, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, b + 16 * kk * ldb + 16 * n, ldb);
      wmma::mma_sync(acc[n], fa[kk], fb, acc[n]);
    }
}

template <typename T16, int D>
__global__ void __launch_bounds__(kTcThreads)
    flash_forward_tc_kernel(FlashParams<float> p, Operands16<T16> io, TcForwardLayout L, int64_t q_tiles) {
  static_assert(D % 16 == 0, "head dim in whole wmma tiles");
  constexpr int kColumnTiles = D / 16;
  unsigned char* smem = dynamic_shared<unsigned char>();
  T16* Qs = reinterpret_cast<T16*>(smem + L.q);
  T16* Ks = reinterpret_cast<T16*>(smem + L.k);
  T16* Vs = reinterpret_cast<T16*>(smem + L.v);
  float* Ss = reinterpret_cast<float*>(smem + L.s);
  T16* Ps = reinterpret_cast<T16*>(smem + L.p);
  float* Os = reinterpret_cast<float*>(smem + L.o);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row_in_warp = lane / 2, half = lane % 2;  // two lanes per row
  const int row = 16 * warp + row_in_warp;            // this lane pair's row of the tile
  const float neg_inf = -positive_infinity<float>();
  // This warp's strips.
  float* S_strip = Ss + 16 * warp * L.ld_s;
  T16* P_strip = Ps + 16 * warp * L.ld_p;
  float* O_strip = Os + 16 * warp * L.ld_o;

  for (int64_t task = blockIdx.x; task < p.B * p.H * q_tiles; task += gridDim.x) {
    const int64_t bh = task / q_tiles, qt = task % q_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qt * kQueryTile;
    const int64_t rows = p.T_ - i0 < kQueryTile ? p.T_ - i0 : kQueryTile;
    const int64_t limit = key_limit(p, b);
    __syncthreads();  // the previous task is done with shared memory
    load_rows16(Qs, L.ld_x, io.q + row_offset(p.lq, b, h, i0), p.lq.seq, rows, kQueryTile, D);
    for (int c = half; c < D; c += 2) O_strip[row_in_warp * L.ld_o + c] = 0.0f;
    float m = neg_inf, l = 0.0f;  // running max and sum of this lane pair's row
    int64_t lo, hi;
    key_range(p, b, i0, i0 + rows, &lo, &hi);
    for (int64_t j0 = lo - lo % kKeyTile; j0 < hi; j0 += kKeyTile) {
      const int64_t cols = p.S - j0 < kKeyTile ? p.S - j0 : kKeyTile;
      __syncthreads();  // K and V of the previous key tile are no longer read
      load_rows16(Ks, L.ld_x, io.k + row_offset(p.lk, b, h, j0), p.lk.seq, cols, kKeyTile, D);
      load_rows16(Vs, L.ld_x, io.v + row_offset(p.lv, b, h, j0), p.lv.seq, cols, kKeyTile, D);
      __syncthreads();

      // S strip (16 x 64) = Q rows (16 x D) . K^T (D x 64)
      strip_times_transpose<T16, D>(Qs + 16 * warp * L.ld_x, L.ld_x, Ks, L.ld_x, S_strip, L.ld_s);
      __syncwarp();

      // Online softmax of this lane's half row: columns [32 half, 32 half + 32).
      const int64_t key_end = j0 + cols < limit ? j0 + cols : limit;
      float* s_row = S_strip + row_in_warp * L.ld_s;
      float tile_max = neg_inf;
      for (int c = 32 * half; c < 32 * half + 32; ++c) {
        const float s = masked_score(p, b, h, i0 + row, j0 + c, key_end, p.scale * s_row[c]);
        s_row[c] = s;
        tile_max = s > tile_max ? s : tile_max;
      }
      const float other_max = __shfl_xor_sync(kFullWarp, tile_max, 1);
      tile_max = other_max > tile_max ? other_max : tile_max;
      const float new_max = m > tile_max ? m : tile_max;
      float correction = 1.0f;
      if (new_max != neg_inf) {
        correction = m == neg_inf ? 0.0f : math_exp(m - new_max);
        m = new_max;
      }
      float partial = 0.0f;
      T16* p_row = P_strip + row_in_warp * L.ld_p;
      for (int c = 32 * half; c < 32 * half + 32; ++c) {
        const float prob = m == neg_inf ? 0.0f : math_exp(s_row[c] - m);
        partial += prob;
        float used = prob;
        if (p.dropout)
          used = (prob != 0.0f && dropout_keeps(p, b, h, i0 + row, j0 + c)) ? prob * p.dropout_scale : 0.0f;
        p_row[c] = narrow<T16>(used);
      }
      partial += __shfl_xor_sync(kFullWarp, partial, 1);
      l = l * correction + partial;
      float* o_row = O_strip + row_in_warp * L.ld_o;
      for (int c = half; c < D; c += 2) o_row[c] *= correction;
      __syncwarp();

      // O strip (16 x D) += P strip (16 x 64) . V tile (64 x D), O through shared memory.
      {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_acc[kColumnTiles];
        for (int n = 0; n < kColumnTiles; ++n)
          wmma::load_matrix_sync(o_acc[n], O_strip + 16 * n, L.ld_o, wmma::mem_row_major);
        strip_accumulate<T16, D>(o_acc, P_strip, L.ld_p, Vs, L.ld_x);
        for (int n = 0; n < kColumnTiles; ++n)
          wmma::store_matrix_sync(O_strip + 16 * n, o_acc[n], L.ld_o, wmma::mem_row_major);
      }
      __syncwarp();
    }
    // Normalise and write this lane pair's row (both lanes hold the same m and l).
    if (row < rows) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      T16* out_row = io.out + row_offset(p.lo, b, h, i0 + row);
      const float* o_row = O_strip + row_in_warp * L.ld_o;
      for (int c = half; c < D; c += 2) out_row[c] = narrow<T16>(o_row[c] * inv);
      if (half == 0) p.lse[bh * p.T_ + i0 + row] = l > 0.0f ? m + math_log(l) : neg_inf;
    }
  }
}

// ---- backward ----------------------------------------------------------------------------------
//
// Two kernels, as the float32 ones, so that no two blocks add into one gradient element (no
// atomics, deterministic): one block per key tile (warp w owns keys [16w, 16w + 16); dK and dV
// stay in wmma accumulators over the query tiles), one per query tile (warp w owns queries
// [16w, 16w + 16); dQ in accumulators over the key tiles). Both recompute S (and dP = dO V^T)
// on tensor cores, P = exp(S - lse) and dS = P * (dP * mask - delta) in float32, and round P
// and dS to the operand type for the products dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K.

struct TcBackwardLayout {
  int ld_x;                                                 // Q, K, V, dO tiles: D + 8 elements
  int ld_s;                                                 // float32 strips (S or S^T, dP or dP^T): 64 + 4
  int ld_p;                                                 // 16-bit strips (P^T, dS or dS^T): 64 + 8
  int ld_out;                                               // float32 gradient staging: D + 4
  size_t q, k, v, go, lse, delta, s, dp, p16, ds16, total;  // the staging area aliases s and dp
};

TcBackwardLayout tc_backward_layout(int64_t D) {
  TcBackwardLayout f{};
  f.ld_x = static_cast<int>(D) + 8;
  f.ld_s = kKeyTile + 4;
  f.ld_p = kKeyTile + 8;
  f.ld_out = static_cast<int>(D) + 4;
  const size_t tile16 = size_t{64} * f.ld_x * 2, strip32 = size_t{64} * f.ld_s * 4, strip16 = size_t{64} * f.ld_p * 2;
  size_t at = 0;
  f.q = at, at = align128(at + tile16);
  f.k = at, at = align128(at + tile16);
  f.v = at, at = align128(at + tile16);
  f.go = at, at = align128(at + tile16);
  f.lse = at, at = align128(at + 64 * 4);
  f.delta = at, at = align128(at + 64 * 4);
  f.s = at;
  f.dp = align128(at + strip32);
  at = std::max(align128(f.dp + strip32), align128(f.s + size_t{64} * f.ld_out * 4));
  f.p16 = at, at = align128(at + strip16);
  f.ds16 = at, at = align128(at + strip16);
  f.total = at;
  return f;
}

// The backward kernels' view of shared memory (TcBackwardLayout): the block's tiles and this
// warp's strips (rows [16 warp, 16 warp + 16) of S or S^T, dP or dP^T, P^T and dS or dS^T), and
// its gradient staging rows, which alias the strips of every warp.
template <typename T16>
struct BackwardShared {
  __device__ BackwardShared(unsigned char* smem, const TcBackwardLayout& L, int warp)
      : Q(reinterpret_cast<const T16*>(smem + L.q)),
        K(reinterpret_cast<T16*>(smem + L.k)),
        V(reinterpret_cast<T16*>(smem + L.v)),
        dO(reinterpret_cast<const T16*>(smem + L.go)),
        lse(reinterpret_cast<const float*>(smem + L.lse)),
        delta(reinterpret_cast<const float*>(smem + L.delta)),
        S(reinterpret_cast<float*>(smem + L.s) + 16 * warp * L.ld_s),
        dP(reinterpret_cast<float*>(smem + L.dp) + 16 * warp * L.ld_s),
        P16(reinterpret_cast<T16*>(smem + L.p16) + 16 * warp * L.ld_p),
        dS16(reinterpret_cast<T16*>(smem + L.ds16) + 16 * warp * L.ld_p),
        staging(reinterpret_cast<float*>(smem + L.s) + 16 * warp * L.ld_out) {}
  const T16* Q;
  T16* K;
  T16* V;
  const T16* dO;
  const float* lse;    // (64) of the query tile
  const float* delta;  // (64) of the query tile
  float* S;
  float* dP;
  T16* P16;
  T16* dS16;
  float* staging;
};

// delta[b,h,i] = sum_c out[b,h,i,c] * grad_out[b,h,i,c] in float32 (the 16-bit values widened).
template <typename T16>
__global__ void flash_delta_16bit_kernel(FlashParams<float> p, Operands16<T16> io, float* delta) {
  const int64_t rows = p.B * p.H * p.T_;
  for (int64_t row = global_thread_index(); row < rows; row += grid_stride()) {
    const int64_t bh = row / p.T_, i = row % p.T_, b = bh / p.H, h = bh % p.H;
    const T16* o = io.out + row_offset(p.lo, b, h, i);
    const T16* g = io.grad_out + row_offset(p.lgo, b, h, i);
    float sum = 0.0f;
    for (int64_t c = 0; c < p.Dv; ++c) sum += widen(o[c]) * widen(g[c]);
    delta[row] = sum;
  }
}

// Loads query rows [i0, i0 + rows) with their dO, lse and delta (block-wide).
template <typename T16, int D>
__device__ void load_query_side16(const FlashParams<float>& p, const Operands16<T16>& io, const TcBackwardLayout& L,
                                  unsigned char* smem, int64_t b, int64_t h, int64_t i0, int64_t rows) {
  load_rows16(reinterpret_cast<T16*>(smem + L.q), L.ld_x, io.q + row_offset(p.lq, b, h, i0), p.lq.seq, rows, kQueryTile,
              D);
  load_rows16(reinterpret_cast<T16*>(smem + L.go), L.ld_x, io.grad_out + row_offset(p.lgo, b, h, i0), p.lgo.seq, rows,
              kQueryTile, D);
  float* lse = reinterpret_cast<float*>(smem + L.lse);
  float* delta = reinterpret_cast<float*>(smem + L.delta);
  const int64_t bh = b * p.H + h;
  for (int i = threadIdx.x; i < kQueryTile; i += blockDim.x) {
    lse[i] = i < rows ? p.lse[bh * p.T_ + i0 + i] : -positive_infinity<float>();
    delta[i] = i < rows ? p.delta[bh * p.T_ + i0 + i] : 0.0f;
  }
}

// P (dropped, for dV) and dS of one score element, from its raw score and dP.
struct ProbabilityAndGrad {
  float p_dropped, ds;
};
__device__ __forceinline__ ProbabilityAndGrad probability_and_grad(const FlashParams<float>& p, int64_t b, int64_t h,
                                                                   int64_t i, int64_t j, int64_t key_end, float raw,
                                                                   float dp, float lse, float delta) {
  const float s = masked_score(p, b, h, i, j, key_end, p.scale * raw);
  const float prob = lse == -positive_infinity<float>() ? 0.0f : math_exp(s - lse);
  const bool kept = !p.dropout || (prob != 0.0f && dropout_keeps(p, b, h, i, j));
  const float p_dropped = kept ? (p.dropout ? prob * p.dropout_scale : prob) : 0.0f;
  const float dp_masked = kept ? (p.dropout ? dp * p.dropout_scale : dp) : 0.0f;
  return {p_dropped, prob * (dp_masked - delta)};
}

// Writes a warp's 16 x D accumulators (times `scale`) to gradient rows [first, first + 16) of
// `base` (row stride `stride`), rows < valid only, through its float32 staging strip.
template <typename T16, int D>
__device__ void write_gradient_strip(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16],
                                     float* staging, int ld, T16* base, int64_t stride, int first, int64_t valid,
                                     float scale) {
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(staging + 16 * n, acc[n], ld, wmma::mem_row_major);
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, c = e % D;
    if (first + r < valid) base[(first + r) * stride + c] = narrow<T16>(scale * staging[r * ld + c]);
  }
  __syncwarp();
}

template <typename T16, int D>
__global__ void __launch_bounds__(kTcThreads)
    flash_backward_kv_tc_kernel(FlashParams<float> p, Operands16<T16> io, TcBackwardLayout L, int64_t q_tiles,
                                int64_t k_tiles) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // This warp's strips hold S^T and dP^T (16 keys x 64 queries), P^T and dS^T in 16 bits.
  const BackwardShared<T16> sh(smem, L, warp);

  for (int64_t task = blockIdx.x; task < p.B * p.H * k_tiles; task += gridDim.x) {
    const int64_t bh = task / k_tiles, kt = task % k_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t j0 = kt * kKeyTile;
    const int64_t cols = p.S - j0 < kKeyTile ? p.S - j0 : kKeyTile;
    const int64_t key_end = j0 + cols < key_limit(p, b) ? j0 + cols : key_limit(p, b);
    __syncthreads();  // the previous task is done with shared memory (the staging area too)
    load_rows16(sh.K, L.ld_x, io.k + row_offset(p.lk, b, h, j0), p.lk.seq, cols, kKeyTile, D);
    load_rows16(sh.V, L.ld_x, io.v + row_offset(p.lv, b, h, j0), p.lv.seq, cols, kKeyTile, D);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[D / 16], dv[D / 16];
    for (int n = 0; n < D / 16; ++n) {
      wmma::fill_fragment(dk[n], 0.0f);
      wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      const int64_t i0 = qt * kQueryTile;
      const int64_t rows = p.T_ - i0 < kQueryTile ? p.T_ - i0 : kQueryTile;
      int64_t lo, hi;
      key_range(p, b, i0, i0 + rows, &lo, &hi);
      if (!(j0 < hi && j0 + cols > lo)) continue;  // the same decision in every thread
      __syncthreads();                             // the previous query tile is no longer read
      load_query_side16<T16, D>(p, io, L, smem, b, h, i0, rows);
      __syncthreads();
      strip_times_transpose<T16, D>(sh.K + 16 * warp * L.ld_x, L.ld_x, sh.Q, L.ld_x, sh.S, L.ld_s);
      strip_times_transpose<T16, D>(sh.V + 16 * warp * L.ld_x, L.ld_x, sh.dO, L.ld_x, sh.dP, L.ld_s);
      __syncwarp();
      for (int e = lane; e < 16 * kQueryTile; e += 32) {
        const int r = e / kQueryTile, c = e % kQueryTile;  // key row of the warp, query column
        const ProbabilityAndGrad g =
            probability_and_grad(p, b, h, i0 + c, j0 + 16 * warp + r, key_end, sh.S[r * L.ld_s + c],
                                 sh.dP[r * L.ld_s + c], sh.lse[c], sh.delta[c]);
        sh.P16[r * L.ld_p + c] = narrow<T16>(g.p_dropped);
        sh.dS16[r * L.ld_p + c] = narrow<T16>(g.ds);
      }
      __syncwarp();
      strip_accumulate<T16, D>(dv, sh.P16, L.ld_p, sh.dO, L.ld_x);  // dV += P^T dO
      strip_accumulate<T16, D>(dk, sh.dS16, L.ld_p, sh.Q, L.ld_x);  // dK += dS^T Q (scaled below)
    }
    __syncthreads();  // every warp is done with its strips: the staging area aliases them
    write_gradient_strip<T16, D>(dv, sh.staging, L.ld_out, io.grad_v + row_offset(p.lgv, b, h, j0), p.lgv.seq,
                                 16 * warp, cols, 1.0f);
    write_gradient_strip<T16, D>(dk, sh.staging, L.ld_out, io.grad_k + row_offset(p.lgk, b, h, j0), p.lgk.seq,
                                 16 * warp, cols, p.scale);
  }
}

template <typename T16, int D>
__global__ void __launch_bounds__(kTcThreads)
    flash_backward_q_tc_kernel(FlashParams<float> p, Operands16<T16> io, TcBackwardLayout L, int64_t q_tiles) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // This warp's strips hold S and dP (16 queries x 64 keys) and dS in 16 bits.
  const BackwardShared<T16> sh(smem, L, warp);
  const float* lse_s = sh.lse + 16 * warp;  // this warp's queries
  const float* delta_s = sh.delta + 16 * warp;

  for (int64_t task = blockIdx.x; task < p.B * p.H * q_tiles; task += gridDim.x) {
    const int64_t bh = task / q_tiles, qt = task % q_tiles, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qt * kQueryTile;
    const int64_t rows = p.T_ - i0 < kQueryTile ? p.T_ - i0 : kQueryTile;
    const int64_t limit = key_limit(p, b);
    __syncthreads();
    load_query_side16<T16, D>(p, io, L, smem, b, h, i0, rows);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[D / 16];
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
    int64_t lo, hi;
    key_range(p, b, i0, i0 + rows, &lo, &hi);
    for (int64_t j0 = lo - lo % kKeyTile; j0 < hi; j0 += kKeyTile) {
      const int64_t cols = p.S - j0 < kKeyTile ? p.S - j0 : kKeyTile;
      const int64_t key_end = j0 + cols < limit ? j0 + cols : limit;
      __syncthreads();  // K and V of the previous key tile are no longer read
      load_rows16(sh.K, L.ld_x, io.k + row_offset(p.lk, b, h, j0), p.lk.seq, cols, kKeyTile, D);
      load_rows16(sh.V, L.ld_x, io.v + row_offset(p.lv, b, h, j0), p.lv.seq, cols, kKeyTile, D);
      __syncthreads();
      strip_times_transpose<T16, D>(sh.Q + 16 * warp * L.ld_x, L.ld_x, sh.K, L.ld_x, sh.S, L.ld_s);
      strip_times_transpose<T16, D>(sh.dO + 16 * warp * L.ld_x, L.ld_x, sh.V, L.ld_x, sh.dP, L.ld_s);
      __syncwarp();
      for (int e = lane; e < 16 * kKeyTile; e += 32) {
        const int r = e / kKeyTile, c = e % kKeyTile;  // query row of the warp, key column
        const ProbabilityAndGrad g =
            probability_and_grad(p, b, h, i0 + 16 * warp + r, j0 + c, key_end, sh.S[r * L.ld_s + c],
                                 sh.dP[r * L.ld_s + c], lse_s[r], delta_s[r]);
        sh.dS16[r * L.ld_p + c] = narrow<T16>(g.ds);
      }
      __syncwarp();
      strip_accumulate<T16, D>(dq, sh.dS16, L.ld_p, sh.K, L.ld_x);  // dQ += dS K (scaled below)
    }
    __syncthreads();  // the staging area aliases every warp's strips
    write_gradient_strip<T16, D>(dq, sh.staging, L.ld_out, io.grad_q + row_offset(p.lgq, b, h, i0), p.lgq.seq,
                                 16 * warp, rows, p.scale);
  }
}

// heed::Error naming `op` when the tensor-core kernels' shared memory exceeds the device's.
void check_shared_fits(size_t bytes, const char* op) {
  if (bytes <= max_shared_bytes()) return;
  const std::string message = "the tensor-core kernels need " + std::to_string(bytes) +
                              " bytes of shared memory per block, the device has " + std::to_string(max_shared_bytes());
  throw_error(op, message.c_str());
}

template <typename T16, int D>
void launch_backward(FlashParams<float> p, const Operands16<T16>& io) {
  const TcBackwardLayout L = tc_backward_layout(D);
  check_shared_fits(L.total, "flash_attention_backward");
  const int64_t rows = p.B * p.H * p.T_;
  DeviceBuffer delta(static_cast<size_t>(std::max<int64_t>(rows, 1)) * sizeof(float));
  p.delta = delta.as<const float>();
  if (rows > 0) HEED_LAUNCH(grid_for(rows), kThreads, 0, flash_delta_16bit_kernel<T16>)(p, io, delta.as<float>());
  check_launch("flash_attention_backward");
  const int64_t q_tiles = (p.T_ + kQueryTile - 1) / kQueryTile, k_tiles = (p.S + kKeyTile - 1) / kKeyTile;
  const int64_t kv_tasks = p.B * p.H * k_tiles, q_tasks = p.B * p.H * q_tiles;
  const auto grid = [](int64_t tasks) {
    return static_cast<unsigned>(std::min<int64_t>(tasks, grid_for(tasks * kTcThreads, kTcThreads)));
  };
  allow_shared(flash_backward_kv_tc_kernel<T16, D>, L.total);
  allow_shared(flash_backward_q_tc_kernel<T16, D>, L.total);
  if (kv_tasks > 0)
    HEED_LAUNCH(grid(kv_tasks), kTcThreads, L.total, flash_backward_kv_tc_kernel<T16, D>)(p, io, L, q_tiles, k_tiles);
  check_launch("flash_attention_backward");
  if (q_tasks > 0)
    HEED_LAUNCH(grid(q_tasks), kTcThreads, L.total, flash_backward_q_tc_kernel<T16, D>)(p, io, L, q_tiles);
  check_launch("flash_attention_backward");
}

template <typename T16, int D>
void launch_forward(const FlashParams<float>& p, const Operands16<T16>& io) {
  const TcForwardLayout L = tc_forward_layout(D);
  check_shared_fits(L.total, "flash_attention_forward");
  const int64_t q_tiles = (p.T_ + kQueryTile - 1) / kQueryTile;
  const int64_t tasks = p.B * p.H * q_tiles;
  if (tasks == 0) return;
  allow_shared(flash_forward_tc_kernel<T16, D>, L.total);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tasks, grid_for(tasks * kTcThreads, kTcThreads)));
  HEED_LAUNCH(grid, kTcThreads, L.total, flash_forward_tc_kernel<T16, D>)(p, io, L, q_tiles);
  check_launch("flash_attention_forward");
}

template <typename T16>
Operands16<T16> operands16(const FlashAttentionArgs& a) {
  return {static_cast<const T16*>(a.q), static_cast<const T16*>(a.k),        static_cast<const T16*>(a.v),
          static_cast<T16*>(a.out),     static_cast<const T16*>(a.grad_out), static_cast<T16*>(a.grad_q),
          static_cast<T16*>(a.grad_k),  static_cast<T16*>(a.grad_v)};
}

template <typename T16>
void forward_16bit_typed(const FlashAttentionArgs& a) {
  const KeyLengths lengths = device_key_lengths(a.key_lengths, a.batch);
  const FlashParams<float> p = make_params<float>(a, lengths.device);
  const Operands16<T16> io = operands16<T16>(a);
  if (a.head_dim == 64)
    launch_forward<T16, 64>(p, io);
  else
    launch_forward<T16, 128>(p, io);
}

template <typename T16>
void backward_16bit_typed(const FlashAttentionArgs& a) {
  const KeyLengths lengths = device_key_lengths(a.key_lengths, a.batch);
  const FlashParams<float> p = make_params<float>(a, lengths.device);
  const Operands16<T16> io = operands16<T16>(a);
  if (a.head_dim == 64)
    launch_backward<T16, 64>(p, io);
  else
    launch_backward<T16, 128>(p, io);
}

}  // namespace

bool flash_attention_takes_16bit(int64_t head_dim, int64_t value_dim) {
  return head_dim == value_dim && (head_dim == 64 || head_dim == 128) && tensor_cores_16bit();
}

void flash_attention_forward_16bit(const FlashAttentionArgs& args) {
  if (args.dtype == DType::Float16)
    forward_16bit_typed<__half>(args);
  else
    forward_16bit_typed<__nv_bfloat16>(args);
}

void flash_attention_backward_16bit(const FlashAttentionArgs& args) {
  if (args.dtype == DType::Float16)
    backward_16bit_typed<__half>(args);
  else
    backward_16bit_typed<__nv_bfloat16>(args);
}

}  // namespace heed::kernels::cuda
