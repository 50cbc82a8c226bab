// layers/src/attention.cpp — attention modules (see heed/nn/attention.h).
#include "heed/nn/attention.h"

#include <array>
#include <cmath>

#include "heed/autograd.h"
#include "heed/nn/init.h"
#include "heed/ops.h"

namespace heed::nn {

// ---- scale modes ----------------------------------------------------------------------------
//
// One row per AttentionScale: adding a mode is adding a row (and its enum value). A constant
// mode gives the factor the attention function applies to q.k; a learned mode owns per-head
// parameters of shape (H) and rescales q (and k) itself, leaving a factor of 1.

namespace {

// A learnable per-head parameter: its name (the state-dict key, which checkpoints depend on),
// the AttentionScaling member holding it, and its initial value from root = sqrt(d_k).
struct ScaleParameter {
  const char* name = nullptr;  // nullptr: unused slot
  Tensor AttentionScaling::*member = nullptr;
  double (*initial)(double root) = nullptr;
};
constexpr size_t kMaxScaleParameters = 2;

// What a learned mode needs to rescale q and k.
struct ScaleInputs {
  const AttentionScaling& scaling;  // its parameters (alpha, beta, tau)
  double root;                      // sqrt(d_k)
  Dims per_head_shape;              // (H, 1, 1), or all 1s for a single head

