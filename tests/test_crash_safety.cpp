// tests/test_crash_safety.cpp — training survives SIGKILL at any moment:
//  * checkpoint writes are atomic: a child process (this test binary, re-executed in writer
//    mode) rewrites a large checkpoint in a loop and is killed at random moments, most of them
//    in the middle of a write; the checkpoint on disk must always load, be one whole version
//    (never a mix of two), and never go back to an older version; the temporary a killed
//    writer leaves is removed by the next writer's first save.
//  * the examples, killed with SIGKILL and resumed from their last checkpoint (--resume) until
//    they finish, end with parameters, optimizer and scheduler state, step, RNG state and loss
//    scaler state bit-identical to an uninterrupted run of the same length: charlm in fp32 on
//    1 thread, charlm with --amp fp16 (GradScaler) on 2 threads, translate on 2 threads. The
//    last two are first killed inside a checkpoint write on purpose (the test-only
//    HEED_TEST_KILL_DURING_CHECKPOINT_WRITE hook of layers/src/checkpoint.cpp: half the file
//    written to the temporary, then SIGKILL), then at random moments. After every kill the
//    checkpoint on disk loads into a model built from its own config and never goes back in
//    time; after the resumed run no temporary file is left.
// The kill points come from a fixed seed printed with the results (HEED_CRASH_SEED=<n> picks
// another): for the examples, the steps after whose checkpoint each start is killed and a
// delay within about one step; for the writer, delays. Where within a step a kill lands still
// depends on timing. Under a sanitizer the runs are slower and the test kills fewer times.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_skip.h"
#ifdef HEED_TRANSLATE_EXE
#include "task.h"  // examples/translate: rebuilds a model from a checkpoint's config
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HEED_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HEED_TEST_UNDER_SANITIZER 1
#endif
#endif

extern char** environ;

using namespace heed;
namespace fs = std::filesystem;

namespace {

constexpr const char* kWriterDirVariable = "HEED_CRASH_WRITER_DIR";

// Under a sanitizer every run is several times slower: fewer kills keep the test short.
#ifdef HEED_TEST_UNDER_SANITIZER
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif

using Clock = std::chrono::steady_clock;

// A child process whose stdout and stderr go to /dev/null.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings(extra_env);
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    const int error = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(error == 0, "cannot start ", args[0], ": ", std::strerror(error));
  }
  ~Child() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_for_exit();
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) record(status);
    return !exited_;
  }
  // Waits up to `timeout`; true when the child exited by then.
  bool wait_until_exit(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (running()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  void kill_now() {
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    wait_for_exit();
  }
  bool exited_normally_with(int code) const { return exited_ && WIFEXITED(status_) && WEXITSTATUS(status_) == code; }
  bool killed() const { return exited_ && WIFSIGNALED(status_) && WTERMSIG(status_) == SIGKILL; }
  pid_t pid() const { return pid_; }

 private:
  void wait_for_exit() {
    int status = 0;
    if (::waitpid(pid_, &status, 0) == pid_) record(status);
  }
  void record(int status) {
    exited_ = true;
    status_ = status;
  }
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// The kill delays come from a fixed seed (printed with the results); HEED_CRASH_SEED=<n>
// replays or varies them.
constexpr uint64_t kDefaultCrashSeed = 20261130;

std::mt19937_64 make_rng(uint64_t* seed_out) {
  const char* chosen = std::getenv("HEED_CRASH_SEED");
  const uint64_t seed = chosen ? std::strtoull(chosen, nullptr, 10) : kDefaultCrashSeed;
  *seed_out = seed;
  return std::mt19937_64(seed);
}

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ---- atomic writes ----------------------------------------------------------------------------

// The writer's model: ~2.4 MB of parameters (and twice that of AdamW state) per checkpoint,
// every element equal to the version number.
struct WriterModel : nn::Module {
  WriterModel() : Module("WriterModel") {
    weight = register_parameter("weight", zeros({600, 500}));
    bias = register_parameter("bias", zeros({500}));
  }
  Tensor weight, bias;
};

void set_version(WriterModel& model, double version) {
  NoGradGuard no_grad;
  model.weight.fill_(version);
  model.bias.fill_(version);
}

// The version a checkpoint holds: its step, which every element of the model must equal.
int64_t checked_version(const std::string& path) {
  WriterModel model;
  const io::RestoredCheckpoint restored = io::load_checkpoint(path, model);
  const double v = static_cast<double>(restored.step);
  CHECK(restored.config["version"].get<int64_t>() == restored.step);
  CHECK(min(model.weight).item<double>() == v);
  CHECK(max(model.weight).item<double>() == v);
  CHECK(min(model.bias).item<double>() == v);
  CHECK(max(model.bias).item<double>() == v);
  return restored.step;
}

// ---- killed and resumed programs --------------------------------------------------------

// Everything in `dir` named like a temporary of write_file_atomic for `file_name`.
std::vector<fs::path> temporaries(const fs::path& dir, const std::string& file_name) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind(file_name + ".tmp.", 0) == 0) found.push_back(entry.path());
  return found;
}

