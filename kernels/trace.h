// kernels/trace.h — the span recorder under heed::profile::Profiler (heed/profile.h).
//
// It lives at the kernel layer because kernel calls are spans too: while a session is active,
// kernel_table() hands out a table whose entries time each call (kernels/registry.cpp), and
// the framework opens spans around every op's forward and every autograd node's backward.
//
// Invariants:
//  * Off (no session), the cost is one relaxed atomic load per op and per kernel lookup.
//  * Spans nest per thread (a stack): an op span's self time excludes the op and backward
//    spans opened inside it, but not its kernel spans (kernels are a separate layer); a
//    kernel's FLOPs and bytes are credited to the innermost enclosing op/backward/user span.
//  * A span opened in one session and closed in another (or after stop) is dropped, never
//    attributed to the wrong session.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heed::kernels::trace {

enum class Kind : uint8_t { Op, Backward, Kernel, User, Counter };
const char* kind_name(Kind kind);

struct Event {
  Kind kind = Kind::Op;
  std::string name;
  std::string shapes;  // e.g. "[16,128,256] x [256,768]" or "m=2048 n=768 k=256"
  std::string dtype;
  uint32_t thread = 0;     // 0 for the thread that started the session, then 1, 2, ... in order of first event
  int depth = 0;           // open spans of this thread around it (kernels included)
  bool top_level = false;  // no enclosing op or backward span on its thread (user spans do not count)
  double start_us = 0;     // since the session started
  double duration_us = 0;
  double self_us = 0;  // duration minus nested op/backward/user spans (kernels: the duration)
  double flops = 0;    // kernels: the kernel's own; others: the kernels directly inside (not nested ops)
  double bytes = 0;
  std::vector<std::pair<std::string, double>> values;  // Counter: the named values at start_us
};

namespace detail {
inline std::atomic<bool> g_active{false};
}
inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// Starts a session (clearing earlier events); throws heed::Error if one is running.
void start_session();
// Ends the session and returns its events in the order they ended.
std::vector<Event> stop_session();
// Wall time since the session started, in microseconds (0 when none).
double session_elapsed_us();

// Opens a span on this thread (no effect when no session is active: then end() is a no-op too).
void begin(Kind kind, std::string name, std::string shapes = {}, std::string dtype = {});
// Closes this thread's innermost span, adding `flops` and `bytes` to it.
void end(double flops = 0, double bytes = 0);

// A sample of named values (a Chrome trace counter, e.g. memory by category) at this moment.
void counter(std::string name, std::vector<std::pair<std::string, double>> values);

// RAII span; records only when a session was active at construction.
class Span {
 public:
  Span(Kind kind, std::string name, std::string shapes = {}, std::string dtype = {}) : open_(active()) {
    if (open_) begin(kind, std::move(name), std::move(shapes), std::move(dtype));
  }
  ~Span() {
    if (open_) end(flops_, bytes_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void add_cost(double flops, double bytes) {
    flops_ += flops;
    bytes_ += bytes;
  }

 private:
  bool open_;
  double flops_ = 0, bytes_ = 0;
};

}  // namespace heed::kernels::trace
