// heed/diagnostics.h — attention statistics and a training-time monitor (seed 000 sec. 6,
// 10; seed 001 sec. 5; seed 003 sec. 8).
//
// Invariants:
//  * Statistics are computed from attention weights (B, H, T, S) in float64 on the host.
//  * The keys a query row may attend come from the attention mask (causal, lengths, padding,
//    window), never from `weight > 0`: a weight that underflowed to exactly 0 is a visible key
//    with weight 0, so a saturated one-hot row has entropy 0 and max/mean ratio L.
//  * Rows with fewer than two visible keys (fully masked rows, the first row of a causal mask)
//    say nothing about sharpness: they are counted apart and left out of every mean.
//  * Rows holding a NaN or Inf weight are counted apart and left out of every mean.
//  * Entropies are in nats; uniform attention over L keys has entropy log L, normalised
//    entropy 1 and max/mean ratio 1; one-hot attention has entropy 0, normalised entropy 0 and
//    max/mean ratio L.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "heed/nn/attention.h"
#include "heed/nn/module.h"

namespace heed::diagnostics {

struct HeadStats {
  double entropy = 0.0;             // mean over rows of -sum w log w (nats)
  double uniform_entropy = 0.0;     // mean over rows of log(visible keys): the entropy of uniform attention
  double normalized_entropy = 0.0;  // mean over rows of entropy / log(visible keys), in [0, 1]
  double max_weight = 0.0;          // mean over rows of the largest weight
  double max_mean_ratio = 0.0;      // mean over rows of max weight / mean weight (mean = 1 / visible keys)
  double top_k_mass = 0.0;          // mean over rows of the summed k largest weights
  int64_t rows = 0;                 // rows with two or more visible keys and finite weights
  int64_t trivial_rows = 0;         // rows with fewer than two visible keys (left out)
  int64_t nonfinite_rows = 0;       // rows holding a NaN or Inf weight (left out)
};

// One entry per head of `weights` (B, H, T, S), or (B, T, S) for a single head. `keep` is
// the boolean "may attend" mask broadcastable to the weights (F::attention_keep_mask), or
// undefined when every key is visible.
std::vector<HeadStats> attention_head_stats(const Tensor& weights, const Tensor& keep = Tensor(), int64_t top_k = 3);

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
  // Statistics of the weights recorded by the last forward pass of each attention module,
  // with the visible keys taken from the mask recorded with them.
  std::vector<LayerStats> attention_stats() const;
  // L2 norm of the gradients of every parameter under each attention module (after backward).
  std::vector<std::pair<std::string, double>> attention_gradient_norms() const;

 private:
  std::vector<std::pair<std::string, nn::MultiHeadAttention*>> modules_;
};

// L2 norm of the gradients that belong to each head of an attention module (after backward):
// the head's rows of the Q, K and V projections (weights and biases) and its columns of the
// output projection; gradients not yet computed count as zero. One entry per head.
std::vector<double> head_gradient_norms(const nn::MultiHeadAttention& attention);

// L2 gradient norm per child module at the given depth of the tree (e.g. depth 2 for
// "encoder.layers"), in parameter order; parameters without gradients count as zero.
std::vector<std::pair<std::string, double>> gradient_norms_by_prefix(const nn::Module& root, int depth);

}  // namespace heed::diagnostics