// A training program run to completion once, then killed and resumed until it completes.
struct KilledRun {
  std::string label;            // e.g. "charlm --amp fp16, 2 threads"
  std::string checkpoint_name;  // the file the program writes in --out-dir
  int64_t steps = 0;            // the step the finished run's checkpoint holds
  int kills = 0;                // random kills, after the deterministic one
  // The step whose checkpoint write the first start kills itself in (test-only hook in
  // layers/src/checkpoint.cpp); -1: none.
  int64_t kill_in_write_at = -1;
  std::function<std::vector<std::string>(const fs::path& out_dir, bool resume)> args;
  // Loads a checkpoint into a model built from the config stored in it; returns its step.
  std::function<int64_t(const std::string& path)> load;
};

void compare_bit_for_bit(const std::string& expected_path, const std::string& got_path) {
  const io::SafetensorsFile expected = io::load_safetensors(expected_path);
  const io::SafetensorsFile got = io::load_safetensors(got_path);
  REQUIRE(got.tensors.size() == expected.tensors.size());
  int differing = 0;
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    const auto& [name, want] = expected.tensors[i];
    CAPTURE(name);
    REQUIRE(got.tensors[i].first == name);
    const Tensor& have = got.tensors[i].second;
    REQUIRE(have.shape() == want.shape());
    REQUIRE(have.dtype() == want.dtype());
    const size_t bytes = static_cast<size_t>(want.numel()) * want.element_size();
    const bool same = std::memcmp(have.raw_data(), want.raw_data(), bytes) == 0;
    if (!same) {
      ++differing;
      MESSAGE("differs: ", name, " (max abs difference ",
              max(abs(have.to(kFloat64) - want.to(kFloat64))).item<double>(), ")");
    }
  }
  CHECK(differing == 0);
  for (const char* key : {"step", "rng", "config", "optimizer", "scheduler"}) {
    CAPTURE(key);
    CHECK(got.metadata.at(key) == expected.metadata.at(key));
  }
  // The loss scaler's state (scale, growth count) travels in the training history.
  const nlohmann::json expected_extra = nlohmann::json::parse(expected.metadata.at("extra"));
  const nlohmann::json got_extra = nlohmann::json::parse(got.metadata.at("extra"));
  CHECK(got_extra.value("grad_scaler", nlohmann::json()) == expected_extra.value("grad_scaler", nlohmann::json()));
}

// The step of the checkpoint at `path` from its safetensors header alone (cheap enough to poll);
// -1 when there is none yet.
int64_t step_on_disk(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header_bytes = 0;
  if (!in.read(reinterpret_cast<char*>(&header_bytes), sizeof header_bytes)) return -1;
  REQUIRE(header_bytes < (uint64_t{1} << 24));
  std::string header(static_cast<size_t>(header_bytes), '\0');
  REQUIRE(in.read(header.data(), static_cast<std::streamsize>(header.size())));
  return std::stoll(io::parse_json(header, path).at("__metadata__").at("step").get<std::string>());
}

// What every example writes into --out-dir besides its checkpoint: a JSON-lines metrics log
// (every line a JSON object) and three SVG pictures (whole documents).
void check_run_outputs(const fs::path& dir) {
  std::istringstream log(io::read_file((dir / "metrics.jsonl").string()));
  int lines = 0;
  for (std::string line; std::getline(log, line); ++lines) {
    CAPTURE(line);
    CHECK(io::parse_json(line, "metrics.jsonl").is_object());
  }
  CHECK(lines >= 2);  // at least one training line and the final results
  for (const char* picture : {"loss.svg", "entropy.svg", "attention.svg"}) {
    CAPTURE(picture);
    const std::string svg = io::read_file((dir / picture).string());
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(svg.find("</svg>") != std::string::npos);
  }
}

