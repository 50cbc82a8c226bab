// layers/src/doctor.cpp — the attention troubleshooting checks (see heed/doctor.h).
//
// Invariants: every number comes from a forward/backward pass on the subject's batch; the
// cause table below is the one place that maps a cause to its title, fix and section; the
// scope guard in run_checks restores the model and the RNG on every exit path.
#include "heed/doctor.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/ranges.h>

#include "heed/autograd.h"
#include "heed/diagnostics.h"
#include "heed/functional.h"
#include "heed/ops.h"
#include "heed/random.h"

namespace heed::doctor {

namespace {

struct CauseInfo {
  const char* id;
  int rank;  // lower = more likely the root of other symptoms
  const char* title;
  const char* fix;
  const char* section;
};

// The documents' troubleshooting, one row per cause.
constexpr CauseInfo kCauses[] = {
    {"nan_parameters", 0, "NaN/Inf in the parameters",
     "restore the last good checkpoint, lower the learning rate, clip gradients (max_norm=1.0), check mixed-precision "
     "overflow",
     "seed 003 sec. 8.2"},
    {"nan_attention", 0, "NaN/Inf in the attention weights",
     "check the numerical stability of the softmax input (subtract the row max, scores in fp32, no -inf mask in "
     "fp16); clip gradients (max_norm=1.0)",
     "seed 003 sec. 8.2, seed 001 sec. 4.3"},
    {"nan_activations", 0, "NaN/Inf in outputs, loss or gradients",
     "enable anomaly detection to find the op; look for log(0), division by zero, -inf masks in fp16; clip gradients",
     "seed 003 sec. 8.2, seed 001 sec. 4.3"},
    {"kernel_scale", 1, "the attention kernel applies another scale than the layer asks for",
     "the kernel scales q.k wrongly: compare it with the composed reference softmax(q k^T / sqrt(d_k)) v and fix it",
     "seed 000 sec. 1-2"},
    {"kernel_mismatch", 1, "the fused attention kernel disagrees with the reference path",
     "the fused kernel computes something else than softmax(q k^T * scale) v: test it against the composed path",
     "seed 000 sec. 10"},
    {"no_scale", 1, "scores are not scaled", "divide q.k by sqrt(d_k) before the softmax", "seed 000 sec. 1-2"},
    {"scale_d_model", 1, "the scale uses d_model instead of d_k",
     "scale by 1/sqrt(d_k) with d_k = d_model / heads, not 1/sqrt(d_model)", "seed 000 sec. 8"},
    {"causal_mask", 2, "future tokens leak into earlier positions",
     "fix the causal mask (lower triangle, masked with -inf before the softmax)", "seed 003 sec. 1.1, 8.3"},
    {"padding_mask", 2, "padded keys leak into the outputs",
     "verify the mask generation: mark the padded keys (key_padding / key_lengths) in every attention layer that reads "
     "them",
     "seed 003 sec. 8.3"},
    {"kv_cache", 2, "the KV cache gives other outputs than the full forward pass",
     "check the cache logic: positions, the concatenation axis and the mask offset", "seed 003 sec. 8.3"},
    {"dropout_eval", 2, "dropout is active in eval mode",
     "call model.eval() before inference and pass training=false to F::dropout", "seed 003 sec. 2.2, 8.3"},
    {"head_gradient", 3, "one head's gradient explodes",
     "clip gradients by global norm (max_norm=1.0) and check the numerical stability of that head's softmax input and "
     "its projections",
     "seed 003 sec. 8.2"},
    {"saturated_softmax", 3, "softmax saturated: attention is one-hot",
     "make sure the 1/sqrt(d_k) scale is applied, add a temperature to soften the softmax, check the key norms and "
     "normalise q and k",
     "seed 001 sec. 5.2, seed 000 sec. 2"},
    {"uniform_attention", 3, "attention is uniform (weights ~ 1/L)",
     "check the Q/K initialisation range (Xavier), the scale (d_k, not d_model) and the embedding norm; add "
     "LayerNorm; break a Q/K symmetry with a bias",
     "seed 001 sec. 5.1, seed 003 sec. 8.1"},
    {"exploding_gradients", 4, "exploding gradients",
     "clip gradients by global norm (max_norm=1.0), lower the learning rate, check the initialisation",
     "seed 003 sec. 8.2"},
    {"vanishing_gradients", 4, "vanishing gradients",
     "check softmax saturation (scale), the initialisation, residual connections and LayerNorm", "seed 001 sec. 5.3"},
    {"init_range", 5, "Q/K/V weights far from their initialisation range",
     "initialise Q/K/V with Xavier (gain 1, or a small gain for Q/K) and check what scaled them since",
     "seed 003 sec. 7.1, 8.1, seed 000 sec. 7"},
    {"qk_symmetric", 5, "identical Q and K projections make QK^T symmetric",
     "initialise Q and K independently and add a bias to break the symmetry", "seed 003 sec. 8.1"},
    {"embedding_norm", 5, "embedding norms far from healthy",
     "vectors with a tiny norm make attention uniform, huge ones make it sharp: check the embedding initialisation "
     "and add LayerNorm",
     "seed 001 sec. 5.1-5.2"},
    {"score_range", 6, "the spread of the scaled scores explains the attention's sharpness",
     "the scaled score spread is tau * |q| |k| cos(q, k): see the key norms and the q-k angle",
     "seed 001 sec. 5.1-5.2"},
    {"learned_scale", 6, "a learned scale is far from 1/sqrt(d_k)",
     "check the learning rate and initialisation of the scale parameters", "seed 000 sec. 5"},
    {"fp16_overflow", 6, "scores could overflow in fp16",
     "compute scores and softmax in fp32 under fp16, scale q before the product, check the initialisation",
     "seed 003 sec. 7.2, seed 000 sec. 8"},
    {"small_head_dim", 7, "d_head below 64 limits what one head can express",
     "prefer d_head = d_model / heads >= 64 (fewer heads or a larger d_model)", "seed 003 sec. 3.3"},
};

const CauseInfo* cause_info(const std::string& id) {
  for (const CauseInfo& c : kCauses)
    if (id == c.id) return &c;
  return nullptr;
}

std::string num(double v) {
  if (!std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3f}", v);
}

// Appends a finding whose fix and section come from the cause table.
void add(Report* r, std::string check, std::string where, std::string measured, std::string healthy, Verdict verdict,
         const std::string& cause) {
  const CauseInfo* info = cause_info(cause);
  HEED_CHECK(cause.empty() || info, "doctor", "unknown cause '{}'", cause);
  r->findings.push_back({std::move(check), std::move(where), std::move(measured), std::move(healthy), verdict, cause,
                         info ? info->fix : "", info ? info->section : ""});
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok:
      return "ok";
    case Verdict::Info:
      return "info";
    case Verdict::Warn:
      return "warn";
    case Verdict::Fail:
      return "FAIL";
  }
  return "?";
}

// ---- report ---------------------------------------------------------------------------------

bool Report::failed() const { return count(Verdict::Fail) > 0; }

int Report::count(Verdict v) const {
  int n = 0;
  for (const Finding& f : findings) n += f.verdict == v;
  return n;
}

Verdict Report::overall() const {
  Verdict worst = Verdict::Ok;
  for (const Finding& f : findings) worst = std::max(worst, f.verdict);
  return worst;
}

Verdict Report::verdict_of(const std::string& cause) const {
  Verdict worst = Verdict::Ok;
  for (const Finding& f : findings)
    if (f.cause == cause) worst = std::max(worst, f.verdict);
  return worst;
}

std::vector<RootCause> Report::root_causes() const {
  std::vector<RootCause> causes;
  for (const Finding& f : findings) {
    if (f.verdict < Verdict::Warn || f.cause.empty()) continue;
    auto it = std::find_if(causes.begin(), causes.end(), [&](const RootCause& c) { return c.cause == f.cause; });
    if (it == causes.end()) {
      const CauseInfo* info = cause_info(f.cause);
      causes.push_back({f.cause, info ? info->title : f.cause, f.fix, f.section, f.verdict, {}});
      it = causes.end() - 1;
    }
    it->verdict = std::max(it->verdict, f.verdict);
    if (std::find(it->where.begin(), it->where.end(), f.where) == it->where.end()) it->where.push_back(f.where);
  }
  // Name the places that gave the cause its verdict (the failing layers, not the warning heads).
  for (RootCause& c : causes) {
    c.where.clear();
    for (const Finding& f : findings)
      if (f.cause == c.cause && f.verdict == c.verdict &&
          std::find(c.where.begin(), c.where.end(), f.where) == c.where.end())
        c.where.push_back(f.where);
  }
  auto rank = [](const RootCause& c) {
    const CauseInfo* info = cause_info(c.cause);
    return info ? info->rank : 99;
  };
  std::stable_sort(causes.begin(), causes.end(), [&](const RootCause& a, const RootCause& b) {
    if (a.verdict != b.verdict) return a.verdict > b.verdict;
    return rank(a) < rank(b);
  });
  return causes;
}

std::string Report::table(bool verbose) const {
  // Collapse healthy rows of the same check (and info rows with the same reading) into one.
  std::vector<Finding> rows;
  if (verbose) {
    rows = findings;
  } else {
    std::map<std::string, size_t> collapsed;  // key -> index into rows
    std::map<std::string, int> seen;
    for (const Finding& f : findings)
      if (f.verdict <= Verdict::Info) ++seen[f.check + '\x1f' + (f.verdict == Verdict::Info ? f.measured : "")];
    for (const Finding& f : findings) {
      const std::string key = f.check + '\x1f' + (f.verdict == Verdict::Info ? f.measured : "");
      if (f.verdict > Verdict::Info || seen[key] < 2) {
        rows.push_back(f);
        continue;
      }
      if (collapsed.count(key)) continue;
      collapsed[key] = rows.size();
      Finding row = f;
      row.where = fmt::format("{} places", seen[key]);
      if (f.verdict == Verdict::Ok) row.measured = "all within the healthy range";
      rows.push_back(row);
    }
  }
  size_t w_check = 5, w_where = 5, w_measured = 8, w_healthy = 7;
  for (const Finding& f : rows) {
    w_check = std::max(w_check, f.check.size());
    w_where = std::max(w_where, f.where.size());
    w_measured = std::max(w_measured, f.measured.size());
    w_healthy = std::max(w_healthy, f.healthy.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", "check", w_check, "where", w_where, "measured",
                                w_measured, "healthy", w_healthy, "verdict");
  for (const Finding& f : rows)
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", f.check, w_check, f.where, w_where, f.measured,
                       w_measured, f.healthy, w_healthy, verdict_name(f.verdict));
  out += fmt::format("{} checks: {} ok, {} info, {} warn, {} fail{}\n", findings.size(), count(Verdict::Ok),
                     count(Verdict::Info), count(Verdict::Warn), count(Verdict::Fail),
                     verbose ? "" : " (healthy rows collapsed; --verbose shows all)");
  return out;
}

std::string Report::text(bool verbose, size_t max_causes) const {
  const std::vector<RootCause> causes = root_causes();
  std::string out = fmt::format("verdict: {}", verdict_name(overall()));
  if (causes.empty()) {
    out += " - no documented fault found\n";
  } else {
    out += fmt::format(" - {} cause{} found, most likely first:\n", causes.size(), causes.size() == 1 ? "" : "s");
    for (size_t i = 0; i < std::min(causes.size(), max_causes); ++i) {
      const RootCause& c = causes[i];
      std::string where;
      for (size_t j = 0; j < std::min<size_t>(c.where.size(), 3); ++j) where += (j ? ", " : "") + c.where[j];
      if (c.where.size() > 3) where += fmt::format(", +{} more", c.where.size() - 3);
      out += fmt::format("  {}. [{}] {} ({})\n     fix: {} ({})\n", i + 1, verdict_name(c.verdict), c.title, where,
                         c.fix, c.section);
    }
    if (causes.size() > max_causes) out += fmt::format("  ... and {} more in the table\n", causes.size() - max_causes);
  }
  return out + "\n" + table(verbose);
}

nlohmann::json Report::json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const Finding& f : findings)
    rows.push_back({{"check", f.check},
                    {"where", f.where},
                    {"measured", f.measured},
                    {"healthy", f.healthy},
                    {"verdict", verdict_name(f.verdict)},
                    {"cause", f.cause},
                    {"fix", f.verdict >= Verdict::Warn ? f.fix : ""},
                    {"section", f.verdict >= Verdict::Warn ? f.section : ""}});
  nlohmann::json causes = nlohmann::json::array();
  for (const RootCause& c : root_causes())
    causes.push_back({{"cause", c.cause},
                      {"title", c.title},
                      {"verdict", verdict_name(c.verdict)},
                      {"where", c.where},
                      {"fix", c.fix},
                      {"section", c.section}});
  return {{"verdict", verdict_name(overall())},
          {"root_causes", causes},
          {"findings", rows},
          {"ok", count(Verdict::Ok)},
          {"info", count(Verdict::Info)},
          {"warn", count(Verdict::Warn)},
          {"fail", count(Verdict::Fail)},
          {"failed", failed()}};
}

