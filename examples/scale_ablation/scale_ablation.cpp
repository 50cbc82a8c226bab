// examples/scale_ablation/scale_ablation.cpp — the scaling experiment of seed 000 sec. 6 on
// the toy translation task: the same model (d_k = 64), seed and budget trained with the
// attention scale `none`, `sqrt_dk`, `learnable` and `cosine`; prints and writes (Markdown
// and JSON) the document's table: test BLEU, steps to reach a fixed validation loss, the
// gradient norm of the attention parameters early in training, and the mean attention
// entropy.
#include <heed/heed.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "main_guard.h"
#include "task.h"

using namespace heed;

namespace {

struct Options {
  int64_t steps = 1500, batch_size = 64, warmup = 150, eval_every = 100, early_steps = 100;
  int64_t d_model = 128, heads = 2, layers = 2, d_ff = 512, seed = 1, threads = 0, train_size = 40000, test_size = 500;
  double lr = 1e-3, target_loss = 0.5, dropout = 0.1;
  std::string scales = "none,sqrt_dk,learnable,cosine", out_dir = "scale_ablation_out";
};

struct Row {
  std::string scale;
  double bleu = 0, exact = 0, final_val = 0, early_grad_norm = 0, entropy = 0, seconds = 0;
  int64_t steps_to_target = -1;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Row run_one(const Options& o, const translate::Task& task, const std::string& scale) {
  manual_seed(static_cast<uint64_t>(o.seed));  // same initial weights (up to the scale parameters) and batches
  translate::ModelConfig mc;
  mc.d_model = o.d_model;
  mc.heads = o.heads;
  mc.layers = o.layers;
  mc.d_ff = o.d_ff;
  mc.dropout = o.dropout;
  mc.attn_scale = scale;
  auto model = translate::build_model(mc, task.source, task.target);
  translate::Trainer trainer(*model, task,
                             {.batch_size = o.batch_size, .steps = o.steps, .warmup = o.warmup, .lr = o.lr});
  diagnostics::AttentionMonitor monitor(*model);
  Row row;
  row.scale = scale;
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
      row.final_val = val;
      if (row.steps_to_target < 0 && val <= o.target_loss) row.steps_to_target = step;
      std::printf("  [%s] step %lld: validation loss %.4f\n", scale.c_str(), static_cast<long long>(step), val);
      std::fflush(stdout);
    }
  }
  row.seconds = now_seconds() - t0;
  row.early_grad_norm = early_sum / static_cast<double>(std::min(o.early_steps, o.steps));
  model->eval();
  const translate::EvalResult eval = translate::evaluate_translation(*model, task, task.corpus.test, {.beam = 1});
  row.bleu = eval.bleu;
  row.exact = eval.exact_match;
  {
    NoGradGuard no_grad;
    std::vector<size_t> rows;
    for (size_t i = 0; i < std::min<size_t>(64, task.corpus.validation.size()); ++i) rows.push_back(i);
    const translate::Batch b = translate::make_batch(task.corpus.validation, rows, task.source, task.target);
    monitor.record(true);
    model->forward(b.src, b.tgt_in);
    monitor.record(false);
    double total = 0;
    int count = 0;
    for (const auto& layer : monitor.attention_stats())
      for (const auto& head : layer.heads) {
        total += head.entropy;
        ++count;
      }
    row.entropy = count ? total / count : 0.0;
  }
  return row;
}

