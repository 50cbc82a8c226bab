// framework/src/dist/dist.cpp — process groups and collectives over Gloo (see heed/dist.h).
//
// Invariants: every Gloo call runs inside guarded(), which turns Gloo's exceptions into a
// heed::Error naming the collective, this rank, the cause and (on one machine) the ranks
// whose processes are gone; every Gloo call gets the group's timeout; CPU tensors are touched
// through their raw storage only (no autograd, no version bump: parameters are leaves).
// CUDA tensors go through NCCL when the group was created with backend "nccl"
// (dist_nccl.cpp), else they are staged through the host: copied to a CPU tensor, reduced
// over Gloo, copied back (under NoGradGuard).
#include "heed/dist.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "dist_nccl.h"
#include "heed/autograd.h"
#include "heed/error.h"
#include "heed/ops.h"

#ifdef HEED_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace heed::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

bool is_nccl_available() { return is_available() && detail::nccl_compiled(); }

std::pair<int64_t, int64_t> chunk_range(int64_t n, int world, int rank) {
  HEED_CHECK(world > 0 && rank >= 0 && rank < world && n >= 0, "dist::chunk_range",
             "bad arguments n={} world={} rank={}", n, world, rank);
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

int64_t env_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value, &end, 10);
  HEED_CHECK(errno == 0 && end && *end == '\0' && parsed >= min && parsed <= max, "dist::init_process_group_from_env",
             "{}='{}' is not an integer in [{}, {}]", name, value, min, max);
  return parsed;
}

[[maybe_unused]] void check_tensor(const Tensor& t, const char* op) {
  HEED_CHECK(t.defined(), op, "undefined tensor");
  HEED_CHECK(t.is_contiguous(), op, "the tensor must be contiguous (shape {}); call .contiguous() first",
             shape_str(t.shape()));
}

}  // namespace

int world_size_from_env() { return static_cast<int>(env_int("HEED_WORLD_SIZE", 1, 1, 1 << 20)); }

std::shared_ptr<ProcessGroup> init_process_group_from_env() {
  InitOptions options;
  options.world_size = world_size_from_env();
  options.rank = static_cast<int>(env_int("HEED_RANK", 0, 0, options.world_size - 1));
  options.store_path = env_or("HEED_STORE_PATH", "");
  options.master_addr = env_or("HEED_MASTER_ADDR", options.master_addr);
  options.master_port = static_cast<int>(env_int("HEED_MASTER_PORT", options.master_port, 1, 65535));
  options.hostname = env_or("HEED_HOSTNAME", options.hostname);
  options.prefix = env_or("HEED_DIST_PREFIX", options.prefix);
  options.backend = env_or("HEED_DIST_BACKEND", options.backend);
  options.timeout =
      std::chrono::milliseconds(env_int("HEED_DIST_TIMEOUT_MS", options.timeout.count(), 1, int64_t{1} << 40));
  return init_process_group(options);
}

bool any_rank(ProcessGroup& group, bool flag) {
  Tensor t = full({1}, flag ? 1.0 : 0.0, kBool);
  group.all_reduce(t, ReduceOp::Max);
  return t.item<bool>();
}

std::function<bool(bool)> found_inf_agreement(std::shared_ptr<ProcessGroup> group) {
  HEED_CHECK(group != nullptr, "dist::found_inf_agreement", "null process group");
  return [group](bool found) { return any_rank(*group, found); };
}

#ifdef HEED_HAVE_GLOO

bool is_available() { return true; }