// ---- subjects -------------------------------------------------------------------------------

Subject lm_subject(nn::TransformerLM& model, const Tensor& tokens, const Tensor& targets) {
  Subject s;
  s.model = &model;
  s.loss = [&model, tokens, targets] { return F::cross_entropy(model.forward(tokens), targets); };
  s.logits = [&model, tokens] { return model.forward(tokens); };
  s.causal_leakage = [&model, tokens] {
    NoGradGuard no_grad;
    const int64_t T = tokens.size(1), cut = T / 2;
    Tensor changed = tokens.clone();
    const int64_t vocab = model.options().vocab;
    // Replace every token after `cut` by a different one.
    Tensor tail = changed.narrow(1, cut, T - cut);
    tail.copy_(add_scalar(tail, 1.0) -
               mul_scalar(ge(add_scalar(tail, 1.0), full({}, static_cast<double>(vocab), kInt64)).to(kInt64),
                          static_cast<double>(vocab)));
    const Tensor a = model.forward(tokens).narrow(1, 0, cut), b = model.forward(changed).narrow(1, 0, cut);
    return max(abs(a - b)).item<double>();
  };
  s.full_logits = [&model, tokens] {
    NoGradGuard no_grad;
    return model.forward(tokens);
  };
  s.incremental_logits = [&model, tokens] {
    NoGradGuard no_grad;
    std::vector<nn::KVCache> caches = model.make_caches();
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < tokens.size(1); ++t) steps.push_back(model.forward(tokens.narrow(1, t, 1), &caches));
    return cat(steps, 1);
  };
  return s;
}

