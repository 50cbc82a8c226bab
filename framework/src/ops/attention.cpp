// framework/src/ops/attention.cpp — scaled dot-product attention, composed from matmul,
// masking and softmax (the reference path; every faster kernel is tested against it).
//
// Invariants: scores are formed as (q * scale) k^T in the compute dtype (float32 for 16-bit
// inputs); masks are combined into one boolean "may attend" tensor and applied with
// masked_fill(-inf), so fully masked rows give zero weights through softmax's definition.
#include <cmath>

#include "heed/attention.h"
#include "heed/autograd.h"
#include "heed/functional.h"
#include "internal.h"

namespace heed::F {

namespace {

// Reshapes a per-batch (B, S) mask to broadcast against (B, ..., T, S) scores.
Tensor per_batch_keys(const Tensor& m, const Dims& scores_shape) {
  Dims shape = Dims::filled(scores_shape.size(), 1);
  shape[0] = m.shape()[0];
  shape[scores_shape.size() - 1] = m.shape()[1];
  return m.reshape(shape);
}

Tensor combine(const Tensor& a, const Tensor& b) { return a.defined() ? logical_and(a, b) : b; }

// True when a tensor of shape `mask` broadcasts to exactly `target` (it adds no dim and
// grows no dim of target).
bool broadcasts_to(const Dims& mask, const Dims& target) {
  if (mask.size() > target.size()) return false;
  for (int i = 1; i <= mask.size(); ++i) {
    const int64_t m = mask[mask.size() - i], t = target[target.size() - i];
    if (m != t && m != 1) return false;
  }
  return true;
}

}  // namespace

Tensor attention_keep_mask(const AttentionMask& mask, const Dims& scores_shape, Device device, const char* name) {
  const int n = scores_shape.size();
  HEED_INTERNAL_ASSERT(n >= 2);
  const int64_t T = scores_shape[n - 2], S = scores_shape[n - 1];
  HEED_CHECK(mask.window >= -1, name, "window must be >= 0 (or -1 for none), got {}", mask.window);
  const TensorOptions idx = TensorOptions(kInt64).device(device);
  Tensor keep;
  if (mask.causal || mask.window >= 0) {
    // position of query i is i + (S - T); key j
    Tensor query_pos = add_scalar(arange(static_cast<double>(T), idx), static_cast<double>(S - T)).unsqueeze(1);
    Tensor key_pos = arange(static_cast<double>(S), idx).unsqueeze(0);
    Tensor offset = query_pos - key_pos;  // (T,S): i_abs - j
    if (mask.causal) keep = ge(offset, zeros({}, idx));
    if (mask.window >= 0) {
      const Tensor w = scalar_tensor(static_cast<double>(mask.window), idx);
      keep = combine(keep, logical_and(le(offset, w), ge(offset, neg(w))));
    }
  }
  if (mask.key_lengths.defined()) {
    const Tensor& len = mask.key_lengths;
    detail::check_index_dtype(len, name, "key_lengths");
    HEED_CHECK(len.dim() == 1 && n >= 3 && len.shape()[0] == scores_shape[0], name,
               "key_lengths must have shape [B] = [{}] for scores of shape {}, got {}", n >= 3 ? scores_shape[0] : -1,
               shape_str(scores_shape), shape_str(len.shape()));
    HEED_CHECK(len.device() == device, name, "key_lengths is on {}, attention runs on {}", len.device().str(),
               device.str());
    const std::vector<int64_t> lengths = len.to_vector<int64_t>();
    for (size_t b = 0; b < lengths.size(); ++b)
      HEED_CHECK(lengths[b] >= 0 && lengths[b] <= S, name, "key_lengths[{}] = {} is outside [0, {}]", b, lengths[b], S);
    Tensor positions = arange(static_cast<double>(S), idx).unsqueeze(0);  // (1,S)
    Tensor valid = lt(positions, len.to(kInt64).unsqueeze(1));            // (B,S)
    keep = combine(keep, per_batch_keys(valid, scores_shape));
  }
  if (mask.key_padding.defined()) {
    const Tensor& pad = mask.key_padding;
    HEED_CHECK(pad.dtype() == kBool, name, "key_padding must be bool (true = padding), got {}",
               dtype_name(pad.dtype()));
    HEED_CHECK(pad.dim() == 2 && n >= 3 && pad.shape()[0] == scores_shape[0] && pad.shape()[1] == S, name,
               "key_padding must have shape [B, S] = [{}, {}] for scores of shape {}, got {}",
               n >= 3 ? scores_shape[0] : -1, S, shape_str(scores_shape), shape_str(pad.shape()));
    keep = combine(keep, per_batch_keys(logical_not(pad), scores_shape));
  }
  if (mask.keep.defined()) {
    HEED_CHECK(mask.keep.dtype() == kBool, name,
               "the boolean mask must be bool (true = may attend); use `additive` for float masks, got {}",
               dtype_name(mask.keep.dtype()));
    HEED_CHECK(broadcasts_to(mask.keep.shape(), scores_shape), name,
               "the boolean keep mask of shape {} does not broadcast to the scores' shape {}",
               shape_str(mask.keep.shape()), shape_str(scores_shape));
    keep = combine(keep, mask.keep);
  }
  if (keep.defined() && keep.device() != device) keep = keep.to(device);
  return keep;
}

void check_additive_mask(const Tensor& additive, const Dims& scores_shape, const char* name) {
  HEED_CHECK(is_floating(additive.dtype()), name, "the additive mask must be floating point, got {}",
             dtype_name(additive.dtype()));
  HEED_CHECK(broadcasts_to(additive.shape(), scores_shape), name,
             "the additive mask of shape {} does not broadcast to the scores' shape {}", shape_str(additive.shape()),
             shape_str(scores_shape));
}

AttentionResult scaled_dot_product_attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const AttentionMask& mask_in, double dropout_p,
                                                          std::optional<double> scale, bool is_causal) {
  const char* name = "scaled_dot_product_attention";
  for (const Tensor* t : {&q, &k, &v}) {
    detail::check_defined(*t, name);
    detail::check_floating(*t, name);
    detail::check_same_device(q, *t, name);
    HEED_CHECK(t->dim() >= 2, name, "q, k and v need at least 2 dims (..., L, D); got shape {}", shape_str(t->shape()));
  }
  const int64_t D = q.shape().back();
  HEED_CHECK(k.shape().back() == D, name, "q has head dim {} but k has {} (shapes {} and {})", D, k.shape().back(),
             shape_str(q.shape()), shape_str(k.shape()));
  HEED_CHECK(k.size(-2) == v.size(-2), name, "k and v must have the same number of keys: shapes {} and {}",
             shape_str(k.shape()), shape_str(v.shape()));
  // The batch dims (...) of q, k and v must broadcast together.
  auto batch_dims = [](const Tensor& t) { return Dims(t.shape().begin(), t.shape().end() - 2); };
  broadcast_shapes(broadcast_shapes(batch_dims(q), batch_dims(k), name), batch_dims(v), name);
  HEED_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, name, "dropout_p must be in [0, 1), got {}", dropout_p);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(D))) * testing::attention_kernel_scale_fault;
  HEED_CHECK(std::isfinite(s), name, "scale must be finite, got {}", s);
  AttentionMask mask = mask_in;
  mask.causal = mask.causal || is_causal;

  const DType compute = detail::compute_dtype(promote_types(promote_types(q.dtype(), k.dtype()), v.dtype()));
  const Tensor qs = mul_scalar(q.to(compute), s);               // (...,T,D)
  Tensor scores = matmul(qs, k.to(compute).transpose(-1, -2));  // (...,T,S)
  if (mask.additive.defined()) {
    check_additive_mask(mask.additive, scores.shape(), name);
    scores = scores + mask.additive.to(compute);
  }
  const Tensor keep = attention_keep_mask(mask, scores.shape(), q.device());
  if (keep.defined()) scores = masked_fill(scores, logical_not(keep), -INFINITY);
  const Tensor weights = softmax(scores, -1);  // (...,T,S)
  const Tensor dropped = dropout_p > 0.0 ? dropout(weights, dropout_p, true) : weights;
  Tensor output = matmul(dropped, v.to(compute));
  if (output.dtype() != v.dtype()) output = output.to(v.dtype());
  return {output, weights};
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                    double dropout_p, std::optional<double> scale, bool is_causal) {
  HEED_PROFILE_OP("scaled_dot_product_attention", &q, &k, &v);
  // The fused kernel whenever the device has it and the shapes fit (O(T) memory); the
  // composed path otherwise, when the weights are wanted, or when the additive mask itself
  // needs a gradient (its gradient is a dense (T, S) tensor anyway).
  const bool additive_needs_grad = mask.additive.defined() && mask.additive.requires_grad();
  if (!additive_needs_grad && flash_attention_supported(q, k, v))
    return detail_flash::flash_attention_impl(q, k, v, mask, dropout_p, scale, is_causal,
                                              "scaled_dot_product_attention");
  return scaled_dot_product_attention_with_weights(q, k, v, mask, dropout_p, scale, is_causal).output;
}

}  // namespace heed::F
