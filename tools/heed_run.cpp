// heed-run — starts N local ranks of a program for heed::dist (like torchrun).
//
//   heed-run --nproc N [--nnodes M --node-rank R --master-addr A --master-port P
//            --store-path DIR] -- PROGRAM ARGS...
//
// Invariants: every rank gets HEED_RANK, HEED_WORLD_SIZE, HEED_LOCAL_RANK, HEED_NODE_RANK,
// HEED_MASTER_ADDR, HEED_MASTER_PORT and, when a file store is used, HEED_STORE_PATH (on one
// machine a fresh temporary directory, removed at the end; --store-path on a file system every
// node shares; without it on several machines, rank 0 serves a TCP store on the master port);
// each line a rank prints is copied to our stdout/stderr prefixed "[rank K] ";
// SIGINT/SIGTERM are forwarded to every rank; when a rank exits non-zero or is killed, the
// others get SIGTERM, then SIGKILL after --grace seconds, and heed-run exits with that rank's
// status (128+signal for a signal) after naming it; when several ranks fail within 300 ms, one
// killed by a signal other than SIGPIPE is named as the cause (its peers fail, or die of SIGPIPE
// writing to its socket, because it died). Usage errors exit 2.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "heed/cli.h"

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Rank {
  int local = 0, global = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;
};

void emit(FILE* to, int rank, const std::string& line) {
  std::fprintf(to, "[rank %d] %s\n", rank, line.c_str());
  std::fflush(to);
}

// Reads what is available from `fd` and prints complete lines; closes it at EOF.
void drain(int& fd, std::string& buf, FILE* to, int rank) {
  if (fd < 0) return;
  char chunk[4096];
  const ssize_t n = read(fd, chunk, sizeof(chunk));
  if (n > 0) {
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      emit(to, rank, buf.substr(0, nl));
      buf.erase(0, nl + 1);
    }
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (!buf.empty()) emit(to, rank, buf);
  buf.clear();
  close(fd);
  fd = -1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped with wait status " + std::to_string(status);
}