Subject seq2seq_subject(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out) {
  Subject s;
  s.model = &model;
  const int64_t pad = model.options().pad_id;
  s.loss = [&model, src, tgt_in, tgt_out, pad] {
    return F::cross_entropy(model.forward(src, tgt_in), tgt_out, {.ignore_index = pad});
  };
  s.logits = [&model, src, tgt_in] { return model.forward(src, tgt_in); };
  // Source padding: the encoder's self-attention and the decoder's cross-attention read it;
  // every target output must ignore it.
  s.key_padding = eq(src, full({}, static_cast<double>(pad), src.options()));
  s.keys_from_padded_input = [](const std::string& layer) {
    return layer.rfind("encoder", 0) == 0 || layer.find("cross_attn") != std::string::npos;
  };
  s.real_outputs = ones({tgt_in.size(0), tgt_in.size(1)}, TensorOptions(kBool));
  s.causal_leakage = [&model, src, tgt_in] {
    NoGradGuard no_grad;
    const int64_t T = tgt_in.size(1), cut = std::max<int64_t>(1, T / 2);
    Tensor changed = tgt_in.clone();
    Tensor tail = changed.narrow(1, cut, T - cut);
    tail.copy_(full_like(tail, 3.0));  // any other token
    const Tensor a = model.forward(src, tgt_in).narrow(1, 0, cut), b = model.forward(src, changed).narrow(1, 0, cut);
    return max(abs(a - b)).item<double>();
  };
  s.full_logits = [&model, src, tgt_in] {
    NoGradGuard no_grad;
    return model.forward(src, tgt_in);
  };
  s.incremental_logits = [&model, src, tgt_in] {
    NoGradGuard no_grad;
    const Tensor memory = model.encode(src);
    std::vector<nn::DecoderLayerCache> caches = model.make_caches();
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < tgt_in.size(1); ++t)
      steps.push_back(model.decode(tgt_in.narrow(1, t, 1), memory, src, &caches));
    return cat(steps, 1);
  };
  return s;
}

// ---- checks ---------------------------------------------------------------------------------

namespace {

// Restores what the checks change, on every exit path (seed 003 sec. 8.3: a doctor that
// leaves the model in eval mode or with a different RNG stream would itself be a fault).
class RestoreModel {
 public:
  explicit RestoreModel(nn::Module& model)
      : model_(model),
        was_training_(model.is_training()),
        seed_(default_generator().seed()),
        offset_(default_generator().offset()),
        attention_(diagnostics::attention_modules(model)) {}
  ~RestoreModel() {
    for (auto& [name, m] : attention_) {
      m->set_record_weights(false);
      m->set_key_value_perturbation({});
    }
    model_.zero_grad();
    model_.train(was_training_);
    default_generator().set_state(seed_, offset_);
  }
  RestoreModel(const RestoreModel&) = delete;
  RestoreModel& operator=(const RestoreModel&) = delete;

