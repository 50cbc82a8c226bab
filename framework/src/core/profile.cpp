// framework/src/core/profile.cpp — heed::profile::Profiler over the kernel-layer span recorder
// (kernels/trace.h): the summary table, the Chrome trace writer, and the op span that every
// public op opens (detail::OpSpan, framework/src/internal.h).
#include "heed/profile.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "heed/error.h"
#include "heed/memory.h"
#include "internal.h"
#include "kernels/trace.h"

namespace heed::profile {

namespace {

namespace trace = kernels::trace;

Event from_trace(trace::Event&& e) {
  Event out;
  out.kind = static_cast<Kind>(e.kind);
  out.name = std::move(e.name);
  out.shapes = std::move(e.shapes);
  out.dtype = std::move(e.dtype);
  out.thread = e.thread;
  out.depth = e.depth;
  out.top_level = e.top_level;
  out.start_us = e.start_us;
  out.duration_us = e.duration_us;
  out.self_us = e.self_us;
  out.flops = e.flops;
  out.bytes = e.bytes;
  out.values = std::move(e.values);
  return out;
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out;
}

// "12.3" for numbers a table column can hold, "-" for none.
std::string rate_text(double value) {
  if (value <= 0) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, value >= 100 ? "%.0f" : "%.1f", value);
  return buffer;
}

}  // namespace

const char* kind_name(Kind kind) { return trace::kind_name(static_cast<trace::Kind>(kind)); }

bool is_recording() { return trace::active(); }

Profiler::Profiler() {
  trace::start_session();
  running_ = true;
}

Profiler::~Profiler() {
  if (running_) trace::stop_session();
}

void Profiler::stop() {
  HEED_CHECK(running_, "profile::Profiler::stop", "the profiler was already stopped");
  wall_ms_ = trace::session_elapsed_us() / 1000.0;
  std::vector<trace::Event> raw = trace::stop_session();
  running_ = false;
  events_.clear();
  events_.reserve(raw.size());
  for (trace::Event& e : raw) events_.push_back(from_trace(std::move(e)));
  std::stable_sort(events_.begin(), events_.end(),
                   [](const Event& a, const Event& b) { return a.start_us < b.start_us; });
}

double Profiler::covered_ms() const {
  double us = 0;
  for (const Event& e : events_)
    if (e.top_level && e.kind != Kind::User) us += e.duration_us;
  return us / 1000.0;
}

std::vector<Row> Profiler::summary() const {
  std::map<std::pair<int, std::string>, Row> rows;
  for (const Event& e : events_) {
    if (e.kind == Kind::Counter) continue;
    Row& r = rows[{e.kind == Kind::Kernel ? 1 : 0, std::string(kind_name(e.kind)) + " " + e.name}];
    r.kind = e.kind;
    r.name = e.name;
    r.calls += 1;
    r.total_ms += e.duration_us / 1000.0;
    r.self_ms += e.self_us / 1000.0;
    r.flops += e.flops;
    r.bytes += e.bytes;
  }
  std::vector<Row> out;
  for (auto& [key, r] : rows) {
    r.share = wall_ms_ > 0 ? r.self_ms / wall_ms_ : 0.0;
    if (r.self_ms > 0) {
      r.gflops_per_s = r.flops / (r.self_ms * 1e6);
      r.gbytes_per_s = r.bytes / (r.self_ms * 1e6);
    }
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) {
    const bool a_kernel = a.kind == Kind::Kernel, b_kernel = b.kind == Kind::Kernel;
    if (a_kernel != b_kernel) return b_kernel;
    return a.self_ms > b.self_ms;
  });
  return out;
}

std::string Profiler::table(int top_n) const {
  HEED_CHECK(!running_, "profile::Profiler::table", "stop the profiler first");
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile: wall %.2f ms; ops, backward nodes and kernels outside ops cover %.1f%% of it (%zu spans)\n",
                wall_ms_, 100.0 * coverage(), events_.size());
  out << line;
  const std::vector<Row> rows = summary();
  for (const bool kernels : {false, true}) {
    std::snprintf(line, sizeof line, "%-9s %-28s %7s %10s %6s %10s %8s %8s\n", kernels ? "kernel" : "kind",
                  kernels ? "name" : "name (ops: self time)", "calls", "self ms", "share", "total ms", "GFLOP/s",
                  "GB/s");
    out << line;
    int shown = 0;
    for (const Row& r : rows) {
      if ((r.kind == Kind::Kernel) != kernels || shown >= top_n) continue;
      ++shown;
      std::string name = r.name.size() > 28 ? r.name.substr(0, 27) + "~" : r.name;
      std::snprintf(line, sizeof line, "%-9s %-28s %7lld %10.2f %5.1f%% %10.2f %8s %8s\n", kind_name(r.kind),
                    name.c_str(), static_cast<long long>(r.calls), r.self_ms, 100.0 * r.share, r.total_ms,
                    rate_text(r.gflops_per_s).c_str(), rate_text(r.gbytes_per_s).c_str());
      out << line;
    }
  }
  return out.str();
}

