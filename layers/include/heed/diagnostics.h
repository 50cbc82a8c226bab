// heed/diagnostics.h — attention statistics and a training-time monitor (seed 000 sec. 6,
// 10; seed 001 sec. 5; seed 003 sec. 8).
//
// Invariants: statistics are computed from attention weights (B, H, T, S) in float64 on
// the host; query rows whose weights sum to less than 0.5 (fully masked rows, which heed
// sets to zero) are left out; entropies are in nats (uniform attention over L keys has
// entropy log L).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "heed/nn/attention.h"
#include "heed/nn/module.h"

namespace heed::diagnostics {

struct HeadStats {
  double entropy = 0.0;          // mean over query rows
  double uniform_entropy = 0.0;  // mean log(number of attendable keys): the entropy of uniform attention
  double max_weight = 0.0;       // mean over rows of the largest weight
  double max_mean_ratio = 0.0;   // mean over rows of max weight / mean weight (mean = 1 / attendable keys)
  int64_t rows = 0;              // query rows that counted
};

// One entry per head of `weights` (B, H, T, S), or (B, T, S) for a single head.
std::vector<HeadStats> attention_head_stats(const Tensor& weights);

// Every MultiHeadAttention in a model, with its dotted path.
std::vector<std::pair<std::string, nn::MultiHeadAttention*>> attention_modules(nn::Module& root);

// Records attention weights during forward passes and summarises them per layer and head,
// and computes per-layer gradient norms.
class AttentionMonitor {
 public:
  explicit AttentionMonitor(nn::Module& root);
  ~AttentionMonitor();  // stops recording
  AttentionMonitor(const AttentionMonitor&) = delete;
  AttentionMonitor& operator=(const AttentionMonitor&) = delete;

  // Turns weight recording on (costs the composed attention path) or off.
  void record(bool on);
  struct LayerStats {
    std::string name;
    std::vector<HeadStats> heads;
    double mean_entropy() const;
  };
  // Statistics of the weights recorded by the last forward pass of each attention module.
  std::vector<LayerStats> attention_stats() const;
  // L2 norm of the gradients of every parameter under each attention module (after backward).
  std::vector<std::pair<std::string, double>> attention_gradient_norms() const;

 private:
  std::vector<std::pair<std::string, nn::MultiHeadAttention*>> modules_;
};

// L2 gradient norm per child module at the given depth of the tree (e.g. depth 2 for
// "encoder.layers"), in parameter order; parameters without gradients count as zero.
std::vector<std::pair<std::string, double>> gradient_norms_by_prefix(const nn::Module& root, int depth);

}  // namespace heed::diagnostics
