// heed/doctor.h — the documents' attention troubleshooting checks as a library (the
// `heed-doctor` tool is a thin front end): seed 000 sec. 6 and 10, seed 001 sec. 5,
// seed 003 sec. 8.
//
// Each check measures something on a model and a batch of its data, compares it with a
// healthy range and gives a verdict (ok / warn / fail) with the fix the documents suggest.
// Invariants: the doctor leaves the model's weights and gradients as it found them
// (gradients are cleared), puts the model in eval mode for the eval checks, and never
// changes the default RNG stream seen by the caller (it saves and restores it).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "heed/nn/module.h"
#include "heed/nn/transformer.h"

namespace heed::doctor {

enum class Verdict { Ok, Warn, Fail };
const char* verdict_name(Verdict v);

struct Finding {
  std::string check;     // e.g. "attention entropy"
  std::string where;     // e.g. "blocks.0.self_attn head 2", or "model"
  std::string measured;  // human-readable value
  std::string healthy;   // the healthy range
  Verdict verdict = Verdict::Ok;
  std::string fix;  // what the documents suggest when it is not ok
};

struct Report {
  std::vector<Finding> findings;
  bool failed() const;
  int count(Verdict v) const;
  std::string table() const;  // one row per finding
  nlohmann::json json() const;
};

// What the doctor needs from a model; the helpers below build it for heed's models.
struct Subject {
  nn::Module* model = nullptr;
  // Scalar training loss on the probe batch (for gradients).
  std::function<Tensor()> loss;
  // Output logits on the probe batch (for NaN and dropout checks).
  std::function<Tensor()> logits;
  // Max |difference| of outputs at positions before t when inputs after t change; null if the
  // model is not autoregressive.
  std::function<double()> causal_leakage;
  // Logits of a full forward pass and of step-by-step decoding with the KV cache, on the
  // same sequence (compared by the doctor); null when there is no cache.
  std::function<Tensor()> full_logits;
  std::function<Tensor()> incremental_logits;
};

Subject lm_subject(nn::TransformerLM& model, const Tensor& tokens, const Tensor& targets);
Subject seq2seq_subject(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out);

Report run_checks(const Subject& subject);

// ---- probe: seed 000 sec. 10's recipe on random Q and K -------------------------------------

struct ProbeRow {
  int64_t dk = 0;
  bool scaled = false;
  double score_mean = 0, score_std = 0, score_mean_abs = 0;
  double entropy = 0, uniform_entropy = 0, max_mean_ratio = 0, max_weight = 0;
  double grad_norm = 0;  // mean per-row norm of d softmax / d scores applied to a random upstream gradient
  std::vector<double> histogram_edges, histogram_counts;  // softmax weights
};
// Random N(0, 1) queries and keys (queries x keys per dk), unscaled and scaled by 1/sqrt(dk).
std::vector<ProbeRow> probe(const std::vector<int64_t>& dks, int64_t queries, int64_t keys, uint64_t seed);

}  // namespace heed::doctor
