// examples/translate/task.cpp — the toy translation task (see task.h).
#include "task.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace translate {

using namespace heed;

// ---- vocabulary -----------------------------------------------------------------------------

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    HEED_CHECK(v.index_.emplace(v.tokens_[i], static_cast<int64_t>(i)).second, "Vocab", "duplicate token '{}'",
               v.tokens_[i]);
  }
  HEED_CHECK(v.tokens_.size() >= 4 && v.tokens_[0] == "<pad>" && v.tokens_[1] == "<bos>" && v.tokens_[2] == "<eos>" &&
                 v.tokens_[3] == "<unk>",
             "Vocab", "a vocabulary must start with <pad> <bos> <eos> <unk>");
  return v;
}

Vocab Vocab::build(const std::vector<std::string>& sentences) {
  std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  std::unordered_map<std::string, int64_t> seen;
  for (const std::string& t : tokens) seen.emplace(t, 0);
  for (const std::string& s : sentences)
    for (const std::string& t : split_tokens(s))
      if (seen.emplace(t, 0).second) tokens.push_back(t);
  return from_tokens(std::move(tokens));
}

int64_t Vocab::id(const std::string& token) const {
  auto it = index_.find(token);
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  HEED_CHECK(id >= 0 && id < size(), "Vocab", "token id {} is outside [0, {})", id, size());
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids;
  for (const std::string& t : tokens) ids.push_back(id(t));
  return ids;
}

std::vector<std::string> Vocab::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  for (int64_t i : ids) {
    if (i == kEos) break;
    if (i == kPad || i == kBos) continue;
    out.push_back(token(i));
  }
  return out;
}

// ---- config, task, model --------------------------------------------------------------------

nlohmann::json ModelConfig::to_json() const {
  return {{"d_model", d_model}, {"heads", heads},     {"layers", layers},         {"d_ff", d_ff},
          {"max_len", max_len}, {"dropout", dropout}, {"attn_scale", attn_scale}, {"norm_first", norm_first}};
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  // The same bounds as the translate flags that write these values.
  const io::JsonFields fields(j, "translate::ModelConfig", source);
  ModelConfig c;
  c.d_model = fields.integer("d_model", 1, 65536);
  c.heads = fields.integer("heads", 1, 1024);
  c.layers = fields.integer("layers", 1, 64);
  c.d_ff = fields.integer("d_ff", 1, 1 << 20);
  c.max_len = fields.integer("max_len", 2, 1 << 20);
  c.dropout = fields.number("dropout", 0.0, 0.99);
  c.attn_scale = fields.string("attn_scale");
  c.norm_first = fields.boolean("norm_first");
  HEED_CHECK(c.d_model % c.heads == 0, "translate::ModelConfig", "{}: d_model {} is not divisible by heads {}", source,
             c.d_model, c.heads);
  return c;
}

SavedConfig read_saved_config(const nlohmann::json& config, const std::string& source) {
  const io::JsonFields fields(config, "translate", source);
  HEED_CHECK(fields.has("source_vocab") && fields.has("target_vocab") && fields.has("model"), "translate",
             "{} is not a translate checkpoint (its configuration has no source_vocab, target_vocab and model)",
             source);
  SavedConfig saved;
  saved.source = Vocab::from_tokens(fields.strings("source_vocab"));
  saved.target = Vocab::from_tokens(fields.strings("target_vocab"));
  saved.model = ModelConfig::from_json(fields.value("model"), source + " model");
  const io::JsonFields corpus = fields.object("corpus");
  // The same bounds as the --seed, --train-size, --val-size and --test-size flags.
  saved.corpus.seed = corpus.unsigned_integer("seed", uint64_t{1} << 62);
  saved.corpus.train_size = static_cast<int>(corpus.integer("train_size", 100, 10000000));
  saved.corpus.test_size = static_cast<int>(corpus.integer("test_size", 1, 1000000));
  // Checkpoints written before --val-size existed used the default split.
  if (corpus.has("val_size")) saved.corpus.validation_size = static_cast<int>(corpus.integer("val_size", 8, 1000000));
  // ... and before --task existed, the quick level.
  if (corpus.has("task")) saved.corpus.level = parse_task_level(corpus.string("task"));
  return saved;
}