 private:
  nn::Module& model_;
  bool was_training_;
  uint64_t seed_, offset_;
  std::vector<std::pair<std::string, nn::MultiHeadAttention*>> attention_;
};

bool tensor_finite(const Tensor& t) { return !t.defined() || isfinite_all(t); }

double max_abs_difference(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape()) return INFINITY;
  return max(abs(a.detach().to(kFloat64) - b.detach().to(kFloat64))).item<double>();
}

// Parameters grouped per layer: the path up to the first numeric component ("blocks.0"),
// else the top-level module ("tok_embed").
std::string layer_of(const std::string& name) {
  size_t at = 0;
  while (true) {
    const size_t dot = name.find('.', at);
    const std::string part = name.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      return name.substr(0, dot == std::string::npos ? name.size() : dot);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  const size_t first = name.find('.');
  return first == std::string::npos ? name : name.substr(0, first);
}

// The Q, K and V projection weights of an attention module, each as (rows, d_model) with the
// heads stacked along the rows; V is undefined when K and V share one projection.
struct QKVWeights {
  Tensor q, k, v;
  int64_t rows_per_matrix = 0;  // fan-out of one projection matrix (d_model, or d_head per head)
};
QKVWeights qkv_weights(const nn::MultiHeadAttention& m) {
  const int64_t C = m.options().d_model;
  const bool shared = m.options().shared_kv;
  switch (m.options().layout) {
    case nn::ProjectionLayout::Separate:
      return {m.q_proj->weight, shared ? m.kv_proj->weight : m.k_proj->weight, shared ? Tensor() : m.v_proj->weight, C};
    case nn::ProjectionLayout::FusedQKV:
      return {m.qkv_proj->weight.narrow(0, 0, C), m.qkv_proj->weight.narrow(0, C, C),
              shared ? Tensor() : m.qkv_proj->weight.narrow(0, 2 * C, C), C};
    case nn::ProjectionLayout::PerHead: {
      std::vector<Tensor> qs, ks, vs;
      for (const auto& [name, p] : m.named_parameters()) {
        if (name.find("q_proj.weight") != std::string::npos) qs.push_back(p);
        if (name.find("k_proj.weight") != std::string::npos || name.find("kv_proj.weight") != std::string::npos)
          ks.push_back(p);
        if (name.find("v_proj.weight") != std::string::npos && name.find("kv_proj") == std::string::npos)
          vs.push_back(p);
      }
      return {cat(qs, 0), cat(ks, 0), vs.empty() ? Tensor() : cat(vs, 0), m.d_head()};
    }
  }
  return {};
}

double weight_std(const Tensor& w) {
  return std::sqrt(var(w.detach().to(kFloat64).flatten(), {}, false, 0.0).item<double>());
}

// The temperature tau with weights ~ softmax(tau * scores + additive) over the visible keys,
// fitted by least squares on log-weights (each row centred, which removes its normaliser).
// Keys whose weight underflowed carry no information and are left out; rows need two keys.
struct TemperatureFit {
  double tau = 0;
  double r2 = 0;          // fraction of the log-weight variance the fit explains
  int64_t rows = 0;       // rows that contributed
  bool measured = false;  // false when every row was one-hot or the scores were constant
};
TemperatureFit fit_temperature(const Tensor& weights, const Tensor& scores, const Tensor& keep,
                               const Tensor& additive) {
  const Dims shape = weights.shape();  // (B,H,T,S)
  const int64_t S = shape.back(), rows = weights.numel() / S;
  auto host = [&](const Tensor& t) { return t.to(kCPU).to(kFloat64).expand(shape).contiguous().to_vector<double>(); };
  const std::vector<double> w = host(weights), s = host(scores);
  const std::vector<double> visible = keep.defined() ? host(keep) : std::vector<double>();
  const std::vector<double> a = additive.defined() ? host(additive) : std::vector<double>();
  double sxy = 0, sxx = 0, syy = 0;
  TemperatureFit fit;
  std::vector<double> x, y;
  for (int64_t r = 0; r < rows; ++r) {
    x.clear();
    y.clear();
    for (int64_t j = 0; j < S; ++j) {
      const size_t i = static_cast<size_t>(r * S + j);
      if (!visible.empty() && visible[i] == 0.0) continue;
      if (!(w[i] > 1e-30) || !std::isfinite(w[i]) || !std::isfinite(s[i])) continue;
      x.push_back(s[i]);
      y.push_back(std::log(w[i]) - (a.empty() ? 0.0 : a[i]));
    }
    if (x.size() < 2) continue;
    double mx = 0, my = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      mx += x[j];
      my += y[j];
    }
    mx /= static_cast<double>(x.size());
    my /= static_cast<double>(y.size());
    for (size_t j = 0; j < x.size(); ++j) {
      sxy += (x[j] - mx) * (y[j] - my);
      sxx += (x[j] - mx) * (x[j] - mx);
      syy += (y[j] - my) * (y[j] - my);
    }
    ++fit.rows;
  }
  if (fit.rows == 0 || sxx <= 1e-12 * static_cast<double>(fit.rows)) return fit;
  fit.tau = sxy / sxx;
  fit.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  fit.measured = true;
  return fit;
}

bool close_ratio(double a, double b, double tolerance) {
  return a > 0 && b > 0 && std::fabs(std::log(a / b)) < std::log1p(tolerance);
}

