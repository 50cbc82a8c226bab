// heed/memory.h — where memory goes: live bytes by category, the peak and what it was made of.
//
//   heed::reset_peak_memory_stats();
//   train_step();
//   std::fputs(heed::memory_stats().table().c_str(), stdout);
//
// Every tensor storage counts in exactly one category, by what owns it:
//   parameter       parameters and buffers registered in an nn::Module
//   gradient        the .grad of leaves (written by backward)
//   optimizer       optimizer state (Adam's moments, SGD's momentum)
//   activation      storages saved for backward by an op (released when backward used them)
//   temporary       everything else: op results in flight, the program's own tensors
// plus, on the CPU, the allocator's cache (freed blocks kept for reuse; not live).
//
// Invariants: the live bytes of the categories add up to the bytes held by live storages of
// that device type (the allocator may round a block up: its bytes_in_use can be larger); the
// peak is the largest such sum since reset_peak_memory_stats, and `at_peak` is its breakdown
// at that moment. A storage keeps the most specific category it was given (an activation that
// is a parameter stays a parameter).
#pragma once

#include <cstddef>
#include <string>

#include "heed/device.h"
#include "heed/storage.h"

namespace heed {

class Tensor;

const char* memory_category_name(MemoryCategory category);

struct MemoryStats {
  static constexpr int kCategories = static_cast<int>(MemoryCategory::Count);
  size_t live[kCategories] = {};     // bytes held now, by category
  size_t at_peak[kCategories] = {};  // the same at the moment of the peak
  size_t live_total = 0, peak_total = 0;
  size_t cached = 0;  // CPU: the caching allocator's free blocks (0 for CUDA)
  size_t bytes(MemoryCategory c) const { return live[static_cast<int>(c)]; }
  // One line per category: live MB and MB at the peak, then the totals and the cache.
  std::string table() const;
};

MemoryStats memory_stats(DeviceType type = DeviceType::CPU);
// Starts a new peak from the bytes live now (every device type).
void reset_peak_memory_stats();

// Tags the storage of `t` (and so every view sharing it). Parameter and OptimizerState are
// kept when a later tag asks for Activation or Temporary.
void set_memory_category(const Tensor& t, MemoryCategory category);
MemoryCategory memory_category(const Tensor& t);

}  // namespace heed
