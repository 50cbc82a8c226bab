// kernels/cpu/allocator.cpp — the CPU caching allocator.
//
// Invariants: blocks are 64-byte aligned; sizes are rounded up to a size class (within
// 12.5% of the request) and freed blocks are kept per class for reuse, so a training loop
// in steady state allocates nothing from the system. The cache is bounded by the working set:
// before a block comes from the system, cached blocks (largest classes first) go back to the
// system until the bytes held (in use + cached) are within the largest in-use total seen so
// far plus a slack of 1/16 of it (at least kMinSlackBytes). So the process never holds much
// more than its tensors' peak (no second copy of the working set in blocks of the wrong
// sizes, such as an initialiser's float64 temporaries), and a step whose sizes repeat still
// finds every block in the cache. Thread safe.
// Blocks of 2 MiB and more are mapped on their own from a 2 MiB boundary and advised onto
// transparent huge pages (system_allocate; HEED_HUGE_PAGES=0 keeps 4 KiB pages and the malloc
// heap): Debian's default THP mode ("madvise") gives them only to memory that asks, and a training step's gemms walk
// their operands with strides that cost a TLB miss per 4 KiB page (on a Zen 4 the d256 lm step's matmuls ran 3% faster
// with them).
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cpu_kernels.h"
#include "heed/allocator_stats.h"
#include "heed/error.h"

namespace heed {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMinSlackBytes = size_t{64} << 20;

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
  std::map<size_t, std::vector<void*>> free_blocks;  // by size class, ascending
  AllocatorStats stats;

  // What the bytes held may reach: the in-use high-water mark plus the slack.
  size_t budget() const { return stats.peak_bytes_in_use + std::max(kMinSlackBytes, stats.peak_bytes_in_use / 16); }
  // Under the lock: takes cached blocks, largest classes first, until the bytes held fit the
  // budget; the caller frees them after unlocking.
  std::vector<std::pair<void*, size_t>> take_blocks_over_budget() {
    std::vector<std::pair<void*, size_t>> released;
    const auto over_budget = [&] { return stats.bytes_in_use + stats.bytes_cached > budget(); };
    for (auto it = free_blocks.rbegin(); it != free_blocks.rend() && over_budget(); ++it) {
      std::vector<void*>& blocks = it->second;  // (a class's list stays, possibly empty)
      while (!blocks.empty() && over_budget()) {
        released.emplace_back(blocks.back(), it->first);
        blocks.pop_back();
        stats.bytes_cached -= it->first;
      }
    }
    return released;
  }

  void* allocate(size_t n) {
    const size_t cls = size_class(n);
    std::vector<std::pair<void*, size_t>> released;
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
      released = take_blocks_over_budget();
    }
    for (const auto& [block, bytes] : released) kernels::cpu::system_free(block, bytes);
    void* p = kernels::cpu::system_allocate(cls);
    if (!p) {
      release_cache();  // try again with the cache returned to the system
      p = kernels::cpu::system_allocate(cls);
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
      free_blocks[cls].push_back(p);  // the bytes held do not change: in use -> cached
      stats.bytes_cached += cls;
    }
  }

  void release_cache() {
    std::map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex);
      blocks.swap(free_blocks);
      stats.bytes_cached = 0;
    }
    for (auto& [cls, list] : blocks)
      for (void* p : list) kernels::cpu::system_free(p, cls);
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
#if defined(__SANITIZE_ADDRESS__)
#define HEED_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEED_UNDER_ASAN 1
#endif
#endif

bool huge_pages_enabled() {
  static const bool enabled = [] {
#if defined(HEED_UNDER_ASAN)
    return false;
#else
    const char* setting = std::getenv("HEED_HUGE_PAGES");
    return !(setting != nullptr && std::strcmp(setting, "0") == 0);
#endif
  }();
  return enabled;
}

namespace {
constexpr size_t kPageBytes = 4096;
size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }
bool mapped_on_its_own(size_t bytes) { return bytes >= kHugePageBytes && huge_pages_enabled(); }
}  // namespace

void* system_allocate(size_t bytes) {
  if (!mapped_on_its_own(bytes)) return std::aligned_alloc(kAlignment, round_up(bytes, kAlignment));
  // Map 2 MiB more than needed, keep the part that starts on a 2 MiB boundary, unmap the rest.
  const size_t length = round_up(bytes, kPageBytes), mapped = length + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t raw_start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(raw_start, kHugePageBytes);
  if (start > raw_start) munmap(raw, start - raw_start);
  if (raw_start + mapped > start + length)
    munmap(reinterpret_cast<void*>(start + length), raw_start + mapped - start - length);
  // Advice only: where transparent huge pages are off (or the kernel refuses), 4 KiB pages it is.
  (void)madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void system_free(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (!mapped_on_its_own(bytes)) return std::free(p);
  munmap(p, round_up(bytes, kPageBytes));
}

void* allocate(size_t nbytes) { return heed::allocator().allocate(nbytes); }
void deallocate(void* ptr, size_t nbytes) { heed::allocator().deallocate(ptr, nbytes); }
void copy_host(void* dst, const void* src, size_t nbytes, bool /*to_host*/) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
}  // namespace kernels::cpu

}  // namespace heed