  // A (H) parameter broadcast over (..., H, L, d_k), in `dtype`.
  Tensor per_head(const Tensor& p, DType dtype) const { return p.view(per_head_shape).to(dtype); }
};

struct ScaleMode {
  AttentionScale mode = AttentionScale::SqrtDk;
  const char* name = "";
  bool parseable = true;          // parse_attention_scale accepts the name (fixed is set from code)
  bool uses_fixed_scale = false;  // the constructor's fixed_scale (must be finite and non-zero)
  std::array<ScaleParameter, kMaxScaleParameters> parameters{};  // registered in this order
  // Constant modes: the factor multiplying q.k; nullptr for learned modes.
  double (*constant)(double root, double fixed_scale) = nullptr;
  // Learned modes: q and k (..., L, d_k) rescaled, and head h's current scale (diagnostics).
  AttentionScaling::Scaled (*rescale)(const Tensor& q, const Tensor& k, const ScaleInputs& in) = nullptr;
  double (*head_scale)(const AttentionScaling& s, int64_t h, double root) = nullptr;
};

// L2-normalises the last dim: x / |x| (the 1e-12 keeps a zero row finite).
Tensor l2_normalize(const Tensor& x) { return x * rsqrt(sum(x * x, {-1}, true) + 1e-12); }

// Rows in the order parse_attention_scale lists them in its error message.
const ScaleMode kScaleModes[] = {
    {.mode = AttentionScale::SqrtDk, .name = "sqrt_dk", .constant = [](double root, double) { return 1.0 / root; }},
    {.mode = AttentionScale::None, .name = "none", .constant = [](double, double) { return 1.0; }},
    {.mode = AttentionScale::Learnable,
     .name = "learnable",
     .parameters = {{{"alpha", &AttentionScaling::alpha, [](double root) { return 1.0 / root; }}}},
     // q * alpha (alpha per head)
     .rescale = [](const Tensor& q, const Tensor& k, const ScaleInputs& in) -> AttentionScaling::Scaled {
       return {q * in.per_head(in.scaling.alpha, q.dtype()), k, 1.0};
     },
     .head_scale = [](const AttentionScaling& s, int64_t h, double) { return s.alpha.at<double>({h}); }},
    {.mode = AttentionScale::Affine,
     .name = "affine",
     .parameters = {{{"alpha", &AttentionScaling::alpha, [](double) { return 1.0; }},
                     {"beta", &AttentionScaling::beta, [](double) { return 0.0; }}}},
     // q / (alpha * sqrt(d_k) + beta), the (H) denominator inverted before broadcasting
     .rescale = [](const Tensor& q, const Tensor& k, const ScaleInputs& in) -> AttentionScaling::Scaled {
       Tensor denominator = in.scaling.alpha * in.root + in.scaling.beta;  // (H)
       return {q * in.per_head(rdiv_scalar(denominator, 1.0), q.dtype()), k, 1.0};
     },
     .head_scale = [](const AttentionScaling& s, int64_t h,
                      double root) { return 1.0 / (s.alpha.at<double>({h}) * root + s.beta.at<double>({h})); }},
    {.mode = AttentionScale::Cosine,
     .name = "cosine",
     .parameters = {{{"tau", &AttentionScaling::tau, [](double root) { return root; }}}},
     // (q / |q|) * tau and k / |k|: tau times the cosine similarity
     .rescale = [](const Tensor& q, const Tensor& k, const ScaleInputs& in) -> AttentionScaling::Scaled {
       return {l2_normalize(q) * in.per_head(in.scaling.tau, q.dtype()), l2_normalize(k), 1.0};
     },
     .head_scale = [](const AttentionScaling& s, int64_t h, double) { return s.tau.at<double>({h}); }},
    {.mode = AttentionScale::Fixed,
     .name = "fixed",
     .parseable = false,
     .uses_fixed_scale = true,
     .constant = [](double, double fixed_scale) { return fixed_scale; }},
};

const ScaleMode* find_scale_mode(AttentionScale mode) {
  for (const ScaleMode& row : kScaleModes)
    if (row.mode == mode) return &row;
  return nullptr;
}

const ScaleMode& scale_mode(AttentionScale mode) {
  const ScaleMode* row = find_scale_mode(mode);
  HEED_CHECK(row != nullptr, "AttentionScaling", "unknown attention scale mode {}", static_cast<int>(mode));
  return *row;
}

// "sqrt_dk, none, learnable, affine or cosine": the parseable names.
std::string parseable_scale_names() {
  std::vector<const char*> names;
  for (const ScaleMode& row : kScaleModes)
    if (row.parseable) names.push_back(row.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

const char* attention_scale_name(AttentionScale scale) {
  const ScaleMode* row = find_scale_mode(scale);
  return row ? row->name : "?";
}

AttentionScale parse_attention_scale(const std::string& text) {
  for (const ScaleMode& row : kScaleModes)
    if (row.parseable && text == row.name) return row.mode;
  fail("parse_attention_scale", "unknown attention scale '{}' (expected {})", text, parseable_scale_names());
}

AttentionScaling::AttentionScaling(AttentionScale mode, int64_t d_k, int64_t heads, double fixed_scale)
    : Module("AttentionScaling"), mode_(mode), d_k_(d_k), heads_(heads), fixed_scale_(fixed_scale) {
  HEED_CHECK(d_k > 0 && heads > 0, "AttentionScaling", "d_k and heads must be positive, got {} and {}", d_k, heads);
  const ScaleMode& row = scale_mode(mode);
  HEED_CHECK(!row.uses_fixed_scale || (std::isfinite(fixed_scale) && fixed_scale != 0.0), "AttentionScaling",
             "a fixed scale must be finite and non-zero, got {}", fixed_scale);
  const double root = std::sqrt(static_cast<double>(d_k));
  for (const ScaleParameter& p : row.parameters)
    if (p.name) this->*p.member = register_parameter(p.name, full({heads}, p.initial(root)));
}

AttentionScaling::Scaled AttentionScaling::apply(const Tensor& q, const Tensor& k) const {
  const char* name = "AttentionScaling";
  HEED_CHECK(q.defined() && k.defined() && q.dim() >= 2 && k.dim() >= 2 && q.size(-1) == d_k_ && k.size(-1) == d_k_,
             name, "expects queries and keys (..., L, {}), got {} and {}", d_k_,
             q.defined() ? shape_str(q.shape()) : "undefined", k.defined() ? shape_str(k.shape()) : "undefined");
  // Per-head parameters (H) broadcast over (..., H, L, d_k) as (H, 1, 1); a single head over
  // inputs of any rank without adding dims.
  const bool per_head_params = alpha.defined() || tau.defined();
  HEED_CHECK(!per_head_params || heads_ == 1 || (q.dim() >= 3 && q.size(-3) == heads_), name,
             "per-head scale parameters for {} heads need queries (..., {}, L, {}), got {}", heads_, heads_, d_k_,
             shape_str(q.shape()));
  const ScaleMode& row = scale_mode(mode_);
  const double root = std::sqrt(static_cast<double>(d_k_));
  if (row.constant) return {q, k, row.constant(root, fixed_scale_)};
  const Dims per_head_shape = heads_ == 1 ? Dims::filled(std::min(q.dim(), 3), 1) : Dims{heads_, 1, 1};
  return row.rescale(q, k, ScaleInputs{*this, root, per_head_shape});
}

std::vector<double> AttentionScaling::effective_scale() const {
  const ScaleMode& row = scale_mode(mode_);
  const double root = std::sqrt(static_cast<double>(d_k_));
  std::vector<double> out(static_cast<size_t>(heads_));
  for (int64_t h = 0; h < heads_; ++h)
    out[h] = row.constant ? row.constant(root, fixed_scale_) : row.head_scale(*this, h, root);
  return out;
}

std::optional<double> AttentionScaling::constant_scale() const {
  const ScaleMode& row = scale_mode(mode_);
  if (!row.constant) return std::nullopt;
  return row.constant(std::sqrt(static_cast<double>(d_k_)), fixed_scale_);
}

void KVCache::reorder(const Tensor& indices) {
  if (!k.defined()) return;
  k = index_select(k, 0, indices);
  v = index_select(v, 0, indices);
}

// ---- single head ----------------------------------------------------------------------------

ScaledDotProductAttention::ScaledDotProductAttention(int64_t d_k, AttentionScale scale, double dropout,
                                                     double fixed_scale)
    : Module("ScaledDotProductAttention"), d_k_(d_k), dropout_(dropout) {
  HEED_CHECK(dropout >= 0.0 && dropout < 1.0, "ScaledDotProductAttention", "dropout must be in [0, 1), got {}",
             dropout);
  scaling = register_module("scaling", std::make_shared<AttentionScaling>(scale, d_k, 1, fixed_scale));
}

F::AttentionResult ScaledDotProductAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const F::AttentionMask& mask, bool need_weights) const {
  // A head dim other than d_k would silently use the wrong scale.
  HEED_CHECK(q.defined() && k.defined() && q.dim() >= 2 && q.size(-1) == d_k_ && k.size(-1) == d_k_,
             "ScaledDotProductAttention", "built for d_k = {}, got queries {} and keys {}", d_k_,
             q.defined() ? shape_str(q.shape()) : "undefined", k.defined() ? shape_str(k.shape()) : "undefined");
  const AttentionScaling::Scaled s = scaling->apply(q, k);
  const double p = is_training() ? dropout_ : 0.0;
  if (need_weights) return F::scaled_dot_product_attention_with_weights(s.q, s.k, v, mask, p, s.scale);
  return {F::scaled_dot_product_attention(s.q, s.k, v, mask, p, s.scale), Tensor()};
}

// ---- multi-head -----------------------------------------------------------------------------

const char* projection_layout_name(ProjectionLayout layout) {
  switch (layout) {
    case ProjectionLayout::Separate:
      return "separate";
    case ProjectionLayout::FusedQKV:
      return "fused_qkv";
    case ProjectionLayout::PerHead:
      return "per_head";
  }
  return "?";
}

namespace {

// The projections of one head in the PerHead layout.
class HeadProjections : public Module {
 public:
  HeadProjections(int64_t d_model, int64_t d_head, bool shared_kv, bool bias) : Module("HeadProjections") {
    q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, d_head, bias));
    if (shared_kv) {
      kv_proj = register_module("kv_proj", std::make_shared<Linear>(d_model, d_head, bias));
    } else {
      k_proj = register_module("k_proj", std::make_shared<Linear>(d_model, d_head, bias));
      v_proj = register_module("v_proj", std::make_shared<Linear>(d_model, d_head, bias));
    }
  }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, kv_proj;
};

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& options)
    : Module("MultiHeadAttention"), options_(options) {
  const int64_t C = options.d_model, H = options.heads;
  HEED_CHECK(C > 0 && H > 0, "MultiHeadAttention", "d_model and heads must be positive, got {} and {}", C, H);
  HEED_CHECK(C % H == 0, "MultiHeadAttention",
             "d_model {} is not divisible by heads {}: d_head = d_model / heads must be an integer", C, H);
  HEED_CHECK(options.dropout >= 0.0 && options.dropout < 1.0, "MultiHeadAttention", "dropout must be in [0, 1), got {}",
             options.dropout);
  d_head_ = C / H;
  const bool kv_shared = options.shared_kv;
  switch (options.layout) {
    case ProjectionLayout::Separate:
      q_proj = register_module("q_proj", std::make_shared<Linear>(C, C, options.bias));
      if (kv_shared) {
        kv_proj = register_module("kv_proj", std::make_shared<Linear>(C, C, options.bias));
      } else {
        k_proj = register_module("k_proj", std::make_shared<Linear>(C, C, options.bias));
        v_proj = register_module("v_proj", std::make_shared<Linear>(C, C, options.bias));
      }
      break;
    case ProjectionLayout::FusedQKV:
      qkv_proj = register_module("qkv_proj", std::make_shared<Linear>(C, (kv_shared ? 2 : 3) * C, options.bias));
      break;
    case ProjectionLayout::PerHead:
      heads = register_module("heads", std::make_shared<ModuleList>());
      for (int64_t h = 0; h < H; ++h)
        heads->push_back(std::make_shared<HeadProjections>(C, d_head_, kv_shared, options.bias));
      break;
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(C, C, options.bias));
  scaling =
      register_module("scaling", std::make_shared<AttentionScaling>(options.scale, d_head_, H, options.fixed_scale));

  // Optional initialisation recipes (seed 003 sec. 7.1).
  if (options.qk_gain > 0.0) {
    NoGradGuard no_grad;
    auto xavier_rows = [&](const Tensor& weight, int64_t row0, int64_t rows) {
      Tensor block = empty({rows, C});
      init::xavier_uniform_(block, options.qk_gain);
      weight.narrow(0, row0, rows).copy_(block);
    };
    switch (options.layout) {
      case ProjectionLayout::Separate:
        init::xavier_uniform_(q_proj->weight, options.qk_gain);
        init::xavier_uniform_(kv_shared ? kv_proj->weight : k_proj->weight, options.qk_gain);
        break;
      case ProjectionLayout::FusedQKV:
        xavier_rows(qkv_proj->weight, 0, C);
        xavier_rows(qkv_proj->weight, C, C);
        break;
      case ProjectionLayout::PerHead:
        for (int64_t h = 0; h < H; ++h) {
          auto head = heads->at<HeadProjections>(static_cast<size_t>(h));
          init::xavier_uniform_(head->q_proj->weight, options.qk_gain);
          init::xavier_uniform_(kv_shared ? head->kv_proj->weight : head->k_proj->weight, options.qk_gain);
        }
        break;
    }
  }
  if (options.orthogonal_output) init::orthogonal_(out_proj->weight);
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), options_.heads, d_head_}).transpose(1, 2);  // (B,H,L,dh)
}

