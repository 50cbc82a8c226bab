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

#include "heed/device.h"

namespace heed {

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

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
};

// Statistics of the CPU caching allocator (for tests and the benchmark).
struct AllocatorStats {
  uint64_t system_allocations = 0;  // calls that reached the system allocator
  uint64_t cache_hits = 0;          // requests served from the cache
  size_t bytes_in_use = 0;          // held by live storages
  size_t bytes_cached = 0;          // freed blocks kept for reuse
  size_t peak_bytes_in_use = 0;
};
AllocatorStats cpu_allocator_stats();
// Returns every cached CPU block to the system.
void cpu_empty_cache();

}  // namespace heed