// Per layer: the applied scale measured from the recorded weights, the sharpness of every
// head, NaN/Inf in the weights, the norms that explain the sharpness, fp16 headroom.
void check_recorded_attention(const std::string& name, nn::MultiHeadAttention& m, Report* r) {
  const Tensor& weights = m.last_weights();  // (B,H,T,S)
  if (!weights.defined()) {
    add(r, "attention recorded", name, "the layer did not run on the batch", "runs", Verdict::Info, "");
    return;
  }
  const int64_t H = m.options().heads, dh = m.d_head(), C = m.options().d_model;
  const std::vector<diagnostics::HeadStats> heads = diagnostics::attention_head_stats(weights, m.last_keep());

  // NaN/Inf in the attention weights themselves (seed 003 sec. 8.2).
  std::vector<std::string> bad_heads;
  int64_t bad_rows = 0;
  for (int64_t h = 0; h < H; ++h)
    if (heads[static_cast<size_t>(h)].nonfinite_rows > 0) {
      bad_heads.push_back(std::to_string(h));
      bad_rows += heads[static_cast<size_t>(h)].nonfinite_rows;
    }
  add(r, "NaN/Inf in attention weights", bad_heads.empty() ? name : fmt::format("{} head {}", name, bad_heads[0]),
      bad_heads.empty() ? "finite" : fmt::format("{} rows in head(s) {}", bad_rows, fmt::join(bad_heads, ", ")),
      "finite", bad_heads.empty() ? Verdict::Ok : Verdict::Fail, "nan_attention");

  // Sharpness per head: entropy, normalised entropy, max/mean and top-3 mass from the same
  // rows, so they cannot contradict each other.
  int one_hot = 0, uniform = 0, counted = 0;
  for (int64_t h = 0; h < H; ++h) {
    const diagnostics::HeadStats& s = heads[static_cast<size_t>(h)];
    if (s.rows == 0) continue;
    ++counted;
    const bool is_one_hot = s.normalized_entropy < 0.02 && s.max_weight > 0.98;
    const bool is_uniform = s.normalized_entropy > 0.98 && s.max_mean_ratio < 1.3;
    one_hot += is_one_hot;
    uniform += is_uniform;
    add(r, "attention head", fmt::format("{} head {}", name, h),
        fmt::format("entropy {} nats ({} of uniform {}), max/mean {}:1, top-3 mass {}", num(s.entropy),
                    num(s.normalized_entropy), num(s.uniform_entropy), num(s.max_mean_ratio), num(s.top_k_mass)),
        "between one-hot (0) and uniform (1)", is_one_hot || is_uniform ? Verdict::Warn : Verdict::Ok,
        is_one_hot   ? "saturated_softmax"
        : is_uniform ? "uniform_attention"
                     : "");
  }
  // A layer fails when most of its heads are one-hot (or uniform), warns when some are.
  auto layer_verdict = [&](int n) { return 2 * n > counted ? Verdict::Fail : n > 0 ? Verdict::Warn : Verdict::Ok; };
  add(r, "one-hot attention", name, fmt::format("{} of {} heads one-hot", one_hot, counted),
      "at most a minority of heads", layer_verdict(one_hot), "saturated_softmax");
  add(r, "uniform attention", name, fmt::format("{} of {} heads uniform", uniform, counted),
      "at most a minority of heads", layer_verdict(uniform), "uniform_attention");

  // The scale actually applied: recompute q.k with the layer's own projections and fit the
  // temperature that reproduces the recorded weights (seed 000 sec. 1-2, 8).
  const Tensor& query_in = m.last_query_input();
  const Tensor& key_in = m.last_key_input();
  if (!query_in.defined() || !key_in.defined()) {
    add(r, "attention scale (measured)", name, "not measurable (the layer ran with a cache)", "1/sqrt(d_head)",
        Verdict::Info, "");
    return;
  }
  NoGradGuard no_grad;
  const Tensor q = m.project_query(query_in);                  // (B,H,T,dh)
  const Tensor k = m.project_key_value(key_in, key_in).first;  // (B,H,S,dh)
  const nn::AttentionScaling::Scaled scaled = m.scaling->apply(q, k);
  const Tensor scores = matmul(scaled.q.to(kFloat64), scaled.k.to(kFloat64).transpose(-1, -2));  // (B,H,T,S)
  const TemperatureFit fit = fit_temperature(weights, scores, m.last_keep(), m.last_additive());
  const double expected = 1.0 / std::sqrt(static_cast<double>(dh));
  const nn::AttentionScale mode = m.scaling->mode();
  const std::optional<double> asked = m.scaling->constant_scale();  // the factor the layer passes to the kernel
  const double kernel_factor = scaled.scale;
  if (!fit.measured) {
    add(r, "attention scale (measured)", name, "not measurable: every row is one-hot or the scores are constant",
        fmt::format("1/sqrt(d_head) = {}", num(expected)), Verdict::Info, "");
  } else {
    std::string cause;
    Verdict verdict = Verdict::Ok;
    std::string measured = fmt::format("fitted {} x q.k (r2 {}, {} rows); the layer asks for {} ({})", num(fit.tau),
                                       num(fit.r2), fit.rows, num(kernel_factor), nn::attention_scale_name(mode));
    if (!close_ratio(fit.tau, kernel_factor, 0.02)) {
      verdict = Verdict::Fail;
      cause = "kernel_scale";
    } else if (asked) {
      if (close_ratio(fit.tau, expected, 0.02)) {
      } else if (close_ratio(fit.tau, 1.0, 0.02)) {
        verdict = Verdict::Fail;
        cause = "no_scale";
      } else if (close_ratio(fit.tau, 1.0 / std::sqrt(static_cast<double>(C)), 0.02)) {
        verdict = Verdict::Fail;
        cause = "scale_d_model";
      } else {
        verdict = Verdict::Warn;
        cause = "kernel_scale";
        measured += ", neither 1/sqrt(d_head), 1 nor 1/sqrt(d_model)";
      }
    }
    add(r, "attention scale (measured)", name, measured, fmt::format("1/sqrt(d_head) = {}", num(expected)), verdict,
        cause);
  }
  if (mode == nn::AttentionScale::Learnable || mode == nn::AttentionScale::Affine) {
    double worst = expected;
    for (double v : m.scaling->effective_scale())
      if (std::fabs(std::log(std::fabs(v) / expected)) > std::fabs(std::log(std::fabs(worst) / expected))) worst = v;
    add(r, "learned scale", name, fmt::format("furthest head {}", num(worst)),
        fmt::format("within 4x of {}", num(expected)),
        std::fabs(std::log(std::fabs(worst) / expected)) > std::log(4.0) ? Verdict::Warn : Verdict::Ok,
        "learned_scale");
  }

  // What explains the sharpness: input (embedding) norm, key and query norms, their angle
  // and the spread of the scaled scores (seed 001 sec. 5.1-5.2).
  {
    const Tensor q64 = q.to(kFloat64), k64 = k.to(kFloat64);
    const double input_rms = std::sqrt(mean(query_in.to(kFloat64).pow(2.0)).item<double>());
    const Tensor q_norm = sum(q64 * q64, {-1}).sqrt(), k_norm = sum(k64 * k64, {-1}).sqrt();  // (B,H,T), (B,H,S)
    const Tensor raw = matmul(q64, k64.transpose(-1, -2));                                    // (B,H,T,S)
    const Tensor cosine = raw / (q_norm.unsqueeze(-1) * k_norm.unsqueeze(-2) + 1e-30);
    const double tau = fit.measured ? fit.tau : kernel_factor;
    const Tensor applied = mul_scalar(scores, tau);
    const double spread = std::sqrt(mean(var(applied, {-1}, false, 0.0)).item<double>());
    const bool sharp = one_hot > 0, flat = uniform > 0;
    std::string reading = fmt::format("score std {}, |q| {}, |k| {}, cos(q,k) {}, input rms {}", num(spread),
                                      num(mean(q_norm).item<double>()), num(mean(k_norm).item<double>()),
                                      num(mean(cosine).item<double>()), num(input_rms));
    if (flat && input_rms < 1e-2)
      reading += ": the inputs (embeddings) vanish";
    else if (flat && mean(k_norm).item<double>() < 1e-3)
      reading += ": the keys vanish";
    else if (flat)
      reading += ": the scores barely vary";
    else if (sharp && std::fabs(mean(cosine).item<double>()) > 0.9)
      reading += ": q and k nearly parallel";
    else if (sharp)
      reading += ": large q/k norms saturate the softmax";
    add(r, "scores and norms", name, reading, "score std 0.3 .. 10", sharp || flat ? Verdict::Info : Verdict::Ok,
        "score_range");
  }

  // fp16 headroom of the scores.
  const double unscaled = m.last_max_abs_score();
  if (unscaled >= 0) {
    const double applied = unscaled * std::fabs(fit.measured ? fit.tau : kernel_factor);
    add(r, "fp16 overflow risk", name, fmt::format("max |q.k| {} (scaled {})", num(unscaled), num(applied)),
        "scaled < 8190 (fp16 max 65504 / 8)",
        applied > 65504.0                               ? Verdict::Fail
        : (applied > 65504.0 / 8 || unscaled > 65504.0) ? Verdict::Warn
                                                        : Verdict::Ok,
        "fp16_overflow");
  }
}