namespace {

// Keys of `base` under "<prefix>." (gloo's PrefixStore joins with '/', which FileStore would
// take for a subdirectory).
class PrefixedStore : public gloo::rendezvous::Store {
 public:
  PrefixedStore(std::string prefix, std::shared_ptr<gloo::rendezvous::Store> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {}
  void set(const std::string& key, const std::vector<char>& data) override { base_->set(join(key), data); }
  std::vector<char> get(const std::string& key) override { return base_->get(join(key)); }
  void wait(const std::vector<std::string>& keys) override { base_->wait(join(keys)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    base_->wait(join(keys), timeout);
  }

 private:
  std::string join(const std::string& key) const { return prefix_ + "." + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(join(k));
    return out;
  }
  std::string prefix_;
  std::shared_ptr<gloo::rendezvous::Store> base_;
};

// ---- a small key-value store over TCP for the rendezvous (PyTorch's TCPStore) -------------
// Rank 0 serves it on master_addr:master_port; every rank (rank 0 too) is a client. Requests:
// 'S' key value (reply 1 byte), 'G' key (reply: found byte, then the value if found). Clients
// poll for keys not yet set, so the server never blocks on a request.

bool write_full(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_full(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_blob(int fd, const std::string& s) {
  const uint32_t n = htonl(static_cast<uint32_t>(s.size()));
  return write_full(fd, &n, 4) && write_full(fd, s.data(), s.size());
}

bool read_blob(int fd, std::string& s) {
  uint32_t n = 0;
  if (!read_full(fd, &n, 4)) return false;
  n = ntohl(n);
  if (n > (1u << 30)) return false;
  s.resize(n);
  return read_full(fd, s.data(), n);
}

class TcpStore : public gloo::rendezvous::Store {
 public:
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout) : timeout_(timeout) {
    if (serve) {
      listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
      const int one = 1;
      setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listen_fd_, 1024) != 0) {
        const std::string why = std::strerror(errno);
        close(listen_fd_);
        throw Error(fmt::format("TCP store: cannot listen on port {}: {}", port, why));
      }
      server_ = std::thread([this] { serve_loop(); });
    }
    fd_ = connect_with_retry(host, port);
  }
  ~TcpStore() override {
    if (fd_ >= 0) close(fd_);
    stop_ = true;
    if (server_.joinable()) server_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    char ok = 0;
    if (!(write_full(fd_, "S", 1) && write_blob(fd_, key) && write_blob(fd_, std::string(data.begin(), data.end())) &&
          read_full(fd_, &ok, 1)))
      throw Error(fmt::format("TCP store: lost the connection to the store (rank 0) while setting '{}'", key));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::string value;
    if (!try_get(key, &value)) throw Error(fmt::format("TCP store: key '{}' vanished", key));
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& key : keys) {
      std::string ignored;
      while (!try_get(key, &ignored)) {
        if (std::chrono::steady_clock::now() > deadline)
          throw Error(fmt::format("TCP store: timed out after {} ms waiting for key '{}'", timeout.count(), key));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

 private:
  bool try_get(const std::string& key, std::string* value) {
    char found = 0;
    if (!(write_full(fd_, "G", 1) && write_blob(fd_, key) && read_full(fd_, &found, 1)))
      throw Error(fmt::format("TCP store: lost the connection to the store (rank 0) while reading '{}'", key));
    if (!found) return false;
    if (!read_blob(fd_, *value))
      throw Error(fmt::format("TCP store: lost the connection to the store (rank 0) while reading '{}'", key));
    return true;
  }

  int connect_with_retry(const std::string& host, int port) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::string why = "no attempt";
    for (;;) {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      if (rc == 0) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
          freeaddrinfo(found);
          const int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          // Every request is bounded too: a store that stops answering is an error, not a hang.
          timeval limit{};
          limit.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
          limit.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
          setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
          setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
          return fd;
        }
        why = std::strerror(errno);
        close(fd);
        freeaddrinfo(found);
      } else {
        why = gai_strerror(rc);
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(fmt::format("TCP store: cannot reach {}:{} within {} ms: {}", host, port, timeout_.count(), why));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  void serve_loop() {
    std::map<std::string, std::string> data;
    std::vector<int> clients;
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      std::vector<int> alive;
      if (fds[0].revents & POLLIN) {
        const int c = accept(listen_fd_, nullptr, nullptr);
        if (c >= 0) {
          const int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          alive.push_back(c);  // served from the next poll on
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        const int c = fds[i].fd;
        bool keep = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char op = 0;
          std::string key, value;
          keep = read_full(c, &op, 1) && read_blob(c, key);
          if (keep && op == 'S') {
            keep = read_blob(c, value);
            if (keep) data[key] = value;
            keep = keep && write_full(c, "\1", 1);
          } else if (keep && op == 'G') {
            const auto it = data.find(key);
            const char found = it != data.end() ? 1 : 0;
            keep = write_full(c, &found, 1) && (!found || write_blob(c, it->second));
          } else {
            keep = false;
          }
        }
        if (keep)
          alive.push_back(c);
        else
          close(c);
      }
      clients = alive;
    }
    for (int c : clients) close(c);
  }

  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread server_;
};

std::string local_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// Whether process `pid` on this machine still runs (a zombie counts as gone).
bool process_alive(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

template <typename T>
void divide_in_place(void* data, int64_t n, int world) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] / static_cast<T>(world);
}

template <typename T>
void gloo_all_reduce(const std::shared_ptr<gloo::Context>& ctx, void* data, int64_t n, ReduceOp op, uint32_t tag,
                     std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(static_cast<T*>(data), static_cast<size_t>(n));
  using Fn = void (*)(void*, const void*, const void*, size_t);
  opts.setReduceFunction(op == ReduceOp::Max ? static_cast<Fn>(&gloo::max<T>) : static_cast<Fn>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

}  // namespace

namespace {
// While alive, SIGPIPE is blocked on this thread, and threads started meanwhile (Gloo's I/O
// loop) inherit that: a write to a peer that died then fails with EPIPE, which Gloo turns
// into an error, instead of killing this process (seen in about 1 of 12 runs where a peer was
// SIGKILLed). A SIGPIPE raised meanwhile is consumed before the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    if (!sigismember(&previous_, SIGPIPE)) {
      const timespec no_wait{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &no_wait) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{}, previous_{};
};
}  // namespace

struct ProcessGroup::Impl {
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{};
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  uint32_t next_tag = 1;
  std::string failed;                              // the first error; the group is unusable afterwards
  std::unique_ptr<detail::NcclCommunicator> nccl;  // backend "nccl": CUDA tensors go through it