int run(const Options& o) {
  if (o.threads > 0) set_num_threads(static_cast<int>(o.threads));
  cli::check_usage(o.d_model % o.heads == 0, "--d-model {} must be divisible by --heads {}", o.d_model, o.heads);
  std::vector<std::string> scales;
  {
    std::string s = o.scales + ",";
    for (size_t at = 0, comma; (comma = s.find(',', at)) != std::string::npos; at = comma + 1) {
      const std::string name = s.substr(at, comma - at);
      try {
        nn::parse_attention_scale(name);  // validates
      } catch (const Error& e) {
        throw cli::UsageError(fmt::format("--scales: {}", e.what()));
      }
      scales.push_back(name);
    }
  }
  std::filesystem::create_directories(o.out_dir);
  translate::CorpusOptions corpus;
  corpus.seed = static_cast<uint64_t>(o.seed);
  corpus.train_size = static_cast<int>(o.train_size);
  corpus.test_size = static_cast<int>(o.test_size);
  const translate::Task task = translate::make_task(corpus);
  std::printf(
      "scale ablation: d_model %lld, %lld heads (d_k = %lld), %lld+%lld layers, %lld steps of %lld pairs, "
      "seed %lld, target validation loss %.2f\n",
      static_cast<long long>(o.d_model), static_cast<long long>(o.heads), static_cast<long long>(o.d_model / o.heads),
      static_cast<long long>(o.layers), static_cast<long long>(o.layers), static_cast<long long>(o.steps),
      static_cast<long long>(o.batch_size), static_cast<long long>(o.seed), o.target_loss);
  std::vector<Row> rows;
  for (const std::string& scale : scales) rows.push_back(run_one(o, task, scale));

  std::string md = fmt::format(
      "| scale | test BLEU | exact match | steps to val loss {:.2f} | attention grad norm (first {} steps) | "
      "mean attention entropy (nats) | final val loss | train s |\n|---|---|---|---|---|---|---|---|\n",
      o.target_loss, o.early_steps);
  nlohmann::json json = nlohmann::json::array();
  for (const Row& r : rows) {
    md += fmt::format("| {} | {:.1f} | {:.1f}% | {} | {:.3g} | {:.2f} | {:.3f} | {:.0f} |\n", r.scale, r.bleu,
                      100 * r.exact,
                      r.steps_to_target < 0 ? std::string("not reached") : std::to_string(r.steps_to_target),
                      r.early_grad_norm, r.entropy, r.final_val, r.seconds);
    json.push_back({{"scale", r.scale},
                    {"test_bleu", r.bleu},
                    {"exact_match", r.exact},
                    {"steps_to_target", r.steps_to_target},
                    {"early_attention_grad_norm", r.early_grad_norm},
                    {"mean_attention_entropy", r.entropy},
                    {"final_val_loss", r.final_val},
                    {"train_seconds", r.seconds}});
  }
  std::printf("\n%s", md.c_str());
  std::ofstream(o.out_dir + "/scale_ablation.md") << md;
  io::save_json(o.out_dir + "/scale_ablation.json", {{"config",
                                                      {{"d_model", o.d_model},
                                                       {"heads", o.heads},
                                                       {"d_k", o.d_model / o.heads},
                                                       {"layers", o.layers},
                                                       {"steps", o.steps},
                                                       {"batch_size", o.batch_size},
                                                       {"seed", o.seed},
                                                       {"target_val_loss", o.target_loss}}},
                                                     {"rows", json}});
  std::printf("wrote %s/scale_ablation.md and scale_ablation.json\n", o.out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cli::ArgParser args(
      "scale_ablation",
      "Trains the toy translator with each attention scale (seed 000 sec. 6) and tabulates the results.");
  args.add_string("scales", &o.scales, "comma-separated scales to compare (none, sqrt_dk, learnable, affine, cosine)");
  args.add_int("steps", &o.steps, "training steps per scale", 1, 10000000);
  args.add_int("batch-size", &o.batch_size, "sentence pairs per step", 1, 100000);
  args.add_int("warmup", &o.warmup, "warmup steps", 0, 10000000);
  args.add_double("lr", &o.lr, "peak learning rate", 0, 10);
  args.add_double("dropout", &o.dropout, "dropout", 0, 0.99);
  args.add_double("target-loss", &o.target_loss, "validation loss whose first crossing is reported", 0, 100);
  args.add_int("eval-every", &o.eval_every, "validation interval", 1, 10000000);
  args.add_int("early-steps", &o.early_steps, "steps over which the early gradient norm is averaged", 1, 10000000);
  args.add_int("d-model", &o.d_model, "model width", 1, 65536);
  args.add_int("heads", &o.heads, "attention heads (d_k = d_model / heads)", 1, 1024);
  args.add_int("layers", &o.layers, "encoder and decoder layers", 1, 64);
  args.add_int("d-ff", &o.d_ff, "feed-forward width", 1, 1 << 20);
  args.add_int("train-size", &o.train_size, "training pairs", 100, 10000000);
  args.add_int("test-size", &o.test_size, "test pairs", 1, 1000000);
  args.add_int("seed", &o.seed, "random seed", 0, 1LL << 62);
  args.add_int("threads", &o.threads, "threads (0: all cores)", 0, 1024);
  args.add_string("out-dir", &o.out_dir, "output directory");
  return examples::parse_and_run(args, "scale_ablation", argc, argv, [&] { return run(o); });
}