Tensor MultiHeadAttention::project_query(const Tensor& x) const {
  const int64_t C = options_.d_model;
  switch (options_.layout) {
    case ProjectionLayout::Separate:
      return split_heads(q_proj->forward(x));
    case ProjectionLayout::FusedQKV: {
      const Tensor& w = qkv_proj->weight;
      const Tensor b = qkv_proj->bias.defined() ? qkv_proj->bias.narrow(0, 0, C) : Tensor();
      return split_heads(F::linear(x, w.narrow(0, 0, C), b));
    }
    case ProjectionLayout::PerHead: {
      std::vector<Tensor> per_head;
      for (size_t h = 0; h < heads->size(); ++h) per_head.push_back(heads->at<HeadProjections>(h)->q_proj->forward(x));
      return stack(per_head, 1);  // (B,H,L,dh)
    }
  }
  return Tensor();
}

std::pair<Tensor, Tensor> MultiHeadAttention::project_key_value(const Tensor& key, const Tensor& value) const {
  const int64_t C = options_.d_model;
  const bool same = key.is_same(value);
  switch (options_.layout) {
    case ProjectionLayout::Separate: {
      if (options_.shared_kv) {
        Tensor k = split_heads(kv_proj->forward(key));
        return {k, same ? k : split_heads(kv_proj->forward(value))};
      }
      return {split_heads(k_proj->forward(key)), split_heads(v_proj->forward(value))};
    }
    case ProjectionLayout::FusedQKV: {
      const Tensor& w = qkv_proj->weight;
      const Tensor& b = qkv_proj->bias;
      auto rows = [&](const Tensor& x, int64_t row0) {
        return split_heads(F::linear(x, w.narrow(0, row0, C), b.defined() ? b.narrow(0, row0, C) : Tensor()));
      };
      if (options_.shared_kv) {
        Tensor k = rows(key, C);
        return {k, same ? k : rows(value, C)};
      }
      return {rows(key, C), rows(value, 2 * C)};
    }
    case ProjectionLayout::PerHead: {
      std::vector<Tensor> ks, vs;
      for (size_t h = 0; h < heads->size(); ++h) {
        auto head = heads->at<HeadProjections>(h);
        if (options_.shared_kv) {
          ks.push_back(head->kv_proj->forward(key));
          vs.push_back(same ? ks.back() : head->kv_proj->forward(value));
        } else {
          ks.push_back(head->k_proj->forward(key));
          vs.push_back(head->v_proj->forward(value));
        }
      }
      return {stack(ks, 1), stack(vs, 1)};
    }
  }
  return {};
}

