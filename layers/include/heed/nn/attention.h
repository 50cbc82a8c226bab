// heed/nn/attention.h — attention modules: the scale variants, single-head scaled
// dot-product attention, multi-head attention (three projection layouts, optional shared
// K/V projection, KV cache), additive (Bahdanau) attention and local windows.
//
// Invariants:
//  * d_head = d_model / heads (an Error if it does not divide); the default scale is
//    1/sqrt(d_head), never 1/sqrt(d_model).
//  * Tensors are (B, T, C) outside and (B, H, T, d_head) inside; attention weights are
//    (B, H, T, S).
//  * With a KVCache, calling forward on tokens one (or a few) at a time gives the same
//    outputs as one full forward over the whole sequence (causal masks are bottom-right
//    aligned, see heed/attention.h).
//  * Diagnostics (heed-doctor): with set_record_weights(true) a forward keeps its weights, the
//    mask it applied and, without a cache, its query/key inputs; set_key_value_perturbation
//    lets the doctor change projected keys and values (the padding-mask check). Both are off
//    by default and cost one branch each then.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "heed/attention.h"
#include "heed/nn/layers.h"
#include "heed/nn/module.h"

namespace heed::nn {

// How query-key scores are scaled (seed 000 sec. 3, 5).
enum class AttentionScale {
  SqrtDk,     // q.k / sqrt(d_k): the standard
  None,       // q.k unscaled
  Learnable,  // q.k * alpha, alpha learnable per head, initialised to 1/sqrt(d_k)
  Affine,     // q.k / (alpha * sqrt(d_k) + beta), alpha (init 1) and beta (init 0) learnable per head
  Cosine,     // cos(q, k) * tau: L2-normalised q and k, tau learnable per head, initialised to sqrt(d_k)
  Fixed,      // q.k * fixed_scale (for experiments and planting faults, e.g. 1/sqrt(d_model))
};
const char* attention_scale_name(AttentionScale scale);
// Parses "sqrt_dk", "none", "learnable", "affine", "cosine"; throws heed::Error otherwise.
AttentionScale parse_attention_scale(const std::string& text);

// Applies a scale mode to per-head queries and keys (B, H, L, d_k) and says which constant
// factor the attention function still has to apply.
class AttentionScaling : public Module {
 public:
  AttentionScaling(AttentionScale mode, int64_t d_k, int64_t heads, double fixed_scale = 0.0);
  struct Scaled {
    Tensor q, k;
    double scale;  // the factor F::scaled_dot_product_attention must still apply
  };
  Scaled apply(const Tensor& q, const Tensor& k) const;
  // The scale that multiplies q.k for each head right now (for diagnostics: a Cosine mode
  // reports tau, whose effective scale also depends on the norms of q and k).
  std::vector<double> effective_scale() const;
  // The scale when it is a constant (sqrt_dk, none, fixed), or nullopt for learned modes.
  std::optional<double> constant_scale() const;
  AttentionScale mode() const { return mode_; }
  Tensor alpha, beta, tau;  // the learnable parameters of the active mode, shape (H)

 private:
  AttentionScale mode_;
  int64_t d_k_, heads_;
  double fixed_scale_;
};

// Keys and values of earlier steps for incremental decoding, (B, H, S, d_head) each.
struct KVCache {
  Tensor k, v;
  bool is_static = false;  // cross-attention: computed once from the encoder memory
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
  // Empties the cache; a static (cross-attention) cache stays static.
  void reset() {
    k = Tensor();
    v = Tensor();
  }
  // Keeps batch rows `indices` (int64), e.g. to follow beams in beam search.
  void reorder(const Tensor& indices);
};

// Single-head attention over (B, T, d_k) queries and (B, S, d_k) keys: the scale modes,
// masks and dropout of F::scaled_dot_product_attention as a module.
class ScaledDotProductAttention : public Module {
 public:
  ScaledDotProductAttention(int64_t d_k, AttentionScale scale = AttentionScale::SqrtDk, double dropout = 0.0,
                            double fixed_scale = 0.0);
  F::AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const F::AttentionMask& mask = {},
                             bool need_weights = false) const;
  std::shared_ptr<AttentionScaling> scaling;

 private:
  int64_t d_k_;
  double dropout_;
};

enum class ProjectionLayout {
  Separate,  // q_proj, k_proj, v_proj: three (C, C) projections split into heads
  FusedQKV,  // qkv_proj: one (3C, C) projection (rows: q, k, v) split into heads
  PerHead,   // heads.i.{q,k,v}_proj: independent (d_head, C) projections per head (seed 003 sec. 3.2.1)
};
const char* projection_layout_name(ProjectionLayout layout);

