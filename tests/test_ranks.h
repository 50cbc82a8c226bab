// tests/test_ranks.h — runs N ranks of a multi-process test scenario (test_dist.cpp,
// test_zero.cpp, test_dist_golden.cpp).
//
// Invariants: every rank is this test binary re-executed (fork + exec, so no OpenMP state is
// inherited) running only the doctest case whose name starts with `child_case`, with
// `scenario_variable`=scenario, HEED_RANK/HEED_WORLD_SIZE/HEED_STORE_PATH (a fresh file
// store), HEED_DIST_TIMEOUT_MS=4000, OMP_NUM_THREADS=1 and HEED_TEST_OUT (an output folder;
// the store's folder when none is given), then `extra_env` (NAME=VALUE; may override those);
// the parent bounds the wait (`deadline_s`, then SIGKILL of every child) and removes the store.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <heed/heed.h>

namespace heed::test {

struct RankResult {
  int status = -1;
  bool timed_out = false;
  std::string output;  // stdout and stderr
  double seconds = 0;  // from the start of the launch until this rank was reaped
};

inline std::filesystem::path fresh_directory(const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      fmt::format("{}_{}_{}", stem, getpid(), std::chrono::steady_clock::now().time_since_epoch().count());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::vector<RankResult> run_ranks(const std::string& child_case, const std::string& scenario_variable,
                                         const std::string& scenario, int world, double deadline_s,
                                         const std::vector<std::string>& extra_env,
                                         const std::filesystem::path& out_dir) {
  namespace fs = std::filesystem;
  const fs::path store = fresh_directory("heed_ranks_store");
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string filter = "--test-case=" + child_case + "*";
  std::vector<pid_t> pids(world);
  std::vector<fs::path> logs(world);
  fs::create_directories(store / "kv");
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    logs[r] = store / fmt::format("rank{}.log", r);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = open(logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      setenv(scenario_variable.c_str(), scenario.c_str(), 1);
      setenv("HEED_RANK", std::to_string(r).c_str(), 1);
      setenv("HEED_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("HEED_STORE_PATH", (store / "kv").c_str(), 1);
      setenv("HEED_DIST_TIMEOUT_MS", "4000", 1);
      setenv("OMP_NUM_THREADS", "1", 1);
      setenv("HEED_TEST_OUT", out_dir.empty() ? store.c_str() : out_dir.c_str(), 1);
      for (const std::string& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
      execl(self.c_str(), self.c_str(), filter.c_str(), "--no-intro=true", "--no-version=true",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    pids[r] = pid;
  }
  std::vector<RankResult> results(world);
  std::vector<bool> done(world, false);
  int remaining = world;
  while (remaining > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int r = 0; r < world; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        results[r].status = status;
        results[r].seconds = elapsed;
      } else if (elapsed > deadline_s) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        done[r] = true;
        --remaining;
        results[r].status = status;
        results[r].timed_out = true;
        results[r].seconds = elapsed;
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    std::ifstream in(logs[r]);
    std::stringstream text;
    text << in.rdbuf();
    results[r].output = text.str();
  }
  fs::remove_all(store);
  return results;
}

inline bool exited_ok(const RankResult& r) { return !r.timed_out && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

inline void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r)
    REQUIRE_MESSAGE(exited_ok(results[r]), "rank ", r, " status ", results[r].status, " timed out ",
                    results[r].timed_out, "\n", results[r].output);
}

// Normwise relative difference max|a - b| / max|b| (an elementwise ratio is dominated by
// elements near zero, whose few-ulp float32 differences say nothing).
inline double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// The body of a "... child" test case: when `scenario_variable` is set (this process is a rank
// started by run_ranks), runs `run(scenario)` and exits with its code (1 on an exception, after
// printing it); otherwise returns at once (the normal test run).
template <typename Run>
void run_child_scenario(const char* scenario_variable, Run&& run) {
  const char* scenario = std::getenv(scenario_variable);
  if (!scenario) return;
  int code = 0;
  try {
    code = run(std::string(scenario));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child error: %s\n", e.what());
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace heed::test

// In a child: on failure print the condition and a formatted message, and exit 1 at once.
#define RANK_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "RANK CHECK FAILED line %d: %s\n", __LINE__, #cond); \
      std::fprintf(stderr, "%s\n", fmt::format(__VA_ARGS__).c_str());           \
      std::fflush(stderr);                                                      \
      std::_Exit(1);                                                            \
    }                                                                           \
  } while (0)
