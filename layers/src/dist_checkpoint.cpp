// layers/src/dist_checkpoint.cpp — collective checkpoints with a DONE marker (see
// heed/dist_checkpoint.h for the layout and the invariants).
#include "heed/dist_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <vector>

#include "heed/error.h"
#include "heed/io.h"
#include "heed/json_read.h"
#include "heed/ops.h"
#include "heed/random.h"

namespace heed::dist {

namespace {

namespace fs = std::filesystem;

constexpr const char* kMarkerFormat = "heed-dist-checkpoint-v1";
constexpr const char* kRankFormat = "heed-dist-rank-v1";
constexpr const char* kMarker = "DONE";
constexpr const char* kShared = "model.ckpt";
constexpr const char* kStepPrefix = "step_";

std::string rank_file(int rank) { return "rank" + std::to_string(rank) + ".json"; }

// Makes a directory entry change (a rename, an unlink, a new subdirectory) durable.
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // nothing to make durable if it cannot even be opened
  (void)::fsync(fd);
  ::close(fd);
}

// The step a "step_<digits>" directory name stands for, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0 || name.size() == std::string(kStepPrefix).size()) return -1;
  int64_t step = 0;
  for (size_t i = std::string(kStepPrefix).size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t{1} << 58)) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Removes a step directory so that no interruption can leave it looking complete: DONE first
// (made durable), then the rest. Errors are ignored (a leftover is incomplete, hence unused).
void remove_step_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::remove(dir / kMarker, ec)) fsync_directory(dir);
  fs::remove_all(dir, ec);
}

// The marker's world size when `dir` holds a complete checkpoint of `step`; nullopt otherwise.
std::optional<int> complete_world_size(const fs::path& dir, int64_t step) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kMarker, ec)) return std::nullopt;
  try {
    const nlohmann::json marker = io::load_json((dir / kMarker).string());
    const io::JsonFields f(marker, "dist::checkpoint", (dir / kMarker).string());
    if (f.string("format") != kMarkerFormat || f.integer("step") != step) return std::nullopt;
    const int world = static_cast<int>(f.integer("world_size", 1, 1 << 20));
    if (!fs::is_regular_file(dir / kShared, ec)) return std::nullopt;
    for (int r = 0; r < world; ++r)
      if (!fs::is_regular_file(dir / rank_file(r), ec)) return std::nullopt;
    return world;
  } catch (const std::exception&) {
    return std::nullopt;  // a malformed marker does not make a checkpoint complete
  }
}

// All step directories under root, ascending by step.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// One collective round: every rank reports ok / not ok; returns the ranks that were not ok.
std::vector<int> failed_ranks(ProcessGroup& group, bool ok) {
  Tensor flags = zeros({group.world_size()}, kInt64);  // (world,)
  if (!ok) flags.data_ptr<int64_t>()[group.rank()] = 1;
  group.all_reduce(flags, ReduceOp::Sum);
  std::vector<int> failed;
  for (int r = 0; r < group.world_size(); ++r)
    if (flags.data_ptr<int64_t>()[r] != 0) failed.push_back(r);
  return failed;
}

// Runs `body`, catching its error; then every rank learns which ranks failed. Throws on every
// rank when any failed (this rank's own message when it is one of them).
void collective_phase(ProcessGroup& group, const std::string& what, int64_t step, const std::function<void()>& body) {
  std::string error;
  try {
    body();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::vector<int> failed = failed_ranks(group, error.empty());
  if (failed.empty()) return;
  if (!error.empty())
    fail("dist::save_checkpoint",
         "step {}: {} failed on rank {}: {} (the checkpoint has no DONE marker and is ignored)", step, what,
         group.rank(), error);
  fail("dist::save_checkpoint", "step {}: {} failed on rank(s) {} (the checkpoint has no DONE marker and is ignored)",
       step, what, fmt::join(failed, ", "));
}

}  // namespace

std::string checkpoint_step_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / fmt::format("{}{:08d}", kStepPrefix, step)).string();
}