struct MultiHeadAttentionOptions {
  int64_t d_model = 0;
  int64_t heads = 1;
  ProjectionLayout layout = ProjectionLayout::Separate;
  bool shared_kv = false;  // one projection for K and V (seed 003 sec. 5.3)
  bool bias = true;
  double dropout = 0.0;  // on the attention weights, training only
  AttentionScale scale = AttentionScale::SqrtDk;
  double fixed_scale = 0.0;  // for AttentionScale::Fixed
  int64_t window = -1;       // >= 0: local attention of half-width `window` (seed 001 sec. 6.2)
  // Initialisation (seed 003 sec. 7.1): Xavier-uniform Q/K with this gain (1.0 = PyTorch's
  // default), and an orthogonal output projection when requested.
  double qk_gain = 1.0;
  bool orthogonal_output = false;
};

class MultiHeadAttention : public Module {
 public:
  explicit MultiHeadAttention(const MultiHeadAttentionOptions& options);
  // query (B, T, C), key/value (B, S, C); self-attention passes the same tensor three times.
  // With a cache, key/value are only the new positions (self-attention) or the encoder
  // memory (cross-attention, projected once and kept when cache->is_static).
  F::AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                             const F::AttentionMask& mask = {}, bool need_weights = false,
                             KVCache* cache = nullptr) const;
  F::AttentionResult forward(const Tensor& x, const F::AttentionMask& mask = {}, bool need_weights = false,
                             KVCache* cache = nullptr) const {
    return forward(x, x, x, mask, need_weights, cache);
  }
  const MultiHeadAttentionOptions& options() const { return options_; }
  int64_t d_head() const { return d_head_; }

  // When on, every forward also keeps the (detached) attention weights (B, H, T, S) of its
  // last call, for the diagnostics; the composed attention path is used then.
  void set_record_weights(bool on) { record_weights_ = on; }
  const Tensor& last_weights() const { return last_weights_; }
  // The largest |q.k| (before any scaling) of the last recorded forward, -1 when none was
  // recorded: the doctor's fp16 overflow check.
  double last_max_abs_score() const { return last_max_abs_score_; }
  // The "may attend" mask (bool, broadcastable to last_weights(); undefined = every key) of
  // the last recorded forward: the diagnostics count visible keys from it.
  const Tensor& last_keep() const { return last_keep_; }
  // The additive mask of the last recorded forward (undefined when none).
  const Tensor& last_additive() const { return last_additive_; }
  // The query and key inputs (B, T, C), (B, S, C) of the last recorded forward without a
  // cache (undefined otherwise): the doctor recomputes q.k from them.
  const Tensor& last_query_input() const { return last_query_input_; }
  const Tensor& last_key_input() const { return last_key_input_; }
  // Called with the projected keys and values (B, H, S, d_head) of every forward, after the
  // cache; may replace them. Empty (the default) = nothing happens.
  using KeyValuePerturbation = std::function<void(Tensor& k, Tensor& v)>;
  void set_key_value_perturbation(KeyValuePerturbation perturb) { perturb_key_value_ = std::move(perturb); }
  // (B, L, C) -> per-head (B, H, L, d_head) projections.
  Tensor project_query(const Tensor& x) const;
  std::pair<Tensor, Tensor> project_key_value(const Tensor& key, const Tensor& value) const;

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, kv_proj, qkv_proj, out_proj;
  std::shared_ptr<ModuleList> heads;  // PerHead layout: per-head Modules with q/k/v(kv)_proj
  std::shared_ptr<AttentionScaling> scaling;

 private:
  Tensor split_heads(const Tensor& x) const;  // (B, L, H*dh) -> (B, H, L, dh)

  MultiHeadAttentionOptions options_;
  int64_t d_head_;
  bool record_weights_ = false;
  mutable Tensor last_weights_;
  mutable double last_max_abs_score_ = -1.0;
  mutable Tensor last_keep_, last_additive_, last_query_input_, last_key_input_;
  KeyValuePerturbation perturb_key_value_;
};

// Bahdanau attention (seed 001 sec. 6.1): score(q, k) = v^T tanh(W_q q + W_k k), with
// queries (B, T, Dq), keys (B, S, Dk), values (B, S, Dv); returns (B, T, Dv) and the
// weights (B, T, S).
class AdditiveAttention : public Module {
 public:
  AdditiveAttention(int64_t query_dim, int64_t key_dim, int64_t hidden_dim);
  F::AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                             const F::AttentionMask& mask = {}) const;
  std::shared_ptr<Linear> w_query, w_key;
  Tensor v;  // (hidden)
};

}  // namespace heed::nn
