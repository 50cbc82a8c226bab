// kernels/cpu/allocator.cpp — the CPU caching allocator.
//
// Invariants: blocks are 64-byte aligned; sizes are rounded up to a size class (within
// 12.5% of the request) and freed blocks are kept per class for reuse, so a training loop
// in steady state allocates nothing from the system. The cache holds at most
// kMaxCachedBytes; beyond that freed blocks go back to the system. Thread safe.
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cpu_kernels.h"
#include "heed/allocator_stats.h"
#include "heed/error.h"

namespace heed {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t{4} << 30;

size_t size_class(size_t n) {
  if (n <= 4096) return std::max<size_t>(kAlignment, (n + kAlignment - 1) / kAlignment * kAlignment);
  // Round up to a multiple of 1/8 of the enclosing power of two.
  size_t power = 1;
  while (power < n) power <<= 1;
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

struct CachingAllocator {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;

  void* allocate(size_t n) {
    const size_t cls = size_class(n);
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = free_blocks.find(cls);
      if (it != free_blocks.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats.cache_hits++;
        stats.bytes_cached -= cls;
        stats.bytes_in_use += cls;
        stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
        return p;
      }
      stats.system_allocations++;
      stats.bytes_in_use += cls;
      stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    }
    void* p = std::aligned_alloc(kAlignment, cls);
    if (!p) {
      release_cache();  // try again with the cache returned to the system
      p = std::aligned_alloc(kAlignment, cls);
    }
    if (!p) {
      std::lock_guard<std::mutex> lock(mutex);
      stats.bytes_in_use -= cls;
      fail("allocate", "out of memory: could not allocate {} bytes on the CPU", cls);
    }
    return p;
  }

  void deallocate(void* p, size_t n) {
    const size_t cls = size_class(n);
    {
      std::lock_guard<std::mutex> lock(mutex);
      stats.bytes_in_use -= cls;
      if (stats.bytes_cached + cls <= kMaxCachedBytes) {
        free_blocks[cls].push_back(p);
        stats.bytes_cached += cls;
        return;
      }
    }
    std::free(p);
  }

  void release_cache() {
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex);
      blocks.swap(free_blocks);
      stats.bytes_cached = 0;
    }
    for (auto& [cls, list] : blocks)
      for (void* p : list) std::free(p);
  }

  ~CachingAllocator() { release_cache(); }
};

CachingAllocator& allocator() {
  static CachingAllocator* instance = new CachingAllocator();  // outlives static tensors
  return *instance;
}

}  // namespace

AllocatorStats cpu_allocator_stats() {
  CachingAllocator& a = allocator();
  std::lock_guard<std::mutex> lock(a.mutex);
  return a.stats;
}

void cpu_empty_cache() { allocator().release_cache(); }

namespace kernels::cpu {
void* allocate(size_t nbytes) { return heed::allocator().allocate(nbytes); }
void deallocate(void* ptr, size_t nbytes) { heed::allocator().deallocate(ptr, nbytes); }
void copy_host(void* dst, const void* src, size_t nbytes, bool /*to_host*/) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
}  // namespace kernels::cpu

}  // namespace heed