F::AttentionResult MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                               const F::AttentionMask& mask, bool need_weights, KVCache* cache) const {
  const char* name = "MultiHeadAttention";
  const int64_t C = options_.d_model;
  for (const Tensor* t : {&query, &key, &value}) {
    HEED_CHECK(t->defined() && t->dim() == 3 && t->size(2) == C, name,
               "expects (B, L, {}) inputs, got query {}, key {}, value {}", C, shape_str(query.shape()),
               key.defined() ? shape_str(key.shape()) : "undefined",
               value.defined() ? shape_str(value.shape()) : "undefined");
  }
  HEED_CHECK(key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == value.size(1), name,
             "batch and key lengths must agree: query {}, key {}, value {}", shape_str(query.shape()),
             shape_str(key.shape()), shape_str(value.shape()));
  const int64_t B = query.size(0), T = query.size(1);

  Tensor q, k, v;
  const bool self_fused = options_.layout == ProjectionLayout::FusedQKV && !options_.shared_kv && query.is_same(key) &&
                          key.is_same(value) && !(cache && cache->is_static);
  // Self-attention with the fused projection, a constant scale and nothing recorded: the
  // packed flash kernel reads q, k, v straight out of the (B,T,3C) projection and returns the
  // merged heads, with no copies in either direction.
  const std::optional<double> constant_scale = scaling->constant_scale();
  if (self_fused && !cache && !need_weights && !record_weights_ && !perturb_key_value_ && constant_scale &&
      F::flash_attention_supported(query, query, query)) {
    F::AttentionMask full_mask = mask;
    if (options_.window >= 0) full_mask.window = options_.window;
    const double p = is_training() ? options_.dropout : 0.0;
    const Tensor merged = F::flash_attention_packed(qkv_proj->forward(query), options_.heads, full_mask, p,
                                                    *constant_scale);  // (B,T,C)
    return {out_proj->forward(merged), Tensor()};
  }
  if (self_fused) {
    // One (B,T,3C) projection split three ways.
    std::vector<Tensor> parts = qkv_proj->forward(query).split(C, 2);
    q = split_heads(parts[0]);
    k = split_heads(parts[1]);
    v = split_heads(parts[2]);
  } else {
    q = project_query(query);
    if (!(cache && cache->is_static && cache->k.defined())) std::tie(k, v) = project_key_value(key, value);
  }
  if (cache) {
    if (cache->k.defined()) {
      HEED_CHECK(cache->k.size(0) == B, name, "the KV cache holds batch {} but the input has batch {}",
                 cache->k.size(0), B);
    }
    if (cache->is_static) {
      if (!cache->k.defined()) {
        cache->k = k;
        cache->v = v;
      }
      k = cache->k;
      v = cache->v;
    } else {
      if (cache->k.defined()) {
        k = cat({cache->k, k}, 2);
        v = cat({cache->v, v}, 2);
      }
      cache->k = k;
      cache->v = v;
    }
  }

  if (perturb_key_value_) perturb_key_value_(k, v);

  F::AttentionMask full_mask = mask;
  if (options_.window >= 0) full_mask.window = options_.window;
  const AttentionScaling::Scaled s = scaling->apply(q, k);
  const double p = is_training() ? options_.dropout : 0.0;
  F::AttentionResult r;
  if (need_weights || record_weights_) {
    r = F::scaled_dot_product_attention_with_weights(s.q, s.k, v, full_mask, p, s.scale);
    if (record_weights_) {
      last_weights_ = r.weights.detach();
      NoGradGuard no_grad;
      last_keep_ = F::attention_keep_mask(full_mask, r.weights.shape(), r.weights.device(), name);
      last_additive_ = full_mask.additive.defined() ? full_mask.additive.detach() : Tensor();
      last_query_input_ = cache ? Tensor() : query.detach();
      last_key_input_ = cache ? Tensor() : key.detach();
      last_max_abs_score_ = max(abs(matmul(q.detach(), k.detach().transpose(-1, -2)))).item<double>();
    }
    if (!need_weights) r.weights = Tensor();
  } else {
    r.output = F::scaled_dot_product_attention(s.q, s.k, v, full_mask, p, s.scale);
  }
  // (B,H,T,dh) -> (B,T,C)
  r.output = out_proj->forward(r.output.transpose(1, 2).reshape({B, T, C}));
  return r;
}

