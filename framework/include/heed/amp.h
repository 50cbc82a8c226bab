// heed/amp.h — automatic mixed precision: the Autocast scope and dynamic loss scaling
// (namespace heed::amp), PyTorch's torch.autocast and torch.amp.GradScaler.
//
//   amp::GradScaler scaler;                       // fp16; bf16 can use {.enabled = false}
//   for (...) {
//     Tensor loss;
//     {
//       amp::Autocast autocast(kFloat16);        // forward pass and loss only
//       loss = F::cross_entropy(model.forward(x), y);
//     }
//     optimizer.zero_grad();
//     scaler.scale(loss).backward();
//     scaler.unscale_(optimizer);                 // before clipping
//     nn::clip_grad_norm_(model.parameters(), 1.0);
//     scaler.step(optimizer);                     // skipped when a gradient is Inf/NaN
//     scaler.update();
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
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>

#include "heed/dtype.h"
#include "heed/tensor.h"

namespace heed::optim {
class Optimizer;
}  // namespace heed::optim

namespace heed::amp {

// ---- autocast -------------------------------------------------------------------------------

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

// ---- dynamic loss scaling -------------------------------------------------------------------

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
  bool enabled = true;             // false: every method is a pass-through
  // Several processes: maps this process's found-Inf flag to the flag every rank agrees on
  // (dist::found_inf_agreement(group) does an all_reduce max), so that all ranks skip the
  // same steps and keep the same scale. Called once per unscale_, collectively.
  std::function<bool(bool found_inf)> found_inf_agreement = nullptr;
};

// PyTorch's GradScaler for one or more optimizers. Per iteration: scale(loss).backward(),
// optionally unscale_(opt) (e.g. before clipping), step(opt), then update() once.
//  * unscale_ multiplies every gradient of the optimizer's groups by 1/scale in place
//    (float32/float64 gradients; 16-bit gradients are refused, as in PyTorch) and records
//    whether any is Inf/NaN; at most once per optimizer between updates.
//  * step unscales if that was not done and calls optimizer.step() only when every gradient
//    was finite; returns whether it stepped.
//  * update: an Inf/NaN in any optimizer since the last update multiplies the scale by
//    backoff_factor and restarts the growth count; otherwise, after growth_interval clean
//    updates in a row, the scale is multiplied by growth_factor.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  Tensor scale(const Tensor& loss) const;  // loss * scale (loss itself when disabled)
  void unscale_(optim::Optimizer& optimizer);
  bool step(optim::Optimizer& optimizer);
  void update();

  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  // Whether unscale_/step of `optimizer` found an Inf/NaN gradient since the last update.
  bool found_inf(const optim::Optimizer& optimizer) const;

  // {"enabled", "scale", "growth_factor", "backoff_factor", "growth_interval",
  //  "growth_tracker"}; load checks every field and changes nothing unless all fit.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  struct PerOptimizer {
    bool unscaled = false;
    bool stepped = false;
    bool found_inf = false;
  };
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace heed::amp
