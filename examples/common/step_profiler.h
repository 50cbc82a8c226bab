// examples/common/step_profiler.h — `--profile FILE` for the training examples: profiles a
// few training steps (heed::profile::Profiler), writes their Chrome trace to FILE and prints
// the top ops once they are done.
//
// Invariants: only the steps [first, first + count) are recorded, each inside a "train step"
// user span (evaluation and checkpointing fall outside the window or show as their own
// spans); `skip` steps of the run go first unprofiled (`--profile-skip`; at least the first step
// when there are others: it pays for one-time allocations), never past the run's last step, so
// the table describes the steady state. Without a path it does nothing.
#pragma once

#include <heed/cli.h>
#include <heed/heed.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace examples {

// --profile FILE, --profile-steps N and --profile-skip K of a training example (the
// StepProfiler's path, count and skip), with one help text for every example.
inline void add_profile_options(heed::cli::ArgParser& args, std::string* path, int64_t* steps, int64_t* skip) {
  args.add_string("profile", path,
                  "FILE: profile --profile-steps training steps (after --profile-skip), write their Chrome trace to "
                  "FILE and print the top ops");
  args.add_int("profile-steps", steps, "training steps --profile records", 1, 1000);
  args.add_int("profile-skip", skip,
               "training steps run unprofiled before --profile records (at least the first, which pays for one-time "
               "allocations)",
               1, 1000000);
}

class StepProfiler {
 public:
  // Steps are numbered by the caller from first_step to last_step; profiles
  // [first_step + skip, + count) clipped to last_step (skip >= 1: the first step is skipped
  // whenever there are others). `program` prefixes the messages.
  StepProfiler(std::string path, int64_t first_step, int64_t last_step, int64_t count, int64_t skip,
               std::string program)
      : path_(std::move(path)),
        first_(std::min(first_step + std::max<int64_t>(skip, 1), std::max(first_step, last_step))),
        end_(std::min(first_ + count, last_step + 1)),
        program_(std::move(program)) {}

  // Call at the start of step `step`: returns the step's user span (empty outside the window).
  std::optional<heed::profile::Scope> begin_step(int64_t step) {
    if (path_.empty() || step < first_ || step >= end_) return std::nullopt;
    if (!profiler_) profiler_ = std::make_unique<heed::profile::Profiler>();
    return std::optional<heed::profile::Scope>(std::in_place, "train step");
  }
  // Call after step `step` ended (its span closed): writes the trace after the last one.
  void end_step(int64_t step) {
    if (!profiler_ || step + 1 != end_) return;
    profiler_->stop();
    profiler_->write_chrome_trace(path_);
    std::printf("%s", profiler_->table(15).c_str());
    std::printf("%s: profile of steps %lld..%lld (%.1f ms per step) written to %s (open in https://ui.perfetto.dev)\n",
                program_.c_str(), static_cast<long long>(first_), static_cast<long long>(end_ - 1),
                profiler_->wall_ms() / static_cast<double>(end_ - first_), path_.c_str());
    profiler_.reset();
  }

 private:
  std::string path_;
  int64_t first_, end_;
  std::string program_;
  std::unique_ptr<heed::profile::Profiler> profiler_;
};

}  // namespace examples
