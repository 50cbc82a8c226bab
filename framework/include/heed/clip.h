// heed/clip.h — gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_) and the
// gradients' global norm (total_grad_norm).
//
// Invariants: only parameters with a defined gradient take part; gradients are changed in
// place under NoGradGuard (no autograd history). The total norm is accumulated in float64
// over every gradient, as if they were one vector.
#pragma once

#include <cmath>
#include <vector>

#include "heed/tensor.h"

namespace heed::nn {

// Returns the global norm of all gradients before clipping (norm_type p > 0, or INFINITY for
// the largest |g|; 0 when no parameter has a gradient). When that norm exceeds max_norm every
// gradient is scaled by max_norm / (norm + 1e-6). A non-finite norm (NaN/Inf gradients) is
// returned with the gradients left untouched, or raises heed::Error when error_if_nonfinite.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// The global norm of all gradients, as clip_grad_norm_ computes it, without changing them
// (torch.nn.utils.get_total_norm over the parameters' gradients): float64 accumulation, a
// gradient shared by several parameters counted once, 0 when no parameter has a gradient;
// non-finite gradients give a non-finite result.
double total_grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

// Clamps every gradient element to [-clip_value, clip_value] (NaN stays NaN).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace heed::nn
