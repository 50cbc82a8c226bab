// heed/doctor.h — the documents' attention troubleshooting checks as a library (the
// `heed-doctor` tool is a thin front end): seed 000 sec. 2, 6, 7 and 10, seed 001 sec. 5,
// seed 003 sec. 3.3 and 8.
//
// Each check measures something on a model and a batch of its data, compares it with a
// healthy range and gives a verdict (ok / info / warn / fail); a finding that is not ok names
// its cause, the fix the documents suggest and the section it comes from.
// Invariants:
//  * Statistics come from what the model computes on the batch, never from its configuration:
//    visible keys from the attention mask, the applied scale fitted from the recorded weights
//    and q.k recomputed with the layer's own projections.
//  * The doctor leaves the model as it found it, also when a check throws (a scope guard):
//    weights unchanged, gradients cleared, train/eval mode, weight recording and key/value
//    perturbations restored, and the default RNG stream seen by the caller unchanged.
//  * Report::failed() is true exactly when some finding is Verdict::Fail.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "heed/nn/module.h"
#include "heed/nn/transformer.h"

namespace heed::doctor {

enum class Verdict { Ok, Info, Warn, Fail };  // in increasing severity
const char* verdict_name(Verdict v);

struct Finding {
  std::string check;     // e.g. "attention head"
  std::string where;     // e.g. "blocks.0.self_attn head 2", or "model"
  std::string measured;  // human-readable value
  std::string healthy;   // the healthy range
  Verdict verdict = Verdict::Ok;
  std::string cause;    // stable id of the root cause this check tests, e.g. "saturated_softmax"
  std::string fix;      // what the documents suggest when it is not ok
  std::string section;  // where the documents say so, e.g. "seed 001 sec. 5.2"
};

// A root cause with the findings that point to it, for the summary.
struct RootCause {
  std::string cause, title, fix, section;
  Verdict verdict = Verdict::Ok;
  std::vector<std::string> where;  // the places it was seen
};

struct Report {
  std::vector<Finding> findings;
  bool failed() const;
  int count(Verdict v) const;
  Verdict overall() const;  // the worst verdict
  // The failing and warning causes, most likely first (fails before warns, then the order of
  // the documents' troubleshooting: numerics, scale, masks, heads, sharpness, initialisation).
  std::vector<RootCause> root_causes() const;
  // The worst verdict among the findings of `cause` (Ok when none).
  Verdict verdict_of(const std::string& cause) const;
  // The summary (overall verdict and up to `max_causes` ranked causes with their fix), then
  // the table; healthy rows of the same check are collapsed into one unless `verbose`.
  std::string text(bool verbose = false, size_t max_causes = 3) const;
  std::string table(bool verbose = true) const;
  nlohmann::json json() const;  // every row, plus the ranked causes
};

// What the doctor needs from a model: the model, its outputs on a probe batch, and optional
// closures for the checks that need more. Any nn::Module containing nn::MultiHeadAttention
// layers works; lm_subject and seq2seq_subject build it for heed's own models.
struct Subject {
  nn::Module* model = nullptr;
  // Outputs (usually logits) on the probe batch. Required.
  std::function<Tensor()> logits;
  // Scalar training loss on the probe batch, for the gradient checks (skipped when null).
  std::function<Tensor()> loss;
  // Max |difference| of outputs at positions before t when inputs after t change; null if the
  // model is not autoregressive.
  std::function<double()> causal_leakage;
  // Outputs of a full forward pass and of step-by-step decoding with the model's KV cache, on
  // the same sequence (compared by the doctor); null when there is no cache.
  std::function<Tensor()> full_logits;
  std::function<Tensor()> incremental_logits;
  // Padding of the probe batch: bool (B, S), true = padding. The doctor perturbs the keys and
  // values at padded positions in every attention layer whose keys come from that input and
  // checks that the outputs at real positions do not move (seed 003 sec. 8.3).
  Tensor key_padding;
  // Which attention layers (by dotted name) take their keys from the padded input; null =
  // every layer whose key length is S.
  std::function<bool(const std::string& layer)> keys_from_padded_input;
  // Positions of the outputs that must not move in the padding check: bool (B, T), true =
  // compare; undefined = compare every output position that is not padding (needs T = S).
  Tensor real_outputs;
};

// heed's models: a decoder-only LM on (tokens, targets), and the encoder-decoder Transformer.
Subject lm_subject(nn::TransformerLM& model, const Tensor& tokens, const Tensor& targets);
Subject seq2seq_subject(nn::Transformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out);

// Runs every check that the subject allows.
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