// ---- additive attention ---------------------------------------------------------------------

AdditiveAttention::AdditiveAttention(int64_t query_dim, int64_t key_dim, int64_t hidden_dim)
    : Module("AdditiveAttention") {
  w_query = register_module("w_query", std::make_shared<Linear>(query_dim, hidden_dim, false));
  w_key = register_module("w_key", std::make_shared<Linear>(key_dim, hidden_dim, true));
  v = register_parameter("v", empty({hidden_dim}));
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_dim));
  init::uniform_(v, -bound, bound);
}

F::AttentionResult AdditiveAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                              const F::AttentionMask& mask) const {
  const char* name = "AdditiveAttention";
  HEED_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, name,
             "expects (B, T, Dq) queries and (B, S, D) keys/values, got {}, {}, {}", shape_str(query.shape()),
             shape_str(key.shape()), shape_str(value.shape()));
  HEED_CHECK(key.size(1) == value.size(1) && key.size(0) == query.size(0) && value.size(0) == query.size(0), name,
             "batch and key lengths must agree: query {}, key {}, value {}", shape_str(query.shape()),
             shape_str(key.shape()), shape_str(value.shape()));
  Tensor wq = w_query->forward(query).unsqueeze(2);  // (B,T,1,A)
  Tensor wk = w_key->forward(key).unsqueeze(1);      // (B,1,S,A)
  Tensor scores = matmul(tanh(wq + wk), v);          // (B,T,S)
  if (mask.additive.defined()) {
    F::check_additive_mask(mask.additive, scores.shape(), name);
    scores = scores + mask.additive;
  }
  const Tensor keep = F::attention_keep_mask(mask, scores.shape(), scores.device(), name);
  if (keep.defined()) scores = masked_fill(scores, logical_not(keep), -INFINITY);
  Tensor weights = F::softmax(scores, -1);
  return {matmul(weights, value), weights};
}

}  // namespace heed::nn