  // "; rank 1 (pid 1234) has exited" for the peers on this machine that are gone. A killed
  // peer's sockets close before its process is gone, so this looks again for up to 0.5 s.
  std::string lost_peers() const {
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::string out = lost_peers_now();
      if (!out.empty()) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return "";
  }
  std::string lost_peers_now() const {
    std::string out;
    const std::string host = local_hostname();
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      try {
        const std::vector<char> blob = store->get("heed_pid_" + std::to_string(r));
        const std::string text(blob.begin(), blob.end());
        const size_t space = text.rfind(' ');
        if (space == std::string::npos || text.substr(0, space) != host) continue;
        const long pid = std::stol(text.substr(space + 1));
        if (!process_alive(pid)) out += fmt::format("; rank {} (pid {}) has exited", r, pid);
      } catch (const std::exception&) {
      }
    }
    return out;
  }

  template <typename Fn>
  void guarded(const char* collective, Fn&& fn) {
    HEED_CHECK(failed.empty(), fmt::format("dist::{}", collective).c_str(),
               "rank {} of {}: the process group failed earlier ({}); create a new one", rank, world, failed);
    try {
      SigpipeBlocked no_sigpipe;
      fn();
    } catch (const gloo::Exception& e) {
      failed = e.what();
      throw Error(
          fmt::format("heed::dist::{}: rank {} of {} failed after at most {} ms: {}{} (a peer rank died, "
                      "hung or called a different collective)",
                      collective, rank, world, timeout.count(), e.what(), lost_peers()));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      failed = e.what();
      throw Error(fmt::format("heed::dist::{}: rank {} of {}: {}{}", collective, rank, world, e.what(), lost_peers()));
    }
  }
};

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  const char* op = "dist::init_process_group";
  HEED_CHECK(options.backend == "gloo" || options.backend == "nccl", op,
             "unknown backend '{}' (expected 'gloo', or 'nccl' for CUDA tensors)", options.backend);
  HEED_CHECK(options.world_size >= 1, op, "world_size must be >= 1, got {}", options.world_size);
  HEED_CHECK(options.rank >= 0 && options.rank < options.world_size, op, "rank {} is outside [0, {})", options.rank,
             options.world_size);
  HEED_CHECK(options.timeout.count() > 0, op, "timeout must be positive");
  HEED_CHECK(options.master_port > 0 && options.master_port < 65536, op, "master_port {} is not a TCP port",
             options.master_port);
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->rank = options.rank;
  impl->world = options.world_size;
  impl->timeout = options.timeout;
  try {
    SigpipeBlocked no_sigpipe;  // Gloo's I/O thread, started here, keeps SIGPIPE blocked
    std::shared_ptr<gloo::rendezvous::Store> base;
    if (!options.store_path.empty())
      base = std::make_shared<gloo::rendezvous::FileStore>(options.store_path);
    else if (options.world_size == 1)
      base = std::make_shared<gloo::rendezvous::HashStore>();
    else  // rank 0 serves the store on master_addr:master_port
      base = std::make_shared<TcpStore>(options.master_addr, options.master_port, options.rank == 0, options.timeout);
    impl->store = std::make_shared<PrefixedStore>(options.prefix, base);
    const std::string me = fmt::format("{} {}", local_hostname(), static_cast<long>(getpid()));
    impl->store->set("heed_pid_" + std::to_string(options.rank), std::vector<char>(me.begin(), me.end()));
    gloo::transport::tcp::attr attr;
    // Several machines: listen on this machine's name unless told otherwise (HEED_HOSTNAME).
    const bool local_master = options.master_addr == "127.0.0.1" || options.master_addr == "localhost";
    attr.hostname = options.hostname == "127.0.0.1" && !local_master ? local_hostname() : options.hostname;
    impl->device = gloo::transport::tcp::CreateDevice(attr);
    impl->context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    impl->context->setTimeout(options.timeout);
    impl->context->connectFullMesh(*impl->store, impl->device);
  } catch (const std::exception& e) {
    const std::string store = !options.store_path.empty() ? "file store " + options.store_path
                              : options.world_size == 1
                                  ? std::string("no store")
                                  : fmt::format("TCP store {}:{}", options.master_addr, options.master_port);
    throw Error(
        fmt::format("heed::dist::init_process_group: rank {} of {} ({}, prefix '{}') could not "
                    "connect within {} ms: {}",
                    options.rank, options.world_size, store, options.prefix, options.timeout.count(), e.what()));
  }
  if (options.backend == "nccl") {
    // CPU tensors keep going through Gloo; CUDA tensors through NCCL, whose unique id travels
    // through the same store.
    gloo::rendezvous::Store& store = *impl->store;
    const std::chrono::milliseconds timeout = options.timeout;
    impl->nccl = detail::create_nccl_communicator(
        options.rank, options.world_size, options.timeout,
        [&store](const std::string& id) { store.set("heed_nccl_id", std::vector<char>(id.begin(), id.end())); },
        [&store, timeout]() {
          store.wait({"heed_nccl_id"}, timeout);
          const std::vector<char> id = store.get("heed_nccl_id");
          return std::string(id.begin(), id.end());
        });
  }
  return std::make_shared<ProcessGroup>(std::move(impl));
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::world_size() const { return impl_->world; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->timeout; }
void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  HEED_CHECK(timeout.count() > 0, "dist::ProcessGroup::set_timeout", "timeout must be positive");
  impl_->timeout = timeout;
  impl_->context->setTimeout(timeout);
  if (impl_->nccl) impl_->nccl->set_timeout(timeout);
}

