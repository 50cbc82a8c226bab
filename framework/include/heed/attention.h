// heed/attention.h — scaled dot-product attention (namespace heed::F) and its masks.
//
// softmax(q k^T * scale + additive) v over the last two dims, with q (..., T, D),
// k (..., S, D), v (..., S, Dv); the leading dims (usually (B, H)) broadcast.
// Invariants:
//  * The default scale is 1/sqrt(D) with D the head dimension (q.size(-1)), never d_model.
//  * Scores and softmax are computed in float32 (float64 for float64 inputs), also for
//    float16/bfloat16 inputs.
//  * A query row whose keys are all masked yields zeros and zero (finite) gradients.
//  * Causal masking is bottom-right aligned: query i sits at absolute position i + S - T, so
//    a KV cache with S > T keys works unchanged.
//  * Test-only hook: testing::attention_kernel_scale_fault multiplies the scale inside both
//    attention kernels (composed and fused); it is 1.0 (no effect) unless a test plants a
//    kernel-level scale bug for heed-doctor's measured-scale check.
#pragma once

#include <cstdint>
#include <optional>

#include "heed/tensor.h"

namespace heed::F {

namespace testing {
// Test-only: a factor both attention kernels apply on top of the requested scale, to plant a
// kernel-level scale bug (tests/test_doctor_faults.cpp). Never set outside tests.
inline double attention_kernel_scale_fault = 1.0;
}  // namespace testing

struct AttentionMask {
  bool causal = false;   // query i may attend key j only when j <= i + (S - T)
  int64_t window = -1;   // >= 0: local attention, |i + (S - T) - j| <= window
  Tensor key_lengths{};  // int64 (B): keys at positions >= length are padding
  Tensor key_padding{};  // bool (B, S): true marks a padding key (PyTorch's key_padding_mask)
  Tensor keep{};         // bool, broadcastable to (..., T, S): true = may attend (PyTorch SDPA attn_mask)
  Tensor additive{};     // float, broadcastable to (..., T, S): added to the scores
  bool restricts() const {
    return causal || window >= 0 || key_lengths.defined() || key_padding.defined() || keep.defined();
  }
};

// The combined "may attend" mask of everything in `mask` except `additive`, shaped to
// broadcast against scores of shape `scores_shape` (..., T, S); undefined when nothing is
// masked. Validates shapes and dtypes (heed::Error naming `op` and the offending mask).
Tensor attention_keep_mask(const AttentionMask& mask, const Dims& scores_shape, Device device,
                           const char* op = "scaled_dot_product_attention");

// Validates an additive (float) mask against scores of shape `scores_shape`: floating dtype,
// and broadcastable to exactly that shape (heed::Error naming `op` otherwise).
void check_additive_mask(const Tensor& additive, const Dims& scores_shape,
                         const char* op = "scaled_dot_product_attention");

struct AttentionResult {
  Tensor output;   // (..., T, Dv)
  Tensor weights;  // (..., T, S), after masking and softmax, before dropout
};

// The attention output. dropout_p > 0 drops attention weights (seeded; pass 0 in eval).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {},
                                    double dropout_p = 0.0, std::optional<double> scale = std::nullopt,
                                    bool is_causal = false);

// The same through the composed path, returning the attention weights too.
AttentionResult scaled_dot_product_attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const AttentionMask& mask = {}, double dropout_p = 0.0,
                                                          std::optional<double> scale = std::nullopt,
                                                          bool is_causal = false);

// The fused (flash-style) kernel explicitly: O(T) memory (only a log-sum-exp per query row is
// saved), masked key blocks skipped, dropout regenerated in backward. q (B, H, T, D),
// k (B, H, S, D), v (B, H, S, Dv) with equal B and H (or 3-D (B, L, D) for one head).
// scaled_dot_product_attention uses it whenever the device has the kernel and the shapes fit.
// The additive mask is a constant here (no gradient flows into it).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {},
                       double dropout_p = 0.0, std::optional<double> scale = std::nullopt, bool is_causal = false);
// Self-attention straight from packed projections qkv (B, T, 3C) = [q | k | v] with `heads`
// heads of d_head = C / heads: returns the merged heads (B, T, C). No head split or merge is
// ever copied, and backward writes dq, dk, dv into one (B, T, 3C) gradient.
Tensor flash_attention_packed(const Tensor& qkv, int64_t heads, const AttentionMask& mask = {}, double dropout_p = 0.0,
                              std::optional<double> scale = std::nullopt);
// Whether flash_attention can run these inputs (device kernel present, matching (B, H)).
bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);

namespace detail_flash {
// flash_attention reporting errors under the caller's op name.
Tensor flash_attention_impl(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                            double dropout_p, std::optional<double> scale, bool is_causal, const char* name);
}  // namespace detail_flash

}  // namespace heed::F
