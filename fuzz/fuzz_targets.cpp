// fuzz/fuzz_targets.cpp — the fuzz entry points (see fuzz_targets.h).
//
// Invariants: every target builds its objects afresh per input (no state carries over from
// one input to the next, so a regression input replays alone); heed::Error is the only
// exception swallowed.
#include "fuzz_targets.h"

#include <heed/heed.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>

#ifdef HEED_FUZZ_HAVE_TRANSLATE
#include "task.h"
#endif

namespace heed::fuzz {

namespace {

void require(bool condition, const std::string& what) {
  if (!condition) throw FuzzPropertyViolation("fuzz property violated: " + what);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t n = static_cast<size_t>(a.numel()) * a.element_size();
  return n == 0 || std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), n) == 0;
}

// The tiny model, optimizer and scheduler the checkpoint target restores into (also used to
// write its seed corpus, see make_seed_corpus.cpp).
struct TinyRun {
  nn::TransformerLM model;
  optim::AdamW optimizer;
  optim::WarmupCosineLR scheduler;
  static nn::TransformerLMOptions options() {
    nn::TransformerLMOptions o;
    o.vocab = 7;
    o.d_model = 4;
    o.heads = 2;
    o.layers = 1;
    o.d_ff = 8;
    o.context = 4;
    return o;
  }
  static std::vector<optim::ParamGroup> groups(const nn::Module& m) {
    optim::ParamGroup decay, no_decay;
    for (const auto& [name, p] : m.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
    no_decay.weight_decay = 0.0;
    return {decay, no_decay};
  }
  TinyRun() : model((manual_seed(0), options())), optimizer(groups(model)), scheduler(optimizer, 2, 10, 1e-4) {}
  void train_step() {
    const Tensor idx = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 1}, {2, 4});
    Tensor loss = F::cross_entropy(model.forward(idx), idx);
    optimizer.zero_grad();
    loss.backward();
    nn::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
    scheduler.step();
  }
};

std::vector<std::string> split_at_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      parts.emplace_back();
    else
      parts.back().push_back(static_cast<char>(data[i]));
  }
  if (size == 0) parts.clear();
  return parts;
}

}  // namespace

// ---- safetensors ----------------------------------------------------------------------------

void safetensors(const uint8_t* data, size_t size) {
  io::SafetensorsFile file;
  try {
    file = io::parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return;
  }
  // Accepted: every tensor is CPU and contiguous, and the file round-trips exactly.
  for (const auto& [name, t] : file.tensors) require(t.device().is_cpu() && t.is_contiguous(), "tensor layout");
  std::string again;
  try {
    again = io::serialize_safetensors(file.tensors, file.metadata);
  } catch (const Error& e) {
    throw FuzzPropertyViolation(std::string("an accepted file cannot be written back: ") + e.what());
  }
  const io::SafetensorsFile reread =
      io::parse_safetensors(reinterpret_cast<const uint8_t*>(again.data()), again.size(), "roundtrip");
  require(reread.metadata == file.metadata, "metadata round trip");
  require(reread.tensors.size() == file.tensors.size(), "tensor count round trip");
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    require(reread.tensors[i].first == file.tensors[i].first, "tensor name round trip");
    require(same_bytes(reread.tensors[i].second, file.tensors[i].second), "tensor bytes round trip");
  }
}

// ---- JSON -----------------------------------------------------------------------------------

void json(const uint8_t* data, size_t size) {
  nlohmann::json value;
  try {
    value = io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const Error&) {
    return;
  }
  // An accepted document can be written and read again (as save_json/load_json do).
  std::string text;
  try {
    text = value.dump(2);
  } catch (const nlohmann::json::exception& e) {
    throw FuzzPropertyViolation(std::string("an accepted document cannot be dumped: ") + e.what());
  }
  io::parse_json(text, "fuzz.json (dumped)");

  // The readers of JSON found in checkpoints: scheduler state, optimizer scalars, configs
  // (all of them want an object; anything else is rejected on the first check).
  if (value.is_object()) {
    TinyRun run;
    try {
      run.scheduler.load_state_dict(value);
    } catch (const Error&) {
    }
    const optim::OptimizerState state = run.optimizer.state_dict();
    try {
      run.optimizer.load_state_dict({state.tensors, value});
    } catch (const Error&) {
    }
    if (value.is_object() && value.contains("state")) {
      try {  // the scalars with the real buffers of a stepped optimizer
        TinyRun stepped;
        stepped.train_step();
        stepped.optimizer.load_state_dict({stepped.optimizer.state_dict().tensors, value});
        stepped.train_step();  // an accepted state must be usable
      } catch (const Error&) {
      }
    }
  }
  try {  // the loss scaler's state, as kept in the examples' checkpoints
    amp::GradScaler scaler;
    scaler.load_state_dict(value);
    require(scaler.get_scale() > 0 && std::isfinite(scaler.get_scale()), "an accepted scaler state has a usable scale");
  } catch (const Error&) {
  }
#ifdef HEED_FUZZ_HAVE_TRANSLATE
  // The translate checkpoint configuration (model config inside it, or alone): accepted values
  // are within the flags' bounds.
  try {
    const translate::ModelConfig c = translate::ModelConfig::from_json(value, "fuzz.json");
    require(c.d_model >= 1 && c.heads >= 1 && c.d_model % c.heads == 0 && c.layers >= 1 && c.max_len >= 2 &&
                c.dropout >= 0 && c.dropout < 1,
            "an accepted model config is in range");
  } catch (const Error&) {
  }
  try {
    const translate::SavedConfig saved = translate::read_saved_config(value, "fuzz.json");
    require(saved.corpus.train_size >= 100 && saved.corpus.test_size >= 1, "an accepted corpus config is in range");
  } catch (const Error&) {
  }
#endif
}

