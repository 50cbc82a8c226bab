// tests/test_memory.cpp — a training loop of 1,000 small steps holds flat memory: after a
// warm-up, heed's CPU allocator has exactly the same bytes in use after every step and makes
// no new system allocations (every tensor of a step is freed and its block reused), and the
// process's resident set (VmRSS from /proc/self/status) does not grow.
//
// Under AddressSanitizer freed memory sits in ASan's quarantine (it grows the resident set by
// design), so the VmRSS bound is checked only in non-ASan builds; the allocator checks, and
// LeakSanitizer at exit, cover that build. A second case checks the bound on the cache, a third
// that large blocks sit on 2 MiB boundaries (the huge pages of system_allocate).
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#define HEED_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEED_TEST_UNDER_ASAN 1
#endif
#endif

using namespace heed;

namespace {

// Resident set size in kB, or -1 where /proc is not available.
long resident_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

TEST_CASE("1,000 training steps hold a flat resident set and allocator footprint") {
  manual_seed(9);
  nn::TransformerLMOptions o;
  o.vocab = 17;
  o.d_model = 16;
  o.heads = 2;
  o.layers = 1;
  o.context = 8;
  o.dropout = 0.1;
  nn::TransformerLM model(o);
  optim::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  optim::WarmupCosineLR scheduler(optimizer, 10, 1000, 1e-4);

  auto step = [&] {
    const Tensor x = randint(0, o.vocab, {4, o.context});
    const Tensor y = randint(0, o.vocab, {4, o.context});
    Tensor loss = F::cross_entropy(model.forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    nn::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
    scheduler.step();
    return loss.item<double>();
  };

  constexpr int kWarmup = 100, kSteps = 1000;
  for (int i = 0; i < kWarmup; ++i) step();
  const AllocatorStats warm = cpu_allocator_stats();
  const long rss_warm = resident_kb();
  long rss_peak = rss_warm;
  std::vector<size_t> in_use_after_step;
  in_use_after_step.reserve(kSteps);
  for (int i = kWarmup; i < kSteps; ++i) {
    CHECK(std::isfinite(step()));
    in_use_after_step.push_back(cpu_allocator_stats().bytes_in_use);
    if (i % 100 == 99) rss_peak = std::max(rss_peak, resident_kb());
  }
  const AllocatorStats end = cpu_allocator_stats();
  const long rss_end = resident_kb();
  MESSAGE("allocator: ", warm.bytes_in_use, " bytes in use after warm-up, ", end.bytes_in_use, " at the end; ",
          end.system_allocations - warm.system_allocations, " system allocations after warm-up; VmRSS ", rss_warm,
          " kB -> ", rss_end, " kB (peak ", rss_peak, " kB)");

  // The same live tensors after every step: parameters, gradients, optimizer state.
  size_t changed = 0;
  for (size_t bytes : in_use_after_step) changed += bytes != warm.bytes_in_use;
  CHECK(changed == 0);
  // Steady state: every block comes from the allocator's cache.
  CHECK(end.system_allocations == warm.system_allocations);
  CHECK(end.peak_bytes_in_use == warm.peak_bytes_in_use);

#ifndef HEED_TEST_UNDER_ASAN
  REQUIRE(rss_warm > 0);
  // No growth beyond noise: a leak of even 1 kB per step would add ~900 kB here.
  CHECK(rss_peak - rss_warm < 512);
  CHECK(rss_end - rss_warm < 512);
#endif
}

TEST_CASE("the allocator's cache stays within the in-use high-water mark plus its slack") {
  // Blocks of ever new size classes, each freed before the next: an unbounded cache would keep
  // them all. Before each new block comes from the system, the cache gives back its largest
  // blocks until in use + cached fits the peak in use plus max(64 MB, peak / 16).
  const auto budget = [](const AllocatorStats& s) {
    return s.peak_bytes_in_use + std::max<size_t>(size_t{64} << 20, s.peak_bytes_in_use / 16);
  };
  size_t freed = 0;
  for (int64_t mb : {20, 24, 28, 40, 48, 56, 80, 96, 112, 160, 192, 224}) {
    {
      const Tensor block = empty({mb << 18});  // mb MB of float32
      freed += static_cast<size_t>(mb) << 20;
      const AllocatorStats s = cpu_allocator_stats();
      CHECK(s.bytes_in_use + s.bytes_cached <= budget(s));
    }
    const AllocatorStats s = cpu_allocator_stats();
    CHECK(s.bytes_in_use + s.bytes_cached <= budget(s));  // freeing moves bytes, adds none
  }
  const AllocatorStats end = cpu_allocator_stats();
  MESSAGE("freed ", freed >> 20, " MB in 12 classes; cached at the end ", end.bytes_cached >> 20, " MB, budget ",
          budget(end) >> 20, " MB");
  if (freed > budget(end)) CHECK(end.bytes_cached < freed);
  // A block of a size seen before still comes from the cache.
  const uint64_t hits = end.cache_hits;
  { const Tensor again = empty({int64_t{224} << 18}); }
  CHECK(cpu_allocator_stats().cache_hits == hits + 1);
}

TEST_CASE("blocks of 2 MiB and more sit on 2 MiB boundaries (huge pages), smaller ones on 64 bytes") {
  // system_allocate: a large block is mapped from a 2 MiB boundary and advised onto transparent
  // huge pages unless HEED_HUGE_PAGES=0 (or under AddressSanitizer); whether the kernel grants
  // them is the system's business, so only the alignment is checked.
  const bool huge = kernels::cpu::huge_pages_enabled();
  for (int64_t floats : {int64_t{3} << 18, int64_t{5} << 19, int64_t{1} << 20}) {  // 3, 10 and 4 MiB
    const Tensor block = ones({floats});
    const auto address = reinterpret_cast<uintptr_t>(block.data_ptr<float>());
    CAPTURE(floats);
    CHECK(address % 64 == 0);
    if (huge) CHECK(address % kernels::cpu::kHugePageBytes == 0);
    CHECK(block.sum().item<double>() == static_cast<double>(floats));  // every byte writable
  }
  for (int64_t floats : {int64_t{1}, int64_t{1000}, int64_t{1} << 18}) {  // under 2 MiB (1 MiB at most)
    const Tensor block = ones({floats});
    CHECK(reinterpret_cast<uintptr_t>(block.data_ptr<float>()) % 64 == 0);
  }
  if (!huge) MESSAGE("huge pages off (HEED_HUGE_PAGES=0 or AddressSanitizer): only the 64-byte alignment checked");
}