Task make_task(const CorpusOptions& options) {
  Task task;
  task.corpus_options = options;
  task.corpus = generate_corpus(options);
  std::vector<std::string> src, tgt;
  for (const Pair& p : task.corpus.train) {
    src.push_back(p.source);
    tgt.push_back(p.target);
  }
  task.source = Vocab::build(src);
  task.target = Vocab::build(tgt);
  return task;
}

int64_t positions_needed(const Task& task) {
  size_t longest = 0;
  for (const std::vector<Pair>* split : {&task.corpus.train, &task.corpus.validation, &task.corpus.test})
    for (const Pair& p : *split)
      longest = std::max({longest, split_tokens(p.source).size(), split_tokens(p.target).size()});
  const auto needed = static_cast<int64_t>(longest) + 2;
  return std::max<int64_t>(32, (needed + 15) / 16 * 16);
}

std::shared_ptr<nn::Transformer> build_model(const ModelConfig& c, const Vocab& source, const Vocab& target) {
  nn::TransformerOptions o;
  o.src_vocab = source.size();
  o.tgt_vocab = target.size();
  o.encoder_layers = c.layers;
  o.decoder_layers = c.layers;
  o.max_len = c.max_len;
  o.pad_id = kPad;
  o.tie_output = true;
  o.positional = nn::PositionalKind::Sinusoidal;
  o.layer.d_model = c.d_model;
  o.layer.heads = c.heads;
  o.layer.d_ff = c.d_ff;
  o.layer.dropout = c.dropout;
  o.layer.norm_first = c.norm_first;
  o.layer.activation = nn::Activation::GELU;
  o.layer.attention.scale = nn::parse_attention_scale(c.attn_scale);
  return std::make_shared<nn::Transformer>(o);
}

// ---- batches --------------------------------------------------------------------------------

Batch make_batch(const std::vector<Pair>& pairs, const std::vector<size_t>& rows, const Vocab& source,
                 const Vocab& target) {
  std::vector<std::vector<int64_t>> src, tgt;
  size_t S = 1, T = 1;
  for (size_t r : rows) {
    src.push_back(source.encode(split_tokens(pairs[r].source)));
    src.back().push_back(kEos);
    tgt.push_back(target.encode(split_tokens(pairs[r].target)));
    S = std::max(S, src.back().size());
    T = std::max(T, tgt.back().size() + 1);
  }
  const size_t B = rows.size();
  std::vector<int64_t> s(B * S, kPad), ti(B * T, kPad), to(B * T, kPad);
  Batch batch;
  for (size_t b = 0; b < B; ++b) {
    std::copy(src[b].begin(), src[b].end(), s.begin() + static_cast<long>(b * S));
    ti[b * T] = kBos;
    for (size_t t = 0; t < tgt[b].size(); ++t) {
      ti[b * T + t + 1] = tgt[b][t];
      to[b * T + t] = tgt[b][t];
    }
    to[b * T + tgt[b].size()] = kEos;
    batch.target_tokens += static_cast<int64_t>(tgt[b].size() + 1);
  }
  batch.src = from_vector(s, {static_cast<int64_t>(B), static_cast<int64_t>(S)});
  batch.tgt_in = from_vector(ti, {static_cast<int64_t>(B), static_cast<int64_t>(T)});
  batch.tgt_out = from_vector(to, {static_cast<int64_t>(B), static_cast<int64_t>(T)});
  return batch;
}

Batch random_batch(const Task& task, int64_t size) { return random_batch(task, size, default_generator()); }

Batch random_batch(const Task& task, int64_t size, Generator& generator) {
  const Tensor picks = randint(0, static_cast<int64_t>(task.corpus.train.size()), {size}, generator);
  std::vector<size_t> rows;
  for (int64_t r : picks.to_vector<int64_t>()) rows.push_back(static_cast<size_t>(r));
  return make_batch(task.corpus.train, rows, task.source, task.target);
}

