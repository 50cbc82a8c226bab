// heed/profile.h — where a training step's time goes: op, backward and kernel spans.
//
//   {
//     heed::profile::Profiler profiler;          // starts recording
//     train_step();                              // ops, backward, optimizer
//     profiler.stop();
//     profiler.write_chrome_trace("step.json");  // open in https://ui.perfetto.dev or chrome://tracing
//     std::fputs(profiler.table(15).c_str(), stdout);
//   }
//
// What is recorded (on the thread that calls the op, and on every other thread that calls one):
//  * op: the forward of every public op (matmul, add, layer_norm, flash_attention, ...), with
//    its input shapes and dtype;
//  * backward: every autograd node the engine runs (the op's name and its output's shape);
//  * kernel: every call of a backend kernel (gemm, layer_norm_forward, adam_step, ...), with
//    its sizes, FLOPs (multiply-add = 2) and bytes read + written from a per-kernel cost model
//    (kernels/registry.cpp); on CUDA a kernel span waits for the kernel to finish;
//  * user: Scope spans the program opens ("step", "data", ...), like torch's record_function;
//  * counter "memory MB (cpu)": heed::memory_stats by category (and the allocator's cache),
//    sampled when each op and backward node ends (a memory track in Perfetto).
//
// Invariants:
//  * Off (no Profiler alive), the cost is one relaxed atomic load per op and per kernel call.
//  * One session per process at a time (a second Profiler throws heed::Error).
//  * An op's self time excludes ops and backward nodes nested in it (a composite op's parts
//    are rows of their own); its FLOPs and bytes are those of the kernels it calls directly.
//  * coverage(): the share of the session's wall time spent inside ops, backward nodes and
//    kernels called outside any op (the optimizer's adam_step, for instance); the rest is the
//    program's own code between ops. User scopes are not counted, so they cannot inflate it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heed::profile {

enum class Kind : uint8_t { Op, Backward, Kernel, User, Counter };
const char* kind_name(Kind kind);

struct Event {
  Kind kind = Kind::Op;
  std::string name;
  std::string shapes;
  std::string dtype;
  uint32_t thread = 0;  // 0: the thread that started the profiler
  int depth = 0;
  bool top_level = false;  // not inside an op or a backward node
  double start_us = 0, duration_us = 0, self_us = 0;
  double flops = 0, bytes = 0;
  std::vector<std::pair<std::string, double>> values;  // Counter: named values at start_us
};

// One row of the summary: every span of one kind and name.
struct Row {
  Kind kind = Kind::Op;
  std::string name;
  int64_t calls = 0;
  double total_ms = 0, self_ms = 0;
  double share = 0;  // self time / wall time of the session
  double flops = 0, bytes = 0;
  double gflops_per_s = 0, gbytes_per_s = 0;  // over self time
};

class Profiler {
 public:
  // Starts recording; throws heed::Error when another Profiler is recording.
  Profiler();
  ~Profiler();  // stops recording if stop() was not called
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void stop();
  bool running() const { return running_; }

  // After stop():
  double wall_ms() const { return wall_ms_; }
  const std::vector<Event>& events() const { return events_; }
  // Summed duration of ops, backward nodes and kernels outside them (see coverage()).
  double covered_ms() const;
  double coverage() const { return wall_ms_ > 0 ? covered_ms() / wall_ms_ : 0.0; }
  // Op, backward and user rows sorted by self time (descending), then kernel rows likewise.
  std::vector<Row> summary() const;
  // The top `top_n` rows of each section as aligned text, with the wall time and coverage.
  std::string table(int top_n = 20) const;
  // Chrome trace event format (JSON); throws heed::Error naming the path when it cannot write.
  void write_chrome_trace(const std::string& path) const;

 private:
  bool running_ = false;
  double wall_ms_ = 0;
  std::vector<Event> events_;
};

// A named span around a region of the program (no effect when no Profiler is recording).
class Scope {
 public:
  explicit Scope(std::string name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool open_ = false;
};

// True while a Profiler is recording.
bool is_recording();

}  // namespace heed::profile
