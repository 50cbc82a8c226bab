// heed/allocator_stats.h — what the CPU caching allocator (kernels/cpu/allocator.cpp) reports,
// declared on the ground floor so that the kernels implement it without including framework/.
#pragma once

#include <cstddef>
#include <cstdint>

namespace heed {

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
