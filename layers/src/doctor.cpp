// layers/src/doctor.cpp — the attention troubleshooting checks (see heed/doctor.h).
#include "heed/doctor.h"

#include <cmath>
#include <map>

#include "heed/autograd.h"
#include "heed/diagnostics.h"
#include "heed/functional.h"
#include "heed/ops.h"
#include "heed/random.h"

namespace heed::doctor {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok:
      return "ok";
    case Verdict::Warn:
      return "warn";
    case Verdict::Fail:
      return "FAIL";
  }
  return "?";
}

bool Report::failed() const { return count(Verdict::Fail) > 0; }

int Report::count(Verdict v) const {
  int n = 0;
  for (const Finding& f : findings) n += f.verdict == v;
  return n;
}

std::string Report::table() const {
  size_t w_check = 5, w_where = 5, w_measured = 8, w_healthy = 7;
  for (const Finding& f : findings) {
    w_check = std::max(w_check, f.check.size());
    w_where = std::max(w_where, f.where.size());
    w_measured = std::max(w_measured, f.measured.size());
    w_healthy = std::max(w_healthy, f.healthy.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<7}  {}\n", "check", w_check, "where", w_where,
                                "measured", w_measured, "healthy", w_healthy, "verdict", "fix");
  for (const Finding& f : findings)
    out +=
        fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<7}  {}\n", f.check, w_check, f.where, w_where, f.measured,
                    w_measured, f.healthy, w_healthy, verdict_name(f.verdict), f.verdict == Verdict::Ok ? "" : f.fix);
  out += fmt::format("{} checks: {} ok, {} warn, {} fail\n", findings.size(), count(Verdict::Ok), count(Verdict::Warn),
                     count(Verdict::Fail));
  return out;
}

nlohmann::json Report::json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const Finding& f : findings)
    rows.push_back({{"check", f.check},
                    {"where", f.where},
                    {"measured", f.measured},
                    {"healthy", f.healthy},
                    {"verdict", verdict_name(f.verdict)},
                    {"fix", f.verdict == Verdict::Ok ? "" : f.fix}});
  return {{"findings", rows},
          {"ok", count(Verdict::Ok)},
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

std::string num(double v) {
  if (!std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3f}", v);
}

bool tensor_finite(const Tensor& t) { return !t.defined() || isfinite_all(t); }

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

// The Q and K projection weights of an attention module as (d_model, d_model)-like matrices.
std::pair<Tensor, Tensor> qk_weights(const nn::MultiHeadAttention& m) {
  const int64_t C = m.options().d_model;
  switch (m.options().layout) {
    case nn::ProjectionLayout::Separate:
      return {m.q_proj->weight, m.options().shared_kv ? m.kv_proj->weight : m.k_proj->weight};
    case nn::ProjectionLayout::FusedQKV:
      return {m.qkv_proj->weight.narrow(0, 0, C), m.qkv_proj->weight.narrow(0, C, C)};
    case nn::ProjectionLayout::PerHead: {
      std::vector<Tensor> qs, ks;
      for (const auto& [name, p] : m.named_parameters()) {
        if (name.find("q_proj.weight") != std::string::npos) qs.push_back(p);
        if (name.find("k_proj.weight") != std::string::npos || name.find("kv_proj.weight") != std::string::npos)
          ks.push_back(p);
      }
      return {cat(qs, 0), cat(ks, 0)};
    }
  }
  return {};
}

void check_finite_parameters(const Subject& s, Report* r) {
  int64_t bad = 0;
  std::string first;
  for (const auto& [name, p] : s.model->named_parameters()) {
    if (!tensor_finite(p)) {
      if (first.empty()) first = name;
      ++bad;
    }
  }
  r->findings.push_back({"NaN/Inf in parameters", bad ? first : "model", fmt::format("{} tensors", bad), "0",
                         bad ? Verdict::Fail : Verdict::Ok,
                         "restore the last good checkpoint, lower the learning rate, clip gradients (max_norm=1.0) "
                         "and check for overflow in mixed precision (seed 003 sec. 8.2)"});
}

}  // namespace

