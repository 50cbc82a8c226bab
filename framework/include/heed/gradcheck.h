// heed/gradcheck.h — finite-difference gradient checking in float64.
//
// gradcheck compares the full Jacobian of fn at `inputs`, computed column by column with
// central differences, against the one backward computes row by row (one backward per
// output element), and reports the worst entry. Inputs must be float64 leaves; those with
// requires_grad are checked.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "heed/tensor.h"

namespace heed {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool passed = true;
  double max_abs_error = 0.0;  // worst |analytic - numeric| over all Jacobian entries
  double max_rel_error = 0.0;  // worst |analytic - numeric| / max(|numeric|, tiny)
  // Where the worst entry sits (by the criterion |err| - rtol*|numeric|).
  int worst_input = -1;
  int64_t worst_input_element = -1;
  int64_t worst_output_element = -1;
  double worst_analytic = 0.0;
  double worst_numeric = 0.0;
  std::string message;  // human-readable summary of the worst entry when it failed
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace heed