// Static checks of one attention module: head size, initialisation range, Q/K symmetry.
void check_attention_parameters(const std::string& name, const nn::MultiHeadAttention& m, Report* r) {
  const int64_t dh = m.d_head(), C = m.options().d_model;
  add(r, "head dimension", name, fmt::format("d_head = {}", dh), ">= 64", dh < 64 ? Verdict::Info : Verdict::Ok,
      "small_head_dim");

  const QKVWeights w = qkv_weights(m);
  NoGradGuard no_grad;
  // Xavier std of one (fan_out, fan_in) projection: sqrt(2 / (fan_in + fan_out)).
  const double xavier = std::sqrt(2.0 / static_cast<double>(C + w.rows_per_matrix));
  std::vector<std::string> parts;
  double worst = 1.0;
  const char* worst_name = "q";
  for (auto [label, t] : {std::pair<const char*, Tensor>{"q", w.q}, {"k", w.k}, {"v", w.v}}) {
    if (!t.defined()) continue;
    const double ratio = weight_std(t) / xavier;
    parts.push_back(fmt::format("{} {}x", label, num(ratio)));
    if (std::fabs(std::log(std::max(ratio, 1e-300))) > std::fabs(std::log(worst))) {
      worst = std::max(ratio, 1e-300);
      worst_name = label;
    }
  }
  add(r, "Q/K/V initialisation range", name,
      fmt::format("std / Xavier std: {} (furthest: {})", fmt::join(parts, ", "), worst_name),
      "0.1x .. 3x (small-gain Q/K allowed)",
      worst > 8.0 || worst < 0.01  ? Verdict::Fail
      : worst > 3.0 || worst < 0.1 ? Verdict::Warn
                                   : Verdict::Ok,
      "init_range");

  const Tensor a = w.q.detach().to(kFloat64).flatten(), b = w.k.detach().to(kFloat64).flatten();
  const double cosine =
      sum(a * b).item<double>() / std::max(1e-300, std::sqrt(sum(a * a).item<double>() * sum(b * b).item<double>()));
  add(r, "Q/K projection similarity", name, fmt::format("cosine {}", num(cosine)), "< 0.9",
      cosine > 0.99  ? Verdict::Fail
      : cosine > 0.9 ? Verdict::Warn
                     : Verdict::Ok,
      "qk_symmetric");
}

void check_embeddings(nn::Module& model, Report* r) {
  NoGradGuard no_grad;
  for (auto& [name, module] : model.named_modules()) {
    auto* embedding = dynamic_cast<nn::Embedding*>(module);
    if (!embedding) continue;
    const Tensor w = embedding->weight.detach().to(kFloat64);
    const double rms = std::sqrt(mean(w * w).item<double>());
    add(r, "embedding norm", name.empty() ? "model" : name,
        fmt::format("row norm {} (rms {})", num(rms * std::sqrt(static_cast<double>(w.size(1)))), num(rms)),
        "rms 1e-2 .. 1e2", rms < 1e-2 || rms > 1e2 ? Verdict::Warn : Verdict::Ok, "embedding_norm");
  }
}

