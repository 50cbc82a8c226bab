// tests/layers_reference.h — plain float64 loop references for the layer tests (test_layers,
// test_attention, test_transformer): linear, layer norm, activations, masked softmax
// attention with every scale mode, multi-head attention computed from a module's own
// weights (all projection layouts, shared K/V), feed-forward and the Transformer encoder and
// decoder layers (pre-LN and post-LN).
//
// The second namespace, layers_testing, holds the doctest helpers the three files share
// (closeness checks, gradcheck and error-message expectations).
//
// Invariants: nothing in layers_reference calls a heed op. Tensors are read out with
// to_vector<double>() (row-major) and every result is computed with loops over std::vector<double>;
// a fully masked attention row gives zero weights and a zero output, as heed/attention.h promises.
#pragma once

#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace layers_reference {

using Values = std::vector<double>;

inline Values values(const heed::Tensor& t) { return t.to_vector<double>(); }

// A module's parameters by dotted name.
using ParamMap = std::map<std::string, heed::Tensor>;
inline ParamMap params_of(const heed::nn::Module& module) {
  ParamMap out;
  for (const auto& [name, tensor] : module.named_parameters()) out[name] = tensor;
  return out;
}
inline bool has_param(const ParamMap& params, const std::string& name) { return params.count(name) > 0; }
inline Values param(const ParamMap& params, const std::string& name) {
  auto it = params.find(name);
  if (it == params.end()) throw std::runtime_error("layers_reference: no parameter " + name);
  return values(it->second);
}
// The parameter if present, else an empty vector (no bias / no affine).
inline Values optional_param(const ParamMap& params, const std::string& name) {
  return has_param(params, name) ? param(params, name) : Values();
}

// Deterministic pseudo-random values uniform in [-scale, scale) from a 64-bit LCG, so test
// inputs do not depend on heed's generator.
inline Values random_values(size_t n, uint64_t seed, double scale = 1.0) {
  Values out(n);
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double unit = static_cast<double>(state >> 11) / 9007199254740992.0;  // [0, 1)
    out[i] = (2.0 * unit - 1.0) * scale;
  }
  return out;
}

// ---- basic layers ----------------------------------------------------------------------------

// x (rows, in), w (out, in), b (out) or empty -> (rows, out).
inline Values linear(const Values& x, int64_t in, const Values& w, const Values& b, int64_t out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  Values y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// Normalises each row of C values (biased variance); w, b empty = no affine.
inline Values layer_norm(const Values& x, int64_t C, const Values& w, const Values& b, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / C;
  Values y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= static_cast<double>(C);
    double var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      double v = (x[r * C + c] - mean) / std::sqrt(var + eps);
      if (!w.empty()) v *= w[c];
      if (!b.empty()) v += b[c];
      y[r * C + c] = v;
    }
  }
  return y;
}

inline double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double activate(double x, heed::nn::Activation a) {
  switch (a) {
    case heed::nn::Activation::ReLU:
      return x > 0 ? x : 0.0;
    case heed::nn::Activation::GELU:
      return gelu_erf(x);
    case heed::nn::Activation::GELUTanh:
      return gelu_tanh(x);
  }
  return x;
}

// fc2(act(fc1(x))) with the weights of a FeedForward at `prefix` ("ff.").
inline Values feed_forward(const ParamMap& p, const std::string& prefix, const Values& x, int64_t C, int64_t d_ff,
                           heed::nn::Activation act) {
  Values h = linear(x, C, param(p, prefix + "fc1.weight"), optional_param(p, prefix + "fc1.bias"), d_ff);
  for (double& v : h) v = activate(v, act);
  return linear(h, d_ff, param(p, prefix + "fc2.weight"), optional_param(p, prefix + "fc2.bias"), C);
}

// ---- attention -------------------------------------------------------------------------------

