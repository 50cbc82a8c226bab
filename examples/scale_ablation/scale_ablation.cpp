// examples/scale_ablation/scale_ablation.cpp — the scaling experiment of seed 000 sec. 6, done as
// an experiment: the translator (by default on the hard task) trained with each attention scale
// (none, sqrt_dk, learnable, cosine) at each head width d_k (d_model fixed, heads = d_model / d_k)
// and several seeds, the same budget for every run. Writes the table the document reports (test
// BLEU, steps to a validation loss, early gradient norm of the attention parameters, attention
// entropy) as mean and standard deviation over seeds, one chart of validation loss per d_k with
// the spread over seeds shaded, and heed-doctor's probe at the same d_k (what random queries and
// keys predict) beside it.
//
// Invariants: a run depends only on (task, budget settings, scale, d_k, seed): the corpus comes
// from --corpus-seed, initial weights, batches and dropout from the run's seed. Every finished
// run is saved to OUT_DIR/runs/ at once, and --resume reuses the saved runs whose settings (and a
// fingerprint of the generated corpus) match exactly, so a long full-budget ablation can be spread
// over several sessions; --table-only trains nothing and rebuilds the table from saved runs (the
// README's table comes from examples/scale_ablation/results/runs, checked so by a test).
#include <heed/doctor.h>
#include <heed/heed.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "main_guard.h"
#include "task.h"

using namespace heed;

