// heed/grad_scaler.h — dynamic loss scaling (namespace heed::amp), PyTorch's
// torch.amp.GradScaler. It sits beside the optimizers (it steps them); autocast itself is in
// heed/autocast.h. A training step with both:
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
// Invariants: gradients are changed only in place, under NoGradGuard, by unscale_ (which step
// calls when it was not done); step() calls optimizer.step() only when every gradient of that
// optimizer was finite; a disabled scaler passes everything through; load_state_dict changes
// nothing unless every field fits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>

#include "heed/tensor.h"

namespace heed::optim {
class Optimizer;
}  // namespace heed::optim

namespace heed::amp {

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