// Which keys a query may attend (heed/attention.h semantics; queries bottom-right aligned).
struct MaskSpec {
  bool causal = false;
  int64_t window = -1;
  std::vector<int64_t> key_lengths;                                            // (B) or empty
  std::vector<bool> key_padding;                                               // (B*S), true = padding
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> keep;        // or empty
  std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)> additive;  // or empty

  bool allowed(int64_t b, int64_t h, int64_t i, int64_t j, int64_t T, int64_t S) const {
    const int64_t query_position = i + S - T;
    if (causal && j > query_position) return false;
    if (window >= 0 && std::abs(query_position - j) > window) return false;
    if (!key_lengths.empty() && j >= key_lengths[b]) return false;
    if (!key_padding.empty() && key_padding[b * S + j]) return false;
    if (keep && !keep(b, h, i, j)) return false;
    return true;
  }
};

// How a head turns q, k (D values each) into a score.
struct ScaleSpec {
  heed::nn::AttentionScale mode = heed::nn::AttentionScale::SqrtDk;
  double fixed = 0.0;
  Values alpha, beta, tau;  // per head, for the learnable modes

  double score(const double* q, const double* k, int64_t D, int64_t head) const {
    double dot = 0, qq = 0, kk = 0;
    for (int64_t d = 0; d < D; ++d) {
      dot += q[d] * k[d];
      qq += q[d] * q[d];
      kk += k[d] * k[d];
    }
    const double root = std::sqrt(static_cast<double>(D));
    switch (mode) {
      case heed::nn::AttentionScale::SqrtDk:
        return dot / root;
      case heed::nn::AttentionScale::None:
        return dot;
      case heed::nn::AttentionScale::Fixed:
        return dot * fixed;
      case heed::nn::AttentionScale::Learnable:
        return dot * alpha[head];
      case heed::nn::AttentionScale::Affine:
        return dot / (alpha[head] * root + beta[head]);
      case heed::nn::AttentionScale::Cosine:
        return tau[head] * dot / (std::sqrt(qq + 1e-12) * std::sqrt(kk + 1e-12));
    }
    return dot;
  }
};

// One (batch, head) slice: q (T,D), k (S,D), v (S,Dv) -> out (T,Dv); weights (T,S) if asked.
inline Values attend(const double* q, const double* k, const double* v, int64_t T, int64_t S, int64_t D, int64_t Dv,
                     int64_t b, int64_t h, const ScaleSpec& scale, const MaskSpec& mask, Values* weights) {
  Values out(static_cast<size_t>(T * Dv), 0.0);
  if (weights) weights->assign(static_cast<size_t>(T * S), 0.0);
  for (int64_t i = 0; i < T; ++i) {
    Values s(static_cast<size_t>(S));
    double max_score = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < S; ++j) {
      s[j] = scale.score(q + i * D, k + j * D, D, h);
      if (mask.additive) s[j] += mask.additive(b, h, i, j);
      if (!mask.allowed(b, h, i, j, T, S)) s[j] = -std::numeric_limits<double>::infinity();
      max_score = std::max(max_score, s[j]);
    }
    if (std::isinf(max_score) && max_score < 0) continue;  // every key masked: zeros
    double total = 0;
    for (int64_t j = 0; j < S; ++j) total += std::exp(s[j] - max_score);
    for (int64_t j = 0; j < S; ++j) {
      const double w = std::exp(s[j] - max_score) / total;
      if (weights) (*weights)[i * S + j] = w;
      for (int64_t d = 0; d < Dv; ++d) out[i * Dv + d] += w * v[j * Dv + d];
    }
  }
  return out;
}

// Batched attention over (N, T, D) queries, (N, S, D) keys, (N, S, Dv) values where N = B*H
// (row n is batch n / H, head n % H). Returns (N, T, Dv); weights (N, T, S) if asked.
inline Values attention(const Values& q, const Values& k, const Values& v, int64_t B, int64_t H, int64_t T, int64_t S,
                        int64_t D, int64_t Dv, const ScaleSpec& scale, const MaskSpec& mask,
                        Values* weights = nullptr) {
  Values out(static_cast<size_t>(B * H * T * Dv));
  if (weights) weights->assign(static_cast<size_t>(B * H * T * S), 0.0);
  for (int64_t n = 0; n < B * H; ++n) {
    Values w;
    Values o = attend(q.data() + n * T * D, k.data() + n * S * D, v.data() + n * S * Dv, T, S, D, Dv, n / H, n % H,
                      scale, mask, weights ? &w : nullptr);
    std::copy(o.begin(), o.end(), out.begin() + n * T * Dv);
    if (weights) std::copy(w.begin(), w.end(), weights->begin() + n * T * S);
  }
  return out;
}