namespace {

struct Options {
  std::string budget = "full", task = "hard", scales = "none,sqrt_dk,learnable,cosine", dks = "64,128,256";
  int64_t seeds = 3, steps = 800, batch_size = 64, warmup = 80, eval_every = 100, early_steps = 100;
  int64_t d_model = 256, layers = 2, d_ff = 512, corpus_seed = 1, threads = 0;
  int64_t train_size = 40000, val_size = 500, test_size = 1000;
  double lr = 1e-3, target_loss = 1.5, dropout = 0.1;
  std::string out_dir = "scale_ablation_out";
  bool resume = false, table_only = false, early_only = false;
};

// --budget quick: a smoke run of a few seconds per configuration (tiny model, corpus and
// budget; its numbers mean nothing). Applied to the flags the command line did not set.
void apply_quick_budget(Options& o, const cli::ArgParser& args) {
  auto set = [&](const char* flag, auto& field, auto value) {
    if (!args.given(flag)) field = value;
  };
  set("dks", o.dks, std::string("8,16,32"));
  set("seeds", o.seeds, int64_t{2});
  set("steps", o.steps, int64_t{30});
  set("batch-size", o.batch_size, int64_t{16});
  set("warmup", o.warmup, int64_t{5});
  set("eval-every", o.eval_every, int64_t{10});
  set("early-steps", o.early_steps, int64_t{10});
  set("d-model", o.d_model, int64_t{32});
  set("layers", o.layers, int64_t{1});
  set("d-ff", o.d_ff, int64_t{64});
  set("train-size", o.train_size, int64_t{1000});
  set("val-size", o.val_size, int64_t{16});
  set("test-size", o.test_size, int64_t{16});
  set("target-loss", o.target_loss, 7.0);
}

struct Run {
  std::string scale;
  int64_t dk = 0, seed = 0;
  double bleu = 0, exact = 0, final_val = 0, early_grad_norm = 0, entropy = 0, seconds = 0;
  int64_t steps_to_target = -1;
  std::vector<double> eval_steps, val_losses;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// FNV-1a over every pair of every split: a saved run is not reused once the corpus generator
// has changed, even with the same flags.
std::string corpus_fingerprint(const translate::Corpus& corpus) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  auto mix = [&](const std::string& text) {
    for (unsigned char ch : text) hash = (hash ^ ch) * 0x100000001b3ULL;
    hash = (hash ^ 0xff) * 0x100000001b3ULL;  // separator
  };
  for (const std::vector<translate::Pair>* split : {&corpus.train, &corpus.validation, &corpus.test})
    for (const translate::Pair& p : *split) {
      mix(p.source);
      mix(p.target);
    }
  return fmt::format("{:016x}", hash);
}

// Everything a run's result depends on besides (scale, d_k, seed); a saved run is reused only
// when this matches exactly.
nlohmann::json settings(const Options& o, const translate::Task& task) {
  return {{"task", o.task},
          {"corpus_fingerprint", corpus_fingerprint(task.corpus)},
          {"corpus_seed", o.corpus_seed},
          {"train_size", o.train_size},
          {"val_size", o.val_size},
          {"test_size", o.test_size},
          {"d_model", o.d_model},
          {"layers", o.layers},
          {"d_ff", o.d_ff},
          {"dropout", o.dropout},
          {"steps", o.steps},
          {"batch_size", o.batch_size},
          {"warmup", o.warmup},
          {"lr", o.lr},
          {"eval_every", o.eval_every},
          {"early_steps", o.early_steps},
          {"target_loss", o.target_loss}};
}

nlohmann::json to_json(const Run& r) {
  return {{"scale", r.scale},
          {"d_k", r.dk},
          {"seed", r.seed},
          {"test_bleu", r.bleu},
          {"exact_match", r.exact},
          {"steps_to_target", r.steps_to_target},
          {"early_attention_grad_norm", r.early_grad_norm},
          {"mean_attention_entropy", r.entropy},
          {"final_val_loss", r.final_val},
          {"train_seconds", r.seconds},
          {"eval_steps", r.eval_steps},
          {"val_losses", r.val_losses}};
}

Run run_from_json(const nlohmann::json& j, const std::string& source) {
  const io::JsonFields f(j, "scale_ablation", source);
  Run r;
  r.scale = f.string("scale");
  r.dk = f.integer("d_k", 1, 1 << 20);
  r.seed = f.integer("seed", 0, int64_t{1} << 62);
  r.bleu = f.number("test_bleu", 0.0, 100.0);
  r.exact = f.number("exact_match", 0.0, 1.0);
  r.steps_to_target = f.integer("steps_to_target", -1, int64_t{1} << 40);
  r.early_grad_norm = f.number("early_attention_grad_norm", 0.0, 1e300);
  r.entropy = f.number("mean_attention_entropy", 0.0, 1e300);
  r.final_val = f.number("final_val_loss", 0.0, 1e300);
  r.seconds = f.number("train_seconds", 0.0, 1e300);
  r.eval_steps = f.numbers("eval_steps", 0.0);
  r.val_losses = f.numbers("val_losses", 0.0, 1e300, static_cast<int64_t>(r.eval_steps.size()));
  return r;
}

// Mean entropy (nats) of every head of every attention module on the first 64 validation pairs.
double mean_attention_entropy(nn::Transformer& model, diagnostics::AttentionMonitor& monitor,
                              const translate::Task& task) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<size_t> rows;
  for (size_t i = 0; i < std::min<size_t>(64, task.corpus.validation.size()); ++i) rows.push_back(i);
  const translate::Batch b = translate::make_batch(task.corpus.validation, rows, task.source, task.target);
  monitor.record(true);
  model.forward(b.src, b.tgt_in);
  monitor.record(false);
  model.train();
  double total = 0;
  int count = 0;
  for (const auto& layer : monitor.attention_stats())
    for (const auto& head : layer.heads) {
      total += head.entropy;
      ++count;
    }
  return count ? total / count : 0.0;
}

// L2 norms of the current gradients of the query and key projections of every attention module
// (the only attention parameters whose gradient passes through the softmax Jacobian, so the ones a
// saturated softmax would starve) and of the value and output projections (which it does not).
struct ProjectionGradientNorms {
  double query_key = 0, value_output = 0;
};
ProjectionGradientNorms projection_gradient_norms(const nn::Module& model) {
  std::vector<Tensor> query_key, value_output;
  auto has = [](const std::string& name, const char* part) { return name.find(part) != std::string::npos; };
  for (const auto& [name, param] : model.named_parameters()) {
    if (has(name, ".q_proj.") || has(name, ".k_proj.")) query_key.push_back(param);
    if (has(name, ".v_proj.") || has(name, ".out_proj.")) value_output.push_back(param);
  }
  return {nn::total_grad_norm(query_key), nn::total_grad_norm(value_output)};
}

