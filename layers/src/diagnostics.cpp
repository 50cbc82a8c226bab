// layers/src/diagnostics.cpp — attention statistics and the training-time monitor.
#include "heed/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "heed/clip.h"
#include "heed/ops.h"

namespace heed::diagnostics {

std::vector<HeadStats> attention_head_stats(const Tensor& weights, const Tensor& keep, int64_t top_k) {
  HEED_CHECK(weights.defined() && (weights.dim() == 4 || weights.dim() == 3), "attention_head_stats",
             "expects weights (B, H, T, S) or (B, T, S), got {}",
             weights.defined() ? shape_str(weights.shape()) : "undefined");
  HEED_CHECK(top_k >= 1, "attention_head_stats", "top_k must be at least 1, got {}", top_k);
  const Tensor w = weights.dim() == 3 ? weights.unsqueeze(1) : weights;  // (B,H,T,S)
  const int64_t B = w.size(0), H = w.size(1), T = w.size(2), S = w.size(3);
  const std::vector<double> v = w.detach().to(kFloat64).contiguous().to_vector<double>();
  std::vector<uint8_t> visible;  // (B,H,T,S), 1 = the mask lets the query see the key
  if (keep.defined()) {
    HEED_CHECK(keep.dtype() == kBool, "attention_head_stats", "the keep mask must be bool, got {}",
               dtype_name(keep.dtype()));
    const Tensor k = weights.dim() == 3 && keep.dim() == 3 ? keep.unsqueeze(1) : keep;
    const Tensor expanded = k.to(kCPU).expand(w.shape()).to(kFloat64).contiguous();  // (B,H,T,S)
    const std::vector<double> flags = expanded.to_vector<double>();
    visible.resize(flags.size());
    for (size_t i = 0; i < flags.size(); ++i) visible[i] = flags[i] != 0.0;
  }
  std::vector<HeadStats> out(static_cast<size_t>(H));
  std::vector<double> sorted;
  for (int64_t h = 0; h < H; ++h) {
    HeadStats& s = out[static_cast<size_t>(h)];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const size_t offset = static_cast<size_t>(((b * H + h) * T + t) * S);
        const double* row = v.data() + offset;
        sorted.clear();
        bool finite = true;
        for (int64_t j = 0; j < S; ++j) {
          if (!visible.empty() && !visible[offset + static_cast<size_t>(j)]) continue;
          finite = finite && std::isfinite(row[j]);
          sorted.push_back(row[j]);
        }
        const int64_t keys = static_cast<int64_t>(sorted.size());
        if (!finite) {
          ++s.nonfinite_rows;
          continue;
        }
        if (keys < 2) {
          ++s.trivial_rows;
          continue;
        }
        double entropy = 0;
        for (double x : sorted)
          if (x > 0) entropy -= x * std::log(x);  // 0 log 0 = 0: an underflowed weight adds nothing
        const int64_t k = std::min(top_k, keys);
        std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<>());
        double top = 0;
        for (int64_t i = 0; i < k; ++i) top += sorted[static_cast<size_t>(i)];
        const double log_keys = std::log(static_cast<double>(keys));
        s.entropy += entropy;
        s.uniform_entropy += log_keys;
        s.normalized_entropy += entropy / log_keys;
        s.max_weight += sorted[0];
        s.max_mean_ratio += sorted[0] * static_cast<double>(keys);
        s.top_k_mass += top;
        ++s.rows;
      }
    if (s.rows > 0) {
      const double n = static_cast<double>(s.rows);
      for (double* field :
           {&s.entropy, &s.uniform_entropy, &s.normalized_entropy, &s.max_weight, &s.max_mean_ratio, &s.top_k_mass})
        *field /= n;
    }
  }
  return out;
}

std::vector<std::pair<std::string, nn::MultiHeadAttention*>> attention_modules(nn::Module& root) {
  std::vector<std::pair<std::string, nn::MultiHeadAttention*>> out;
  for (auto& [name, module] : root.named_modules())
    if (auto* mha = dynamic_cast<nn::MultiHeadAttention*>(module)) out.emplace_back(name, mha);
  return out;
}

AttentionMonitor::AttentionMonitor(nn::Module& root) : modules_(attention_modules(root)) {}

