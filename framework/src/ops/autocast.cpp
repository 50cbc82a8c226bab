// framework/src/ops/autocast.cpp — autocast state and the per-scope cast cache (see autocast.h).
//
// Invariants: all autocast state (enabled flag, dtype, scope depth, cast cache, counters) is
// thread-local; the cache only holds casts of float32 leaves that require grad, and an entry
// is used only while its source is alive, unchanged (same storage, geometry and version)
// and, when grad mode is on, still differentiable; it is emptied when the outermost scope
// exits.
#include "heed/autocast.h"

#include <map>
#include <memory>
#include <utility>

#include "heed/autograd.h"
#include "internal.h"

namespace heed::amp {

namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
  Dims shape, strides;
  int64_t offset = 0;
  Tensor cast;
};

struct ThreadState {
  bool enabled = false;
  DType dtype = kFloat16;
  int depth = 0;  // live Autocast scopes on this thread
  std::map<std::pair<const TensorImpl*, DType>, CacheEntry> cache;
  int64_t conversions = 0;
  int64_t hits = 0;
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

thread_local bool t_enabled = false;  // mirrors state().enabled for the cheap check

bool entry_valid(const CacheEntry& e, const Tensor& x) {
  if (e.source.lock() != x.impl_ptr()) return false;
  if (e.storage.lock() != x.storage()) return false;
  if (e.version != x.storage()->version()) return false;
  if (e.shape != x.shape() || e.strides != x.strides() || e.offset != x.offset()) return false;
  const std::shared_ptr<Node>& fn = e.cast.grad_fn();
  if (fn && fn->released()) return false;        // its graph was backpropagated already
  if (!fn && grad_mode_enabled()) return false;  // cached under no_grad: not differentiable
  return true;
}

Tensor convert(const Tensor& x, DType dtype) {
  ++state().conversions;
  return x.to(dtype);
}

}  // namespace

bool autocast_enabled() { return t_enabled; }

std::optional<DType> autocast_dtype() {
  if (!t_enabled) return std::nullopt;
  return state().dtype;
}

Autocast::Autocast(std::optional<DType> dtype) {
  HEED_CHECK(!dtype || *dtype == kFloat16 || *dtype == kBFloat16, "amp::Autocast",
             "the autocast dtype must be float16 or bfloat16 (or std::nullopt to disable), got {}", dtype_name(*dtype));
  ThreadState& s = state();
  previous_enabled_ = s.enabled;
  previous_dtype_ = s.dtype;
  s.enabled = dtype.has_value();
  if (dtype) s.dtype = *dtype;
  t_enabled = s.enabled;
  ++s.depth;
}

Autocast::~Autocast() {
  ThreadState& s = state();
  s.enabled = previous_enabled_;
  s.dtype = previous_dtype_;
  t_enabled = s.enabled;
  if (--s.depth == 0) s.cache.clear();
}

Tensor cast_to_autocast_dtype(const Tensor& x) {
  if (!t_enabled || !x.defined()) return x;
  const DType target = state().dtype;
  const DType from = x.dtype();
  if (!is_floating(from) || from == kFloat64 || from == target) return x;
  const bool cacheable = from == kFloat32 && x.is_leaf() && x.requires_grad();
  if (!cacheable) return convert(x, target);
  ThreadState& s = state();
  const auto key = std::make_pair(x.impl_ptr().get(), target);
  auto it = s.cache.find(key);
  if (it != s.cache.end() && entry_valid(it->second, x)) {
    ++s.hits;
    return it->second.cast;
  }
  CacheEntry e;
  e.source = x.impl_ptr();
  e.storage = x.storage();
  e.version = x.storage()->version();
  e.shape = x.shape();
  e.strides = x.strides();
  e.offset = x.offset();
  e.cast = convert(x, target);
  Tensor cast = e.cast;
  s.cache[key] = std::move(e);
  return cast;
}

Tensor cast_to_float32(const Tensor& x) {
  if (!x.defined() || !is_half(x.dtype())) return x;
  return x.to(kFloat32);
}

CastCacheStats cast_cache_stats() {
  const ThreadState& s = state();
  return {s.conversions, s.hits, static_cast<int64_t>(s.cache.size())};
}

void reset_cast_cache_stats() {
  state().conversions = 0;
  state().hits = 0;
}

void clear_cast_cache() { state().cache.clear(); }

}  // namespace heed::amp
