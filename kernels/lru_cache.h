// kernels/lru_cache.h — a small thread-safe map of at most `capacity` entries that drops the
// least recently used one first (cuBLASLt's algorithm choices in kernels/cuda/gemm.cu).
//
// Invariants: size() <= capacity() after every call; find() marks the entry it returns as the
// most recently used, insert() of a new key makes it the most recently used and of a key already
// present changes nothing (another thread computed the same answer); every call takes the lock.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <mutex>
#include <utility>

namespace heed::kernels {

template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The cached value in *value, marked most recently used; false when the key is not cached.
  bool find(const Key& key, Value* value) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = index_.find(key);
    if (found == index_.end()) return false;
    entries_.splice(entries_.begin(), entries_, found->second);
    *value = found->second->second;
    return true;
  }

  void insert(const Key& key, const Value& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index_.count(key)) return;
    entries_.emplace_front(key, value);
    index_.emplace(key, entries_.begin());
    trim();
  }

  // At most `capacity` entries from now on (the least recently used dropped at once).
  void set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    trim();
  }

  size_t capacity() {
    std::lock_guard<std::mutex> lock(mutex_);
    return capacity_;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  void trim() {
    while (entries_.size() > capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
  }

  std::mutex mutex_;
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;  // the most recently used first
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace heed::kernels
