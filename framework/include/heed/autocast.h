// heed/autocast.h — the Autocast scope (namespace heed::amp), PyTorch's torch.autocast: the
// thread-local autocast state and the cast helpers the ops call. It sits below the ops
// (depends on tensors and dtypes only); the loss scaler is in heed/grad_scaler.h.
//
//   {
//     amp::Autocast autocast(kFloat16);  // forward pass and loss only
//     loss = F::cross_entropy(model.forward(x), y);
//   }
//
// Invariants:
//  * Autocast state is thread-local. Scopes nest; each restores the state it found. An
//    Autocast constructed with std::nullopt disables autocast inside it.
//  * Under autocast, matmul and F::linear cast floating inputs (not float64) to the autocast
//    dtype and compute with float32 accumulation, so their outputs are 16-bit; attention
//    takes 16-bit q/k/v and keeps scores and softmax in float32 (see attention.h).
//    softmax, log_softmax, layer_norm, cross_entropy and sum/mean/var cast 16-bit inputs to
//    float32 and return float32. Every other op runs as without autocast (type promotion).
//  * Casts are differentiable (recorded `to_dtype` ops), so gradients reach the float32
//    master weights as float32. Casts of float32 leaves that require grad (parameters) are
//    cached: a weight used several times in a scope is converted once. A cache entry is
//    keyed on the TensorImpl, the storage version (an in-place update invalidates it) and
//    the target dtype; it is dropped when the outermost Autocast scope exits.
//  * The hooks cost one thread-local check when autocast is off. Gradient helpers used by
//    backward closures (sum_to, var's backward) never autocast, so backward keeps dtypes.
//  * Run backward outside the scope, as in PyTorch. Two forward passes in one scope share
//    the cached casts; backpropagate their losses together (or use separate scopes).
#pragma once

#include <cstdint>
#include <optional>

#include "heed/dtype.h"
#include "heed/tensor.h"

namespace heed::amp {

// Whether ops on this thread autocast now (one thread-local read).
bool autocast_enabled();
// The dtype of the innermost enabled scope, or std::nullopt when autocast is off.
std::optional<DType> autocast_dtype();

// RAII scope: autocast to `dtype` (kFloat16 or kBFloat16) until the destructor, or no
// autocast inside when `dtype` is std::nullopt. Other dtypes raise heed::Error.
class Autocast {
 public:
  explicit Autocast(std::optional<DType> dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

// The cast helpers the op implementations call (also usable by custom ops).
// To the autocast dtype: floating tensors other than float64 are converted (a float32
// parameter through the cache); others, and everything when autocast is off, pass through.
Tensor cast_to_autocast_dtype(const Tensor& x);
// To float32: 16-bit floating tensors are converted; others pass through.
Tensor cast_to_float32(const Tensor& x);

// Counters of this thread's cast cache, for tests and diagnostics.
struct CastCacheStats {
  int64_t conversions = 0;  // casts actually performed by cast_to_autocast_dtype
  int64_t hits = 0;         // casts answered from the cache
  int64_t entries = 0;      // entries held now
};
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();  // zeroes conversions and hits (entries stay)
void clear_cast_cache();        // drops every entry (done when the outermost scope exits)

}  // namespace heed::amp