void check_gradients(const Subject& s, Report* r) {
  nn::Module& model = *s.model;
  model.zero_grad();
  Tensor loss = s.loss();
  const bool loss_finite = isfinite_all(loss);
  if (loss.requires_grad()) loss.backward();
  std::map<std::string, double> squares;
  std::vector<std::string> order;
  int64_t nonfinite = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string layer = layer_of(name);
    if (!squares.count(layer)) order.push_back(layer);
    const Tensor g = p.grad();
    double sq = 0;
    if (g.defined()) {
      sq = sum(g.detach().to(kFloat64).pow(2.0)).item<double>();
      if (!std::isfinite(sq)) ++nonfinite;
    }
    squares[layer] += sq;
  }
  add(r, "NaN/Inf in loss and gradients", "model",
      fmt::format("loss {}, {} non-finite gradients", loss_finite ? "finite" : "NON-FINITE", nonfinite), "finite",
      (loss_finite && nonfinite == 0) ? Verdict::Ok : Verdict::Fail, "nan_activations");
  for (const std::string& layer : order) {
    const double norm = std::sqrt(squares[layer]);
    const Verdict v = !std::isfinite(norm) || norm > 1e3 || norm < 1e-8 ? Verdict::Fail
                      : norm > 1e2 || norm < 1e-6                       ? Verdict::Warn
                                                                        : Verdict::Ok;
    add(r, "gradient norm", layer, num(norm), "1e-6 .. 1e2", v,
        norm < 1e-6 ? "vanishing_gradients" : "exploding_gradients");
  }
  // Per head: one head whose gradient is far above its siblings' (seed 003 sec. 8.2).
  for (const auto& [name, m] : diagnostics::attention_modules(model)) {
    const std::vector<double> norms = diagnostics::head_gradient_norms(*m);
    if (norms.size() < 2) continue;
    std::vector<double> sorted = norms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const size_t worst = static_cast<size_t>(std::max_element(norms.begin(), norms.end()) - norms.begin());
    const double ratio = median > 0 ? norms[worst] / median : (norms[worst] > 0 ? INFINITY : 1.0);
    std::vector<std::string> shown;
    for (double v : norms) shown.push_back(num(v));
    const Verdict v = !std::isfinite(norms[worst]) || (ratio > 20 && norms[worst] > 1e-6) ? Verdict::Fail
                      : ratio > 5 && norms[worst] > 1e-6                                  ? Verdict::Warn
                                                                                          : Verdict::Ok;
    add(r, "head gradient norms", v == Verdict::Ok ? name : fmt::format("{} head {}", name, worst),
        fmt::format("{} (max/median {})", fmt::join(shown, " "), num(ratio)), "max/median < 5", v, "head_gradient");
  }
  model.zero_grad();
}

// Padded keys and values are perturbed inside every attention layer that reads the padded
// input; a correct mask keeps the outputs at real positions unchanged (seed 003 sec. 8.3).
void check_padding(const Subject& s, Report* r) {
  const Tensor pad = s.key_padding.to(kBool);  // (B,S)
  HEED_CHECK(pad.dim() == 2, "doctor", "key_padding must be (B, S), got {}", shape_str(pad.shape()));
  const int64_t B = pad.size(0), S = pad.size(1);
  if (sum(pad.to(kInt64)).item<double>() == 0) {
    add(r, "padding mask", "model", "the batch has no padding", "padded keys change nothing", Verdict::Info, "");
    return;
  }
  NoGradGuard no_grad;
  const Tensor before = s.logits();
  int64_t perturbed_layers = 0;
  const auto modules = diagnostics::attention_modules(*s.model);
  for (auto& [name, m] : modules) {
    if (s.keys_from_padded_input && !s.keys_from_padded_input(name)) continue;
    ++perturbed_layers;
    m->set_key_value_perturbation([pad, B, S](Tensor& k, Tensor& v) {
      if (k.dim() != 4 || k.size(0) != B || k.size(2) != S) return;
      const Tensor where = pad.view({B, 1, S, 1}).to(k.dtype());  // (B,1,S,1)
      k = k + mul_scalar(where, 7.0);
      v = v + mul_scalar(where, -5.0);
    });
  }
  const Tensor after = s.logits();
  for (auto& [name, m] : modules) m->set_key_value_perturbation({});
  Tensor real = s.real_outputs.defined() ? s.real_outputs.to(kBool) : logical_not(pad);  // (B,T)
  HEED_CHECK(before.dim() >= 2 && real.size(0) == before.size(0) && real.size(1) == before.size(1), "doctor",
             "the padding check compares outputs {} at positions {}: pass real_outputs (B, T)",
             shape_str(before.shape()), shape_str(real.shape()));
  Dims shape = Dims::filled(before.dim(), 1);
  shape[0] = real.size(0);
  shape[1] = real.size(1);
  const Tensor diff = abs(before.to(kFloat64) - after.to(kFloat64)) * real.reshape(shape).to(kFloat64);
  const double leak = max(diff).item<double>();
  add(r, "padding mask", "model",
      fmt::format("real outputs move by {} when {} layers' padded keys change", num(leak), perturbed_layers), "< 1e-4",
      leak < 1e-4 ? Verdict::Ok : Verdict::Fail, "padding_mask");
}

}  // namespace

