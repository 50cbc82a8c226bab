// kernels/trace.cpp — the span recorder (see trace.h): a stack of open spans per thread and
// one event list per session, appended under a mutex when a span closes.
#include "kernels/trace.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "heed/error.h"

namespace heed::kernels::trace {

namespace {

using Clock = std::chrono::steady_clock;

struct Session {
  std::mutex mutex;
  std::vector<Event> events;
  std::unordered_map<std::thread::id, uint32_t> thread_numbers;
  Clock::time_point start;
  std::atomic<uint64_t> generation{0};  // bumped by start and stop
};

Session& session() {
  static Session s;
  return s;
}

struct OpenSpan {
  Event event;
  uint64_t generation = 0;
  Clock::time_point start;
  double nested_us = 0;  // op/backward/user spans closed inside this one
};

thread_local std::vector<OpenSpan> t_stack;

// This thread's number in the session (0 for the thread that started it, then in order of first
// event). Call with s.mutex held.
uint32_t thread_number(Session& s) {
  return s.thread_numbers.emplace(std::this_thread::get_id(), static_cast<uint32_t>(s.thread_numbers.size()))
      .first->second;
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Op:
      return "op";
    case Kind::Backward:
      return "backward";
    case Kind::Kernel:
      return "kernel";
    case Kind::User:
      return "user";
    case Kind::Counter:
      return "counter";
  }
  return "?";
}

void start_session() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  HEED_CHECK(!active(), "profile::Profiler", "a profiling session is already running (one at a time per process)");
  s.events.clear();
  s.thread_numbers.clear();
  s.thread_numbers.emplace(std::this_thread::get_id(), 0);
  s.start = Clock::now();
  s.generation.fetch_add(1);
  detail::g_active.store(true);
}

std::vector<Event> stop_session() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::g_active.store(false);
  s.generation.fetch_add(1);
  std::vector<Event> out;
  out.swap(s.events);
  return out;
}

double session_elapsed_us() { return active() ? micros(Clock::now() - session().start) : 0.0; }

void counter(std::string name, std::vector<std::pair<std::string, double>> values) {
  if (!active()) return;
  Session& s = session();
  const Clock::time_point now = Clock::now();
  Event e;
  e.kind = Kind::Counter;
  e.name = std::move(name);
  e.values = std::move(values);
  e.depth = static_cast<int>(t_stack.size());
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!active()) return;
  e.start_us = micros(now - s.start);
  e.thread = thread_number(s);
  s.events.push_back(std::move(e));
}

void begin(Kind kind, std::string name, std::string shapes, std::string dtype) {
  if (!active()) return;
  Session& s = session();
  const uint64_t generation = s.generation.load();
  // Spans of an earlier session still open on this thread are stale: drop them.
  while (!t_stack.empty() && t_stack.back().generation != generation) t_stack.pop_back();
  OpenSpan span;
  span.event.kind = kind;
  span.event.name = std::move(name);
  span.event.shapes = std::move(shapes);
  span.event.dtype = std::move(dtype);
  span.event.depth = static_cast<int>(t_stack.size());
  span.event.top_level = true;
  for (const OpenSpan& outer : t_stack)
    if (outer.event.kind == Kind::Op || outer.event.kind == Kind::Backward) span.event.top_level = false;
  span.generation = generation;
  span.start = Clock::now();
  t_stack.push_back(std::move(span));
}

void end(double flops, double bytes) {
  if (t_stack.empty()) return;
  const Clock::time_point now = Clock::now();
  OpenSpan span = std::move(t_stack.back());
  t_stack.pop_back();
  Session& s = session();
  if (!active() || span.generation != s.generation.load()) return;
  Event& e = span.event;
  e.duration_us = micros(now - span.start);
  e.self_us = e.kind == Kind::Kernel ? e.duration_us : e.duration_us - span.nested_us;
  e.flops += flops;
  e.bytes += bytes;
  // Credit the innermost enclosing non-kernel span: a kernel's cost, or an op's time.
  for (auto it = t_stack.rbegin(); it != t_stack.rend(); ++it) {
    if (it->event.kind == Kind::Kernel) continue;
    if (e.kind == Kind::Kernel) {
      it->event.flops += e.flops;
      it->event.bytes += e.bytes;
    } else {
      it->nested_us += e.duration_us;
    }
    break;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  if (span.generation != s.generation.load()) return;
  e.start_us = micros(span.start - s.start);
  e.thread = thread_number(s);
  s.events.push_back(std::move(e));
}

}  // namespace heed::kernels::trace