// Killed by a signal that is not a consequence of a peer's death: SIGPIPE is (a write to the
// dead peer's socket), so a rank killed by it is not named as the cause when another was killed.
bool killed_first_hand(int status) { return WIFSIGNALED(status) && WTERMSIG(status) != SIGPIPE; }

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is the program and its arguments.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      split = i;
      break;
    }
  int64_t nproc = 1, nnodes = 1, node_rank = 0, master_port = 29500, timeout_ms = 300000;
  double grace = 5.0;
  std::string master_addr = "127.0.0.1", store_path;
  heed::cli::ArgParser args(
      "heed-run",
      "Starts --nproc ranks of PROGRAM for heed::dist on this machine (node --node-rank of "
      "--nnodes).\nEverything after -- is the program and its arguments: heed-run [options] -- PROGRAM [ARGS...]");
  args.add_int("nproc", &nproc, "ranks to start on this machine", 1, 1024);
  args.add_int("nnodes", &nnodes, "machines taking part", 1, 65536);
  args.add_int("node-rank", &node_rank, "this machine's index in [0, nnodes)", 0, 65535);
  args.add_string("master-addr", &master_addr, "address of node 0 (HEED_MASTER_ADDR)");
  args.add_int("master-port", &master_port, "port on node 0 (HEED_MASTER_PORT)", 1, 65535);
  args.add_string("store-path", &store_path,
                  "rendezvous directory (a file system every node sees); default: a fresh temporary "
                  "directory on one machine, the TCP store on --master-addr:--master-port (served by rank 0) "
                  "on several");
  args.add_int("timeout-ms", &timeout_ms, "collective timeout passed as HEED_DIST_TIMEOUT_MS", 1, int64_t{1} << 40);
  args.add_double("grace", &grace, "seconds between SIGTERM and SIGKILL when stopping ranks", 0.0, 3600.0);
  switch (args.parse(split, argv)) {
    case heed::cli::ArgParser::Outcome::Help:
      std::printf("%s", args.usage().c_str());
      return 0;
    case heed::cli::ArgParser::Outcome::Error:
      std::fprintf(stderr, "heed-run: %s (see --help)\n", args.error().c_str());
      return 2;
    case heed::cli::ArgParser::Outcome::Ok:
      break;
  }
  auto usage_error = [&](const std::string& message) {
    std::fprintf(stderr, "heed-run: %s (see --help)\n", message.c_str());
    return 2;
  };
  if (split >= argc - 1) return usage_error("no program given: heed-run [options] -- PROGRAM [ARGS...]");
  if (node_rank >= nnodes) return usage_error("--node-rank must be below --nnodes");

  bool own_store = false;
  if (store_path.empty() && nnodes == 1) {
    char tmpl[] = "/tmp/heed-run-XXXXXX";
    if (!mkdtemp(tmpl)) {
      std::fprintf(stderr, "heed-run: error: cannot create a store directory: %s\n", std::strerror(errno));
      return 1;
    }
    store_path = tmpl;
    own_store = true;
  } else if (!store_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(store_path, ec);
  }

  const int64_t world = nproc * nnodes;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string omp_threads = std::to_string(std::max<int64_t>(1, cores / nproc));

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // SIGINT/SIGTERM stay blocked while forking: a child resets them to the default action
  // before unblocking, so a signal sent while it starts is never swallowed by our handler.
  sigset_t stop_signals, previous_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop_signals, &previous_mask);
  std::vector<Rank> ranks(static_cast<size_t>(nproc));
  for (int k = 0; k < nproc; ++k) {
    Rank& r = ranks[k];
    r.local = k;
    r.global = static_cast<int>(node_rank * nproc + k);
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
      std::fprintf(stderr, "heed-run: error: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "heed-run: error: fork: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      close(out_pipe[0]);
      close(out_pipe[1]);
      close(err_pipe[0]);
      close(err_pipe[1]);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
      setenv("HEED_RANK", std::to_string(r.global).c_str(), 1);
      setenv("HEED_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("HEED_LOCAL_RANK", std::to_string(k).c_str(), 1);
      setenv("HEED_LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("HEED_NODE_RANK", std::to_string(node_rank).c_str(), 1);
      setenv("HEED_MASTER_ADDR", master_addr.c_str(), 1);
      setenv("HEED_MASTER_PORT", std::to_string(master_port).c_str(), 1);
      if (!store_path.empty()) setenv("HEED_STORE_PATH", store_path.c_str(), 1);
      setenv("HEED_DIST_TIMEOUT_MS", std::to_string(timeout_ms).c_str(), 1);
      setenv("OMP_NUM_THREADS", omp_threads.c_str(), 0);  // unless the user set it
      execvp(argv[split + 1], argv + split + 1);
      std::fprintf(stderr, "heed-run: cannot run '%s': %s\n", argv[split + 1], std::strerror(errno));
      _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    r.pid = pid;
    r.out_fd = out_pipe[0];
    r.err_fd = err_pipe[0];
  }

  sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
  int result = 0;
  bool stopping = false;
  std::chrono::steady_clock::time_point stop_time;
  int forwarded = 0;
  for (;;) {
    // Output first, so lines are not lost when a rank exits.
    std::vector<pollfd> fds;
    for (Rank& r : ranks) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0});
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0});
    }
    if (!fds.empty()) {
      const int ready = poll(fds.data(), fds.size(), 100);
      if (ready > 0)
        for (Rank& r : ranks)
          for (const pollfd& p : fds) {
            if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (p.fd == r.out_fd) drain(r.out_fd, r.out_buf, stdout, r.global);
            if (p.fd == r.err_fd) drain(r.err_fd, r.err_buf, stderr, r.global);
          }
    } else {
      usleep(50 * 1000);
    }
    if (g_signal != 0 && g_signal != forwarded) {
      forwarded = g_signal;
      for (Rank& r : ranks)
        if (!r.exited) kill(r.pid, forwarded);
      if (!stopping) {
        stopping = true;
        stop_time = std::chrono::steady_clock::now();
        if (result == 0) result = 128 + forwarded;
      }
    }
    // Reap the ranks that exited. The first failure stops the run; ranks that fail within
    // kSettle of it are considered with it, and one killed by a signal is named as the cause
    // (its peers' collectives fail at once when its sockets close, so a peer's non-zero exit
    // can be reaped first).
    std::vector<Rank*> failed_now;
    auto reap = [&] {
      for (Rank& r : ranks) {
        if (r.exited) continue;
        int status = 0;
        if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
        r.exited = true;
        r.status = status;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed_now.push_back(&r);
      }
    };
    reap();
    if (!failed_now.empty() && result == 0 && !stopping) {
      constexpr auto kSettle = std::chrono::milliseconds(300);
      const auto settle_end = std::chrono::steady_clock::now() + kSettle;
      auto signalled = [&] {
        for (Rank* r : failed_now)
          if (killed_first_hand(r->status)) return r;
        return static_cast<Rank*>(nullptr);
      };
      while (!signalled() && std::chrono::steady_clock::now() < settle_end) {
        usleep(10 * 1000);
        reap();
      }
      Rank* cause = signalled() ? signalled() : failed_now.front();
      std::fprintf(stderr, "heed-run: rank %d (pid %d) %s; stopping the other ranks\n", cause->global,
                   static_cast<int>(cause->pid), describe(cause->status).c_str());
      result = exit_code_of(cause->status);
      stopping = true;
      stop_time = std::chrono::steady_clock::now();
      for (Rank& other : ranks)
        if (!other.exited) kill(other.pid, SIGTERM);
      for (const Rank* r : failed_now)
        if (r != cause)
          std::fprintf(stderr, "heed-run: rank %d (pid %d) %s\n", r->global, static_cast<int>(r->pid),
                       describe(r->status).c_str());
    } else if (stopping) {
      for (const Rank* r : failed_now)
        std::fprintf(stderr, "heed-run: rank %d (pid %d) %s\n", r->global, static_cast<int>(r->pid),
                     describe(r->status).c_str());
    }
    bool all_exited = true;
    for (const Rank& r : ranks) all_exited = all_exited && r.exited;
    bool all_closed = true;
    for (const Rank& r : ranks) all_closed = all_closed && r.out_fd < 0 && r.err_fd < 0;
    if (all_exited && all_closed) break;
    if (all_exited && stopping) {
      // Grandchildren may hold the pipes open: do not wait for them.
      for (Rank& r : ranks) {
        if (r.out_fd >= 0) close(r.out_fd);
        if (r.err_fd >= 0) close(r.err_fd);
        r.out_fd = r.err_fd = -1;
      }
      break;
    }
    if (stopping && std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_time).count() > grace) {
      for (Rank& r : ranks)
        if (!r.exited) kill(r.pid, SIGKILL);
    }
  }
  if (own_store) {
    std::error_code ec;
    std::filesystem::remove_all(store_path, ec);
  }
  return result;
}
