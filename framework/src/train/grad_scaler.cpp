// framework/src/train/grad_scaler.cpp — GradScaler, dynamic loss scaling (see grad_scaler.h).
//
// Invariants: gradients change only in place under NoGradGuard; a gradient is changed only
// after every gradient of the optimizer was checked.
#include "heed/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "heed/autograd.h"
#include "heed/json_read.h"
#include "heed/ops.h"
#include "heed/optim.h"
#include "internal.h"

namespace heed::amp {

namespace {

void check_options(const GradScalerOptions& o, const char* op) {
  HEED_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0, op, "init_scale must be finite and positive, got {}",
             o.init_scale);
  HEED_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0, op,
             "growth_factor must be finite and > 1, got {}", o.growth_factor);
  HEED_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, op, "backoff_factor must be in (0, 1), got {}",
             o.backoff_factor);
  HEED_CHECK(o.growth_interval > 0, op, "growth_interval must be positive, got {}", o.growth_interval);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  check_options(options_, "amp::GradScaler");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  detail::check_defined(loss, "amp::GradScaler::scale", "loss");
  if (!options_.enabled) return loss;
  detail::check_floating(loss, "amp::GradScaler::scale");
  return mul_scalar(loss, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  const char* op = "amp::GradScaler::unscale_";
  if (!options_.enabled) return;
  PerOptimizer& st = per_optimizer_[&optimizer];
  HEED_CHECK(!st.unscaled, op, "unscale_() was already called on this optimizer since the last update()");
  HEED_CHECK(!st.stepped, op, "step() was already called on this optimizer since the last update()");
  // Validate every gradient before changing any.
  std::vector<Tensor> grads;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = groups[g].params[i];
      if (!p.defined()) continue;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      HEED_CHECK(grad.dtype() == kFloat32 || grad.dtype() == kFloat64, op,
                 "parameter {} of group {} (shape {}) has a {} gradient; keep float32 master "
                 "weights (autocast casts them), 16-bit gradients cannot be unscaled safely",
                 i, g, shape_str(p.shape()), dtype_name(grad.dtype()));
      grads.push_back(grad);
    }
  }
  NoGradGuard no_grad;
  const double inv_scale = 1.0 / scale_;
  // One non-finite probe per device: sum(g * 0) is NaN exactly when some element is Inf or
  // NaN; the probes are read back once at the end, not per gradient.
  std::vector<std::pair<Device, Tensor>> probes;
  for (Tensor& grad : grads) {
    grad.mul_(inv_scale);
    const Tensor probe = sum(mul_scalar(grad, 0.0)).to(kFloat64);
    auto it = std::find_if(probes.begin(), probes.end(), [&](const auto& p) { return p.first == grad.device(); });
    if (it == probes.end())
      probes.emplace_back(grad.device(), probe);
    else
      it->second = it->second + probe;
  }
  bool found = false;
  for (const auto& [device, probe] : probes) found = found || !std::isfinite(probe.item<double>());
  if (options_.found_inf_agreement) found = options_.found_inf_agreement(found);
  st.unscaled = true;
  st.found_inf = found;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  HEED_CHECK(!per_optimizer_[&optimizer].stepped, "amp::GradScaler::step",
             "step() was already called on this optimizer since the last update()");
  if (!per_optimizer_[&optimizer].unscaled) unscale_(optimizer);
  PerOptimizer& st = per_optimizer_[&optimizer];
  st.stepped = true;
  if (st.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  HEED_CHECK(!per_optimizer_.empty(), "amp::GradScaler::update",
             "no unscale_() or step() was recorded since the last update(); call step(optimizer) "
             "first");
  bool found = false;
  for (const auto& [opt, st] : per_optimizer_) found = found || st.found_inf;
  if (found) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

bool GradScaler::found_inf(const optim::Optimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  return it != per_optimizer_.end() && it->second.found_inf;
}

nlohmann::json GradScaler::state_dict() const {
  return {{"enabled", options_.enabled},
          {"scale", scale_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval},
          {"growth_tracker", growth_tracker_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  const char* op = "amp::GradScaler::load_state_dict";
  const io::JsonFields fields(state, op, "loss scaler state");
  const bool enabled = fields.boolean("enabled");
  HEED_CHECK(enabled == options_.enabled, op, "the state comes from {} scaler but this scaler is {}",
             enabled ? "an enabled" : "a disabled", options_.enabled ? "enabled" : "disabled");
  GradScalerOptions o = options_;
  o.init_scale = fields.number("scale");
  o.growth_factor = fields.number("growth_factor");
  o.backoff_factor = fields.number("backoff_factor");
  o.growth_interval = fields.integer("growth_interval");
  check_options(o, op);
  const int64_t tracker = fields.integer("growth_tracker");
  HEED_CHECK(tracker >= 0 && tracker < o.growth_interval, op,
             "growth_tracker must be in [0, growth_interval = {}), got {}", o.growth_interval, tracker);
  const double scale = o.init_scale;
  o.init_scale = options_.init_scale;  // the option stays; the current scale is restored
  options_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
  per_optimizer_.clear();
}

}  // namespace heed::amp