Tensor batch_loss(const nn::Transformer& model, const Batch& batch, double label_smoothing) {
  const Device device = model.device();                                          // batches are built on the CPU
  Tensor logits = model.forward(batch.src.to(device), batch.tgt_in.to(device));  // (B,T,V)
  return F::cross_entropy(logits, batch.tgt_out.to(device), {.ignore_index = kPad, .label_smoothing = label_smoothing});
}

double evaluate_loss(const nn::Transformer& model, const Task& task, const std::vector<Pair>& split,
                     int64_t batch_size) {
  NoGradGuard no_grad;
  double total = 0;
  int64_t tokens = 0;
  for (size_t start = 0; start < split.size(); start += static_cast<size_t>(batch_size)) {
    std::vector<size_t> rows;
    for (size_t r = start; r < std::min(split.size(), start + static_cast<size_t>(batch_size)); ++r) rows.push_back(r);
    const Batch b = make_batch(split, rows, task.source, task.target);
    total += batch_loss(model, b, 0.0).item<double>() * static_cast<double>(b.target_tokens);
    tokens += b.target_tokens;
  }
  return tokens ? total / static_cast<double>(tokens) : 0.0;
}

// ---- training -------------------------------------------------------------------------------

Trainer::Trainer(nn::Transformer& model, const Task& task, const TrainOptions& options)
    : model_(model), task_(task), options_(options), scaler_({.enabled = options.amp == kFloat16}) {
  // Weight matrices decay; biases, LayerNorm parameters and embeddings do not.
  optim::ParamGroup decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool is_matrix = p.dim() >= 2 && name.find("embed") == std::string::npos;
    (is_matrix ? decay : no_decay).params.push_back(p);
  }
  decay.weight_decay = options.weight_decay;
  no_decay.weight_decay = 0.0;
  optimizer_ = std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{decay, no_decay},
                                              optim::AdamWOptions{.lr = options.lr, .betas = {0.9, 0.98}});
  scheduler_ = std::make_unique<optim::WarmupCosineLR>(*optimizer_, std::min(options.warmup, options.steps),
                                                       options.steps, options.min_lr);
}

Trainer::StepResult Trainer::step(const std::function<void()>& after_backward) {
  model_.train();
  Batch batch = options_.batch_generator ? random_batch(task_, options_.batch_size, *options_.batch_generator)
                                         : random_batch(task_, options_.batch_size);
  double weight = 1.0;  // this rank's share of the global batch's loss, times shards
  if (options_.shards > 1) {
    const int64_t rows = options_.batch_size / options_.shards, first = options_.shard * rows;
    const int64_t global_tokens = batch.target_tokens;
    // Same padded lengths on every rank: (rows, S), (rows, T), (rows, T).
    batch.src = batch.src.narrow(0, first, rows).contiguous();
    batch.tgt_in = batch.tgt_in.narrow(0, first, rows).contiguous();
    batch.tgt_out = batch.tgt_out.narrow(0, first, rows).contiguous();
    const std::vector<int64_t> out_ids = batch.tgt_out.to_vector<int64_t>();
    batch.target_tokens =
        static_cast<int64_t>(std::count_if(out_ids.begin(), out_ids.end(), [](int64_t id) { return id != kPad; }));
    weight = static_cast<double>(options_.shards * batch.target_tokens) / static_cast<double>(global_tokens);
  }
  Tensor loss;
  {
    amp::Autocast autocast(options_.amp);  // no-op when options_.amp is std::nullopt
    loss = batch_loss(model_, batch, options_.label_smoothing);
  }
  optimizer_->zero_grad();
  scaler_.scale(options_.shards > 1 ? loss * weight : loss).backward();  // a pass-through unless float16
  scaler_.unscale_(*optimizer_);
  if (after_backward) after_backward();
  StepResult r;
  r.grad_norm = nn::clip_grad_norm_(model_.parameters(), options_.clip);
  r.lr = scheduler_->last_lr()[0];
  r.stepped = scaler_.step(*optimizer_);  // skipped when a float16 gradient overflowed
  scaler_.update();
  scheduler_->step();
  r.loss = loss.item<double>();
  r.target_tokens = batch.target_tokens;
  return r;
}