AttentionMonitor::~AttentionMonitor() { record(false); }

void AttentionMonitor::record(bool on) {
  for (auto& [name, m] : modules_) m->set_record_weights(on);
}

double AttentionMonitor::LayerStats::mean_entropy() const {
  double total = 0;
  for (const HeadStats& h : heads) total += h.entropy;
  return heads.empty() ? 0.0 : total / static_cast<double>(heads.size());
}

std::vector<AttentionMonitor::LayerStats> AttentionMonitor::attention_stats() const {
  std::vector<LayerStats> out;
  for (const auto& [name, m] : modules_) {
    if (!m->last_weights().defined()) continue;
    out.push_back({name, attention_head_stats(m->last_weights(), m->last_keep())});
  }
  return out;
}

std::vector<std::pair<std::string, double>> AttentionMonitor::attention_gradient_norms() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, m] : modules_) out.emplace_back(name, nn::total_grad_norm(m->parameters()));
  return out;
}

std::vector<double> head_gradient_norms(const nn::MultiHeadAttention& attention) {
  const int64_t H = attention.options().heads, dh = attention.d_head(), C = attention.options().d_model;
  std::vector<double> squares(static_cast<size_t>(H), 0.0);
  // Adds the squared gradient of `rows` rows (dim 0) or columns (dim 1) starting at `first`.
  auto add = [](double* total, const Tensor& param, int dim, int64_t first, int64_t count) {
    if (!param.defined() || !param.grad().defined()) return;
    const Tensor g = param.grad().detach().narrow(dim, first, count).to(kFloat64);
    *total += sum(g * g).item<double>();
  };
  for (int64_t h = 0; h < H; ++h) {
    double* total = &squares[static_cast<size_t>(h)];
    const auto& o = attention.options();
    switch (o.layout) {
      case nn::ProjectionLayout::Separate:
        for (const auto* proj : {&attention.q_proj, &attention.k_proj, &attention.v_proj, &attention.kv_proj})
          if (*proj) {
            add(total, (*proj)->weight, 0, h * dh, dh);
            add(total, (*proj)->bias, 0, h * dh, dh);
          }
        break;
      case nn::ProjectionLayout::FusedQKV:
        for (int64_t part = 0; part < (o.shared_kv ? 2 : 3); ++part) {
          add(total, attention.qkv_proj->weight, 0, part * C + h * dh, dh);
          add(total, attention.qkv_proj->bias, 0, part * C + h * dh, dh);
        }
        break;
      case nn::ProjectionLayout::PerHead:
        for (const auto& [name, p] : attention.heads->at<nn::Module>(static_cast<size_t>(h))->named_parameters())
          if (p.grad().defined()) *total += sum(p.grad().detach().to(kFloat64).pow(2.0)).item<double>();
        break;
    }
    add(total, attention.out_proj->weight, 1, h * dh, dh);  // the head's columns of W_o
  }
  std::vector<double> norms;
  for (double sq : squares) norms.push_back(std::sqrt(sq));
  return norms;
}

std::vector<std::pair<std::string, double>> gradient_norms_by_prefix(const nn::Module& root, int depth) {
  std::vector<std::pair<std::string, double>> out;
  std::map<std::string, size_t> index;
  std::vector<double> squares;
  for (const auto& [name, p] : root.named_parameters()) {
    // The first `depth` components of the dotted name, not counting the parameter itself.
    std::string prefix;
    size_t at = 0;
    int parts = 0;
    while (parts < depth) {
      const size_t dot = name.find('.', at);
      if (dot == std::string::npos) break;
      prefix = name.substr(0, dot);
      at = dot + 1;
      ++parts;
    }
    if (prefix.empty()) prefix = name;
    auto [it, inserted] = index.emplace(prefix, out.size());
    if (inserted) {
      out.emplace_back(prefix, 0.0);
      squares.push_back(0.0);
    }
    const Tensor g = p.grad();
    if (g.defined()) squares[it->second] += sum(g.detach().to(kFloat64).pow(2.0)).item<double>();
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].second = std::sqrt(squares[i]);
  return out;
}

}  // namespace heed::diagnostics
