// layers/src/diagnostics.cpp — attention statistics and the training-time monitor.
#include "heed/diagnostics.h"

#include <cmath>
#include <map>

#include "heed/ops.h"

namespace heed::diagnostics {

std::vector<HeadStats> attention_head_stats(const Tensor& weights) {
  HEED_CHECK(weights.defined() && (weights.dim() == 4 || weights.dim() == 3), "attention_head_stats",
             "expects weights (B, H, T, S) or (B, T, S), got {}",
             weights.defined() ? shape_str(weights.shape()) : "undefined");
  const Tensor w = weights.dim() == 3 ? weights.unsqueeze(1) : weights;
  const int64_t B = w.size(0), H = w.size(1), T = w.size(2), S = w.size(3);
  const std::vector<double> v = w.detach().to(kFloat64).contiguous().to_vector<double>();
  std::vector<HeadStats> out(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) {
    HeadStats& s = out[static_cast<size_t>(h)];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const double* row = v.data() + ((b * H + h) * T + t) * S;
        double total = 0, entropy = 0, largest = 0;
        int64_t attendable = 0;
        for (int64_t j = 0; j < S; ++j) {
          total += row[j];
          if (row[j] > 0) {
            entropy -= row[j] * std::log(row[j]);
            ++attendable;
          }
          largest = std::max(largest, row[j]);
        }
        if (total < 0.5) continue;  // fully masked row
        // Keys with exactly zero weight were masked (softmax never gives exact zeros otherwise
        // except by underflow, which then also marks them as not attended).
        const double keys = static_cast<double>(std::max<int64_t>(attendable, 1));
        s.entropy += entropy;
        s.uniform_entropy += std::log(keys);
        s.max_weight += largest;
        s.max_mean_ratio += largest * keys;
        ++s.rows;
      }
    if (s.rows > 0) {
      const double n = static_cast<double>(s.rows);
      s.entropy /= n;
      s.uniform_entropy /= n;
      s.max_weight /= n;
      s.max_mean_ratio /= n;
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
    out.push_back({name, attention_head_stats(m->last_weights())});
  }
  return out;
}

namespace {
double grad_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    total += sum(g.detach().to(kFloat64).pow(2.0)).item<double>();
  }
  return std::sqrt(total);
}
}  // namespace

std::vector<std::pair<std::string, double>> AttentionMonitor::attention_gradient_norms() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, m] : modules_) out.emplace_back(name, grad_norm(m->parameters()));
  return out;
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