std::shared_ptr<nn::Transformer> build_ablation_model(const Options& o, const translate::Task& task,
                                                      const std::string& scale, int64_t dk) {
  translate::ModelConfig mc;
  mc.d_model = o.d_model;
  mc.heads = o.d_model / dk;
  mc.layers = o.layers;
  mc.d_ff = o.d_ff;
  mc.dropout = o.dropout;
  mc.attn_scale = scale;
  mc.max_len = translate::positions_needed(task);
  return translate::build_model(mc, task.source, task.target);
}

// --early-only: the first --early-steps steps of one run (the same weights, batches and schedule
// as the full run's start), with the gradient norms split by projection.
struct EarlyRun {
  std::string scale;
  int64_t dk = 0, seed = 0;
  double entropy_at_init = 0, query_key = 0, value_output = 0;
};

EarlyRun train_early(const Options& o, const translate::Task& task, const std::string& scale, int64_t dk,
                     int64_t seed) {
  manual_seed(static_cast<uint64_t>(seed));
  auto model = build_ablation_model(o, task, scale, dk);
  translate::Trainer trainer(*model, task,
                             {.batch_size = o.batch_size, .steps = o.steps, .warmup = o.warmup, .lr = o.lr});
  diagnostics::AttentionMonitor monitor(*model);
  EarlyRun run{scale, dk, seed, mean_attention_entropy(*model, monitor, task), 0, 0};
  for (int64_t step = 1; step <= o.early_steps; ++step)
    trainer.step([&] {
      const ProjectionGradientNorms norms = projection_gradient_norms(*model);
      run.query_key += norms.query_key / static_cast<double>(o.early_steps);
      run.value_output += norms.value_output / static_cast<double>(o.early_steps);
    });
  return run;
}

Run train_one(const Options& o, const translate::Task& task, const std::string& scale, int64_t dk, int64_t seed) {
  manual_seed(static_cast<uint64_t>(seed));  // initial weights (up to the scale parameters), batches, dropout
  auto model = build_ablation_model(o, task, scale, dk);
  translate::Trainer trainer(*model, task,
                             {.batch_size = o.batch_size, .steps = o.steps, .warmup = o.warmup, .lr = o.lr});
  diagnostics::AttentionMonitor monitor(*model);
  Run run;
  run.scale = scale;
  run.dk = dk;
  run.seed = seed;
  double early_sum = 0;
  const double t0 = now_seconds();
  for (int64_t step = 1; step <= o.steps; ++step) {
    const bool early = step <= o.early_steps;
    trainer.step([&] {
      if (!early) return;
      double squares = 0;
      for (const auto& [name, norm] : monitor.attention_gradient_norms()) squares += norm * norm;
      early_sum += std::sqrt(squares);
    });
    if (step % o.eval_every == 0 || step == o.steps) {
      model->eval();
      const double val = translate::evaluate_loss(*model, task, task.corpus.validation);
      model->train();
      run.eval_steps.push_back(static_cast<double>(step));
      run.val_losses.push_back(val);
      run.final_val = val;
      if (run.steps_to_target < 0 && val <= o.target_loss) run.steps_to_target = step;
    }
  }
  run.seconds = now_seconds() - t0;
  run.early_grad_norm = early_sum / static_cast<double>(std::min(o.early_steps, o.steps));
  model->eval();
  const translate::EvalResult eval = translate::evaluate_translation(*model, task, task.corpus.test, {.beam = 1});
  run.bleu = eval.bleu;
  run.exact = eval.exact_match;
  run.entropy = mean_attention_entropy(*model, monitor, task);
  return run;
}

// Mean and sample standard deviation (0 for a single value).
struct Spread {
  double mean = 0, sd = 0;
};
Spread spread(const std::vector<double>& values) {
  Spread s;
  if (values.empty()) return s;
  for (double v : values) s.mean += v;
  s.mean /= static_cast<double>(values.size());
  if (values.size() < 2) return s;
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  s.sd = std::sqrt(squares / static_cast<double>(values.size() - 1));
  return s;
}
std::string format_spread(const Spread& s, int decimals) {
  return fmt::format("{:.{}f} ± {:.{}f}", s.mean, decimals, s.sd, decimals);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string s = text + ",";
  for (size_t at = 0, comma; (comma = s.find(',', at)) != std::string::npos; at = comma + 1)
    if (comma > at) items.push_back(s.substr(at, comma - at));
  return items;
}

