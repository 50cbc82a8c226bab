// examples/charlm/charlm.cpp — a character-level decoder-only Transformer language model.
//
// With --data PATH it trains on that text file (e.g. ../shared/data/tinyshakespeare.txt);
// without, on a corpus it generates itself, so it runs on a fresh clone. The defaults are
// nanoGPT's documented CPU recipe (block 64, batch 12, 4 layers, 4 heads, 128 dims, 2000
// iterations, dropout 0, AdamW lr 1e-3 with 100 warmup steps and cosine decay to 1e-4,
// betas (0.9, 0.99), weight decay 0.1, clip 1.0). Train/validation: first 90% / last 10%.
// Reports the validation loss (mean over 200 batches, as the PyTorch reference does), the
// training wall time, samples (temperature, top-k, KV cache), a metrics log, SVG pictures,
// and keeps checkpoints that --resume continues exactly. --amp fp16|bf16 trains under
// amp::Autocast (fp16 with a GradScaler whose state the checkpoint keeps). Under heed-run
// (several processes) the checkpoint is a directory of collective checkpoints
// (heed/dist_checkpoint.h): --checkpoint names that directory (default OUT_DIR/checkpoints).
#include <heed/dist_checkpoint.h>
#include <heed/heed.h>

#include "dataset.h"
#include "main_guard.h"
#include "step_profiler.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

using namespace heed;
using charlm::Dataset;
using charlm::get_batch;

namespace {

struct Options {
  std::string data, out_dir = "charlm_out", checkpoint, device = "cpu", amp = "none", prompt = "\n";
  int64_t block = 64, batch = 12, layers = 4, heads = 4, d_model = 128, iters = 2000, warmup = 100;
  int64_t eval_every = 250, eval_batches = 20, final_eval_batches = 200, log_every = 50, checkpoint_every = 500;
  int64_t seed = 1337, threads = 0, sample_tokens = 300, top_k = 40;
  double lr = 1e-3, min_lr = 1e-4, beta2 = 0.99, weight_decay = 0.1, clip = 1.0, dropout = 0.0, temperature = 0.8;
  std::string attn_scale = "sqrt_dk";
  std::string dist_overlap = "on";  // under heed-run: reduce gradient buckets during backward
  std::string profile;              // Chrome trace of a few training steps
  int64_t profile_steps = 5;
  int64_t profile_skip = 1;  // steps run unprofiled first (--profile-skip)
  bool resume = false, sample_only = false, memory = false, recompute = false;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double estimate_loss(const nn::TransformerLM& model, const std::vector<int64_t>& data, int64_t batches, int64_t batch,
                     int64_t block) {
  NoGradGuard no_grad;
  const Device device = model.device();
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto [x, y] = get_batch(data, batch, block);
    total += F::cross_entropy(model.forward(x.to(device)), y.to(device)).item<double>();
  }
  return total / static_cast<double>(batches);
}

// Samples `count` characters after `prompt` with temperature and top-k, using the KV cache
// (the cache restarts with the last block/2 characters when the context is full).
std::string sample(const nn::TransformerLM& model, const Dataset& d, const std::string& prompt, int64_t count,
                   double temperature, int64_t top_k) {
  NoGradGuard no_grad;
  std::vector<int64_t> context;
  for (unsigned char c : prompt) {
    auto it = d.index.find(c);
    if (it != d.index.end()) context.push_back(it->second);
  }
  if (context.empty()) context.push_back(0);
  const int64_t block = model.options().context;
  std::vector<nn::KVCache> caches = model.make_caches();
  std::vector<int64_t> pending = context;
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    if (caches[0].length() + static_cast<int64_t>(pending.size()) > block) {
      // Refill the cache from the most recent half block.
      caches = model.make_caches();
      pending.assign(context.end() - std::min<long>(static_cast<long>(context.size()), block / 2), context.end());
    }
    const Tensor ids = from_vector(pending, {1, static_cast<int64_t>(pending.size())}).to(model.device());
    const Tensor logits = model.forward(ids, &caches);
    std::vector<float> last = logits.select(1, -1).squeeze(0).to(kCPU).to(kFloat32).to_vector<float>();
    // top-k, temperature, then sample with the default generator.
    std::vector<float> sorted = last;
    const int64_t k = std::min<int64_t>(top_k, static_cast<int64_t>(last.size()));
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    const float threshold = sorted[static_cast<size_t>(k - 1)];
    double max_logit = -INFINITY;
    for (float v : last) max_logit = std::max<double>(max_logit, v);
    std::vector<double> p(last.size());
    double total = 0;
    for (size_t j = 0; j < last.size(); ++j) {
      p[j] = last[j] >= threshold ? std::exp((last[j] - max_logit) / temperature) : 0.0;
      total += p[j];
    }
    double u = rand({}, kFloat64).item<double>() * total;
    int64_t next = 0;
    for (size_t j = 0; j < p.size(); ++j) {
      u -= p[j];
      if (u <= 0 && p[j] > 0) {
        next = static_cast<int64_t>(j);
        break;
      }
      if (p[j] > 0) next = static_cast<int64_t>(j);
    }
    context.push_back(next);
    pending = {next};
    out += d.chars[static_cast<size_t>(next)];
  }
  return out;
}