// Runs `run` uninterrupted, then again: first killed inside the write of checkpoint
// `kill_in_write_at` (if any), then killed `run.kills` times after random delays (fractions of
// the uninterrupted run's time, drawn from `rng`), resumed each time, until it completes. The
// final checkpoint must equal the uninterrupted one bit for bit, the checkpoint on disk must
// load after every kill and never go back in time, and no temporary file may be left.
void kill_and_resume(const KilledRun& run, std::mt19937_64& rng, uint64_t seed) {
  CAPTURE(run.label);
  const fs::path reference_dir = fresh_directory("heed_crash_reference");
  const fs::path crash_dir = fresh_directory("heed_crash_resumed");
  constexpr auto kTimeout = std::chrono::minutes(10);

  // The uninterrupted run.
  const auto start = Clock::now();
  {
    Child reference(run.args(reference_dir, false));
    REQUIRE(reference.wait_until_exit(kTimeout));
    REQUIRE(reference.exited_normally_with(0));
  }
  const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const std::string reference_checkpoint = (reference_dir / run.checkpoint_name).string();
  REQUIRE(run.load(reference_checkpoint) == run.steps);
  check_run_outputs(reference_dir);

  const std::string checkpoint = (crash_dir / run.checkpoint_name).string();
  int64_t last_step = -1;
  std::vector<int64_t> steps_at_kills;
  // After a kill: the checkpoint on disk loads and never goes back in time.
  auto check_on_disk = [&] {
    if (!fs::exists(checkpoint)) return;
    const int64_t step = run.load(checkpoint);
    CHECK(step >= last_step);
    last_step = step;
    steps_at_kills.push_back(step);
  };

  // The deterministic kill: the writer raises SIGKILL on itself halfway through the temporary
  // of checkpoint `kill_in_write_at`; the last whole checkpoint (every step is saved) stays.
  int starts = 0;
  if (run.kill_in_write_at >= 0) {
    Child first(run.args(crash_dir, false),
                {"HEED_TEST_KILL_DURING_CHECKPOINT_WRITE=" + std::to_string(run.kill_in_write_at)});
    ++starts;
    REQUIRE(first.wait_until_exit(kTimeout));
    REQUIRE_MESSAGE(first.killed(), "the writer did not kill itself at step ", run.kill_in_write_at);
    const std::vector<fs::path> left = temporaries(crash_dir, run.checkpoint_name);
    REQUIRE(left.size() == 1);
    CHECK(fs::file_size(left[0]) > 0);
    CHECK(fs::file_size(left[0]) < fs::file_size(reference_checkpoint));
    check_on_disk();
    CHECK(last_step == run.kill_in_write_at - 1);
  }

  // Kills at steps drawn from the seed: each start resumes from the checkpoint on disk, runs
  // until the checkpoint of its target step is on disk, and is killed after a random delay
  // within about one step's time (during the next step, or in the middle of its checkpoint
  // write); then one run to the end.
  const int64_t first_target = std::max<int64_t>(1, run.kill_in_write_at);
  std::vector<int64_t> targets;
  for (int64_t step = first_target; step < run.steps; ++step) targets.push_back(step);
  std::shuffle(targets.begin(), targets.end(), rng);
  targets.resize(std::min<size_t>(targets.size(), static_cast<size_t>(run.kills)));
  std::sort(targets.begin(), targets.end());
  const double step_ms = run_ms / static_cast<double>(run.steps);
  int kills = 0, mid_write = 0;
  bool finished = false;
  for (const int64_t target : targets) {
    Child child(run.args(crash_dir, fs::exists(checkpoint)));
    ++starts;
    const auto deadline = Clock::now() + kTimeout;
    while (child.running() && step_on_disk(checkpoint) < target && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!child.running()) {
      // It ran to the end between two polls (a loaded machine): fewer kills, still checked.
      REQUIRE(child.exited_normally_with(0));
      finished = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<int64_t>(std::uniform_real_distribution<double>(0.0, 1.0)(rng) * step_ms * 1000.0)));
    child.kill_now();
    if (child.exited_normally_with(0)) {
      finished = true;
      break;
    }
    REQUIRE(child.killed());
    ++kills;
    mid_write += !temporaries(crash_dir, run.checkpoint_name).empty();
    check_on_disk();
  }
  if (!finished) {
    Child last(run.args(crash_dir, fs::exists(checkpoint)));
    ++starts;
    REQUIRE(last.wait_until_exit(kTimeout));
    REQUIRE(last.exited_normally_with(0));
  }
  CHECK(kills >= 1);
  MESSAGE(run.label, ", seed ", seed, ": uninterrupted run ", run_ms, " ms; ", kills, " kills at or after steps ",
          fmt::format("{}", fmt::join(targets, " ")), " (", mid_write, " with a temporary left)",
          std::string(run.kill_in_write_at >= 0 ? " + 1 inside the write of checkpoint " : ""),
          run.kill_in_write_at >= 0 ? std::to_string(run.kill_in_write_at) : std::string(), ", ", starts,
          " starts; steps on disk after the kills: ", fmt::format("{}", fmt::join(steps_at_kills, " ")));

  compare_bit_for_bit(reference_checkpoint, checkpoint);
  // Every temporary a killed writer left was removed by a later save.
  const std::vector<fs::path> stray = temporaries(crash_dir, run.checkpoint_name);
  CHECK_MESSAGE(stray.empty(), stray.size(), " temporary file(s) left, e.g. ",
                stray.empty() ? std::string() : stray[0].string());
  fs::remove_all(reference_dir);
  fs::remove_all(crash_dir);
}

