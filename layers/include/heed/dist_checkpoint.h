// heed/dist_checkpoint.h — collective checkpoints of a multi-process (heed::dist) training run.
//
// Layout under a root directory (one per run; on several machines, a file system all share):
//   <root>/step_<00000006>/model.ckpt   rank 0: model + optimizer (+ scheduler), io::save_checkpoint
//   <root>/step_<00000006>/rank<K>.json rank K: its RNG state (the default generator) and the
//                                       program's rank-specific state (data position, ...)
//   <root>/step_<00000006>/DONE         rank 0, written last: {format, step, world_size}
// Invariants:
//  * A checkpoint counts only when its DONE marker exists (and parses, and names the files
//    that are present): DONE is written by rank 0 only after a collective has confirmed that
//    every rank's file was written atomically (fsync'ed, renamed, directory fsync'ed). A
//    directory without DONE is never resumed from: the previous complete one is used.
//  * Saving is collective: every rank calls save_checkpoint with the same step. It issues three
//    small all_reduces (prepare, files written, marker written), so a slow or dead rank makes
//    every other rank fail with the group's timeout (a heed::Error), never hang; a rank whose
//    write fails makes every rank throw a heed::Error naming the failed rank(s).
//  * The last complete checkpoint is never destroyed by a failed or killed save: older
//    complete checkpoints are pruned (down to `keep`) only after the new DONE is durable, and
//    pruning removes DONE first, so a pruning interrupted half-way leaves an incomplete
//    directory, not a false complete one. Directories of steps >= the one being saved (left
//    by an abandoned earlier run) are removed when the save starts.
//  * Resuming is collective: rank 0 picks the newest complete checkpoint and broadcasts its
//    step; a checkpoint saved by N ranks resumes only with N ranks (heed::Error naming both
//    sizes otherwise); every rank restores the shared file and then its own RNG state, so the
//    continued run is bit-identical to an uninterrupted one (on the CPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "heed/dist.h"

namespace heed::dist {

// "<root>/step_<step, 8 digits>".
std::string checkpoint_step_dir(const std::string& root, int64_t step);

// Collective. `write_shared(path)` runs on rank 0 only and writes the model/optimizer file at
// `path` (<step dir>/model.ckpt), e.g. with io::save_checkpoint. `rank_state` is this rank's
// program-specific JSON (stored under "state"); the default generator's state is added.
// Keeps the newest `keep` (>= 1) complete checkpoints. Returns the step directory.
std::string save_checkpoint(ProcessGroup& group, const std::string& root, int64_t step,
                            const std::function<void(const std::string& shared_path)>& write_shared,
                            const nlohmann::json& rank_state = nlohmann::json::object(), int keep = 2);

struct CompleteCheckpoint {
  int64_t step = 0;
  int world_size = 0;
  std::string dir;
};
// Not collective: the newest complete checkpoint under `root` (nullopt when none or no root).
std::optional<CompleteCheckpoint> find_latest_checkpoint(const std::string& root);

struct ResumePoint {
  int64_t step = 0;
  std::string dir;
  nlohmann::json rank_state;  // what this rank passed as rank_state when saving
};
// Collective. Picks the newest complete checkpoint (rank 0 decides, every rank follows), checks
// that it was saved by group.world_size() ranks, calls `load_shared(<dir>/model.ckpt)` (the
// program restores model, optimizer, ... there) and then restores this rank's default
// generator from its rank file. heed::Error when there is no complete checkpoint under `root`,
// when the world sizes differ, or when a file is malformed.
ResumePoint resume_checkpoint(ProcessGroup& group, const std::string& root,
                              const std::function<void(const std::string& shared_path)>& load_shared);

// Test hook for crash tests: when HEED_TEST_KILL_AT is "RANK:STEP" and both match, the process
// raises SIGKILL on itself (no cleanup, as a crash or an OOM kill would). Otherwise a no-op.
void kill_point_for_tests(int rank, int64_t step);

}  // namespace heed::dist