// ---- decoding -------------------------------------------------------------------------------

namespace {

struct Hypothesis {
  std::vector<int64_t> tokens;
  double score;  // length-normalised log-probability
};

double length_normalised(double log_prob, size_t length, double alpha) {
  return log_prob / std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

}  // namespace

std::vector<std::vector<std::string>> translate_batch(const nn::Transformer& model, const Vocab& source,
                                                      const Vocab& target,
                                                      const std::vector<std::vector<std::string>>& sentences,
                                                      const DecodeOptions& options) {
  NoGradGuard no_grad;
  const int64_t B = static_cast<int64_t>(sentences.size());
  if (B == 0) return {};
  const int64_t K = std::max(1, options.beam);
  // Source batch, each sentence repeated K times: (B*K, S).
  size_t S = 1;
  std::vector<std::vector<int64_t>> ids;
  for (const auto& s : sentences) {
    ids.push_back(source.encode(s));
    ids.back().push_back(kEos);
    S = std::max(S, ids.back().size());
  }
  std::vector<int64_t> flat(static_cast<size_t>(B * K) * S, kPad);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k)
      std::copy(ids[b].begin(), ids[b].end(), flat.begin() + static_cast<long>(static_cast<size_t>(b * K + k) * S));
  const Tensor src = from_vector(flat, {B * K, static_cast<int64_t>(S)}).to(model.device());
  const Tensor memory = model.encode(src);
  std::vector<nn::DecoderLayerCache> caches = model.make_caches();
  const int64_t max_len = std::min<int64_t>(options.max_len, model.options().max_len - 1);

  // Beams: B*K rows of tokens and cumulative log-probabilities; row b*K+k.
  std::vector<std::vector<int64_t>> beams(static_cast<size_t>(B * K));
  std::vector<double> beam_score(static_cast<size_t>(B * K), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 1; k < K; ++k) beam_score[static_cast<size_t>(b * K + k)] = -INFINITY;  // start from one beam
  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  std::vector<int64_t> last(static_cast<size_t>(B * K), kBos);