#ifdef HEED_CHARLM_EXE
std::vector<std::string> charlm_args(const fs::path& out_dir, bool resume, const std::string& amp, int threads) {
  std::vector<std::string> args = {HEED_CHARLM_EXE,
                                   "--iters",
                                   "30",
                                   "--block",
                                   "16",
                                   "--batch",
                                   "4",
                                   "--layers",
                                   "1",
                                   "--heads",
                                   "2",
                                   "--d-model",
                                   "32",
                                   "--warmup",
                                   "3",
                                   "--dropout",
                                   "0.1",
                                   "--eval-every",
                                   "100000",
                                   "--eval-batches",
                                   "1",
                                   "--final-eval-batches",
                                   "1",
                                   "--log-every",
                                   "100000",
                                   "--checkpoint-every",
                                   "1",
                                   "--sample-tokens",
                                   "0",
                                   "--threads",
                                   std::to_string(threads),
                                   "--amp",
                                   amp,
                                   "--seed",
                                   "7",
                                   "--out-dir",
                                   out_dir.string()};
  if (resume) args.push_back("--resume");
  return args;
}

// Loads a charlm checkpoint into a model built from the config stored in it; returns its step.
int64_t load_charlm_checkpoint(const std::string& path) {
  const nlohmann::json config = io::read_config(path);
  nn::TransformerLMOptions o;
  o.vocab = config.at("vocab").get<int64_t>();
  o.d_model = config.at("d_model").get<int64_t>();
  o.heads = config.at("heads").get<int64_t>();
  o.layers = config.at("layers").get<int64_t>();
  o.context = config.at("block").get<int64_t>();
  nn::TransformerLM model(o);
  return io::load_checkpoint(path, model).step;
}
#endif

#ifdef HEED_TRANSLATE_EXE
std::vector<std::string> translate_args(const fs::path& out_dir, bool resume) {
  std::vector<std::string> args = {HEED_TRANSLATE_EXE,
                                   "--steps",
                                   "20",
                                   "--batch-size",
                                   "8",
                                   "--warmup",
                                   "3",
                                   "--d-model",
                                   "32",
                                   "--heads",
                                   "2",
                                   "--layers",
                                   "1",
                                   "--d-ff",
                                   "64",
                                   "--dropout",
                                   "0.1",
                                   "--eval-every",
                                   "100000",
                                   "--log-every",
                                   "100000",
                                   "--checkpoint-every",
                                   "1",
                                   "--train-size",
                                   "200",
                                   "--test-size",
                                   "2",
                                   "--samples",
                                   "0",
                                   "--beam",
                                   "1",
                                   "--threads",
                                   "2",
                                   "--seed",
                                   "3",
                                   "--out-dir",
                                   out_dir.string()};
  if (resume) args.push_back("--resume");
  return args;
}

int64_t load_translate_checkpoint(const std::string& path) {
  const translate::SavedConfig saved = translate::read_saved_config(io::read_config(path), path);
  auto model = translate::build_model(saved.model, saved.source, saved.target);
  return io::load_checkpoint(path, *model).step;
}
#endif

}  // namespace

TEST_CASE("crash safety child: rewrites a checkpoint until killed (runs only as a child process)") {
  const char* dir = std::getenv(kWriterDirVariable);
  if (!dir) return;  // in the normal test run this case does nothing
  const std::string path = (fs::path(dir) / "writer.ckpt").string();
  WriterModel model;
  optim::AdamW optimizer(model.parameters());
  int64_t version = fs::exists(path) ? checked_version(path) : 0;
  for (;;) {
    ++version;
    set_version(model, static_cast<double>(version));
    io::save_checkpoint(path, model, &optimizer, nullptr, version, {{"version", version}});
  }
}