Report run_checks(const Subject& s) {
  HEED_CHECK(s.model && s.logits, "doctor", "the subject needs a model and its outputs on a batch");
  Report report;
  nn::Module& model = *s.model;
  RestoreModel restore(model);
  model.eval();
  model.zero_grad();
  const auto attention = diagnostics::attention_modules(model);
  HEED_CHECK(!attention.empty(), "doctor", "the model has no nn::MultiHeadAttention layer to examine");

  // Static: parameters, embeddings, initialisation, head size, Q/K symmetry.
  {
    int64_t bad = 0;
    std::string first;
    for (const auto& [name, p] : model.named_parameters())
      if (!tensor_finite(p)) {
        if (first.empty()) first = name;
        ++bad;
      }
    add(&report, "NaN/Inf in parameters", bad ? first : "model", fmt::format("{} tensors", bad), "0",
        bad ? Verdict::Fail : Verdict::Ok, "nan_parameters");
  }
  check_embeddings(model, &report);
  for (const auto& [name, m] : attention) check_attention_parameters(name, *m, &report);

  // Dropout still active in eval mode: two eval passes must agree. First, because every
  // comparison of two passes (kernels, causal, padding, cache) needs deterministic outputs.
  bool deterministic = true;
  {
    NoGradGuard no_grad;
    const double diff = max_abs_difference(s.logits(), s.logits());
    deterministic = diff == 0.0 || std::isnan(diff);  // NaN outputs: the NaN checks report them
    add(&report, "dropout in eval mode", "model", fmt::format("two eval passes differ by {}", num(diff)), "0",
        deterministic ? Verdict::Ok : Verdict::Fail, "dropout_eval");
  }

  // One recorded forward pass (eval, composed attention path, weights and masks kept).
  Tensor recorded;
  {
    NoGradGuard no_grad;
    for (auto& [name, m] : attention) m->set_record_weights(true);
    recorded = s.logits();
    for (auto& [name, m] : attention) m->set_record_weights(false);
  }
  add(&report, "NaN/Inf in outputs", "model", isfinite_all(recorded) ? "finite" : "non-finite", "finite",
      isfinite_all(recorded) ? Verdict::Ok : Verdict::Fail, "nan_activations");
  for (auto& [name, m] : attention) check_recorded_attention(name, *m, &report);

  // The fused kernel (taken when nothing is recorded) against the composed reference path.
  {
    NoGradGuard no_grad;
    const Tensor fused = s.logits();
    const double diff = max_abs_difference(fused, recorded);
    const double magnitude = isfinite_all(recorded) ? max(abs(recorded.to(kFloat64))).item<double>() : 1.0;
    const bool agree = (diff <= 1e-3 * (1.0 + magnitude)) || !isfinite_all(recorded);
    if (deterministic)
      add(&report, "fused vs reference attention", "model", fmt::format("outputs differ by {}", num(diff)),
          "< 1e-3 relative", agree ? Verdict::Ok : Verdict::Fail, "kernel_mismatch");
    else
      add(&report, "fused vs reference attention", "model", "not measurable: outputs differ between two eval passes",
          "", Verdict::Info, "");
  }

  if (s.loss) check_gradients(s, &report);

  if (!deterministic) {
    // Every comparison below would measure the dropout noise, not its own fault.
    for (const char* check : {"causal leakage", "padding mask", "KV-cache consistency"})
      add(&report, check, "model", "not measurable: outputs differ between two eval passes", "", Verdict::Info, "");
    return report;
  }
  if (s.causal_leakage) {
    const double leak = s.causal_leakage();
    add(&report, "causal leakage", "model", fmt::format("earlier outputs change by {}", num(leak)), "< 1e-5",
        leak < 1e-5 ? Verdict::Ok : Verdict::Fail, "causal_mask");
  }
  if (s.key_padding.defined()) check_padding(s, &report);
  if (s.full_logits && s.incremental_logits) {
    const Tensor full_out = s.full_logits(), step_out = s.incremental_logits();
    const double diff = max_abs_difference(full_out, step_out);
    add(&report, "KV-cache consistency", "model", fmt::format("incremental vs full forward differ by {}", num(diff)),
        "< 1e-4", diff < 1e-4 ? Verdict::Ok : Verdict::Fail, "kv_cache");
  }
  return report;
}

// ---- probe ----------------------------------------------------------------------------------

std::vector<ProbeRow> probe(const std::vector<int64_t>& dks, int64_t queries, int64_t keys, uint64_t seed) {
  HEED_CHECK(queries > 0 && keys > 1, "probe", "needs queries > 0 and keys > 1, got {} and {}", queries, keys);
  std::vector<ProbeRow> rows;
  Generator& gen = default_generator();
  const uint64_t saved_seed = gen.seed(), saved_offset = gen.offset();
  for (int64_t dk : dks) {
    HEED_CHECK(dk > 0, "probe", "d_k must be positive, got {}", dk);
    manual_seed(seed);
    const Tensor q = randn({queries, dk}, kFloat64), k = randn({keys, dk}, kFloat64);
    const Tensor upstream = randn({queries, keys}, kFloat64);
    for (bool scaled : {false, true}) {
      ProbeRow r;
      r.dk = dk;
      r.scaled = scaled;
      Tensor scores = matmul(q, k.t());
      if (scaled) scores = scores / std::sqrt(static_cast<double>(dk));
      scores = scores.detach().requires_grad_();
      r.score_mean = mean(scores).item<double>();
      r.score_std = std::sqrt(var(scores, {}, false, 0.0).item<double>());
      r.score_mean_abs = mean(abs(scores)).item<double>();
      const Tensor w = F::softmax(scores, -1);
      const auto stats = diagnostics::attention_head_stats(w.detach().unsqueeze(0));
      r.entropy = stats[0].entropy;
      r.uniform_entropy = stats[0].uniform_entropy;
      r.max_mean_ratio = stats[0].max_mean_ratio;
      r.max_weight = stats[0].max_weight;
      sum(w * upstream).backward();
      r.grad_norm = mean(sum(scores.grad() * scores.grad(), {1}).sqrt()).item<double>();
      // Histogram of the weights on a log scale of 1/L multiples.
      const std::vector<double> values = w.detach().to_vector<double>();
      r.histogram_edges = {0.0};
      for (double e = 1.0 / static_cast<double>(keys) / 16; e < 1.0; e *= 2) r.histogram_edges.push_back(e);
      r.histogram_edges.push_back(1.0);
      r.histogram_counts.assign(r.histogram_edges.size() - 1, 0.0);
      for (double v : values) {
        size_t bin = 0;
        while (bin + 1 < r.histogram_counts.size() && v >= r.histogram_edges[bin + 1]) ++bin;
        r.histogram_counts[bin] += 1;
      }
      rows.push_back(r);
    }
  }
  gen.set_state(saved_seed, saved_offset);
  return rows;
}

}  // namespace heed::doctor
