// heed/storage.h — a reference-counted block of device memory shared by tensors and views.
//
// Invariants: storage is allocated through the device's kernel table (the CPU
// path goes through the caching allocator); `version` counts in-place writes
// and is shared by every view of the storage, so a tensor saved for backward
// can tell that it was modified afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "heed/allocator_stats.h"  // AllocatorStats, cpu_allocator_stats, cpu_empty_cache
#include "heed/device.h"

namespace heed {

// What a block of memory holds, for heed::memory_stats (heed/memory.h). A storage starts as
// Temporary; modules, the autograd engine and the optimizers retag the storages they own.
enum class MemoryCategory : uint8_t { Parameter, Gradient, OptimizerState, Activation, Temporary, Count };

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  MemoryCategory category() const { return category_; }
  // Moves this storage's bytes to `category` in the live-bytes accounting (memory.cpp).
  void set_category(MemoryCategory category);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  MemoryCategory category_ = MemoryCategory::Temporary;
};

}  // namespace heed