namespace {
// A CUDA tensor's values on the host, for a Gloo collective; copy_back writes them back.
Tensor staged_on_host(const Tensor& t) { return t.to(kCPU).contiguous(); }
void copy_back(Tensor& device_tensor, const Tensor& host) {
  NoGradGuard no_grad;
  device_tensor.copy_(host);
}
}  // namespace

namespace {
struct Timed {
  ProcessGroup::Counters& counters;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Timed() { counters.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};
}  // namespace

void ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op) {
  constexpr const char* kOp = "dist::all_reduce";
  check_tensor(tensor, kOp);
  const DType dtype = tensor.dtype();
  HEED_CHECK(op != ReduceOp::Avg || is_floating(dtype), kOp,
             "avg of a {} tensor is not representable; use sum (and divide yourself)", dtype_name(dtype));
  const int64_t n = tensor.numel();
  if (tensor.device() != kCPU && !impl_->nccl) {  // Gloo: through the host
    Tensor host = staged_on_host(tensor);
    all_reduce(host, op);
    copy_back(tensor, host);
    return;
  }
  if (tensor.device() != kCPU) {
    counters_.collectives += 1;
    counters_.bytes += n * static_cast<int64_t>(tensor.element_size());
    if (n == 0) return;
    Timed timed{counters_};
    impl_->nccl->all_reduce(tensor.raw_data(), n, dtype, op);
    return;
  }
  counters_.collectives += 1;
  counters_.bytes += n * static_cast<int64_t>(tensor.element_size());
  if (n == 0) return;
  Timed timed{counters_};
  // 16-bit floats travel and reduce as float32 (one rounding at the end).
  Tensor work = (dtype == kFloat16 || dtype == kBFloat16) ? tensor.to(kFloat32) : tensor;
  void* data = work.raw_data();
  if (impl_->world > 1) {
    const uint32_t tag = impl_->next_tag++;
    impl_->guarded("all_reduce", [&] {
      auto ctx = std::static_pointer_cast<gloo::Context>(impl_->context);
      switch (work.dtype()) {
        case kFloat32:
          gloo_all_reduce<float>(ctx, data, n, op, tag, impl_->timeout);
          break;
        case kFloat64:
          gloo_all_reduce<double>(ctx, data, n, op, tag, impl_->timeout);
          break;
        case kInt32:
          gloo_all_reduce<int32_t>(ctx, data, n, op, tag, impl_->timeout);
          break;
        case kInt64:
          gloo_all_reduce<int64_t>(ctx, data, n, op, tag, impl_->timeout);
          break;
        case kBool:  // sum and max are both "or" (max of 0/1 bytes)
          gloo_all_reduce<uint8_t>(ctx, data, n, ReduceOp::Max, tag, impl_->timeout);
          break;
        default:
          throw Error(fmt::format("heed::{}: unsupported dtype {}", kOp, dtype_name(work.dtype())));
      }
    });
  }
  if (op == ReduceOp::Avg) {
    if (work.dtype() == kFloat32)
      divide_in_place<float>(data, n, impl_->world);
    else
      divide_in_place<double>(data, n, impl_->world);
  }
  if (dtype == kFloat16) {
    const float* src = work.data_ptr<float>();
    Half* dst = static_cast<Half*>(tensor.raw_data());
    for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
  } else if (dtype == kBFloat16) {
    const float* src = work.data_ptr<float>();
    BFloat16* dst = static_cast<BFloat16*>(tensor.raw_data());
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]);
  }
}