void Profiler::write_chrome_trace(const std::string& path) const {
  HEED_CHECK(!running_, "profile::Profiler::write_chrome_trace", "stop the profiler first");
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  HEED_CHECK(file.good(), "profile::Profiler::write_chrome_trace", "cannot open '{}' for writing", path);
  file << "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"wall_ms\": " << wall_ms_ << ", \"coverage\": " << coverage()
       << "},\n\"traceEvents\": [\n";
  char number[64];
  bool first = true;
  for (const Event& e : events_) {
    file << (first ? "" : ",\n");
    first = false;
    if (e.kind == Kind::Counter) {
      std::snprintf(number, sizeof number, "%.3f", e.start_us);
      file << "{\"name\": \"" << json_escape(e.name)
           << "\", \"cat\": \"counter\", \"ph\": \"C\", \"pid\": 0, \"ts\": " << number << ", \"args\": {";
      for (size_t i = 0; i < e.values.size(); ++i) {
        std::snprintf(number, sizeof number, "%.3f", e.values[i].second);
        file << (i ? ", " : "") << "\"" << json_escape(e.values[i].first) << "\": " << number;
      }
      file << "}}";
      continue;
    }
    file << "{\"name\": \"" << json_escape(e.name) << "\", \"cat\": \"" << kind_name(e.kind)
         << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << e.thread;
    std::snprintf(number, sizeof number, "%.3f", e.start_us);
    file << ", \"ts\": " << number;
    std::snprintf(number, sizeof number, "%.3f", e.duration_us);
    file << ", \"dur\": " << number << ", \"args\": {\"shapes\": \"" << json_escape(e.shapes) << "\", \"dtype\": \""
         << json_escape(e.dtype) << "\"";
    std::snprintf(number, sizeof number, "%.3f", e.self_us);
    file << ", \"self_us\": " << number;
    std::snprintf(number, sizeof number, "%.0f", e.flops);
    file << ", \"flops\": " << number;
    std::snprintf(number, sizeof number, "%.0f", e.bytes);
    file << ", \"bytes\": " << number << "}}";
  }
  file << "\n]}\n";
  file.flush();
  HEED_CHECK(file.good(), "profile::Profiler::write_chrome_trace", "writing '{}' failed", path);
}

Scope::Scope(std::string name) : open_(trace::active()) {
  if (open_) trace::begin(trace::Kind::User, std::move(name));
}

Scope::~Scope() {
  if (open_) trace::end();
}

}  // namespace heed::profile

namespace heed::detail {

void OpSpan::open(const char* name, std::initializer_list<const Tensor*> inputs) {
  std::string shapes, dtype;
  for (const Tensor* t : inputs) {
    if (!t || !t->defined()) continue;
    if (!shapes.empty()) shapes += " ";
    shapes += shape_str(t->shape());
    if (dtype.empty()) dtype = std::string(dtype_name(t->dtype()));
  }
  kernels::trace::begin(kernels::trace::Kind::Op, name, std::move(shapes), std::move(dtype));
  open_ = true;
}

void OpSpan::close() {
  kernels::trace::end();
  sample_memory_counter();
}

void sample_memory_counter() {
  if (!kernels::trace::active()) return;
  const MemoryStats m = memory_stats(DeviceType::CPU);
  std::vector<std::pair<std::string, double>> values;
  values.reserve(MemoryStats::kCategories + 1);
  constexpr double kMB = 1024.0 * 1024.0;
  for (int c = 0; c < MemoryStats::kCategories; ++c)
    values.emplace_back(memory_category_name(static_cast<MemoryCategory>(c)), static_cast<double>(m.live[c]) / kMB);
  values.emplace_back("cached", static_cast<double>(m.cached) / kMB);
  kernels::trace::counter("memory MB (cpu)", std::move(values));
}

}  // namespace heed::detail
