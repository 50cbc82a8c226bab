// examples/translate/translate.cpp — the main demo: trains an encoder-decoder Transformer
// on the synthetic German -> English corpus, then reports test BLEU and exact match with
// greedy and beam-search decoding (KV cache), sample translations, a metrics log and SVG
// pictures. `--translate "..."` translates a sentence with a saved checkpoint.
//
// Under heed-run (HEED_WORLD_SIZE > 1) it trains data-parallel as charlm does: every rank draws
// the same global batch of --batch-size pairs from a batch generator all ranks share and trains
// on its --batch-size/N rows (DDP averages the token-weighted gradients, so one step follows the
// 1-process step on the same global batch); dropout draws from the default generator, seeded
// per rank. Checkpoints are collective (heed/dist_checkpoint.h): --checkpoint names their
// directory (default OUT_DIR/checkpoints); ranks other than 0 write logs under OUT_DIR/rank<K>.
#include <heed/dist_checkpoint.h>
#include <heed/heed.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "main_guard.h"
#include "step_profiler.h"
#include "task.h"

using namespace heed;
using translate::Pair;

namespace {

struct Options {
  int64_t steps = 3000, batch_size = 64, warmup = 300, eval_every = 500, checkpoint_every = 500, log_every = 50;
  int64_t d_model = 128, heads = 4, layers = 2, d_ff = 512;
  int64_t seed = 1, threads = 0, beam = 4, train_size = 40000, val_size = 500, test_size = 1000, samples = 6,
          show_corpus = 0;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.01, label_smoothing = 0.1, clip = 1.0, dropout = 0.1;
  double length_penalty = 0.6;
  std::string task = "quick", attn_scale = "sqrt_dk", device = "cpu", amp = "none", out_dir = "translate_out",
              checkpoint, translate_text;
  std::string profile;  // Chrome trace of a few training steps
  int64_t profile_steps = 5;
  int64_t profile_skip = 1;  // steps run unprofiled first (--profile-skip)
  bool resume = false, memory = false, recompute = false;
  bool show_corpus_given = false;  // --show-corpus N was given: print the corpus and exit
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string join(const std::vector<std::string>& tokens) {
  std::string s;
  for (const std::string& t : tokens) s += (s.empty() ? "" : " ") + t;
  return s;
}

// Cross-attention of the last decoder layer for one (source, reference) pair, one heatmap
// per head with the tokens on the axes.
void attention_pictures(nn::Transformer& model, const translate::Task& task, const Pair& pair,
                        const std::string& path) {
  NoGradGuard no_grad;
  model.eval();
  auto layer = model.decoder->layer(model.decoder->size() - 1);
  layer->cross_attn->set_record_weights(true);
  const translate::Batch b = translate::make_batch({pair}, {0}, task.source, task.target);
  const Device device = model.device();
  model.forward(b.src.to(device), b.tgt_in.to(device));
  const Tensor w = layer->cross_attn->last_weights().to(kCPU);  // (1,H,T,S)
  layer->cross_attn->set_record_weights(false);
  std::vector<std::string> src_labels = translate::split_tokens(pair.source),
                           tgt_labels = translate::split_tokens(pair.target);
  src_labels.push_back("<eos>");
  tgt_labels.push_back("<eos>");
  const int64_t H = w.size(1), T = w.size(2), S = w.size(3);
  std::vector<report::svg::Panel> panels;
  for (int64_t h = 0; h < H; ++h)
    panels.push_back({fmt::format("head {}", h), w.select(0, 0).select(0, h).to(kFloat64).to_vector<double>(), T, S});
  report::svg::heatmap_grid(path,
                            "cross-attention of the last decoder layer (rows: English output, columns: German input)",
                            panels, tgt_labels, src_labels, 2);
}

// The training history a resumed checkpoint carries feeds the charts at the end: check its shape
// and values now (a corrupt history is a heed::Error naming the key, not a failure mid-way).
void check_history(const nlohmann::json& history, const std::string& checkpoint) {
  const io::JsonFields h(history, "translate", checkpoint + " (training history)");
  const auto logged = static_cast<int64_t>(h.numbers("step", 0).size());
  const auto evals = static_cast<int64_t>(h.numbers("eval_step", 0).size());
  h.numbers("train_loss", -1e300, 1e300, logged);
  h.numbers("val_loss", -1e300, 1e300, evals);
  const nlohmann::json& entropy = h.array("entropy");
  HEED_CHECK(static_cast<int64_t>(entropy.size()) == evals, "translate",
             "{} (training history): \"entropy\" has {} rows for {} evaluations", checkpoint, entropy.size(), evals);
  for (size_t i = 0; i < entropy.size(); ++i) io::json_numbers(entropy[i], h.element_place("entropy", i), 0.0);
}

// --show-corpus N: the corpus's sizes and N training pairs, without training.
void show_corpus(const translate::Task& task, int64_t examples) {
  const translate::CorpusOptions& c = task.corpus_options;
  size_t source_tokens = 0, target_tokens = 0, longest = 0;
  for (const Pair& p : task.corpus.train) {
    const size_t s = translate::split_tokens(p.source).size(), t = translate::split_tokens(p.target).size();
    source_tokens += s;
    target_tokens += t;
    longest = std::max({longest, s, t});
  }
  const double pairs = static_cast<double>(std::max<size_t>(1, task.corpus.train.size()));
  // Vocabularies hold 4 special tokens (<pad> <bos> <eos> <unk>).
  std::printf(
      "task %s, seed %llu: %zu training / %zu validation / %zu test pairs; %lld German and %lld English word types "
      "in training; mean %.1f German / %.1f English tokens per sentence, longest %zu; model positions %lld\n",
      translate::task_level_name(c.level), static_cast<unsigned long long>(c.seed), task.corpus.train.size(),
      task.corpus.validation.size(), task.corpus.test.size(), static_cast<long long>(task.source.size() - 4),
      static_cast<long long>(task.target.size() - 4), static_cast<double>(source_tokens) / pairs,
      static_cast<double>(target_tokens) / pairs, longest, static_cast<long long>(translate::positions_needed(task)));
  if (c.level == translate::TaskLevel::Hard) {
    const translate::HardLexiconSizes l = translate::hard_lexicon_sizes();
    std::printf("lexicon: %zu nouns, %zu adjectives, %zu verbs, %zu names, %zu compound nouns\n", l.nouns, l.adjectives,
                l.verbs, l.names, l.compounds);
  }
  for (int64_t i = 0; i < std::min<int64_t>(examples, static_cast<int64_t>(task.corpus.train.size())); ++i) {
    const Pair& p = task.corpus.train[static_cast<size_t>(i)];
    std::printf("  de: %s\n  en: %s\n", p.source.c_str(), p.target.c_str());
  }
}

int run(const Options& o) {
  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  const Device device = parse_device(o.device);
  // --amp fp16|bf16: training under amp::Autocast (fp16 with loss scaling); evaluation in float32.
  const std::optional<DType> amp_dtype = o.amp == "fp16"   ? std::optional<DType>(kFloat16)
                                         : o.amp == "bf16" ? std::optional<DType>(kBFloat16)
                                                           : std::nullopt;
  cli::check_usage(o.d_model % o.heads == 0, "--d-model {} must be divisible by --heads {}", o.d_model, o.heads);
  // Several processes (heed-run --nproc N -- translate ...): DDP over a process group.
  std::shared_ptr<dist::ProcessGroup> group;
  // Flags are checked before joining the group, so every rank rejects them alike.
  if (const int world = dist::world_size_from_env(); world > 1 && o.translate_text.empty()) {
    cli::check_usage(o.batch_size % world == 0, "--batch-size {} must be divisible by the number of ranks {}",
                     o.batch_size, world);
    cli::check_usage(device == kCPU, "several processes train on the CPU only (NCCL: not yet)");
    group = dist::init_process_group_from_env();
  }
  const int rank = group ? group->rank() : 0;
  const std::string out_dir = rank == 0 ? o.out_dir : o.out_dir + "/rank" + std::to_string(rank);
  std::filesystem::create_directories(out_dir);
  // One process: a checkpoint file. Several: the root of the collective checkpoints.
  const std::string checkpoint = !o.checkpoint.empty() ? o.checkpoint
                                 : group               ? o.out_dir + "/checkpoints"
                                                       : o.out_dir + "/translate.ckpt";

  // ---- translate a sentence with a trained checkpoint ---------------------------------------
  if (!o.translate_text.empty()) {
    const translate::SavedConfig saved = translate::read_saved_config(io::read_config(checkpoint), checkpoint);
    const translate::Vocab& source = saved.source;
    const translate::Vocab& target = saved.target;
    auto model = translate::build_model(saved.model, source, target);
    io::load_checkpoint(checkpoint, *model);
    model->eval();
    const std::vector<std::string> tokens = translate::tokenize_german(o.translate_text);
    const auto out = translate::translate_batch(*model, source, target, {tokens},
                                                {.beam = static_cast<int>(o.beam), .length_penalty = o.length_penalty});
    std::vector<std::string> unknown;
    for (const std::string& t : tokens)
      if (source.id(t) == translate::kUnk) unknown.push_back(t);
    std::printf("%s\n", join(out[0]).c_str());
    if (!unknown.empty()) std::fprintf(stderr, "note: words unknown to the model: %s\n", join(unknown).c_str());
    return 0;
  }

  // ---- train --------------------------------------------------------------------------------
  manual_seed(static_cast<uint64_t>(o.seed));
  translate::CorpusOptions corpus_options;
  corpus_options.seed = static_cast<uint64_t>(o.seed);
  corpus_options.train_size = static_cast<int>(o.train_size);
  corpus_options.test_size = static_cast<int>(o.test_size);
  corpus_options.validation_size = static_cast<int>(o.val_size);
  corpus_options.level = translate::parse_task_level(o.task);
  const translate::Task task = translate::make_task(corpus_options);
  if (o.show_corpus_given) {
    show_corpus(task, o.show_corpus);
    return 0;
  }
  translate::ModelConfig mc;
  mc.d_model = o.d_model;
  mc.heads = o.heads;
  mc.layers = o.layers;
  mc.d_ff = o.d_ff;
  mc.dropout = o.dropout;
  mc.attn_scale = o.attn_scale;
  mc.max_len = translate::positions_needed(task);
  auto model = translate::build_model(mc, task.source, task.target);
  model->encoder->recompute = model->decoder->recompute = o.recompute;  // training only: not in the config
  model->to(device);
  // Several processes: the global batches come from a generator every rank shares (a copy of the
  // default generator after initialisation, so with --dropout 0 the batches are those of the
  // 1-process run), dropout from the default generator reseeded per rank (distinct masks).
  Generator batch_generator(default_generator());
  if (group) manual_seed(static_cast<uint64_t>(o.seed) * 1000003u + 7919u * static_cast<uint64_t>(rank + 1));
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (group) ddp = std::make_unique<dist::DistributedDataParallel>(*model, group);
  translate::Trainer trainer(*model, task,
                             {.batch_size = o.batch_size,
                              .steps = o.steps,
                              .warmup = o.warmup,
                              .lr = o.lr,
                              .min_lr = o.min_lr,
                              .weight_decay = o.weight_decay,
                              .label_smoothing = o.label_smoothing,
                              .clip = o.clip,
                              .amp = amp_dtype,
                              .batch_generator = group ? &batch_generator : nullptr,
                              .shard = rank,
                              .shards = group ? group->world_size() : 1});
  optim::Optimizer& optimizer = trainer.optimizer();
  optim::LRScheduler& scheduler = trainer.scheduler();
  const nlohmann::json config = {{"model", mc.to_json()},
                                 {"source_vocab", task.source.tokens()},
                                 {"target_vocab", task.target.tokens()},
                                 {"corpus",
                                  {{"task", o.task},
                                   {"seed", o.seed},
                                   {"train_size", o.train_size},
                                   {"val_size", o.val_size},
                                   {"test_size", o.test_size}}}};
  std::printf(
      "heed translate: %zu training pairs, %zu validation, %zu test; vocab de %lld / en %lld; "
      "model %lld parameters (d_model %lld, %lld heads, %lld+%lld layers), %d threads\n",
      task.corpus.train.size(), task.corpus.validation.size(), task.corpus.test.size(),
      static_cast<long long>(task.source.size()), static_cast<long long>(task.target.size()),
      static_cast<long long>(model->num_parameters()), static_cast<long long>(o.d_model),
      static_cast<long long>(o.heads), static_cast<long long>(o.layers), static_cast<long long>(o.layers),
      get_num_threads());

  int64_t start_step = 0;
  nlohmann::json history = {{"step", nlohmann::json::array()},
                            {"train_loss", nlohmann::json::array()},
                            {"eval_step", nlohmann::json::array()},
                            {"val_loss", nlohmann::json::array()},
                            {"entropy", nlohmann::json::array()}};
  auto load = [&](const std::string& path) {
    const io::RestoredCheckpoint restored = io::load_checkpoint(path, *model, &optimizer, &scheduler);
    // Checkpoints written before --val-size existed used the default validation split.
    nlohmann::json saved = restored.config;
    if (saved.is_object() && saved.contains("corpus") && saved["corpus"].is_object() &&
        !saved["corpus"].contains("val_size"))
      saved["corpus"]["val_size"] = 500;
    // ... and before --task existed, the quick task.
    if (saved.is_object() && saved.contains("corpus") && saved["corpus"].is_object() &&
        !saved["corpus"].contains("task"))
      saved["corpus"]["task"] = "quick";
    HEED_CHECK(saved == config, "translate",
               "{} was trained with a different configuration; pass the same flags to resume", path);
    start_step = restored.step;
    if (restored.extra.is_object()) history = restored.extra;
    check_history(history, path);
    // The precision and the loss scaler's state, so that the continued run is exact.
    const std::string trained_amp = history.value("amp", std::string("none"));
    HEED_CHECK(trained_amp == o.amp, "translate", "{} was trained with --amp {}; pass the same flag to resume", path,
               trained_amp);
    if (history.contains("grad_scaler")) trainer.scaler().load_state_dict(history["grad_scaler"]);
    std::printf("resumed from %s at step %lld\n", path.c_str(), static_cast<long long>(start_step));
  };
  if (group && o.resume) {
    // The newest complete checkpoint (DONE marker); this rank's dropout RNG and the shared
    // batch generator (the data position) from its rank file.
    const dist::ResumePoint point = dist::resume_checkpoint(*group, checkpoint, load);
    const io::JsonFields state(point.rank_state, "translate", point.dir + " (rank state)");
    HEED_CHECK(state.integer("step") == start_step, "translate", "{}: rank {}'s state is for step {}, the model for {}",
               point.dir, rank, state.integer("step"), start_step);
    const io::JsonFields batches = state.object("batch_rng");
    batch_generator.set_state(batches.unsigned_integer("seed"), batches.unsigned_integer("offset"));
  } else if (o.resume) {
    load(checkpoint);
  }

  report::MetricsLog log(out_dir + "/metrics.jsonl", o.resume);
  report::Progress progress(o.log_every);
  diagnostics::AttentionMonitor monitor(*model);
  const translate::Batch probe =
      translate::make_batch(task.corpus.validation, {0, 1, 2, 3, 4, 5, 6, 7}, task.source, task.target);
  const double t0 = now_seconds();
  double tokens_seen = 0, loss_window = 0;
  int64_t window_steps = 0, skipped_steps = 0;
  double train_seconds = 0;
  examples::StepProfiler step_profiler(rank == 0 ? o.profile : std::string(), start_step + 1, o.steps, o.profile_steps,
                                       o.profile_skip, "translate");
  for (int64_t step = start_step + 1; step <= o.steps; ++step) {
    std::optional<profile::Scope> step_span = step_profiler.begin_step(step);
    const translate::Trainer::StepResult r =
        trainer.step([&] { dist::kill_point_for_tests(rank, step); });  // HEED_TEST_KILL_AT (crash tests)
    step_span.reset();
    step_profiler.end_step(step);
    const double loss_value = r.loss, norm = r.grad_norm;
    tokens_seen += static_cast<double>(r.target_tokens);
    loss_window += loss_value;
    ++window_steps;
    train_seconds = now_seconds() - t0;
    progress.update({step, o.steps, loss_value, r.lr, norm, tokens_seen / train_seconds, ""});
    if (step % o.log_every == 0 || step == o.steps) {
      history["step"].push_back(step);
      history["train_loss"].push_back(loss_window / static_cast<double>(window_steps));
      log.write({{"step", step},
                 {"loss", loss_window / static_cast<double>(window_steps)},
                 {"lr", r.lr},
                 {"grad_norm", norm},
                 {"tokens_per_s", tokens_seen / train_seconds},
                 {"elapsed_s", train_seconds}});
      loss_window = 0;
      window_steps = 0;
    }
    if (step % o.eval_every == 0 || step == o.steps) {
      model->eval();
      const double val = translate::evaluate_loss(*model, task, task.corpus.validation);
      std::vector<double> entropies;
      {
        NoGradGuard no_grad;
        monitor.record(true);
        model->forward(probe.src.to(device), probe.tgt_in.to(device));
        monitor.record(false);
        for (const auto& layer : monitor.attention_stats()) entropies.push_back(layer.mean_entropy());
      }
      history["eval_step"].push_back(step);
      history["val_loss"].push_back(val);
      history["entropy"].push_back(entropies);
      progress.finish_line();
      std::printf("step %lld: validation loss %.4f, mean attention entropy per layer [%s]\n",
                  static_cast<long long>(step), val, fmt::format("{:.2f}", fmt::join(entropies, ", ")).c_str());
      log.write({{"step", step}, {"val_loss", val}, {"attention_entropy", entropies}});
    }
    if (!r.stepped) ++skipped_steps;
    if (step % o.checkpoint_every == 0 || step == o.steps) {
      history["amp"] = o.amp;
      history["grad_scaler"] = trainer.scaler().state_dict();
      auto save = [&](const std::string& path) {
        io::save_checkpoint(path, *model, &optimizer, &scheduler, step, config, history);
      };
      if (group)  // collective: rank 0's model file, every rank's RNG states, then the DONE marker
        dist::save_checkpoint(
            *group, checkpoint, step, save,
            {{"step", step}, {"batch_rng", {{"seed", batch_generator.seed()}, {"offset", batch_generator.offset()}}}});
      else
        save(checkpoint);
    }
  }
  progress.finish_line();
  if (o.memory) std::printf("memory of training (heed::memory_stats):\n%s", memory_stats().table().c_str());
  std::printf("training: %.1f s for %lld steps (%.0f target tokens/s, --amp %s)\n", train_seconds,
              static_cast<long long>(o.steps - start_step), tokens_seen / std::max(train_seconds, 1e-9), o.amp.c_str());
  if (trainer.scaler().is_enabled())
    std::printf("fp16 loss scaling: %lld steps skipped (overflow), final scale %g\n",
                static_cast<long long>(skipped_steps), trainer.scaler().get_scale());

  // ---- evaluate -----------------------------------------------------------------------------
  model->eval();
  const double e0 = now_seconds();
  const translate::EvalResult greedy = translate::evaluate_translation(*model, task, task.corpus.test, {.beam = 1});
  const double e1 = now_seconds();
  const translate::EvalResult beam = translate::evaluate_translation(
      *model, task, task.corpus.test, {.beam = static_cast<int>(o.beam), .length_penalty = o.length_penalty});
  const double e2 = now_seconds();
  std::printf("test set (%zu sentences never seen in training):\n", task.corpus.test.size());
  std::printf("  greedy:      BLEU %.2f, exact match %.1f%% (%.1f s)\n", greedy.bleu, 100 * greedy.exact_match,
              e1 - e0);
  std::printf("  beam %lld:      BLEU %.2f, exact match %.1f%% (%.1f s)\n", static_cast<long long>(o.beam), beam.bleu,
              100 * beam.exact_match, e2 - e1);
  std::printf("sample translations (beam):\n");
  for (int64_t i = 0; i < std::min<int64_t>(o.samples, static_cast<int64_t>(task.corpus.test.size())); ++i) {
    const Pair& p = task.corpus.test[static_cast<size_t>(i)];
    std::printf("  de:  %s\n  en:  %s\n  ref: %s%s\n",
                translate::detokenize_german(translate::split_tokens(p.source)).c_str(),
                beam.hypotheses[static_cast<size_t>(i)].c_str(), p.target.c_str(),
                beam.hypotheses[static_cast<size_t>(i)] == p.target ? "" : "   <- differs");
  }
  log.write({{"test_bleu_greedy", greedy.bleu},
             {"test_exact_greedy", greedy.exact_match},
             {"test_bleu_beam", beam.bleu},
             {"test_exact_beam", beam.exact_match},
             {"train_seconds", train_seconds}});

  // ---- pictures -----------------------------------------------------------------------------
  std::vector<report::svg::Series> losses = {{"train (smoothed CE)", {}, {}}, {"validation", {}, {}}};
  for (size_t i = 0; i < history["step"].size(); ++i) {
    losses[0].x.push_back(history["step"][i].get<double>());
    losses[0].y.push_back(history["train_loss"][i].get<double>());
  }
  for (size_t i = 0; i < history["eval_step"].size(); ++i) {
    losses[1].x.push_back(history["eval_step"][i].get<double>());
    losses[1].y.push_back(history["val_loss"][i].get<double>());
  }
  report::svg::line_chart(out_dir + "/loss.svg", "toy translation: loss", losses, "step", "cross entropy", true);
  std::vector<report::svg::Series> entropy_series;
  for (size_t i = 0; i < history["eval_step"].size(); ++i) {
    const auto& e = history["entropy"][i];
    for (size_t l = 0; l < e.size(); ++l) {
      if (entropy_series.size() <= l) {
        const auto modules = diagnostics::attention_modules(*model);
        entropy_series.push_back({l < modules.size() ? modules[l].first : fmt::format("layer {}", l), {}, {}});
      }
      entropy_series[l].x.push_back(history["eval_step"][i].get<double>());
      entropy_series[l].y.push_back(e[l].get<double>());
    }
  }
  report::svg::line_chart(out_dir + "/entropy.svg", "mean attention entropy per layer (nats)", entropy_series, "step",
                          "entropy");
  attention_pictures(*model, task, task.corpus.test[0], out_dir + "/attention.svg");
  std::printf("wrote %s/{metrics.jsonl, loss.svg, entropy.svg, attention.svg} and %s\n", out_dir.c_str(),
              checkpoint.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cli::ArgParser args("translate",
                      "Trains a Transformer to translate a synthetic German->English corpus and reports test BLEU.\n"
                      "With --translate TEXT, translates TEXT with the checkpoint instead.");
  args.add_int("steps", &o.steps, "training steps", 1, 10000000);
  args.add_int("batch-size", &o.batch_size, "sentence pairs per step", 1, 100000);
  args.add_double("lr", &o.lr, "peak learning rate (AdamW)", 0, 10);
  args.add_double("min-lr", &o.min_lr, "final learning rate of the cosine decay", 0, 10);
  args.add_int("warmup", &o.warmup, "linear warmup steps", 0, 10000000);
  args.add_double("weight-decay", &o.weight_decay, "AdamW weight decay (matrices only)", 0, 10);
  args.add_double("label-smoothing", &o.label_smoothing, "label smoothing", 0, 1);
  args.add_double("clip", &o.clip, "global gradient-norm clipping", 0, 1e9);
  args.add_double("dropout", &o.dropout, "dropout", 0, 0.99);
  args.add_int("d-model", &o.d_model, "model width", 1, 65536);
  args.add_int("heads", &o.heads, "attention heads", 1, 1024);
  args.add_int("layers", &o.layers, "encoder and decoder layers", 1, 64);
  args.add_int("d-ff", &o.d_ff, "feed-forward width", 1, 1 << 20);
  args.add_string("attn-scale", &o.attn_scale, "attention scale", {"sqrt_dk", "none", "learnable", "affine", "cosine"});
  args.add_string("task", &o.task,
                  "corpus level: quick (the demo: short clauses, small lexicon) or hard (long sentences with "
                  "relative and subordinate clauses, a large lexicon; needs a longer run)",
                  {"quick", "hard"});
  args.add_int("seed", &o.seed, "random seed (corpus, init, batches, dropout)", 0, 1LL << 62);
  args.add_int("threads", &o.threads, "threads (0: all cores)", 0, 1024);
  args.add_string("device", &o.device, "cpu or cuda");
  args.add_string("amp", &o.amp, "mixed-precision training (fp16 with loss scaling; evaluation stays float32)",
                  {"none", "fp16", "bf16"});
  args.add_int("beam", &o.beam, "beam size for evaluation and --translate", 1, 64);
  args.add_double("length-penalty", &o.length_penalty, "GNMT length penalty alpha", 0, 10);
  args.add_int("eval-every", &o.eval_every, "validation interval (steps)", 1, 10000000);
  args.add_int("log-every", &o.log_every, "metrics-log interval (steps)", 1, 10000000);
  args.add_int("checkpoint-every", &o.checkpoint_every, "checkpoint interval (steps)", 1, 10000000);
  args.add_string("checkpoint", &o.checkpoint,
                  "checkpoint path (default OUT_DIR/translate.ckpt; under heed-run the checkpoint directory, default "
                  "OUT_DIR/checkpoints)");
  args.add_flag("resume", &o.resume, "continue training from the checkpoint");
  args.add_string("translate", &o.translate_text, "translate this German text with the checkpoint and exit");
  args.add_string("out-dir", &o.out_dir, "directory for the log, pictures and checkpoint");
  examples::add_profile_options(args, &o.profile, &o.profile_steps, &o.profile_skip);
  args.add_flag("memory", &o.memory, "after training, print live and peak tensor memory by category");
  args.add_flag("recompute", &o.recompute,
                "checkpoint every encoder and decoder layer: backward recomputes its forward instead of keeping "
                "its activations (same results, less memory, about one more forward of time)");
  args.add_int("train-size", &o.train_size, "training pairs to generate", 100, 10000000);
  args.add_int("val-size", &o.val_size, "validation pairs to generate", 8, 1000000);
  args.add_int("test-size", &o.test_size, "test pairs to generate", 1, 1000000);
  args.add_int("samples", &o.samples, "sample translations to print", 0, 1000);
  args.add_int("show-corpus", &o.show_corpus,
               "N: print the corpus's sizes and N training pairs (with --task, --seed, the split sizes) and exit", 0,
               1000000);
  return examples::parse_and_run(args, "translate", argc, argv, [&] {
    o.show_corpus_given = args.given("show-corpus");
    return run(o);
  });
}