std::string save_checkpoint(ProcessGroup& group, const std::string& root, int64_t step,
                            const std::function<void(const std::string& shared_path)>& write_shared,
                            const nlohmann::json& rank_state, int keep) {
  HEED_CHECK(step >= 0, "dist::save_checkpoint", "step must be >= 0, got {}", step);
  HEED_CHECK(keep >= 1, "dist::save_checkpoint", "keep must be >= 1, got {}", keep);
  HEED_CHECK(!root.empty(), "dist::save_checkpoint", "the checkpoint root directory is empty");
  const fs::path dir = checkpoint_step_dir(root, step);
  const int rank = group.rank(), world = group.world_size();

  // 1. Rank 0 clears what an abandoned run left at this step or later and creates the directory.
  collective_phase(group, "preparing " + dir.string(), step, [&] {
    if (rank != 0) return;
    fs::create_directories(root);
    for (const auto& [s, path] : step_dirs(root))
      if (s >= step) remove_step_dir(path);
    fs::create_directories(dir);
    fsync_directory(root);
  });
  // 2. Every rank writes its state file (rank 0 the shared file too), each atomically and durably.
  collective_phase(group, "writing the rank files", step, [&] {
    const Generator::Draw rng = default_generator().state();
    const nlohmann::json state = {{"format", kRankFormat},
                                  {"rank", rank},
                                  {"world_size", world},
                                  {"step", step},
                                  {"rng", {{"seed", rng.seed}, {"offset", rng.first}}},
                                  {"state", rank_state}};
    if (rank == 0) write_shared((dir / kShared).string());
    io::save_json((dir / rank_file(rank)).string(), state);
  });
  // 3. Every file is durable: rank 0 writes the marker, then prunes older checkpoints.
  collective_phase(group, "writing the DONE marker", step, [&] {
    if (rank != 0) return;
    io::save_json((dir / kMarker).string(), {{"format", kMarkerFormat}, {"step", step}, {"world_size", world}});
    int complete = 0;
    const auto dirs = step_dirs(root);
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
      if (it->first >= step) {
        complete += it->first == step;
        continue;
      }
      if (complete_world_size(it->second, it->first) && complete < keep)
        ++complete;
      else
        remove_step_dir(it->second);  // beyond `keep`, or a leftover of an interrupted save
    }
  });
  return dir.string();
}

std::optional<CompleteCheckpoint> find_latest_checkpoint(const std::string& root) {
  if (root.empty()) return std::nullopt;
  const auto dirs = step_dirs(root);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
    if (const std::optional<int> world = complete_world_size(it->second, it->first))
      return CompleteCheckpoint{it->first, *world, it->second.string()};
  return std::nullopt;
}

ResumePoint resume_checkpoint(ProcessGroup& group, const std::string& root,
                              const std::function<void(const std::string& shared_path)>& load_shared) {
  const char* op = "dist::resume_checkpoint";
  // Rank 0 decides (the directory may be on a shared file system others see later).
  Tensor choice = from_vector(std::vector<int64_t>{-1, 0}, {2});  // (step, world size)
  if (group.rank() == 0)
    if (const auto latest = find_latest_checkpoint(root))
      choice = from_vector(std::vector<int64_t>{latest->step, latest->world_size}, {2});
  group.broadcast(choice, 0);
  const int64_t step = choice.data_ptr<int64_t>()[0];
  const int64_t saved_world = choice.data_ptr<int64_t>()[1];
  HEED_CHECK(step >= 0, op, "no complete checkpoint (a step_N directory with its DONE marker) under '{}'", root);
  HEED_CHECK(saved_world == group.world_size(), op,
             "{} was saved by {} ranks, but this run has {} ranks; resume with the same number of ranks "
             "(heed-run --nproc {})",
             checkpoint_step_dir(root, step), saved_world, group.world_size(), saved_world);
  const fs::path dir = checkpoint_step_dir(root, step);
  const std::string path = (dir / rank_file(group.rank())).string();
  const nlohmann::json state = io::load_json(path);
  const io::JsonFields f(state, op, path);
  HEED_CHECK(f.string("format") == kRankFormat, op, "{}: expected format '{}', found '{}'", path, kRankFormat,
             f.string("format"));
  HEED_CHECK(
      f.integer("rank") == group.rank() && f.integer("world_size") == group.world_size() && f.integer("step") == step,
      op, "{}: it belongs to rank {} of {} at step {}, expected rank {} of {} at step {}", path, f.integer("rank"),
      f.integer("world_size"), f.integer("step"), group.rank(), group.world_size(), step);
  const io::JsonFields rng = f.object("rng");
  const uint64_t seed = rng.unsigned_integer("seed"), offset = rng.unsigned_integer("offset");
  load_shared((dir / kShared).string());
  default_generator().set_state(seed, offset);  // after load_shared: this rank's own stream
  return ResumePoint{step, dir.string(), f.value("state")};
}

void kill_point_for_tests(int rank, int64_t step) {
  const char* spec = std::getenv("HEED_TEST_KILL_AT");
  if (spec == nullptr) return;
  const std::string s(spec);
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return;
  if (s.substr(0, colon) == std::to_string(rank) && s.substr(colon + 1) == std::to_string(step)) ::raise(SIGKILL);
}

}  // namespace heed::dist