// ---- checkpoints ----------------------------------------------------------------------------

void checkpoint(const uint8_t* data, size_t size) {
  TinyRun run;
  std::vector<std::pair<Dims, DType>> before;
  for (const Tensor& p : run.model.parameters()) before.emplace_back(p.shape(), p.dtype());
  try {
    io::parse_checkpoint(data, size, "fuzz.ckpt", run.model, &run.optimizer, &run.scheduler);
  } catch (const Error&) {
    return;
  }
  const std::vector<Tensor> after = run.model.parameters();
  require(after.size() == before.size(), "parameter count after a restore");
  for (size_t i = 0; i < after.size(); ++i) {
    require(after[i].shape() == before[i].first && after[i].dtype() == before[i].second, "parameter shapes");
    require(after[i].requires_grad() && after[i].is_leaf(), "parameters stay trainable leaves");
  }
  // A restored run must be able to continue (the optimizer's buffers and the RNG are usable).
  try {
    run.train_step();
  } catch (const Error& e) {
    throw FuzzPropertyViolation(std::string("an accepted checkpoint cannot continue training: ") + e.what());
  }
}

// ---- command lines --------------------------------------------------------------------------

void cli(const uint8_t* data, size_t size) {
  const std::vector<std::string> args = split_at_nul(data, size);
  // Like heed-doctor: a subcommand picks the option table; otherwise the examples' table.
  const bool subcommand = !args.empty() && (args[0] == "check" || args[0] == "probe");
  std::vector<const char*> argv = {"prog"};
  for (size_t i = subcommand ? 1 : 0; i < args.size(); ++i) argv.push_back(args[i].c_str());

  struct IntOption {
    const char* name;
    int64_t value, min, max;
  };
  struct DoubleOption {
    const char* name;
    double value, min, max;
  };
  std::vector<IntOption> ints = {{"steps", 5, 1, 10000000},        {"seed", 1337, 0, int64_t{1} << 62},
                                 {"threads", 0, 0, 1024},          {"warmup", 100, 0, 100000000},
                                 {"d-model", 128, 1, 65536},       {"batch", 12, 1, 4096},
                                 {"huge", 0, INT64_MIN, INT64_MAX}};
  std::vector<DoubleOption> doubles = {
      {"lr", 1e-3, 0, 10}, {"dropout", 0.0, 0, 0.99}, {"temperature", 0.8, 1e-3, 100}, {"any", 0.0, -1e308, 1e308}};
  std::string device = "cpu", attn_scale = "sqrt_dk", out_dir = "out", positional, optional_positional;
  bool resume = false, json_output = false;
  cli::ArgParser parser(subcommand ? "prog " + args[0] : "prog", "fuzzed options");
  for (IntOption& o : ints) parser.add_int(o.name, &o.value, "an integer", o.min, o.max);
  for (DoubleOption& o : doubles) parser.add_double(o.name, &o.value, "a number", o.min, o.max);
  parser.add_string("device", &device, "cpu or cuda");
  parser.add_string("attn-scale", &attn_scale, "attention scale", {"sqrt_dk", "none", "learnable", "affine", "cosine"});
  parser.add_string("out-dir", &out_dir, "a path");
  parser.add_flag("resume", &resume, "a flag");
  parser.add_flag("json", &json_output, "a flag");
  if (subcommand) {
    parser.add_positional("CHECKPOINT", &positional, "required");
    parser.add_positional("EXTRA", &optional_positional, "optional", false);
  }
  const cli::ArgParser::Outcome outcome = parser.parse(static_cast<int>(argv.size()), argv.data());
  require(!parser.usage().empty(), "usage text");
  if (outcome == cli::ArgParser::Outcome::Error) {
    require(!parser.error().empty(), "an error has a message");
    return;
  }
  if (outcome == cli::ArgParser::Outcome::Help) return;
  for (const IntOption& o : ints) require(o.value >= o.min && o.value <= o.max, std::string("--") + o.name + " range");
  for (const DoubleOption& o : doubles)
    require(std::isfinite(o.value) && o.value >= o.min && o.value <= o.max, std::string("--") + o.name + " range");
  // What the programs do next with the strings.
  nn::parse_attention_scale(attn_scale);  // validated by its choices: must not throw
  try {
    parse_device(device);
  } catch (const Error&) {
  }
}

