// tools/heed_doctor.cpp — heed-doctor: the documents' attention troubleshooting checks.
//
//   heed-doctor check CHECKPOINT [--json] [--verbose] [--batch N]   checks a trained translate/charlm
//                                                                    model on a batch of its own data
//   heed-doctor probe [--dk 16,64,256] [--seed 0]        seed 000 sec. 10's recipe on random Q, K
//
// The report starts with the overall verdict and the most likely root causes (with the
// documents' fix and section), then the table (healthy rows collapsed unless --verbose;
// --json keeps every row). The checks themselves live in heed/doctor.h.
// Exit status: 0 healthy or warnings only, 1 a check fails or a runtime error (unreadable or
// wrong-kind checkpoint), 2 bad arguments.
#include <heed/doctor.h>
#include <heed/heed.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dataset.h"
#include "task.h"

using namespace heed;

namespace {

struct CheckOptions {
  std::string checkpoint, data;
  int64_t batch = 8;
  bool json = false, verbose = false;
};

int check(const CheckOptions& o) {
  const nlohmann::json config = io::read_config(o.checkpoint);
  HEED_CHECK(config.is_object(), "doctor", "{} has no model configuration", o.checkpoint);
  doctor::Report report;
  std::string kind;
  if (config.contains("source_vocab")) {
    kind = "translate";
    const translate::SavedConfig saved = translate::read_saved_config(config, o.checkpoint);
    const translate::Vocab& source = saved.source;
    const translate::Vocab& target = saved.target;
    auto model = translate::build_model(saved.model, source, target);
    io::load_checkpoint(o.checkpoint, *model);
    const translate::CorpusOptions& corpus = saved.corpus;
    const translate::Corpus data = translate::generate_corpus(corpus);
    std::vector<size_t> rows;
    for (size_t i = 0; i < std::min<size_t>(static_cast<size_t>(o.batch), data.validation.size()); ++i)
      rows.push_back(i);
    const translate::Batch b = translate::make_batch(data.validation, rows, source, target);
    report = doctor::run_checks(doctor::seq2seq_subject(*model, b.src, b.tgt_in, b.tgt_out));
  } else if (config.contains("chars")) {
    kind = "charlm";
    const charlm::SavedModel saved = charlm::read_saved_model(config, o.checkpoint, "doctor");
    const nn::TransformerLMOptions& mo = saved.options;
    nn::TransformerLM model(mo);
    io::load_checkpoint(o.checkpoint, model);
    std::string text;
    const std::string source = o.data.empty() ? saved.data : o.data;
    if (source == "generated") {
      text = charlm::generated_corpus(saved.seed, 400000);
    } else {
      std::ifstream in(source, std::ios::binary);
      HEED_CHECK(in.good(), "doctor", "cannot read the training data '{}' (pass --data PATH)", source);
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    const charlm::Dataset data = charlm::load_dataset(text);
    HEED_CHECK(
        static_cast<int64_t>(data.chars.size()) == mo.vocab, "doctor",
        "the data has {} distinct characters but the model was trained on {}: pass the training text with --data",
        data.chars.size(), mo.vocab);
    manual_seed(0);
    auto [x, y] = charlm::get_batch(data.val, o.batch, mo.context);
    report = doctor::run_checks(doctor::lm_subject(model, x, y));
  } else {
    fail("doctor", "{}: unknown model kind (expected a translate or charlm checkpoint)", o.checkpoint);
  }
  if (o.json) {
    nlohmann::json j = report.json();
    j["checkpoint"] = o.checkpoint;
    j["model"] = kind;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("heed-doctor: %s (%s model), batch of %lld\n%s", o.checkpoint.c_str(), kind.c_str(),
                static_cast<long long>(o.batch), report.text(o.verbose).c_str());
  }
  return report.failed() ? 1 : 0;
}

struct ProbeOptions {
  std::string dks = "16,64,256", svg_dir;
  int64_t seed = 0, queries = 64, keys = 128;
  bool json = false;
};

int probe(const ProbeOptions& o) {
  const std::vector<int64_t> dks = cli::parse_positive_list("--dk", o.dks, int64_t{1} << 16);
  const std::vector<doctor::ProbeRow> rows = doctor::probe(dks, o.queries, o.keys, static_cast<uint64_t>(o.seed));
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows)
      j.push_back({{"dk", r.dk},
                   {"scaled", r.scaled},
                   {"score_mean", r.score_mean},
                   {"score_std", r.score_std},
                   {"score_mean_abs", r.score_mean_abs},
                   {"entropy", r.entropy},
                   {"uniform_entropy", r.uniform_entropy},
                   {"max_mean_ratio", r.max_mean_ratio},
                   {"max_weight", r.max_weight},
                   {"grad_norm", r.grad_norm},
                   {"histogram_edges", r.histogram_edges},
                   {"histogram_counts", r.histogram_counts}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("probe: %lld random queries x %lld random keys, entries N(0, 1), seed %lld (seed 000 sec. 10)\n\n",
                static_cast<long long>(o.queries), static_cast<long long>(o.keys), static_cast<long long>(o.seed));
    std::printf("%6s %9s %10s %10s %10s %10s %10s %10s %12s\n", "d_k", "scores", "mean", "std", "mean|s|", "entropy",
                "max/mean", "max w", "|grad|");
    for (const auto& r : rows)
      std::printf("%6lld %9s %10.3f %10.3f %10.3f %10.3f %10.2f %10.3f %12.3e\n", static_cast<long long>(r.dk),
                  r.scaled ? "scaled" : "unscaled", r.score_mean, r.score_std, r.score_mean_abs, r.entropy,
                  r.max_mean_ratio, r.max_weight, r.grad_norm);
    std::printf(
        "\nuniform attention over %lld keys has entropy %.3f nats; expected |s| of unscaled scores is "
        "sqrt(2 d_k / pi) and their std sqrt(d_k).\n\nsoftmax weight histograms (count per bin):\n",
        static_cast<long long>(o.keys), std::log(static_cast<double>(o.keys)));
    for (const auto& r : rows) {
      std::printf("  d_k %lld %s:\n", static_cast<long long>(r.dk), r.scaled ? "scaled" : "unscaled");
      double top = 0;
      for (double c : r.histogram_counts) top = std::max(top, c);
      for (size_t b = 0; b < r.histogram_counts.size(); ++b) {
        const int bar = top > 0 ? static_cast<int>(40.0 * r.histogram_counts[b] / top + 0.5) : 0;
        std::printf("    [%9.2e, %9.2e) %7.0f %s\n", r.histogram_edges[b], r.histogram_edges[b + 1],
                    r.histogram_counts[b], std::string(static_cast<size_t>(bar), '#').c_str());
      }
    }
  }
  if (!o.svg_dir.empty()) {
    std::filesystem::create_directories(o.svg_dir);
    for (const auto& r : rows) {
      const std::string path = fmt::format("{}/probe_dk{}_{}.svg", o.svg_dir, r.dk, r.scaled ? "scaled" : "unscaled");
      report::svg::histogram(
          path, fmt::format("softmax weights, d_k = {}, {}", r.dk, r.scaled ? "scaled by 1/sqrt(d_k)" : "unscaled"),
          r.histogram_edges, r.histogram_counts, "attention weight", true);
    }
    if (!o.json) std::printf("\nwrote the histograms to %s/probe_dk*.svg\n", o.svg_dir.c_str());
  }
  return 0;
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: heed-doctor check CHECKPOINT [--json] [--verbose] [--batch N] [--data PATH]\n"
               "       heed-doctor probe [--dk 16,64,256] [--seed 0] [--queries 64] [--keys 128] [--svg-dir DIR] "
               "[--json]\n\n"
               "check: runs the attention troubleshooting checks of the documents on a trained translate or charlm\n"
               "       checkpoint and a batch of its data: the verdict and the likely root causes first, then\n"
               "       the table (--verbose: every row); exit status 1 when a check fails.\n"
               "probe: statistics of unscaled and scaled scores of random Q and K (seed 000 sec. 10).\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    usage(stdout);
    return 0;
  }
  if (command == "check") {
    CheckOptions o;
    cli::ArgParser args("heed-doctor check", "Runs the attention troubleshooting checks on a checkpoint.");
    args.add_positional("CHECKPOINT", &o.checkpoint, "a translate or charlm training checkpoint");
    args.add_flag("json", &o.json, "print JSON (every row) instead of the report");
    args.add_flag("verbose", &o.verbose, "show every row, also the repeated healthy ones");
    args.add_int("batch", &o.batch, "sequences in the probe batch", 1, 4096);
    args.add_string("data", &o.data, "the text a charlm model was trained on (default: from its config)");
    switch (args.parse(argc - 1, argv + 1)) {
      case cli::ArgParser::Outcome::Help:
        std::printf("%s", args.usage().c_str());
        return 0;
      case cli::ArgParser::Outcome::Error:
        std::fprintf(stderr, "heed-doctor %s: %s (see --help)\n", command.c_str(), args.error().c_str());
        return 2;
      case cli::ArgParser::Outcome::Ok:
        break;
    }
    return cli::run_guarded("heed-doctor", [&] { return check(o); });
  }
  if (command == "probe") {
    ProbeOptions o;
    cli::ArgParser args("heed-doctor probe", "Seed 000 sec. 10's diagnostic recipe on random Q and K.");
    args.add_string("dk", &o.dks, "comma-separated key dimensions");
    args.add_int("seed", &o.seed, "random seed", 0, 1LL << 62);
    args.add_int("queries", &o.queries, "random queries", 1, 1 << 16);
    args.add_int("keys", &o.keys, "random keys", 2, 1 << 16);
    args.add_string("svg-dir", &o.svg_dir, "write SVG histograms here");
    args.add_flag("json", &o.json, "print JSON instead of tables");
    switch (args.parse(argc - 1, argv + 1)) {
      case cli::ArgParser::Outcome::Help:
        std::printf("%s", args.usage().c_str());
        return 0;
      case cli::ArgParser::Outcome::Error:
        std::fprintf(stderr, "heed-doctor %s: %s (see --help)\n", command.c_str(), args.error().c_str());
        return 2;
      case cli::ArgParser::Outcome::Ok:
        break;
    }
    return cli::run_guarded("heed-doctor", [&] { return probe(o); });
  }
  std::fprintf(stderr, "heed-doctor: unknown command '%s' (see --help)\n", command.c_str());
  return 2;
}
