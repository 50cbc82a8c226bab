// kernels/cuda/flash_attention_common.cuh — what the flash attention kernels share: the
// parameter block, operand geometry, the masks (causal bottom-right aligned, window, key
// lengths, boolean keep and additive views), dropout regenerated from Philox, and the host-side
// parameter set-up. flash_attention.cu (float32/float64, CUDA cores) and flash_attention_tc.cu
// (float16/bfloat16 on tensor cores) include it, so both decide visibility identically.
//
// Invariants: masks are those of kernels/cpu/flash_attention.cpp; dropout keeps element
// (b,h,i,j) when philox_uniform(seed, offset + ((b*H+h)*T+i)*S + j) >= p; for 16-bit operands the
// parameter block is FlashParams<float> (scale, additive mask and lse in float32) and the
// 16-bit operand pointers travel beside it.
#pragma once

#include <algorithm>
#include <memory>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

template <typename T>
struct FlashParams {
  const T* q;
  const T* k;
  const T* v;
  T* out;
  T* lse;
  AttentionLayout lq, lk, lv, lo;
  int64_t B, H, T_, S, D, Dv, shift;
  T scale;
  bool causal;
  int64_t window;
  const int64_t* key_lengths;  // device pointer or null
  const bool* keep;
  int64_t keep_strides[4];
  const T* additive;
  int64_t additive_strides[4];
  bool dropout;
  float dropout_threshold;
  T dropout_scale;
  uint64_t seed, offset;
  // backward
  const T* grad_out;
  T* grad_q;
  T* grad_k;
  T* grad_v;
  const T* delta;  // (B,H,T) contiguous
  AttentionLayout lgo, lgq, lgk, lgv;
};

AttentionLayout resolve(const AttentionLayout& l, int64_t heads, int64_t len, int64_t dim) {
  if (l.batch == 0 && l.head == 0 && l.seq == 0) return {heads * len * dim, len * dim, dim};
  return l;
}

HEED_HD int64_t row_offset(const AttentionLayout& l, int64_t b, int64_t h, int64_t i) {
  return b * l.batch + h * l.head + i * l.seq;
}

template <typename T>
__device__ int64_t key_limit(const FlashParams<T>& p, int64_t b) {
  if (!p.key_lengths) return p.S;
  const int64_t len = p.key_lengths[b];
  return len < p.S ? len : p.S;
}

// Keys [lo, hi) that queries [i0, i1) may see at all (cpu Problem::key_range).
template <typename T>
__device__ void key_range(const FlashParams<T>& p, int64_t b, int64_t i0, int64_t i1, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = key_limit(p, b);
  if (p.causal) *hi = *hi < i1 + p.shift ? *hi : i1 + p.shift;
  if (p.window >= 0) {
    const int64_t first = i0 + p.shift - p.window;
    *lo = first > 0 ? first : 0;
    const int64_t last = i1 - 1 + p.shift + p.window + 1;
    *hi = *hi < last ? *hi : last;
  }
  if (*hi < *lo) *hi = *lo;
}

// The score of (i, j) after masking: -inf where the key is not visible (or out of range).
template <typename T>
__device__ T masked_score(const FlashParams<T>& p, int64_t b, int64_t h, int64_t i, int64_t j, int64_t limit, T s) {
  if (i >= p.T_ || j >= limit) return -positive_infinity<T>();
  const int64_t pos = i + p.shift;
  bool visible = true;
  if (p.causal) visible = j <= pos;
  if (p.window >= 0) visible = visible && j >= pos - p.window && j <= pos + p.window;
  if (visible && p.keep)
    visible = p.keep[b * p.keep_strides[0] + h * p.keep_strides[1] + i * p.keep_strides[2] + j * p.keep_strides[3]];
  if (!visible) return -positive_infinity<T>();
  if (p.additive)
    s += p.additive[b * p.additive_strides[0] + h * p.additive_strides[1] + i * p.additive_strides[2] +
                    j * p.additive_strides[3]];
  return s;
}