// ---- seed corpus ----------------------------------------------------------------------------

void write_seed_corpus(const std::string& directory) {
  auto write = [&](const std::string& target, const std::string& name, const std::string& bytes) {
    const std::filesystem::path dir = std::filesystem::path(directory) / target;
    std::filesystem::create_directories(dir);
    io::write_file_atomic((dir / name).string(), bytes);
  };
  manual_seed(42);
  // safetensors: every dtype, scalars, empty tensors, metadata, an empty file list.
  write("safetensors", "f32_i64_metadata.safetensors",
        io::serialize_safetensors({{"weight", randn({2, 3})}, {"ids", arange(4.0)}}, {{"format", "pt"}}));
  write("safetensors", "all_dtypes.safetensors",
        io::serialize_safetensors({{"f64", randn({2}, kFloat64)},
                                   {"f16", randn({3}, kFloat16)},
                                   {"bf16", randn({1, 2}, kBFloat16)},
                                   {"i32", arange(3.0, kInt32)},
                                   {"bool", ones({2}) > 0.0}}));
  write("safetensors", "scalar_and_empty.safetensors",
        io::serialize_safetensors({{"scalar", scalar_tensor(3.5)}, {"empty", zeros({0, 4})}}));
  write("safetensors", "metadata_only.safetensors", io::serialize_safetensors({}, {{"note", "no tensors"}}));

  // checkpoints of the tiny run the checkpoint target restores into, a model file (the wrong
  // kind) and a model-only checkpoint.
  {
    TinyRun run;
    const std::string path = (std::filesystem::temp_directory_path() / "heed_fuzz_seed.ckpt").string();
    io::save_checkpoint(path, run.model, &run.optimizer, &run.scheduler, 0, {{"vocab", 7}});
    write("checkpoint", "step0.ckpt", io::read_file(path));
    run.train_step();
    io::save_checkpoint(path, run.model, &run.optimizer, &run.scheduler, 1, {{"vocab", 7}}, {{"note", "x"}});
    write("checkpoint", "step1.ckpt", io::read_file(path));
    io::save_checkpoint(path, run.model, nullptr, nullptr, 1, nullptr);
    write("checkpoint", "model_only.ckpt", io::read_file(path));
    io::save_model(run.model, path, {{"vocab", 7}});
    write("checkpoint", "model_file.safetensors", io::read_file(path));
    std::filesystem::remove(path);

    // JSON: the states a checkpoint stores, a translate model config, odd documents.
    write("json", "scheduler.json", run.scheduler.state_dict().dump());
    write("json", "optimizer.json", run.optimizer.state_dict().scalars.dump());
  }
  write("json", "model_config.json",
        R"({"d_model": 32, "heads": 4, "layers": 1, "d_ff": 64, "max_len": 16, "dropout": 0.1,)"
        R"( "attn_scale": "sqrt_dk", "norm_first": true})");
  write("json", "values.json",
        R"([null, true, -0.0, 1e308, -9223372036854775808, 18446744073709551615,)"
        R"( "\u00e9\ud83d\ude00", {"": {}}, [[[]]]])");

  // command lines: NUL-separated arguments.
  auto args = [](std::initializer_list<std::string> parts) {
    std::string out;
    bool first = true;
    for (const std::string& p : parts) {
      if (!first) out.push_back('\0');
      first = false;
      out += p;
    }
    return out;
  };
  write("cli", "flags.args", args({"--steps", "20", "--lr=0.01", "--resume", "--device", "cuda:1"}));
  write("cli", "subcommand.args", args({"check", "model.ckpt", "--json", "--batch", "4", "extra"}));
  write("cli", "choices.args", args({"--attn-scale", "cosine", "--dropout", "0.5", "--huge=-9223372036854775808"}));
  write("cli", "help.args", args({"probe", "--help"}));
  write("cli", "errors.args", args({"--steps", "-1", "--unknown"}));
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"safetensors", &safetensors}, {"json", &json}, {"checkpoint", &checkpoint}, {"cli", &cli}};
  return all;
}

}  // namespace heed::fuzz