// The training history a resumed checkpoint carries feeds the timing and the charts: check its
// shape and values now (a corrupt history is a heed::Error naming the key).
void check_history(const nlohmann::json& history, const std::string& checkpoint) {
  const io::JsonFields h(history, "charlm", checkpoint + " (training history)");
  const auto logged = static_cast<int64_t>(h.numbers("iter", 0).size());
  const auto evals = static_cast<int64_t>(h.numbers("eval_iter", 0).size());
  h.numbers("train_loss", -1e300, 1e300, logged);
  h.numbers("val_loss", -1e300, 1e300, evals);
  h.number("train_seconds", 0.0);
  const nlohmann::json& entropy = h.array("entropy");
  HEED_CHECK(static_cast<int64_t>(entropy.size()) == evals, "charlm",
             "{} (training history): \"entropy\" has {} rows for {} evaluations", checkpoint, entropy.size(), evals);
  for (size_t i = 0; i < entropy.size(); ++i) io::json_numbers(entropy[i], h.element_place("entropy", i), 0.0);
}

// --sample-only: the model's shape and the character table come from the checkpoint, so
// neither --data nor the model flags are needed (flags that differ are ignored, and the
// model used is printed). The checkpoint's RNG state is restored, so a checkpoint always
// gives the same sample for the same prompt.
int sample_from_checkpoint(const Options& o, const std::string& path, Device device) {
  const charlm::SavedModel saved = charlm::read_saved_model(io::read_config(path), path, "charlm");
  nn::TransformerLM model(saved.options);
  const io::RestoredCheckpoint restored = io::load_checkpoint(path, model);
  model.to(device);
  model.eval();
  const nn::TransformerLMOptions& mo = saved.options;
  std::printf(
      "loaded %s (iteration %lld; d_model %lld, %lld heads, %lld layers, block %lld, %lld characters, "
      "trained on %s)\n",
      path.c_str(), static_cast<long long>(restored.step), static_cast<long long>(mo.d_model),
      static_cast<long long>(mo.heads), static_cast<long long>(mo.layers), static_cast<long long>(mo.context),
      static_cast<long long>(mo.vocab), saved.data == "generated" ? "the generated corpus" : saved.data.c_str());
  std::printf("%s%s\n", o.prompt.c_str(),
              sample(model, saved.vocabulary, o.prompt, o.sample_tokens, o.temperature, o.top_k).c_str());
  return 0;
}