// The per-head projections of a MultiHeadAttention, read from its parameters whatever the
// layout: head h uses rows [h*dh, (h+1)*dh) of the (C, C) projections.
struct MhaWeights {
  int64_t C = 0, H = 0, dh = 0;
  std::vector<Values> wq, bq, wk, bk, wv, bv;  // per head: (dh, C) and (dh) or empty
  Values wo, bo;                               // (C, C), (C) or empty
  ScaleSpec scale;
};

inline Values rows_of(const Values& w, int64_t row0, int64_t rows, int64_t cols) {
  return Values(w.begin() + row0 * cols, w.begin() + (row0 + rows) * cols);
}
inline Values rows_or_empty(const Values& b, int64_t row0, int64_t rows) {
  return b.empty() ? Values() : rows_of(b, row0, rows, 1);
}

inline MhaWeights mha_weights(const ParamMap& p, const std::string& prefix,
                              const heed::nn::MultiHeadAttentionOptions& o) {
  using heed::nn::ProjectionLayout;
  MhaWeights m;
  m.C = o.d_model;
  m.H = o.heads;
  m.dh = m.C / m.H;
  const int64_t C = m.C, dh = m.dh;
  for (int64_t h = 0; h < m.H; ++h) {
    Values wq, bq, wk, bk, wv, bv;
    switch (o.layout) {
      case ProjectionLayout::Separate: {
        wq = rows_of(param(p, prefix + "q_proj.weight"), h * dh, dh, C);
        bq = rows_or_empty(optional_param(p, prefix + "q_proj.bias"), h * dh, dh);
        const std::string k_name = o.shared_kv ? "kv_proj" : "k_proj";
        const std::string v_name = o.shared_kv ? "kv_proj" : "v_proj";
        wk = rows_of(param(p, prefix + k_name + ".weight"), h * dh, dh, C);
        bk = rows_or_empty(optional_param(p, prefix + k_name + ".bias"), h * dh, dh);
        wv = rows_of(param(p, prefix + v_name + ".weight"), h * dh, dh, C);
        bv = rows_or_empty(optional_param(p, prefix + v_name + ".bias"), h * dh, dh);
        break;
      }
      case ProjectionLayout::FusedQKV: {
        const Values w = param(p, prefix + "qkv_proj.weight");
        const Values b = optional_param(p, prefix + "qkv_proj.bias");
        const int64_t v_block = o.shared_kv ? 1 : 2;  // shared: K and V both use rows [C, 2C)
        wq = rows_of(w, h * dh, dh, C);
        bq = rows_or_empty(b, h * dh, dh);
        wk = rows_of(w, C + h * dh, dh, C);
        bk = rows_or_empty(b, C + h * dh, dh);
        wv = rows_of(w, v_block * C + h * dh, dh, C);
        bv = rows_or_empty(b, v_block * C + h * dh, dh);
        break;
      }
      case ProjectionLayout::PerHead: {
        const std::string head = prefix + "heads." + std::to_string(h) + ".";
        const std::string k_name = o.shared_kv ? "kv_proj" : "k_proj";
        const std::string v_name = o.shared_kv ? "kv_proj" : "v_proj";
        wq = param(p, head + "q_proj.weight");
        bq = optional_param(p, head + "q_proj.bias");
        wk = param(p, head + k_name + ".weight");
        bk = optional_param(p, head + k_name + ".bias");
        wv = param(p, head + v_name + ".weight");
        bv = optional_param(p, head + v_name + ".bias");
        break;
      }
    }
    m.wq.push_back(wq);
    m.bq.push_back(bq);
    m.wk.push_back(wk);
    m.bk.push_back(bk);
    m.wv.push_back(wv);
    m.bv.push_back(bv);
  }
  m.wo = param(p, prefix + "out_proj.weight");
  m.bo = optional_param(p, prefix + "out_proj.bias");
  m.scale.mode = o.scale;
  m.scale.fixed = o.fixed_scale;
  m.scale.alpha = optional_param(p, prefix + "scaling.alpha");
  m.scale.beta = optional_param(p, prefix + "scaling.beta");
  m.scale.tau = optional_param(p, prefix + "scaling.tau");
  return m;
}