void ProcessGroup::broadcast(Tensor& tensor, int root) {
  constexpr const char* kOp = "dist::broadcast";
  check_tensor(tensor, kOp);
  HEED_CHECK(root >= 0 && root < impl_->world, kOp, "root {} is outside [0, {})", root, impl_->world);
  if (tensor.device() != kCPU && !impl_->nccl) {  // Gloo: through the host
    Tensor host = staged_on_host(tensor);
    broadcast(host, root);
    if (impl_->world > 1) copy_back(tensor, host);
    return;
  }
  const size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  counters_.collectives += 1;
  counters_.bytes += static_cast<int64_t>(bytes);
  if (bytes == 0 || impl_->world == 1) return;
  Timed timed{counters_};
  if (tensor.device() != kCPU) {
    impl_->nccl->broadcast(tensor.raw_data(), static_cast<int64_t>(bytes), root);
    return;
  }
  const uint32_t tag = impl_->next_tag++;
  impl_->guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->context);
    opts.setOutput(static_cast<uint8_t*>(tensor.raw_data()), bytes);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(impl_->timeout);
    gloo::broadcast(opts);
  });
}

void ProcessGroup::all_gather(std::vector<Tensor>& out, const Tensor& input) {
  constexpr const char* kOp = "dist::all_gather";
  check_tensor(input, kOp);
  const int world = impl_->world;
  if (input.device() != kCPU && !impl_->nccl) {  // Gloo: through the host
    std::vector<Tensor> host_out;
    all_gather(host_out, staged_on_host(input));
    out.clear();
    for (const Tensor& t : host_out) out.push_back(t.to(input.device()));
    return;
  }
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  counters_.collectives += 1;
  counters_.bytes += static_cast<int64_t>(bytes);
  Dims gathered_shape{world};
  for (int64_t d : input.shape()) gathered_shape.push_back(d);
  Tensor gathered = empty(gathered_shape, input.options());
  if (bytes > 0 && input.device() != kCPU) {
    Timed timed{counters_};
    impl_->nccl->all_gather(input.raw_data(), gathered.raw_data(), static_cast<int64_t>(bytes));
  } else if (bytes > 0) {
    Timed timed{counters_};
    if (world == 1) {
      std::memcpy(gathered.raw_data(), input.raw_data(), bytes);
    } else {
      const uint32_t tag = impl_->next_tag++;
      impl_->guarded("all_gather", [&] {
        gloo::AllgatherOptions opts(impl_->context);
        opts.setInput(static_cast<uint8_t*>(input.raw_data()), bytes);
        opts.setOutput(static_cast<uint8_t*>(gathered.raw_data()), bytes * world);
        opts.setTag(tag);
        opts.setTimeout(impl_->timeout);
        gloo::allgather(opts);
      });
    }
  }
  out.clear();
  for (int r = 0; r < world; ++r) out.push_back(gathered.select(0, r).contiguous());
}