int run(const Options& o) {
  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  const Device device = parse_device(o.device);
  // --amp fp16|bf16: forward and loss under amp::Autocast (float32 master weights); fp16 with
  // dynamic loss scaling, bf16 (float32's exponent range) without. Evaluation runs in float32.
  const std::optional<DType> amp_dtype = o.amp == "fp16"   ? std::optional<DType>(kFloat16)
                                         : o.amp == "bf16" ? std::optional<DType>(kBFloat16)
                                                           : std::nullopt;
  amp::GradScaler scaler({.enabled = amp_dtype == kFloat16});
  cli::check_usage(o.d_model % o.heads == 0, "--d-model {} must be divisible by --heads {}", o.d_model, o.heads);
  cli::check_usage(o.warmup <= o.iters, "--warmup {} exceeds --iters {}", o.warmup, o.iters);
  // Several processes (heed-run --nproc N -- charlm ...): HEED_WORLD_SIZE > 1. Every rank
  // draws the same global batch of --batch windows and trains on its slice of --batch/N rows;
  // DDP averages the gradients, so the run follows the 1-process run. Checkpoints are collective
  // (heed/dist_checkpoint.h): rank 0 writes model and optimizer, every rank its RNG state, and
  // the DONE marker makes a checkpoint count; the other ranks write their logs under
  // <out-dir>/rank<K>.
  std::shared_ptr<dist::ProcessGroup> group;
  // Every flag is checked before joining the group: each rank then rejects it alike and none
  // waits in the rendezvous for a rank that already left.
  if (const int world = dist::world_size_from_env(); world > 1) {
    cli::check_usage(o.batch % world == 0, "--batch {} must be divisible by the number of ranks {}", o.batch, world);
    cli::check_usage(device == kCPU, "several processes train on the CPU only (NCCL: not yet)");
    cli::check_usage(!o.sample_only,
                     "--sample-only runs in one process: pass --checkpoint <dir>/step_<N>/model.ckpt without heed-run");
    group = dist::init_process_group_from_env();
  }
  const int rank = group ? group->rank() : 0;
  const int64_t rank_batch = group ? o.batch / group->world_size() : o.batch;
  const std::string out_dir = rank == 0 ? o.out_dir : o.out_dir + "/rank" + std::to_string(rank);
  std::filesystem::create_directories(out_dir);
  // One process: a checkpoint file. Several: the root of the collective checkpoints.
  const std::string checkpoint = !o.checkpoint.empty() ? o.checkpoint
                                 : group               ? o.out_dir + "/checkpoints"
                                                       : o.out_dir + "/charlm.ckpt";

  if (o.sample_only) return sample_from_checkpoint(o, checkpoint, device);

  std::string text;
  if (o.data.empty()) {
    text = charlm::generated_corpus(static_cast<uint64_t>(o.seed), 400000);
  } else {
    std::ifstream in(o.data, std::ios::binary);
    HEED_CHECK(in.good(), "charlm", "cannot read --data '{}'", o.data);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    HEED_CHECK(text.size() > static_cast<size_t>(20 * (o.block + 1)), "charlm", "--data '{}' is too short ({} bytes)",
               o.data, text.size());
  }
  const Dataset data = charlm::load_dataset(text);
  manual_seed(static_cast<uint64_t>(o.seed));
  nn::TransformerLMOptions mo;
  mo.vocab = static_cast<int64_t>(data.chars.size());
  mo.d_model = o.d_model;
  mo.heads = o.heads;
  mo.layers = o.layers;
  mo.context = o.block;
  mo.dropout = o.dropout;
  mo.recompute = o.recompute;
  mo.scale = nn::parse_attention_scale(o.attn_scale);
  nn::TransformerLM model(mo);
  model.to(device);
  optim::ParamGroup decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  decay.weight_decay = o.weight_decay;
  no_decay.weight_decay = 0.0;
  optim::AdamW optimizer({decay, no_decay}, {.lr = o.lr, .betas = {0.9, o.beta2}});
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (group) {
    dist::DDPOptions ddp_options;
    ddp_options.overlap = o.dist_overlap == "on";
    ddp = std::make_unique<dist::DistributedDataParallel>(model, group, ddp_options);
  }
  // The reference's schedule: lr*(it+1)/warmup, then cosine from lr to min_lr.
  auto lr_at = [&](int64_t it) {
    if (it < o.warmup) return o.lr * static_cast<double>(it + 1) / static_cast<double>(o.warmup);
    const double r = static_cast<double>(it - o.warmup) / static_cast<double>(std::max<int64_t>(o.iters - o.warmup, 1));
    return o.min_lr + 0.5 * (1 + std::cos(M_PI * r)) * (o.lr - o.min_lr);
  };
  nlohmann::json chars = nlohmann::json::array();
  for (const std::string& c : data.chars) chars.push_back(static_cast<int>(static_cast<unsigned char>(c[0])));
  const nlohmann::json config = {{"vocab", mo.vocab},
                                 {"d_model", o.d_model},
                                 {"heads", o.heads},
                                 {"layers", o.layers},
                                 {"block", o.block},
                                 {"dropout", o.dropout},
                                 {"attn_scale", o.attn_scale},
                                 {"chars", chars},
                                 {"data", o.data.empty() ? "generated" : o.data},
                                 {"seed", o.seed}};
  std::printf("heed charlm: %s, %zu characters (vocab %zu), train %zu / val %zu; %lld parameters; %d threads\n",
              o.data.empty() ? "generated corpus" : o.data.c_str(), text.size(), data.chars.size(), data.train.size(),
              data.val.size(), static_cast<long long>(model.num_parameters()), get_num_threads());

  int64_t start = 0;
  nlohmann::json history = {{"iter", nlohmann::json::array()},      {"train_loss", nlohmann::json::array()},
                            {"eval_iter", nlohmann::json::array()}, {"val_loss", nlohmann::json::array()},
                            {"entropy", nlohmann::json::array()},   {"train_seconds", 0.0}};
  // Restores model, optimizer, RNG, history and loss scaler from a checkpoint file.
  auto load = [&](const std::string& path) {
    // The configuration first, so that a checkpoint of another program or other flags is
    // named as such before any tensor is loaded.
    const nlohmann::json saved_config = io::read_config(path);
    HEED_CHECK(saved_config.is_object() && saved_config.contains("chars"), "charlm",
               "{} is not a charlm checkpoint (its configuration has no character table)", path);
    HEED_CHECK(saved_config == config, "charlm",
               "{} was trained with a different configuration or data; pass the same flags (and --data) to resume",
               path);
    const io::RestoredCheckpoint restored = io::load_checkpoint(path, model, &optimizer, nullptr);
    start = restored.step;
    if (restored.extra.is_object()) history = restored.extra;
    check_history(history, path);
    // The precision and the loss scaler's state, so that the continued run is exact.
    const std::string trained_amp = history.value("amp", std::string("none"));
    HEED_CHECK(trained_amp == o.amp, "charlm", "{} was trained with --amp {}; pass the same flag to resume", path,
               trained_amp);
    if (history.contains("grad_scaler")) scaler.load_state_dict(history["grad_scaler"]);
    std::printf("loaded %s (iteration %lld)\n", path.c_str(), static_cast<long long>(start));
  };
  if (group && o.resume) {
    // The newest complete checkpoint (DONE marker), saved by as many ranks; then this rank's RNG.
    const dist::ResumePoint point = dist::resume_checkpoint(*group, checkpoint, load);
    HEED_CHECK(point.rank_state.value("iteration", int64_t{-1}) == start, "charlm",
               "{}: rank {}'s state is for iteration {}, the model for {}", point.dir, rank,
               point.rank_state.value("iteration", int64_t{-1}), start);
  } else if (o.resume) {
    load(checkpoint);
  }

  report::MetricsLog log(out_dir + "/metrics.jsonl", o.resume);
  report::Progress progress(o.log_every);
  diagnostics::AttentionMonitor monitor(model);
  double train_seconds = history["train_seconds"].get<double>();
  double loss_window = 0;
  int64_t window = 0, skipped_steps = 0, saves = 0;
  double save_seconds = 0;  // wall time of the collective checkpoint saves (several processes)
  examples::StepProfiler step_profiler(rank == 0 ? o.profile : std::string(), start, o.iters - 1, o.profile_steps,
                                       o.profile_skip, "charlm");
  for (int64_t it = start; it < o.iters; ++it) {
    std::optional<profile::Scope> step_span = step_profiler.begin_step(it);
    const double t0 = now_seconds();
    model.train();
    const double lr = lr_at(it);
    for (auto& g : optimizer.param_groups()) g.lr = lr;
    auto [x, y] = get_batch(data.train, o.batch, o.block);
    if (group) {  // this rank's rows of the global batch
      x = x.narrow(0, rank * rank_batch, rank_batch).contiguous();
      y = y.narrow(0, rank * rank_batch, rank_batch).contiguous();
    }
    Tensor loss;
    {
      amp::Autocast autocast(amp_dtype);  // no-op without --amp
      loss = F::cross_entropy(model.forward(x.to(device)), y.to(device));
    }
    dist::kill_point_for_tests(rank, it + 1);  // HEED_TEST_KILL_AT=RANK:STEP (crash tests only)
    optimizer.zero_grad();
    scaler.scale(loss).backward();  // the scaler is a pass-through unless --amp fp16
    scaler.unscale_(optimizer);     // clip the true gradients
    const double norm = nn::clip_grad_norm_(model.parameters(), o.clip);
    if (!scaler.step(optimizer)) ++skipped_steps;  // a gradient overflowed (fp16): no update
    scaler.update();
    const double value = loss.item<double>();
    train_seconds += now_seconds() - t0;
    step_span.reset();
    step_profiler.end_step(it);
    loss_window += value;
    ++window;
    const int64_t done = it + 1;
    progress.update({done, o.iters, value, lr, norm,
                     static_cast<double>((done - start) * o.batch * o.block) / std::max(train_seconds, 1e-9), ""});
    if (done % o.log_every == 0 || done == o.iters) {
      history["iter"].push_back(done);
      history["train_loss"].push_back(loss_window / static_cast<double>(window));
      log.write({{"iter", done},
                 {"loss", loss_window / static_cast<double>(window)},
                 {"lr", lr},
                 {"grad_norm", norm},
                 {"train_seconds", train_seconds}});
      loss_window = 0;
      window = 0;
    }
    if (done % o.eval_every == 0 || done == o.iters) {
      model.eval();
      const double val = estimate_loss(model, data.val, o.eval_batches, o.batch, o.block);
      std::vector<double> entropy;
      {
        NoGradGuard no_grad;
        auto [px, py] = get_batch(data.val, 1, o.block);
        monitor.record(true);
        model.forward(px.to(device));
        monitor.record(false);
        for (const auto& layer : monitor.attention_stats()) entropy.push_back(layer.mean_entropy());
      }
      history["eval_iter"].push_back(done);
      history["val_loss"].push_back(val);
      history["entropy"].push_back(entropy);
      progress.finish_line();
      std::printf("iter %lld: val loss %.4f (%lld batches), attention entropy per layer [%s]\n",
                  static_cast<long long>(done), val, static_cast<long long>(o.eval_batches),
                  fmt::format("{:.2f}", fmt::join(entropy, ", ")).c_str());
      log.write({{"iter", done}, {"val_loss", val}, {"attention_entropy", entropy}});
    }
    if (done % o.checkpoint_every == 0 || done == o.iters) {
      history["train_seconds"] = train_seconds;
      history["amp"] = o.amp;
      history["grad_scaler"] = scaler.state_dict();
      if (group) {  // collective: rank 0's model file, every rank's RNG state, then the DONE marker
        const double s0 = now_seconds();
        dist::save_checkpoint(*group, checkpoint, done,
                              [&](const std::string& path) {
                                io::save_checkpoint(path, model, &optimizer, nullptr, done, config, history);
                              },
                              {{"iteration", done}});
        save_seconds += now_seconds() - s0;
        ++saves;
      } else
        io::save_checkpoint(checkpoint, model, &optimizer, nullptr, done, config, history);
    }
  }
  progress.finish_line();
  if (o.memory) std::printf("memory of training (heed::memory_stats):\n%s", memory_stats().table().c_str());
  model.eval();
  const double final_val = estimate_loss(model, data.val, o.final_eval_batches, o.batch, o.block);
  std::printf(
      "training wall time %.1f s (%lld iterations, %.1f ms/iter, --amp %s); final validation loss %.4f "
      "(mean of %lld batches)\n",
      train_seconds, static_cast<long long>(o.iters), 1e3 * train_seconds / std::max<double>(1, o.iters - start),
      o.amp.c_str(), final_val, static_cast<long long>(o.final_eval_batches));
  if (ddp) {
    const auto c = ddp->counters();
    const double steps = static_cast<double>(std::max<int64_t>(1, o.iters - start));
    std::printf(
        "dist: rank %d of %d, batch %lld per rank; %.1f all_reduces/step, %.0f bytes reduced/step, "
        "%.2f ms/step in all_reduce, %.2f ms/step of it blocking backward (%.0f%% hidden behind "
        "backward; overlap %s), %.1f%% of training time waiting\n",
        rank, group->world_size(), static_cast<long long>(rank_batch), c.reductions / steps, c.bytes / steps,
        1e3 * c.seconds / steps, 1e3 * c.wait_seconds / steps, 100.0 * c.overlap_fraction(), o.dist_overlap.c_str(),
        100.0 * c.wait_seconds / std::max(train_seconds, 1e-9));
    std::printf("dist: %lld collective checkpoint saves under %s, %.1f ms each (mean)\n", static_cast<long long>(saves),
                checkpoint.c_str(), 1e3 * save_seconds / static_cast<double>(std::max<int64_t>(saves, 1)));
  }
  if (scaler.is_enabled())
    std::printf("fp16 loss scaling: %lld of %lld steps skipped (overflow), final scale %g\n",
                static_cast<long long>(skipped_steps), static_cast<long long>(o.iters - start), scaler.get_scale());
  log.write({{"final_val_loss", final_val}, {"train_seconds", train_seconds}});
  std::printf("--- sample (temperature %.2f, top-k %lld) ---\n%s%s\n---\n", o.temperature,
              static_cast<long long>(o.top_k), o.prompt.c_str(),
              sample(model, data, o.prompt, o.sample_tokens, o.temperature, o.top_k).c_str());

  // Pictures: loss curves, attention heatmaps of the first block for a sample, entropy.
  std::vector<report::svg::Series> losses = {{"train", {}, {}}, {"validation", {}, {}}};
  for (size_t i = 0; i < history["iter"].size(); ++i) {
    losses[0].x.push_back(history["iter"][i].get<double>());
    losses[0].y.push_back(history["train_loss"][i].get<double>());
  }
  for (size_t i = 0; i < history["eval_iter"].size(); ++i) {
    losses[1].x.push_back(history["eval_iter"][i].get<double>());
    losses[1].y.push_back(history["val_loss"][i].get<double>());
  }
  report::svg::line_chart(out_dir + "/loss.svg", "character LM: loss", losses, "iteration", "cross entropy");
  std::vector<report::svg::Series> entropy_series;
  for (size_t i = 0; i < history["eval_iter"].size(); ++i)
    for (size_t l = 0; l < history["entropy"][i].size(); ++l) {
      if (entropy_series.size() <= l) entropy_series.push_back({fmt::format("block {}", l), {}, {}});
      entropy_series[l].x.push_back(history["eval_iter"][i].get<double>());
      entropy_series[l].y.push_back(history["entropy"][i][l].get<double>());
    }
  report::svg::line_chart(out_dir + "/entropy.svg", "mean attention entropy per block (nats)", entropy_series,
                          "iteration", "entropy");
  {
    NoGradGuard no_grad;
    const int64_t n = std::min<int64_t>(32, o.block);
    std::vector<int64_t> window_ids(data.val.begin(), data.val.begin() + n);
    std::vector<std::string> labels;
    for (int64_t id : window_ids) {
      std::string c = data.chars[static_cast<size_t>(id)];
      labels.push_back(c == "\n" ? "\\n" : c == " " ? "_" : c);
    }
    auto attn = model.block(model.options().layers - 1)->self_attn;
    attn->set_record_weights(true);
    model.forward(from_vector(window_ids, {1, n}).to(device));
    attn->set_record_weights(false);
    const Tensor w = attn->last_weights();  // (1,H,n,n)
    std::vector<report::svg::Panel> panels;
    for (int64_t h = 0; h < w.size(1); ++h)
      panels.push_back(
          {fmt::format("head {}", h), w.select(0, 0).select(0, h).to(kCPU).to(kFloat64).to_vector<double>(), n, n});
    report::svg::heatmap_grid(out_dir + "/attention.svg", "last block's causal self-attention (rows: queries)", panels,
                              labels, labels, 2);
  }
  std::printf("wrote %s/{metrics.jsonl, loss.svg, entropy.svg, attention.svg} and %s\n", out_dir.c_str(),
              checkpoint.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cli::ArgParser args("charlm",
                      "Trains a character-level Transformer language model (nanoGPT's CPU recipe by default) and "
                      "samples from it.");
  args.add_string("data", &o.data, "text file to train on (default: a generated corpus)");
  args.add_int("block", &o.block, "context length", 2, 4096);
  args.add_int("batch", &o.batch, "sequences per iteration", 1, 4096);
  args.add_int("layers", &o.layers, "Transformer blocks", 1, 64);
  args.add_int("heads", &o.heads, "attention heads", 1, 256);
  args.add_int("d-model", &o.d_model, "model width", 1, 16384);
  args.add_int("iters", &o.iters, "training iterations", 1, 100000000);
  args.add_int("warmup", &o.warmup, "warmup iterations", 0, 100000000);
  args.add_double("lr", &o.lr, "peak learning rate", 0, 10);
  args.add_double("min-lr", &o.min_lr, "final learning rate", 0, 10);
  args.add_double("beta2", &o.beta2, "AdamW beta2", 0, 0.999999);
  args.add_double("weight-decay", &o.weight_decay, "AdamW weight decay (matrices)", 0, 10);
  args.add_double("clip", &o.clip, "global gradient-norm clipping", 0, 1e9);
  args.add_double("dropout", &o.dropout, "dropout", 0, 0.99);
  args.add_string("attn-scale", &o.attn_scale, "attention scale", {"sqrt_dk", "none", "learnable", "affine", "cosine"});
  args.add_int("eval-every", &o.eval_every, "validation interval", 1, 100000000);
  args.add_int("eval-batches", &o.eval_batches, "batches per periodic validation", 1, 100000);
  args.add_int("final-eval-batches", &o.final_eval_batches, "batches for the final validation loss", 1, 100000);
  args.add_int("log-every", &o.log_every, "metrics-log interval", 1, 100000000);
  args.add_int("checkpoint-every", &o.checkpoint_every, "checkpoint interval", 1, 100000000);
  args.add_string("checkpoint", &o.checkpoint,
                  "checkpoint path (default OUT_DIR/charlm.ckpt; under heed-run the checkpoint directory, default "
                  "OUT_DIR/checkpoints)");
  args.add_flag("resume", &o.resume, "continue training from the checkpoint");
  args.add_string("dist-overlap", &o.dist_overlap,
                  "under heed-run: all-reduce gradient buckets on a communication thread during backward (on) or "
                  "in the gradient hooks (off); results are identical",
                  {"on", "off"});
  args.add_flag("sample-only", &o.sample_only,
                "load the checkpoint and only sample (its model shape and characters come from the checkpoint: no "
                "--data or model flags needed)");
  args.add_string("prompt", &o.prompt, "text to start sampling from");
  args.add_int("sample-tokens", &o.sample_tokens, "characters to sample", 0, 1000000);
  args.add_double("temperature", &o.temperature, "sampling temperature", 1e-3, 100);
  args.add_int("top-k", &o.top_k, "sample among the k most likely characters", 1, 1000000);
  args.add_int("seed", &o.seed, "random seed", 0, 1LL << 62);
  args.add_int("threads", &o.threads, "threads (0: all cores)", 0, 1024);
  args.add_string("device", &o.device, "cpu or cuda");
  args.add_string("amp", &o.amp, "mixed-precision training (fp16 with loss scaling; evaluation stays float32)",
                  {"none", "fp16", "bf16"});
  args.add_string("out-dir", &o.out_dir, "directory for the log, pictures and checkpoint");
  examples::add_profile_options(args, &o.profile, &o.profile_steps, &o.profile_skip);
  args.add_flag("memory", &o.memory, "after training, print live and peak tensor memory by category");
  args.add_flag("recompute", &o.recompute,
                "checkpoint every block: backward recomputes its forward instead of keeping its activations "
                "(same results, less memory, about one more forward of time)");
  return examples::parse_and_run(args, "charlm", argc, argv, [&] { return run(o); });
}
