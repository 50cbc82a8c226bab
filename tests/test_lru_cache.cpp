// tests/test_lru_cache.cpp — kernels/lru_cache.h, the bounded cache behind cuBLASLt's algorithm
// choices (kernels/cuda/gemm.cu): at most its capacity, the least recently used dropped first
// (a find counts as a use), an insert of a present key changes nothing, a smaller capacity trims
// at once; and concurrent use from several threads keeps those invariants.
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kernels/lru_cache.h"

using heed::kernels::LruCache;

TEST_CASE("LruCache: the least recently used entry goes first, a find counts as a use") {
  LruCache<int, std::string> cache(3);
  cache.insert(1, "a");
  cache.insert(2, "b");
  cache.insert(3, "c");
  CHECK(cache.size() == 3);
  std::string value;
  REQUIRE(cache.find(1, &value));  // 1 is now the most recently used: 2 is the oldest
  CHECK(value == "a");
  cache.insert(4, "d");
  CHECK(cache.size() == 3);
  CHECK_FALSE(cache.find(2, &value));
  CHECK(cache.find(1, &value));
  CHECK(cache.find(3, &value));
  CHECK(cache.find(4, &value));
  CHECK(value == "d");
  // Order now (most recent first): 4, 3, 1. Inserting a present key neither replaces its value
  // nor refreshes it.
  cache.insert(1, "changed");
  cache.insert(5, "e");  // drops 1, the least recently used
  CHECK_FALSE(cache.find(1, &value));
  CHECK(cache.find(3, &value));
  CHECK(value == "c");
  // A smaller capacity trims at once, keeping the most recent (3, found last; then 5).
  cache.set_capacity(2);
  CHECK(cache.capacity() == 2);
  CHECK(cache.size() == 2);
  CHECK(cache.find(3, &value));
  CHECK(cache.find(5, &value));
  CHECK_FALSE(cache.find(4, &value));
  cache.set_capacity(0);
  CHECK(cache.size() == 0);
  cache.insert(6, "f");
  CHECK(cache.size() == 0);
}

TEST_CASE("LruCache: several threads inserting and finding keep it within its capacity") {
  LruCache<int, int> cache(16);
  std::atomic<int> wrong{0}, found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache, &wrong, &found, t] {
      for (int i = 0; i < 2000; ++i) {
        // Every other access the thread's own hot key (kept: recently used), else one of 40
        // cold keys cycling through the 16 entries (dropped and inserted again).
        const int key = i % 2 == 0 ? t : 4 + (i * 7 + t) % 40;
        int value = -1;
        if (cache.find(key, &value)) {
          ++found;
          wrong += value != key * 3;
        } else {
          cache.insert(key, key * 3);
        }
        if (cache.size() > 16) ++wrong;
      }
    });
  for (std::thread& thread : threads) thread.join();
  CHECK(wrong == 0);
  CHECK(found > 0);  // the hot keys were found again
  CHECK(cache.size() == 16);
}
