// framework/src/train/clip.cpp — clip_grad_norm_ and clip_grad_value_.
//
// Invariants: norms accumulate in float64 on the gradients' devices through the global_norm
// kernel (one call, so one host synchronisation, per device); a gradient tensor shared by
// several parameters is counted and scaled once; non-finite norms never modify a gradient.
#include "heed/clip.h"

#include <algorithm>
#include <set>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "kernels/kernels.h"

namespace heed::nn {

namespace {

// The distinct defined gradients of `params`.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    HEED_CHECK(params[i].defined(), op, "parameter {} is an undefined Tensor", i);
    Tensor grad = params[i].grad();
    if (!grad.defined() || !seen.insert(grad.impl_ptr().get()).second) continue;
    grads.push_back(grad);
  }
  return grads;
}

// The global norm of `grads` (distinct, defined) on their devices, for the op named `op`.
double norm_of(const std::vector<Tensor>& grads, double norm_type, const char* op) {
  HEED_CHECK(norm_type > 0.0, op, "norm_type must be > 0 or INFINITY, got {}", norm_type);
  NoGradGuard no_grad;
  const bool max_norm_type = std::isinf(norm_type);
  // One global_norm kernel call per device (one host synchronisation per device, not per
  // tensor); the per-device results combine as partial sums (or maxima).
  double total = 0.0;
  std::vector<Device> devices;
  for (const Tensor& grad : grads)
    if (std::find(devices.begin(), devices.end(), grad.device()) == devices.end()) devices.push_back(grad.device());
  for (const Device& device : devices) {
    std::vector<Tensor> keep_alive;
    std::vector<kernels::NormInput> inputs;
    for (const Tensor& grad : grads) {
      if (grad.device() != device || grad.numel() == 0) continue;
      HEED_CHECK(is_floating(grad.dtype()), op, "gradient of dtype {} (shape {}) is not floating-point",
                 dtype_name(grad.dtype()), shape_str(grad.shape()));
      keep_alive.push_back(grad.is_contiguous() ? grad.detach()
                                                : grad.detach().contiguous());  // no op call when not needed
      inputs.push_back({keep_alive.back().raw_data(), grad.dtype(), grad.numel()});
    }
    if (inputs.empty()) continue;
    const double part = HEED_KERNEL(device, global_norm)(inputs.data(), static_cast<int>(inputs.size()), norm_type);
    total = max_norm_type ? ((std::isnan(part) || part > total) ? part : total) : total + part;
  }
  if (!max_norm_type) {
    if (norm_type == 2.0)
      total = std::sqrt(total);
    else if (norm_type != 1.0)
      total = std::pow(total, 1.0 / norm_type);
  }
  return total;
}

}  // namespace

double total_grad_norm(const std::vector<Tensor>& params, double norm_type) {
  constexpr const char* kOp = "total_grad_norm";
  return norm_of(gradients_of(params, kOp), norm_type, kOp);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  constexpr const char* kOp = "clip_grad_norm_";
  HEED_CHECK(max_norm >= 0.0, kOp, "max_norm must be >= 0, got {}", max_norm);
  const std::vector<Tensor> grads = gradients_of(params, kOp);
  const double total = norm_of(grads, norm_type, kOp);
  NoGradGuard no_grad;
  if (!std::isfinite(total)) {
    HEED_CHECK(!error_if_nonfinite, kOp,
               "the total norm of order {} of the gradients of {} parameters is non-finite ({}), "
               "so they cannot be clipped; set error_if_nonfinite=false to skip clipping",
               norm_type, params.size(), total);
    return total;
  }
  if (total > max_norm) {
    const double coefficient = max_norm / (total + 1e-6);
    for (const Tensor& grad : grads) {
      Tensor g = grad;
      g.mul_(coefficient);
    }
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  constexpr const char* kOp = "clip_grad_value_";
  HEED_CHECK(clip_value >= 0.0, kOp, "clip_value must be >= 0, got {}", clip_value);
  const std::vector<Tensor> grads = gradients_of(params, kOp);
  NoGradGuard no_grad;
  for (const Tensor& grad : grads) {
    if (grad.numel() == 0) continue;
    Tensor g = grad;
    g.copy_(clamp(grad.detach(), -clip_value, clip_value));
  }
}

}  // namespace heed::nn
