// examples/translate/task.h — the toy translation task: vocabularies, batches, the model
// built from a JSON config, a training loop with evaluation hooks, greedy and beam-search
// decoding with the KV cache, and BLEU / exact-match evaluation.
//
// Invariants: token id 0 is <pad>, 1 <bos>, 2 <eos>, 3 <unk> in both vocabularies; batches
// are drawn with the default generator, so restoring the RNG state (checkpoints) replays
// the same batches; the model config JSON holds everything needed to rebuild the model and
// its vocabularies (it is stored in every checkpoint).
#pragma once

#include <heed/heed.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "corpus.h"

namespace translate {

inline constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;

class Vocab {
 public:
  Vocab() = default;
  // The specials, then every token of `sentences` by first appearance.
  static Vocab build(const std::vector<std::string>& sentences);
  static Vocab from_tokens(std::vector<std::string> tokens);
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t id(const std::string& token) const;
  const std::string& token(int64_t id) const;
  std::vector<int64_t> encode(const std::vector<std::string>& tokens) const;
  // Stops at <eos>, skips <pad>/<bos>.
  std::vector<std::string> decode(const std::vector<int64_t>& ids) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> index_;
};

struct ModelConfig {
  int64_t d_model = 128, heads = 4, layers = 2, d_ff = 512, max_len = 32;
  double dropout = 0.1;
  std::string attn_scale = "sqrt_dk";
  bool norm_first = true;
  nlohmann::json to_json() const;
  // Checked: every value must be of its type and within the flags' bounds, else heed::Error
  // naming `source`, the key and the value.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "model config");
};

// What a translate checkpoint's configuration holds, read with every value checked (a corrupt
// or foreign configuration is a heed::Error naming `source` and the key).
struct SavedConfig {
  Vocab source, target;
  ModelConfig model;
  CorpusOptions corpus;
};
SavedConfig read_saved_config(const nlohmann::json& config, const std::string& source);

struct Task {
  Corpus corpus;
  Vocab source, target;
  CorpusOptions corpus_options;
};
Task make_task(const CorpusOptions& options);

// The positions a model needs for this task: the longest source or target sentence of every
// split plus <bos>/<eos>, rounded up to a multiple of 16, at least 32 (the quick task's 32).
int64_t positions_needed(const Task& task);

std::shared_ptr<heed::nn::Transformer> build_model(const ModelConfig& config, const Vocab& source, const Vocab& target);

struct Batch {
  heed::Tensor src;      // (B, S) int64, <eos>-terminated, padded
  heed::Tensor tgt_in;   // (B, T) <bos> + target
  heed::Tensor tgt_out;  // (B, T) target + <eos>, padded with <pad> (ignored by the loss)
  int64_t target_tokens = 0;
};
Batch make_batch(const std::vector<Pair>& pairs, const std::vector<size_t>& rows, const Vocab& source,
                 const Vocab& target);
// A batch of `size` random training rows drawn with the default generator (or `generator`).
Batch random_batch(const Task& task, int64_t size);
Batch random_batch(const Task& task, int64_t size, heed::Generator& generator);

// Token-level cross entropy of a batch (label smoothing as given), on the model's device.
heed::Tensor batch_loss(const heed::nn::Transformer& model, const Batch& batch, double label_smoothing);
// Mean loss over a whole split (no smoothing, eval mode restored by the caller).
double evaluate_loss(const heed::nn::Transformer& model, const Task& task, const std::vector<Pair>& split,
                     int64_t batch_size = 128);

struct DecodeOptions {
  int beam = 1;                 // 1: greedy
  double length_penalty = 0.6;  // GNMT alpha: score / ((5 + len) / 6)^alpha
  int64_t max_len = 128;        // capped at the model's positions - 1
};
// Translates tokenized German sentences (a batch at a time) with the KV cache.
std::vector<std::vector<std::string>> translate_batch(const heed::nn::Transformer& model, const Vocab& source,
                                                      const Vocab& target,
                                                      const std::vector<std::vector<std::string>>& sentences,
                                                      const DecodeOptions& options);

struct TrainOptions {
  int64_t batch_size = 64, steps = 3000, warmup = 300;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.01, label_smoothing = 0.1, clip = 1.0;
  // Mixed precision: the forward pass and the loss run under amp::Autocast with this dtype
  // (float32 master weights); float16 adds dynamic loss scaling. std::nullopt: float32.
  std::optional<heed::DType> amp = std::nullopt;
  // Data parallelism (heed-run + DDP): every rank draws the same global batch of batch_size rows
  // from `batch_generator` (null: the default generator) and trains on its rows
  // [shard * batch_size / shards, (shard + 1) * batch_size / shards) (batch_size must be divisible
  // by shards). Its token-mean loss is weighted by shards * (its target tokens / the global
  // batch's), so DDP's average of the gradients is the gradient of the global batch's loss.
  heed::Generator* batch_generator = nullptr;
  int64_t shard = 0, shards = 1;
};

// AdamW (decay on weight matrices only) with warmup + cosine decay and global-norm clipping;
// optionally mixed precision (TrainOptions::amp) with a GradScaler for float16.
class Trainer {
 public:
  Trainer(heed::nn::Transformer& model, const Task& task, const TrainOptions& options);
  struct StepResult {
    double loss = 0, grad_norm = 0, lr = 0;  // loss: this rank's rows' token mean (unweighted)
    int64_t target_tokens = 0;
    bool stepped = true;  // false: a float16 gradient overflowed and the update was skipped
  };
  // One optimisation step on a random batch; `after_backward` (if set) runs between
  // backward (gradients already unscaled) and clipping, e.g. to measure gradients.
  StepResult step(const std::function<void()>& after_backward = nullptr);
  heed::optim::AdamW& optimizer() { return *optimizer_; }
  heed::optim::WarmupCosineLR& scheduler() { return *scheduler_; }
  // The loss scaler (disabled unless TrainOptions::amp is float16); checkpoints keep its state.
  heed::amp::GradScaler& scaler() { return scaler_; }

 private:
  heed::nn::Transformer& model_;
  const Task& task_;
  TrainOptions options_;
  std::unique_ptr<heed::optim::AdamW> optimizer_;
  std::unique_ptr<heed::optim::WarmupCosineLR> scheduler_;
  heed::amp::GradScaler scaler_;
};

struct EvalResult {
  double bleu = 0.0;
  double exact_match = 0.0;  // fraction of sentences translated exactly
  std::vector<std::string> hypotheses;
};
EvalResult evaluate_translation(const heed::nn::Transformer& model, const Task& task, const std::vector<Pair>& split,
                                const DecodeOptions& options, int64_t batch_size = 100);

}  // namespace translate