template <typename T>
__device__ bool dropout_keeps(const FlashParams<T>& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const uint64_t index = p.offset + static_cast<uint64_t>(((b * p.H + h) * p.T_ + i) * p.S + j);
  return philox_uniform(p.seed, index) >= p.dropout_threshold;
}

// ---- host side --------------------------------------------------------------------------------------

// Device copy of key_lengths when the caller passed host memory.
struct KeyLengths {
  std::unique_ptr<DeviceBuffer> copy;
  const int64_t* device = nullptr;
};

KeyLengths device_key_lengths(const int64_t* lengths, int64_t batch) {
  KeyLengths out;
  if (!lengths) return out;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, lengths);
  if (status != cudaSuccess) cudaGetLastError();
  if (status == cudaSuccess && (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged)) {
    out.device = lengths;
    return out;
  }
  out.copy = std::make_unique<DeviceBuffer>(static_cast<size_t>(batch) * sizeof(int64_t));
  HEED_CUDA_CHECK(
      cudaMemcpy(out.copy->as<void>(), lengths, static_cast<size_t>(batch) * sizeof(int64_t), cudaMemcpyHostToDevice));
  out.device = out.copy->as<const int64_t>();
  return out;
}

template <typename T>
FlashParams<T> make_params(const FlashAttentionArgs& a, const int64_t* key_lengths) {
  FlashParams<T> p{};
  p.q = static_cast<const T*>(a.q);
  p.k = static_cast<const T*>(a.k);
  p.v = static_cast<const T*>(a.v);
  p.out = static_cast<T*>(a.out);
  p.lse = static_cast<T*>(a.lse);
  p.B = a.batch;
  p.H = a.heads;
  p.T_ = a.queries;
  p.S = a.keys;
  p.D = a.head_dim;
  p.Dv = a.value_dim;
  p.shift = a.keys - a.queries;
  p.lq = resolve(a.q_layout, p.H, p.T_, p.D);
  p.lk = resolve(a.k_layout, p.H, p.S, p.D);
  p.lv = resolve(a.v_layout, p.H, p.S, p.Dv);
  p.lo = resolve(a.out_layout, p.H, p.T_, p.Dv);
  p.lgo = resolve(a.grad_out_layout, p.H, p.T_, p.Dv);
  p.lgq = resolve(a.grad_q_layout, p.H, p.T_, p.D);
  p.lgk = resolve(a.grad_k_layout, p.H, p.S, p.D);
  p.lgv = resolve(a.grad_v_layout, p.H, p.S, p.Dv);
  p.scale = static_cast<T>(a.scale);
  p.causal = a.causal;
  p.window = a.window;
  p.key_lengths = key_lengths;
  p.keep = static_cast<const bool*>(a.keep.data);
  p.additive = static_cast<const T*>(a.additive.data);
  for (int d = 0; d < 4; ++d) {
    p.keep_strides[d] = a.keep.data && d < a.keep.ndim ? a.keep.strides[d] : 0;
    p.additive_strides[d] = a.additive.data && d < a.additive.ndim ? a.additive.strides[d] : 0;
  }
  p.dropout = a.dropout_p > 0.0;
  p.dropout_threshold = static_cast<float>(a.dropout_p);
  p.dropout_scale = static_cast<T>(1.0 / (1.0 - a.dropout_p));
  p.seed = a.dropout_state.seed;
  p.offset = a.dropout_state.offset;
  p.grad_out = static_cast<const T*>(a.grad_out);
  p.grad_q = static_cast<T*>(a.grad_q);
  p.grad_k = static_cast<T*>(a.grad_k);
  p.grad_v = static_cast<T*>(a.grad_v);
  return p;
}

template <typename Kernel>
void allow_shared(Kernel* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    HEED_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

// The float16/bfloat16 tensor-core kernels of flash_attention_tc.cu (forward and backward);
// they require D == Dv in {64, 128} (flash_attention_takes_16bit).
void flash_attention_forward_16bit(const FlashAttentionArgs& args);
void flash_attention_backward_16bit(const FlashAttentionArgs& args);

}  // namespace heed::kernels::cuda