// query (B,T,C), key/value (B,S,C) -> (B,T,C); weights (B,H,T,S) if asked.
inline Values multi_head_attention(const MhaWeights& m, const Values& query, const Values& key, const Values& value,
                                   int64_t B, int64_t T, int64_t S, const MaskSpec& mask, Values* weights = nullptr) {
  const int64_t C = m.C, H = m.H, dh = m.dh;
  Values q(static_cast<size_t>(B * H * T * dh)), k(static_cast<size_t>(B * H * S * dh)),
      v(static_cast<size_t>(B * H * S * dh));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Values qb(query.begin() + b * T * C, query.begin() + (b + 1) * T * C);
      const Values kb(key.begin() + b * S * C, key.begin() + (b + 1) * S * C);
      const Values vb(value.begin() + b * S * C, value.begin() + (b + 1) * S * C);
      const Values qh = linear(qb, C, m.wq[h], m.bq[h], dh);  // (T,dh)
      const Values kh = linear(kb, C, m.wk[h], m.bk[h], dh);  // (S,dh)
      const Values vh = linear(vb, C, m.wv[h], m.bv[h], dh);  // (S,dh)
      std::copy(qh.begin(), qh.end(), q.begin() + (b * H + h) * T * dh);
      std::copy(kh.begin(), kh.end(), k.begin() + (b * H + h) * S * dh);
      std::copy(vh.begin(), vh.end(), v.begin() + (b * H + h) * S * dh);
    }
  const Values heads = attention(q, k, v, B, H, T, S, dh, dh, m.scale, mask, weights);
  // (B,H,T,dh) -> (B,T,C)
  Values merged(static_cast<size_t>(B * T * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < dh; ++d) merged[(b * T + t) * C + h * dh + d] = heads[((b * H + h) * T + t) * dh + d];
  return linear(merged, C, m.wo, m.bo, C);
}