TEST_CASE("checkpoint writes killed at random moments never corrupt the checkpoint on disk") {
  uint64_t seed = 0;
  std::mt19937_64 rng = make_rng(&seed);
  const fs::path dir = fresh_directory("heed_crash_writer");
  const std::string path = (dir / "writer.ckpt").string();
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::vector<std::string> args = {self, "--test-case=crash safety child*", "--no-intro=true",
                                         "--no-version=true"};
  const std::vector<std::string> env = {std::string(kWriterDirVariable) + "=" + dir.string()};
  constexpr int kKills = 16;
  int killed_mid_write = 0;
  int64_t last_version = 0;
  for (int round = 0; round < kKills; ++round) {
    Child child(args, env);
    // Let it write at least one version past the one on disk, then kill it at a random moment.
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (child.running() && Clock::now() < deadline) {
      if (fs::exists(path) && checked_version(path) > last_version) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    REQUIRE_MESSAGE(child.running(), "the writer child exited on its own (round ", round, ")");
    // Its first save removed the temporaries the killed writers before it left behind.
    for (const fs::path& temporary : temporaries(dir, "writer.ckpt"))
      CHECK_MESSAGE(temporary.filename().string() == "writer.ckpt.tmp." + std::to_string(child.pid()),
                    "a killed writer's temporary was not removed: ", temporary.string());
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(rng)));
    child.kill_now();
    CHECK(child.killed());
    killed_mid_write += !temporaries(dir, "writer.ckpt").empty();
    // The checkpoint on disk is one whole version, never older than the last one seen.
    const int64_t version = checked_version(path);
    CHECK(version >= last_version);
    last_version = version;
  }
  MESSAGE("seed ", seed, ": ", kKills, " kills, ", killed_mid_write, " of them in the middle of a write; last version ",
          last_version);
  // Writing dominates the child's time, so kills land mid-write; the check above is what
  // matters, this one makes sure it was exercised.
  CHECK(killed_mid_write > 0);
  fs::remove_all(dir);
}

TEST_CASE("charlm (fp32, 1 thread) killed with SIGKILL at random moments resumes to a bit-identical result") {
#ifndef HEED_CHARLM_EXE
  heed::test::skip("the charlm example is not built (HEED_BUILD_EXAMPLES=OFF)");
#else
  uint64_t seed = 0;
  std::mt19937_64 rng = make_rng(&seed);
  KilledRun run;
  run.label = "charlm fp32, 1 thread";
  run.checkpoint_name = "charlm.ckpt";
  run.steps = 30;
  run.kills = kUnderSanitizer ? 3 : 8;
  run.args = [](const fs::path& dir, bool resume) { return charlm_args(dir, resume, "none", 1); };
  run.load = load_charlm_checkpoint;
  kill_and_resume(run, rng, seed);
#endif
}

TEST_CASE(
    "charlm --amp fp16 (GradScaler state), 2 threads, killed inside a checkpoint write and at random moments, "
    "resumes to a bit-identical result") {
#ifndef HEED_CHARLM_EXE
  heed::test::skip("the charlm example is not built (HEED_BUILD_EXAMPLES=OFF)");
#else
  uint64_t seed = 0;
  std::mt19937_64 rng = make_rng(&seed);
  rng.discard(1000);  // not the same delays as the fp32 case
  KilledRun run;
  run.label = "charlm --amp fp16, 2 threads";
  run.checkpoint_name = "charlm.ckpt";
  run.steps = 30;
  run.kills = kUnderSanitizer ? 2 : 5;
  run.kill_in_write_at = std::uniform_int_distribution<int64_t>(2, run.steps - 1)(rng);
  run.args = [](const fs::path& dir, bool resume) { return charlm_args(dir, resume, "fp16", 2); };
  run.load = load_charlm_checkpoint;
  kill_and_resume(run, rng, seed);
#endif
}

TEST_CASE(
    "translate (2 threads) killed inside a checkpoint write and at random moments resumes to a bit-identical "
    "result") {
#ifndef HEED_TRANSLATE_EXE
  heed::test::skip("the translate example is not built (HEED_BUILD_EXAMPLES=OFF)");
#else
  uint64_t seed = 0;
  std::mt19937_64 rng = make_rng(&seed);
  rng.discard(2000);
  KilledRun run;
  run.label = "translate, 2 threads";
  run.checkpoint_name = "translate.ckpt";
  run.steps = 20;
  run.kills = kUnderSanitizer ? 2 : 5;
  run.kill_in_write_at = std::uniform_int_distribution<int64_t>(2, run.steps - 1)(rng);
  run.args = translate_args;
  run.load = load_translate_checkpoint;
  kill_and_resume(run, rng, seed);
#endif
}