// --early-only: every (d_k, scale, seed) for its first --early-steps steps; the table of the
// attention entropy at initialisation and the early gradient norms of the Q/K and V/O projections
// (seed 000 sec. 6 says unscaled attention's gradients are orders of magnitude smaller).
int run_early(const Options& o, const translate::Task& task, const std::vector<std::string>& scales,
              const std::vector<int64_t>& dks) {
  std::printf(
      "early gradients on the %s task: %zu scales x %zu head widths x %lld seeds, the first %lld of %lld steps of "
      "%lld pairs; d_model %lld, %lld+%lld layers, d_ff %lld, %d threads\n",
      o.task.c_str(), scales.size(), dks.size(), static_cast<long long>(o.seeds), static_cast<long long>(o.early_steps),
      static_cast<long long>(o.steps), static_cast<long long>(o.batch_size), static_cast<long long>(o.d_model),
      static_cast<long long>(o.layers), static_cast<long long>(o.layers), static_cast<long long>(o.d_ff),
      get_num_threads());
  std::string md = fmt::format(
      "| d_k (heads) | scale | attention entropy at init (nats) | Q/K projection grad norm (first {0} steps) | V/O "
      "projection grad norm (first {0} steps) | Q/K ÷ V/O |\n|---|---|---|---|---|---|\n",
      o.early_steps);
  nlohmann::json rows = nlohmann::json::array(), runs = nlohmann::json::array();
  for (int64_t dk : dks)
    for (const std::string& scale : scales) {
      std::vector<double> entropy, query_key, value_output, ratio;
      for (int64_t seed = 1; seed <= o.seeds; ++seed) {
        const EarlyRun r = train_early(o, task, scale, dk, seed);
        std::printf("  [%s d_k %lld seed %lld] entropy at init %.2f, Q/K grad norm %.4f, V/O grad norm %.4f\n",
                    scale.c_str(), static_cast<long long>(dk), static_cast<long long>(seed), r.entropy_at_init,
                    r.query_key, r.value_output);
        std::fflush(stdout);
        entropy.push_back(r.entropy_at_init);
        query_key.push_back(r.query_key);
        value_output.push_back(r.value_output);
        ratio.push_back(r.value_output > 0 ? r.query_key / r.value_output : 0.0);
        runs.push_back({{"scale", scale},
                        {"d_k", dk},
                        {"seed", seed},
                        {"entropy_at_init", r.entropy_at_init},
                        {"query_key_grad_norm", r.query_key},
                        {"value_output_grad_norm", r.value_output}});
      }
      md += fmt::format("| {} ({}) | {} | {} | {} | {} | {} |\n", dk, o.d_model / dk, scale,
                        format_spread(spread(entropy), 2), format_spread(spread(query_key), 4),
                        format_spread(spread(value_output), 4), format_spread(spread(ratio), 3));
      rows.push_back({{"d_k", dk},
                      {"heads", o.d_model / dk},
                      {"scale", scale},
                      {"entropy_at_init_mean", spread(entropy).mean},
                      {"query_key_grad_norm_mean", spread(query_key).mean},
                      {"query_key_grad_norm_sd", spread(query_key).sd},
                      {"value_output_grad_norm_mean", spread(value_output).mean},
                      {"value_output_grad_norm_sd", spread(value_output).sd}});
    }
  std::printf("\n%s", md.c_str());
  std::ofstream(o.out_dir + "/early_gradients.md") << md;
  io::save_json(o.out_dir + "/early_gradients.json",
                {{"settings", settings(o, task)}, {"seeds", o.seeds}, {"rows", rows}, {"runs", runs}});
  std::printf("\nwrote %s/early_gradients.md and early_gradients.json\n", o.out_dir.c_str());
  return 0;
}

