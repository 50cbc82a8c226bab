// framework/src/core/memory.cpp — live bytes by memory category (heed/memory.h): a counter per
// (device type, category), updated when a storage is created, retagged or freed, and the peak
// with its breakdown, updated when the total passes it.
#include "heed/memory.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "heed/error.h"
#include "heed/tensor.h"
#include "internal.h"

namespace heed {

namespace {

constexpr int kDeviceTypes = 2;
constexpr int kCategories = MemoryStats::kCategories;

struct Accounting {
  std::atomic<int64_t> live[kDeviceTypes][kCategories] = {};
  std::atomic<int64_t> total[kDeviceTypes] = {};
  std::mutex peak_mutex;
  int64_t peak[kDeviceTypes] = {};
  int64_t at_peak[kDeviceTypes][kCategories] = {};
};

Accounting& accounting() {
  static Accounting a;
  return a;
}

int type_index(Device device) { return device.is_cuda() ? 1 : 0; }

// A retag moves bytes from one category to another; the total, and so the peak, stays.
void move_bytes(int type, MemoryCategory from, MemoryCategory to, int64_t bytes) {
  Accounting& a = accounting();
  a.live[type][static_cast<int>(from)].fetch_sub(bytes, std::memory_order_relaxed);
  a.live[type][static_cast<int>(to)].fetch_add(bytes, std::memory_order_relaxed);
}

// Rank of specificity: a storage is not moved to a less specific category.
int specificity(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameter:
      return 4;
    case MemoryCategory::OptimizerState:
      return 4;
    case MemoryCategory::Gradient:
      return 3;
    case MemoryCategory::Activation:
      return 2;
    default:
      return 1;
  }
}

}  // namespace

namespace detail {

void storage_created(Device device, size_t nbytes, MemoryCategory category) {
  Accounting& a = accounting();
  const int type = type_index(device);
  const auto bytes = static_cast<int64_t>(nbytes);
  a.live[type][static_cast<int>(category)].fetch_add(bytes, std::memory_order_relaxed);
  const int64_t total = a.total[type].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (total > a.peak[type]) {  // racy read; confirmed under the mutex
    std::lock_guard<std::mutex> lock(a.peak_mutex);
    if (total > a.peak[type]) {
      a.peak[type] = total;
      for (int c = 0; c < kCategories; ++c) a.at_peak[type][c] = a.live[type][c].load(std::memory_order_relaxed);
    }
  }
}

void storage_freed(Device device, size_t nbytes, MemoryCategory category) {
  Accounting& a = accounting();
  const int type = type_index(device);
  const auto bytes = static_cast<int64_t>(nbytes);
  a.live[type][static_cast<int>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  a.total[type].fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace detail

void Storage::set_category(MemoryCategory category) {
  if (category == category_ || specificity(category) < specificity(category_)) return;
  move_bytes(type_index(device_), category_, category, static_cast<int64_t>(nbytes_));
  category_ = category;
}

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Parameter:
      return "parameter";
    case MemoryCategory::Gradient:
      return "gradient";
    case MemoryCategory::OptimizerState:
      return "optimizer";
    case MemoryCategory::Activation:
      return "activation";
    case MemoryCategory::Temporary:
      return "temporary";
    case MemoryCategory::Count:
      break;
  }
  return "?";
}

MemoryStats memory_stats(DeviceType type) {
  Accounting& a = accounting();
  const int t = type == DeviceType::CUDA ? 1 : 0;
  MemoryStats s;
  std::lock_guard<std::mutex> lock(a.peak_mutex);
  for (int c = 0; c < kCategories; ++c) {
    s.live[c] = static_cast<size_t>(std::max<int64_t>(0, a.live[t][c].load()));
    s.at_peak[c] = static_cast<size_t>(std::max<int64_t>(0, a.at_peak[t][c]));
  }
  s.live_total = static_cast<size_t>(std::max<int64_t>(0, a.total[t].load()));
  s.peak_total = static_cast<size_t>(std::max<int64_t>(0, a.peak[t]));
  if (type == DeviceType::CPU) s.cached = cpu_allocator_stats().bytes_cached;
  return s;
}

void reset_peak_memory_stats() {
  Accounting& a = accounting();
  std::lock_guard<std::mutex> lock(a.peak_mutex);
  for (int t = 0; t < kDeviceTypes; ++t) {
    a.peak[t] = a.total[t].load();
    for (int c = 0; c < kCategories; ++c) a.at_peak[t][c] = a.live[t][c].load();
  }
}

std::string MemoryStats::table() const {
  auto mb = [](size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::string out = fmt::format("{:<12} {:>10} {:>10}\n", "memory", "live MB", "at peak MB");
  for (int c = 0; c < kCategories; ++c)
    out += fmt::format("{:<12} {:>10.1f} {:>10.1f}\n", memory_category_name(static_cast<MemoryCategory>(c)),
                       mb(live[c]), mb(at_peak[c]));
  out += fmt::format("{:<12} {:>10.1f} {:>10.1f}\n", "total", mb(live_total), mb(peak_total));
  out += fmt::format("{:<12} {:>10.1f}\n", "cached", mb(cached));
  return out;
}

void set_memory_category(const Tensor& t, MemoryCategory category) {
  detail::check_defined(t, "set_memory_category", "tensor");
  HEED_CHECK(category != MemoryCategory::Count, "set_memory_category", "not a category");
  if (t.storage()) t.storage()->set_category(category);
}

MemoryCategory memory_category(const Tensor& t) {
  detail::check_defined(t, "memory_category", "tensor");
  return t.storage() ? t.storage()->category() : MemoryCategory::Temporary;
}

}  // namespace heed