Report run_checks(const Subject& s) {
  HEED_CHECK(s.model && s.loss && s.logits, "doctor", "the subject needs a model, a loss and logits");
  Report report;
  nn::Module& model = *s.model;
  Generator& gen = default_generator();
  const uint64_t saved_seed = gen.seed(), saved_offset = gen.offset();
  const bool was_training = model.is_training();
  model.eval();
  model.zero_grad();

  check_finite_parameters(s, &report);

  // Attention statistics on the probe batch (eval mode, weights recorded).
  diagnostics::AttentionMonitor monitor(model);
  Tensor logits;
  {
    NoGradGuard no_grad;
    monitor.record(true);
    logits = s.logits();
    monitor.record(false);
  }
  report.findings.push_back({"NaN/Inf in activations", "logits", isfinite_all(logits) ? "finite" : "non-finite",
                             "finite", isfinite_all(logits) ? Verdict::Ok : Verdict::Fail,
                             "look for log(0), division by zero, -inf masks in fp16 (use -1e4 or fp32 scores) and "
                             "softmax without max subtraction (seed 001 sec. 4.3)"});
  for (const auto& layer : monitor.attention_stats()) {
    const auto& heads = layer.heads;
    int uniform = 0, one_hot = 0;
    double entropy = 0, uniform_entropy = 0, ratio = 0;
    for (const auto& h : heads) {
      if (h.rows == 0) continue;  // no row with two visible keys: nothing to judge
      uniform += h.normalized_entropy > 0.97 && h.max_mean_ratio < 1.25;
      one_hot += h.max_weight > 0.995;
      entropy += h.entropy;
      uniform_entropy += h.uniform_entropy;
      ratio += h.max_mean_ratio;
    }
    const double n = static_cast<double>(std::max<size_t>(heads.size(), 1));
    report.findings.push_back(
        {"attention entropy", layer.name,
         fmt::format("{} nats (uniform {}), {} of {} heads uniform, {} one-hot", num(entropy / n),
                     num(uniform_entropy / n), uniform, heads.size(), one_hot),
         "between one-hot (0) and uniform (log L)",
         2 * uniform > static_cast<int>(heads.size()) || 2 * one_hot > static_cast<int>(heads.size()) ? Verdict::Fail
         : (uniform > 0 || one_hot > 0)                                                                ? Verdict::Warn
                                                                                                       : Verdict::Ok,
         uniform > 0 ? "uniform attention (weights ~ 1/L): check the Q/K initialisation (Xavier), the scale (d_k not "
                       "d_model), the embedding norm, add LayerNorm (seed 001 sec. 5.1, seed 003 sec. 8.1)"
                     : "one-hot attention (softmax saturated): apply the 1/sqrt(d_k) scale, add a temperature, check "
                       "key norms (seed 001 sec. 5.2, seed 000 sec. 2)"});
    report.findings.push_back({"max/mean attention weight", layer.name, fmt::format("{}:1", num(ratio / n)),
                               "about 5:1 (seed 000 sec. 10)", ratio / n < 1.5 ? Verdict::Warn : Verdict::Ok,
                               "weights are nearly uniform: see the entropy check"});
  }

  // Scale actually applied vs 1/sqrt(d_head); identical Q/K projections; fp16 headroom.
  for (const auto& [name, m] : diagnostics::attention_modules(model)) {
    const double expected = 1.0 / std::sqrt(static_cast<double>(m->d_head()));
    const double wrong = 1.0 / std::sqrt(static_cast<double>(m->options().d_model));
    const std::vector<double> scales = m->scaling->effective_scale();
    double mean_scale = 0;
    for (double v : scales) mean_scale += v;
    mean_scale /= static_cast<double>(std::max<size_t>(scales.size(), 1));
    Verdict v = Verdict::Ok;
    std::string fix;
    const nn::AttentionScale mode = m->scaling->mode();
    if (mode == nn::AttentionScale::None) {
      v = Verdict::Fail;
      fix = "scores are not scaled: divide q.k by sqrt(d_k) (seed 000 sec. 1-2)";
    } else if (mode != nn::AttentionScale::Cosine && m->d_head() != m->options().d_model &&
               std::fabs(mean_scale - wrong) < 1e-6 * wrong) {
      v = Verdict::Fail;
      fix = "the scale uses d_model instead of d_k = d_model / heads (seed 000 sec. 8)";
    } else if (mode != nn::AttentionScale::Cosine &&
               (mean_scale <= 0 || std::fabs(std::log(mean_scale / expected)) > std::log(4.0))) {
      v = Verdict::Warn;
      fix = "the (learned) scale is far from 1/sqrt(d_k); check the learning rate of the scale parameters";
    }
    report.findings.push_back({"attention scale", name,
                               fmt::format("{} ({})", num(mean_scale), nn::attention_scale_name(mode)),
                               fmt::format("1/sqrt(d_k) = {}", num(expected)), v, fix});

    auto [wq, wk] = qk_weights(*m);
    const Tensor a = wq.detach().to(kFloat64).flatten(), b = wk.detach().to(kFloat64).flatten();
    const double cosine =
        sum(a * b).item<double>() / std::max(1e-300, std::sqrt(sum(a * a).item<double>() * sum(b * b).item<double>()));
    report.findings.push_back({"Q/K projection similarity", name, fmt::format("cosine {}", num(cosine)), "< 0.9",
                               cosine > 0.99  ? Verdict::Fail
                               : cosine > 0.9 ? Verdict::Warn
                                              : Verdict::Ok,
                               "identical Q and K projections make QK^T symmetric: initialise them independently and "
                               "add a bias to break the symmetry (seed 003 sec. 8.1)"});

    const double unscaled = m->last_max_abs_score();
    if (unscaled >= 0) {
      const double scaled = unscaled * std::fabs(mean_scale);
      const Verdict fv = scaled > 65504.0                               ? Verdict::Fail
                         : (scaled > 65504.0 / 8 || unscaled > 65504.0) ? Verdict::Warn
                                                                        : Verdict::Ok;
      report.findings.push_back(
          {"fp16 overflow risk", name, fmt::format("max |q.k| {} (scaled {})", num(unscaled), num(scaled)),
           "scaled < 8190 (fp16 max 65504 / 8)", fv,
           "compute scores and softmax in fp32 under fp16, scale q before the product, and check the "
           "initialisation (seed 003 sec. 7.2, seed 000 sec. 8)"});
    }
  }

  // Gradient norm per layer on the probe batch.
  {
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
    report.findings.push_back(
        {"NaN/Inf in loss and gradients", "model",
         fmt::format("loss {}, {} non-finite gradients", loss_finite ? "finite" : "NON-FINITE", nonfinite), "finite",
         (loss_finite && nonfinite == 0) ? Verdict::Ok : Verdict::Fail,
         "enable anomaly detection to find the op, clip gradients (max_norm=1.0), lower the "
         "learning rate (seed 003 sec. 8.2)"});
    for (const std::string& layer : order) {
      const double norm = std::sqrt(squares[layer]);
      const Verdict v = !std::isfinite(norm)          ? Verdict::Fail
                        : norm > 1e3 || (norm < 1e-8) ? Verdict::Fail
                        : norm > 1e2 || (norm < 1e-6) ? Verdict::Warn
                                                      : Verdict::Ok;
      report.findings.push_back({"gradient norm", layer, num(norm), "1e-6 .. 1e2", v,
                                 norm < 1e-6 ? "vanishing gradients: check softmax saturation (scale), initialisation, "
                                               "residual connections and LayerNorm (seed 001 sec. 5.3)"
                                             : "exploding gradients: clip by global norm (max_norm=1.0), lower the "
                                               "learning rate, check the initialisation (seed 003 sec. 8.2)"});
    }
    model.zero_grad();
  }

  // Dropout still active in eval mode: two eval passes must agree.
  {
    NoGradGuard no_grad;
    model.eval();
    const Tensor a = s.logits(), b = s.logits();
    const double diff = max(abs(a - b)).item<double>();
    report.findings.push_back({"dropout in eval mode", "model", fmt::format("two eval passes differ by {}", num(diff)),
                               "0", diff == 0.0 ? Verdict::Ok : Verdict::Fail,
                               "dropout is still active: call model.eval() before inference and pass training=false "
                               "to F::dropout (seed 003 sec. 2.2, 8.3)"});
  }
  if (s.causal_leakage) {
    const double leak = s.causal_leakage();
    report.findings.push_back({"causal leakage", "model", fmt::format("earlier outputs change by {}", num(leak)),
                               "< 1e-5", leak < 1e-5 ? Verdict::Ok : Verdict::Fail,
                               "future tokens leak into earlier positions: fix the causal mask (lower triangle, "
                               "masked with -inf before softmax) (seed 003 sec. 1.1, 8.3)"});
  }
  if (s.full_logits && s.incremental_logits) {
    const Tensor full_out = s.full_logits(), step_out = s.incremental_logits();
    const double diff = full_out.shape() == step_out.shape() ? max(abs(full_out - step_out)).item<double>() : INFINITY;
    report.findings.push_back({"KV-cache consistency", "model",
                               fmt::format("incremental vs full forward differ by {}", num(diff)), "< 1e-4",
                               diff < 1e-4 ? Verdict::Ok : Verdict::Fail,
                               "the KV cache update is wrong (positions, concatenation axis or mask offset): check "
                               "the cache logic (seed 003 sec. 8.3)"});
  }
  model.train(was_training);
  gen.set_state(saved_seed, saved_offset);
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