int run(const Options& o) {
  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  std::vector<std::string> scales = split_list(o.scales);
  cli::check_usage(!scales.empty(), "--scales: give at least one scale");
  for (const std::string& name : scales) {
    try {
      nn::parse_attention_scale(name);  // validates
    } catch (const Error& e) {
      throw cli::UsageError(fmt::format("--scales: {}", e.what()));
    }
  }
  const std::vector<int64_t> dks = cli::parse_positive_list("--dks", o.dks, o.d_model);
  for (int64_t dk : dks)
    cli::check_usage(o.d_model % dk == 0, "--dks: d_k {} does not divide --d-model {}", dk, o.d_model);
  cli::check_usage(!(o.early_only && o.table_only), "--early-only trains; it cannot be combined with --table-only");
  std::filesystem::create_directories(o.out_dir);

  translate::CorpusOptions corpus;
  corpus.level = translate::parse_task_level(o.task);
  corpus.seed = static_cast<uint64_t>(o.corpus_seed);
  corpus.train_size = static_cast<int>(o.train_size);
  corpus.validation_size = static_cast<int>(o.val_size);
  corpus.test_size = static_cast<int>(o.test_size);
  const translate::Task task = translate::make_task(corpus);
  if (o.early_only) return run_early(o, task, scales, dks);
  const nlohmann::json setup = settings(o, task);
  const std::string runs_dir = o.out_dir + "/runs";
  std::filesystem::create_directories(runs_dir);
  std::printf(
      "scale ablation (%s budget) on the %s task: %zu scales x %zu head widths x %lld seeds; d_model %lld, %lld+%lld "
      "layers, d_ff %lld, %lld steps of %lld pairs, target validation loss %.2f, %d threads\n",
      o.budget.c_str(), o.task.c_str(), scales.size(), dks.size(), static_cast<long long>(o.seeds),
      static_cast<long long>(o.d_model), static_cast<long long>(o.layers), static_cast<long long>(o.layers),
      static_cast<long long>(o.d_ff), static_cast<long long>(o.steps), static_cast<long long>(o.batch_size),
      o.target_loss, get_num_threads());

  std::vector<Run> runs;
  int reused = 0;
  const bool reuse_saved = o.resume || o.table_only;  // --table-only reads saved runs and trains none
  for (int64_t dk : dks)
    for (const std::string& scale : scales)
      for (int64_t seed = 1; seed <= o.seeds; ++seed) {
        const std::string path = fmt::format("{}/{}_dk{}_seed{}.json", runs_dir, scale, dk, seed);
        if (reuse_saved && std::filesystem::exists(path)) {
          const nlohmann::json saved = io::load_json(path);
          HEED_CHECK(saved.is_object() && saved.contains("settings") && saved.contains("run"), "scale_ablation",
                     "{} is not a saved run (no settings and run)", path);
          if (saved["settings"] == setup) {
            runs.push_back(run_from_json(saved["run"], path));
            ++reused;
            std::printf("  [%s d_k %lld seed %lld] reused %s\n", scale.c_str(), static_cast<long long>(dk),
                        static_cast<long long>(seed), path.c_str());
            continue;
          }
          HEED_CHECK(!o.table_only, "scale_ablation", "--table-only: {} was saved with other settings", path);
          std::printf("  [%s d_k %lld seed %lld] %s has other settings: training again\n", scale.c_str(),
                      static_cast<long long>(dk), static_cast<long long>(seed), path.c_str());
        }
        HEED_CHECK(!o.table_only, "scale_ablation", "--table-only: no saved run {}", path);
        const Run r = train_one(o, task, scale, dk, seed);
        io::save_json(path, {{"settings", setup}, {"run", to_json(r)}});
        std::printf("  [%s d_k %lld seed %lld] test BLEU %.2f, final validation loss %.4f, entropy %.2f (%.0f s)\n",
                    scale.c_str(), static_cast<long long>(dk), static_cast<long long>(seed), r.bleu, r.final_val,
                    r.entropy, r.seconds);
        std::fflush(stdout);
        runs.push_back(r);
      }

  // ---- the table: mean ± sd over seeds per (d_k, scale) ---------------------------------------
  std::string md = fmt::format(
      "| d_k (heads) | scale | test BLEU | exact match % | steps to val loss {:.2f} | attention grad norm (first "
      "{} steps) | attention entropy (nats) | final val loss |\n|---|---|---|---|---|---|---|---|\n",
      o.target_loss, o.early_steps);
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t dk : dks) {
    std::vector<report::svg::Series> curves;
    for (const std::string& scale : scales) {
      std::vector<double> bleu, exact, grad, entropy, final_val, reached_at;
      std::vector<const Run*> group;
      for (const Run& r : runs)
        if (r.dk == dk && r.scale == scale) {
          group.push_back(&r);
          bleu.push_back(r.bleu);
          exact.push_back(100 * r.exact);
          grad.push_back(r.early_grad_norm);
          entropy.push_back(r.entropy);
          final_val.push_back(r.final_val);
          if (r.steps_to_target >= 0) reached_at.push_back(static_cast<double>(r.steps_to_target));
        }
      const std::string reached =
          reached_at.empty() ? std::string("not reached")
                             : fmt::format("{}{}", format_spread(spread(reached_at), 0),
                                           reached_at.size() < group.size()
                                               ? fmt::format(" ({} of {} seeds)", reached_at.size(), group.size())
                                               : std::string());
      md += fmt::format("| {} ({}) | {} | {} | {} | {} | {} | {} | {} |\n", dk, o.d_model / dk, scale,
                        format_spread(spread(bleu), 1), format_spread(spread(exact), 1), reached,
                        format_spread(spread(grad), 3), format_spread(spread(entropy), 2),
                        format_spread(spread(final_val), 3));
      rows.push_back(
          {{"d_k", dk},
           {"heads", o.d_model / dk},
           {"scale", scale},
           {"seeds", group.size()},
           {"test_bleu_mean", spread(bleu).mean},
           {"test_bleu_sd", spread(bleu).sd},
           {"exact_match_mean", spread(exact).mean / 100},
           {"steps_to_target_mean", reached_at.empty() ? nlohmann::json() : nlohmann::json(spread(reached_at).mean)},
           {"seeds_reaching_target", reached_at.size()},
           {"early_attention_grad_norm_mean", spread(grad).mean},
           {"mean_attention_entropy_mean", spread(entropy).mean},
           {"final_val_loss_mean", spread(final_val).mean},
           {"final_val_loss_sd", spread(final_val).sd}});
      // The chart: mean validation loss over seeds, shaded from the lowest to the highest seed.
      report::svg::Series curve{scale, {}, {}};
      if (!group.empty()) {
        curve.x = group.front()->eval_steps;
        for (size_t i = 0; i < curve.x.size(); ++i) {
          std::vector<double> at;
          for (const Run* r : group)
            if (i < r->val_losses.size()) at.push_back(r->val_losses[i]);
          curve.y.push_back(spread(at).mean);
          curve.band_lo.push_back(*std::min_element(at.begin(), at.end()));
          curve.band_hi.push_back(*std::max_element(at.begin(), at.end()));
        }
      }
      curves.push_back(std::move(curve));
    }
    report::svg::line_chart(fmt::format("{}/val_loss_dk{}.svg", o.out_dir, dk),
                            fmt::format("validation loss, d_k = {} ({} head{}): mean over {} seeds, min-max shaded", dk,
                                        o.d_model / dk, o.d_model / dk == 1 ? "" : "s", o.seeds),
                            curves, "training step", "validation loss", true);
  }

  // ---- what heed-doctor probe predicts at the same d_k ---------------------------------------
  const std::vector<doctor::ProbeRow> probe = doctor::probe(dks, 64, 128, 0);
  std::string probe_md =
      "| d_k | scores | score std | attention entropy / uniform | largest weight | softmax gradient norm |\n"
      "|---|---|---|---|---|---|\n";
  nlohmann::json probe_json = nlohmann::json::array();
  for (const doctor::ProbeRow& p : probe) {
    probe_md += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.3g} |\n", p.dk, p.scaled ? "scaled" : "unscaled",
                            p.score_std, p.entropy / p.uniform_entropy, p.max_weight, p.grad_norm);
    probe_json.push_back({{"d_k", p.dk},
                          {"scaled", p.scaled},
                          {"score_std", p.score_std},
                          {"entropy_over_uniform", p.entropy / p.uniform_entropy},
                          {"max_weight", p.max_weight},
                          {"grad_norm", p.grad_norm}});
  }

  std::printf("\n%s\nheed-doctor probe at the same d_k (64 random N(0,1) queries x 128 keys, seed 0):\n\n%s",
              md.c_str(), probe_md.c_str());
  std::ofstream(o.out_dir + "/scale_ablation.md")
      << md << "\nheed-doctor probe at the same d_k (64 random N(0,1) queries x 128 keys, seed 0):\n\n"
      << probe_md;
  nlohmann::json all_runs = nlohmann::json::array();
  for (const Run& r : runs) all_runs.push_back(to_json(r));
  io::save_json(o.out_dir + "/scale_ablation.json", {{"budget", o.budget},
                                                     {"settings", setup},
                                                     {"seeds", o.seeds},
                                                     {"rows", rows},
                                                     {"runs", all_runs},
                                                     {"probe", probe_json}});
  std::printf("\n%zu runs (%d reused from %s); wrote %s/scale_ablation.md, scale_ablation.json and val_loss_dk*.svg\n",
              runs.size(), reused, runs_dir.c_str(), o.out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cli::ArgParser args("scale_ablation",
                      "Trains the translator with each attention scale at each head width d_k and several seeds "
                      "(seed 000 sec. 6) and tabulates mean and spread.");
  args.add_string("budget", &o.budget,
                  "full (the README table: d_model 256, d_k 64/128/256, 3 seeds, 800 steps of 64 pairs per run, "
                  "about 3.5 minutes per run on 2 cores) or quick (a smoke run of seconds: tiny model and corpus); "
                  "explicit flags override either",
                  {"quick", "full"});
  args.add_string("task", &o.task, "translation task level (translate --task)", {"quick", "hard"});
  args.add_string("scales", &o.scales, "comma-separated scales to compare (none, sqrt_dk, learnable, affine, cosine)");
  args.add_string("dks", &o.dks, "comma-separated head widths d_k; heads = d_model / d_k");
  args.add_int("seeds", &o.seeds, "seeds per configuration (1..N: weights, batches, dropout)", 1, 1000);
  args.add_int("steps", &o.steps, "training steps per run", 1, 10000000);
  args.add_int("batch-size", &o.batch_size, "sentence pairs per step", 1, 100000);
  args.add_int("warmup", &o.warmup, "warmup steps", 0, 10000000);
  args.add_double("lr", &o.lr, "peak learning rate", 0, 10);
  args.add_double("dropout", &o.dropout, "dropout", 0, 0.99);
  args.add_double("target-loss", &o.target_loss, "validation loss whose first crossing is reported", 0, 100);
  args.add_int("eval-every", &o.eval_every, "validation interval", 1, 10000000);
  args.add_int("early-steps", &o.early_steps, "steps over which the early gradient norm is averaged", 1, 10000000);
  args.add_int("d-model", &o.d_model, "model width (the same for every d_k)", 1, 65536);
  args.add_int("layers", &o.layers, "encoder and decoder layers", 1, 64);
  args.add_int("d-ff", &o.d_ff, "feed-forward width", 1, 1 << 20);
  args.add_int("train-size", &o.train_size, "training pairs", 100, 10000000);
  args.add_int("val-size", &o.val_size, "validation pairs", 8, 1000000);
  args.add_int("test-size", &o.test_size, "test pairs", 1, 1000000);
  args.add_int("corpus-seed", &o.corpus_seed, "seed of the corpus (the same for every run)", 0, 1LL << 62);
  args.add_int("threads", &o.threads, "threads (0: all cores)", 0, 1024);
  args.add_string("out-dir", &o.out_dir, "output directory (runs/ holds one JSON file per finished run)");
  args.add_flag("resume", &o.resume, "reuse the finished runs in OUT_DIR/runs whose settings match");
  args.add_flag("table-only", &o.table_only,
                "train nothing: build the table from the saved runs alone, and fail naming the first run that is "
                "missing or was saved with other settings");
  args.add_flag("early-only", &o.early_only,
                "train every configuration for --early-steps steps only and tabulate the attention entropy at "
                "initialisation and the early gradient norms of the Q/K and V/O projections (early_gradients.md)");
  return examples::parse_and_run(args, "scale_ablation", argc, argv, [&] {
    if (o.budget == "quick") apply_quick_budget(o, args);
    return run(o);
  });
}
