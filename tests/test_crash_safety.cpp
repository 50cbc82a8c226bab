// tests/test_crash_safety.cpp — training survives SIGKILL at any moment:
//  * checkpoint writes are atomic: a child process (this test binary, re-executed in writer
//    mode) rewrites a large checkpoint in a loop and is killed at random moments, most of them
//    in the middle of a write; the checkpoint on disk must always load, be one whole version
//    (never a mix of two), and never go back to an older version.
//  * the charlm example, killed with SIGKILL at random moments and resumed from its last
//    checkpoint (--resume) until it finishes, ends with parameters, optimizer state, step and
//    RNG state bit-identical to an uninterrupted run of the same length; after every kill the
//    checkpoint on disk loads into a model built from its own config.
// The random delays come from a seed printed with the results (HEED_CRASH_SEED replays one).
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_skip.h"

extern char** environ;

using namespace heed;
namespace fs = std::filesystem;

namespace {

constexpr const char* kWriterDirVariable = "HEED_CRASH_WRITER_DIR";

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

std::mt19937_64 make_rng(uint64_t* seed_out) {
  const char* fixed = std::getenv("HEED_CRASH_SEED");
  const uint64_t seed = fixed ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  *seed_out = seed;
  return std::mt19937_64(seed);
}

fs::path fresh_directory(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Temporary files left by writers killed in the middle of write_file_atomic; removes them.
int collect_temporaries(const fs::path& dir, const std::string& file_name) {
  int found = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(file_name + ".tmp.", 0) == 0) {
      ++found;
      fs::remove(entry.path());
    }
  }
  return found;
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

// ---- charlm ---------------------------------------------------------------------------------

#ifdef HEED_CHARLM_EXE
std::vector<std::string> charlm_args(const fs::path& out_dir, bool resume) {
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
                                   "1",
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
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(rng)));
    child.kill_now();
    CHECK(child.killed());
    killed_mid_write += collect_temporaries(dir, "writer.ckpt") > 0;
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

TEST_CASE("charlm killed with SIGKILL at random moments resumes to a bit-identical result") {
#ifndef HEED_CHARLM_EXE
  heed::test::skip("the charlm example is not built (HEED_BUILD_EXAMPLES=OFF)");
#else
  uint64_t seed = 0;
  std::mt19937_64 rng = make_rng(&seed);
  const fs::path reference_dir = fresh_directory("heed_crash_reference");
  const fs::path crash_dir = fresh_directory("heed_crash_resumed");
  constexpr auto kTimeout = std::chrono::minutes(10);

  // The uninterrupted run.
  const auto start = Clock::now();
  {
    Child reference(charlm_args(reference_dir, false));
    REQUIRE(reference.wait_until_exit(kTimeout));
    REQUIRE(reference.exited_normally_with(0));
  }
  const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const std::string reference_checkpoint = (reference_dir / "charlm.ckpt").string();
  REQUIRE(load_charlm_checkpoint(reference_checkpoint) == 30);

  // The same run, killed at random moments and resumed until it completes.
  const std::string checkpoint = (crash_dir / "charlm.ckpt").string();
  constexpr int kKills = 12;
  int kills = 0, mid_write = 0, restarts = 0;
  int64_t last_step = -1;
  std::vector<int64_t> steps_at_kills;
  for (;;) {
    const bool resume = fs::exists(checkpoint);
    Child run(charlm_args(crash_dir, resume));
    ++restarts;
    if (kills < kKills) {
      const auto delay = std::chrono::microseconds(
          static_cast<int64_t>(std::uniform_real_distribution<double>(0.1, 1.0)(rng) * run_ms * 1000.0));
      if (!run.wait_until_exit(std::chrono::duration_cast<std::chrono::milliseconds>(delay))) {
        run.kill_now();
        ++kills;
        mid_write += collect_temporaries(crash_dir, "charlm.ckpt") > 0;
        // After every kill the checkpoint on disk loads, and it never goes back in time.
        if (fs::exists(checkpoint)) {
          const int64_t step = load_charlm_checkpoint(checkpoint);
          CHECK(step >= last_step);
          last_step = step;
          steps_at_kills.push_back(step);
        }
        continue;
      }
    } else {
      REQUIRE(run.wait_until_exit(kTimeout));
    }
    REQUIRE(run.exited_normally_with(0));
    break;
  }
  MESSAGE("seed ", seed, ": uninterrupted run ", run_ms, " ms; ", kills, " kills (", mid_write,
          " during a checkpoint write), ", restarts,
          " starts; steps on disk at the kills: ", fmt::format("{}", fmt::join(steps_at_kills, " ")));

  // Bit-identical: every tensor (model and optimizer state), the step and the RNG state.
  const io::SafetensorsFile expected = io::load_safetensors(reference_checkpoint);
  const io::SafetensorsFile got = io::load_safetensors(checkpoint);
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
  CHECK(got.metadata.at("step") == expected.metadata.at("step"));
  CHECK(got.metadata.at("rng") == expected.metadata.at("rng"));
  CHECK(got.metadata.at("config") == expected.metadata.at("config"));
  CHECK(got.metadata.at("optimizer") == expected.metadata.at("optimizer"));
  fs::remove_all(reference_dir);
  fs::remove_all(crash_dir);
#endif
}