Tensor ProcessGroup::reduce_scatter(const Tensor& input, ReduceOp op) {
  constexpr const char* kOp = "dist::reduce_scatter";
  check_tensor(input, kOp);
  Tensor reduced = input.clone().flatten();
  all_reduce(reduced, op);
  const auto [begin, end] = chunk_range(reduced.numel(), impl_->world, impl_->rank);
  return reduced.slice(0, begin, end).contiguous();
}

void ProcessGroup::barrier() {
  counters_.collectives += 1;
  if (impl_->world == 1) return;
  Timed timed{counters_};
  const uint32_t tag = impl_->next_tag++;
  impl_->guarded("barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(tag);
    opts.setTimeout(impl_->timeout);
    gloo::barrier(opts);
  });
}

#else  // no Gloo

bool is_available() { return false; }

struct ProcessGroup::Impl {};

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions&) {
  throw Error(
      "heed::dist::init_process_group: heed was built without Gloo (HEED_DIST=OFF or libgloo-dev missing); "
      "install libgloo-dev and rebuild with -DHEED_DIST=ON");
}
ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return 0; }
int ProcessGroup::world_size() const { return 1; }
std::chrono::milliseconds ProcessGroup::timeout() const { return {}; }
void ProcessGroup::set_timeout(std::chrono::milliseconds) {}
void ProcessGroup::all_reduce(Tensor&, ReduceOp) { init_process_group({}); }
void ProcessGroup::broadcast(Tensor&, int) { init_process_group({}); }
void ProcessGroup::all_gather(std::vector<Tensor>&, const Tensor&) { init_process_group({}); }
Tensor ProcessGroup::reduce_scatter(const Tensor&, ReduceOp) {
  init_process_group({});
  return {};
}
void ProcessGroup::barrier() { init_process_group({}); }

#endif

}  // namespace heed::dist