inline Values add(const Values& a, const Values& b) {
  Values out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// A TransformerEncoderLayer at `prefix` on x (B,T,C).
inline Values encoder_layer(const ParamMap& p, const std::string& prefix, const heed::nn::TransformerLayerOptions& o,
                            const Values& x, int64_t B, int64_t T, const MaskSpec& mask) {
  heed::nn::MultiHeadAttentionOptions a = o.attention;
  a.d_model = o.d_model;
  a.heads = o.heads;
  a.bias = o.bias;
  const MhaWeights attn = mha_weights(p, prefix + "self_attn.", a);
  MaskSpec m = mask;
  if (a.window >= 0) m.window = a.window;
  const int64_t C = o.d_model;
  auto norm = [&](const std::string& name, const Values& v) {
    return layer_norm(v, C, optional_param(p, prefix + name + ".weight"), optional_param(p, prefix + name + ".bias"),
                      o.layer_norm_eps);
  };
  auto ff = [&](const Values& v) { return feed_forward(p, prefix + "ff.", v, C, o.d_ff, o.activation); };
  if (o.norm_first) {
    const Values h = norm("norm1", x);
    const Values y = add(x, multi_head_attention(attn, h, h, h, B, T, T, m));
    return add(y, ff(norm("norm2", y)));
  }
  const Values y = norm("norm1", add(x, multi_head_attention(attn, x, x, x, B, T, T, m)));
  return norm("norm2", add(y, ff(y)));
}

// A TransformerDecoderLayer at `prefix` on x (B,T,C) with memory (B,S,C).
inline Values decoder_layer(const ParamMap& p, const std::string& prefix, const heed::nn::TransformerLayerOptions& o,
                            const Values& x, const Values& memory, int64_t B, int64_t T, int64_t S,
                            const MaskSpec& self_mask, const MaskSpec& memory_mask) {
  heed::nn::MultiHeadAttentionOptions a = o.attention;
  a.d_model = o.d_model;
  a.heads = o.heads;
  a.bias = o.bias;
  const MhaWeights self_attn = mha_weights(p, prefix + "self_attn.", a);
  const MhaWeights cross_attn = mha_weights(p, prefix + "cross_attn.", a);
  MaskSpec sm = self_mask, mm = memory_mask;
  if (a.window >= 0) sm.window = mm.window = a.window;
  const int64_t C = o.d_model;
  auto norm = [&](const std::string& name, const Values& v) {
    return layer_norm(v, C, optional_param(p, prefix + name + ".weight"), optional_param(p, prefix + name + ".bias"),
                      o.layer_norm_eps);
  };
  auto ff = [&](const Values& v) { return feed_forward(p, prefix + "ff.", v, C, o.d_ff, o.activation); };
  if (o.norm_first) {
    const Values h = norm("norm1", x);
    const Values y = add(x, multi_head_attention(self_attn, h, h, h, B, T, T, sm));
    const Values hy = norm("norm2", y);
    const Values z = add(y, multi_head_attention(cross_attn, hy, memory, memory, B, T, S, mm));
    return add(z, ff(norm("norm3", z)));
  }
  const Values y = norm("norm1", add(x, multi_head_attention(self_attn, x, x, x, B, T, T, sm)));
  const Values z = norm("norm2", add(y, multi_head_attention(cross_attn, y, memory, memory, B, T, S, mm)));
  return norm("norm3", add(z, ff(z)));
}

// Largest |a - b| / (atol + rtol |b|) over the elements: <= 1 means every element is close.
inline double closeness(const Values& actual, const Values& expected, double rtol, double atol) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (std::isnan(err)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, err / (atol + rtol * std::fabs(expected[i])));
  }
  return worst;
}

inline double max_abs_diff(const Values& a, const Values& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace layers_reference

namespace layers_testing {

using layers_reference::Values;

inline heed::Tensor to_tensor(const Values& v, const heed::Dims& shape, heed::DType dtype = heed::kFloat64) {
  return heed::from_vector(v, shape, dtype);
}

// CHECKs that every element of `actual` is within atol + rtol |expected|.
inline void check_close(const Values& actual, const Values& expected, double rtol, double atol,
                        const std::string& what = "") {
  REQUIRE_MESSAGE(actual.size() == expected.size(),
                  what << ": " << actual.size() << " values, expected " << expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= atol + rtol * std::fabs(expected[i]))) {
      FAIL_CHECK(what << ": element " << i << " is " << actual[i] << ", expected " << expected[i] << " (|error| " << err
                      << ")");
      return;
    }
  }
}
inline void check_close(const heed::Tensor& actual, const Values& expected, double rtol, double atol,
                        const std::string& what = "") {
  check_close(actual.to_vector<double>(), expected, rtol, atol, what);
}

// CHECKs heed::gradcheck passes, reporting its worst entry otherwise.
inline void expect_gradcheck(const heed::GradcheckFn& fn, const std::vector<heed::Tensor>& inputs,
                             const heed::GradcheckOptions& options = {}) {
  const heed::GradcheckResult r = heed::gradcheck(fn, inputs, options);
  CHECK_MESSAGE(r.passed, r.message);
}

// CHECKs that `body` throws heed::Error whose message contains every one of `needles`.
template <typename Body>
void expect_error(Body&& body, std::initializer_list<std::string> needles) {
  try {
    body();
    FAIL_CHECK("expected a heed::Error mentioning " << *needles.begin());
  } catch (const heed::Error& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles)
      CHECK_MESSAGE(message.find(needle) != std::string::npos,
                    "message '" << message << "' does not mention '" << needle << "'");
  }
}

}  // namespace layers_testing