  for (int64_t step = 0; step < max_len; ++step) {
    const Tensor input = from_vector(last, {B * K, 1}).to(src.device());
    const Tensor logits = model.decode(input, memory, src, &caches);  // (B*K,1,V)
    const Tensor log_probs = F::log_softmax(logits.squeeze(1), -1);   // (B*K,V)
    const int64_t V = log_probs.size(1);
    const std::vector<float> lp = log_probs.to(kCPU).to(kFloat32).to_vector<float>();
    std::vector<int64_t> origin(static_cast<size_t>(B * K));
    std::vector<std::vector<int64_t>> next_beams(static_cast<size_t>(B * K));
    std::vector<double> next_score(static_cast<size_t>(B * K), -INFINITY);
    for (int64_t b = 0; b < B; ++b) {
      // Candidates (score, row, token) over the K beams of sentence b.
      std::vector<std::tuple<double, int64_t, int64_t>> candidates;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t row = b * K + k;
        if (!std::isfinite(beam_score[static_cast<size_t>(row)])) continue;
        const float* p = lp.data() + row * V;
        if (K == 1) {
          const int64_t best = static_cast<int64_t>(std::max_element(p, p + V) - p);
          candidates.emplace_back(beam_score[static_cast<size_t>(row)] + p[best], row, best);
          continue;
        }
        for (int64_t v = 0; v < V; ++v) candidates.emplace_back(beam_score[static_cast<size_t>(row)] + p[v], row, v);
      }
      const size_t keep = std::min(candidates.size(), static_cast<size_t>(2 * K));
      std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(keep), candidates.end(),
                        [](const auto& a, const auto& c) { return std::get<0>(a) > std::get<0>(c); });
      int64_t filled = 0;
      for (size_t c = 0; c < keep && filled < K; ++c) {
        const auto [score, row, token] = candidates[c];
        std::vector<int64_t> seq = beams[static_cast<size_t>(row)];
        if (token == kEos || step + 1 == max_len) {
          if (!done[static_cast<size_t>(b)])
            finished[static_cast<size_t>(b)].push_back(
                {seq, length_normalised(score, seq.size() + 1, options.length_penalty)});
          if (K == 1) {
            // Greedy: the sentence is finished; keep a dead beam so shapes stay fixed.
            const int64_t dest = b * K;
            origin[static_cast<size_t>(dest)] = row;
            next_beams[static_cast<size_t>(dest)] = seq;
            next_score[static_cast<size_t>(dest)] = -INFINITY;
            filled = K;
          }
          continue;
        }
        const int64_t dest = b * K + filled++;
        seq.push_back(token);
        origin[static_cast<size_t>(dest)] = row;
        next_beams[static_cast<size_t>(dest)] = std::move(seq);
        next_score[static_cast<size_t>(dest)] = score;
      }
      for (; filled < K; ++filled) {  // no live candidate left for these beams
        const int64_t dest = b * K + filled;
        origin[static_cast<size_t>(dest)] = b * K;
        next_score[static_cast<size_t>(dest)] = -INFINITY;
      }
      // A sentence is done when it has K finished hypotheses and no live beam can beat them.
      auto& fin = finished[static_cast<size_t>(b)];
      if (static_cast<int64_t>(fin.size()) >= K) {
        double best_finished = -INFINITY, best_alive = -INFINITY;
        for (const auto& h : fin) best_finished = std::max(best_finished, h.score);
        for (int64_t k = 0; k < K; ++k) {
          const double s = next_score[static_cast<size_t>(b * K + k)];
          if (std::isfinite(s))
            best_alive =
                std::max(best_alive, length_normalised(s, static_cast<size_t>(max_len), options.length_penalty));
        }
        if (best_alive <= best_finished) {
          done[static_cast<size_t>(b)] = true;
          for (int64_t k = 0; k < K; ++k) next_score[static_cast<size_t>(b * K + k)] = -INFINITY;
        }
      }
    }
    beams = std::move(next_beams);
    beam_score = std::move(next_score);
    bool any_alive = false;
    for (int64_t r = 0; r < B * K; ++r) {
      any_alive = any_alive || std::isfinite(beam_score[static_cast<size_t>(r)]);
      last[static_cast<size_t>(r)] =
          beams[static_cast<size_t>(r)].empty() ? kBos : beams[static_cast<size_t>(r)].back();
    }
    if (!any_alive) break;
    if (K > 1) {
      const Tensor order = from_vector(origin, {B * K}).to(src.device());
      for (auto& c : caches) c.self_attention.reorder(order);
    }
  }
  std::vector<std::vector<std::string>> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto& fin = finished[static_cast<size_t>(b)];
    const Hypothesis* best = nullptr;
    for (const auto& h : fin)
      if (!best || h.score > best->score) best = &h;
    out.push_back(best ? target.decode(best->tokens) : std::vector<std::string>{});
  }
  return out;
}

EvalResult evaluate_translation(const nn::Transformer& model, const Task& task, const std::vector<Pair>& split,
                                const DecodeOptions& options, int64_t batch_size) {
  EvalResult r;
  std::vector<std::string> references;
  int64_t exact = 0;
  for (size_t start = 0; start < split.size(); start += static_cast<size_t>(batch_size)) {
    std::vector<std::vector<std::string>> batch;
    for (size_t i = start; i < std::min(split.size(), start + static_cast<size_t>(batch_size)); ++i)
      batch.push_back(split_tokens(split[i].source));
    const auto translations = translate_batch(model, task.source, task.target, batch, options);
    for (size_t i = 0; i < translations.size(); ++i) {
      std::string hyp;
      for (const std::string& t : translations[i]) hyp += (hyp.empty() ? "" : " ") + t;
      const std::string& ref = split[start + i].target;
      exact += hyp == ref;
      r.hypotheses.push_back(hyp);
      references.push_back(ref);
    }
  }
  r.bleu = metrics::corpus_bleu(r.hypotheses, references).score;
  r.exact_match = split.empty() ? 0.0 : static_cast<double>(exact) / static_cast<double>(split.size());
  return r;
}

}  // namespace translate
