// framework/src/ops/gradcheck.cpp — finite-difference Jacobian check in float64.
//
// Invariants: the analytic Jacobian comes from one autograd::grad call per output element
// (a one-hot output gradient); the numeric one from central differences, perturbing each
// input element in place (raw memory, so no version bump) and restoring it exactly.
#include "heed/gradcheck.h"

#include <cmath>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

namespace {

// Address of element k (row-major over the view's shape) of a float64 tensor.
double* element_address(const Tensor& t, int64_t k) {
  int64_t offset = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    const int64_t coord = k % t.shape()[d];
    k /= t.shape()[d];
    offset += coord * t.strides()[d];
  }
  return static_cast<double*>(t.storage()->data()) + t.offset() + offset;
}

bool has_overlap(const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) return true;
  return false;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<int> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    detail::check_defined(t, "gradcheck");
    if (!t.requires_grad()) continue;
    HEED_CHECK(t.dtype() == kFloat64, "gradcheck", "input {} has dtype {}; gradcheck needs float64 inputs", i,
               dtype_name(t.dtype()));
    HEED_CHECK(t.device().is_cpu(), "gradcheck", "input {} is on {}; gradcheck runs on the CPU", i, t.device().str());
    HEED_CHECK(t.is_leaf(), "gradcheck", "input {} is not a leaf tensor", i);
    HEED_CHECK(!has_overlap(t), "gradcheck",
               "input {} (shape {}, strides {}) has overlapping elements; pass a contiguous copy", i,
               shape_str(t.shape()), shape_str(t.strides()));
    checked.push_back(static_cast<int>(i));
  }
  HEED_CHECK(!checked.empty(), "gradcheck", "no input requires grad");

  // Analytic Jacobian, one row per output element.
  Tensor out = fn(inputs);
  detail::check_defined(out, "gradcheck", "output");
  HEED_CHECK(out.dtype() == kFloat64, "gradcheck", "the function returned {}; expected a float64 output",
             dtype_name(out.dtype()));
  const int64_t n_out = out.numel();
  std::vector<Tensor> wrt;
  for (int i : checked) wrt.push_back(inputs[i]);
  // analytic[c][o * n_in + k]
  std::vector<std::vector<double>> analytic(checked.size());
  for (size_t c = 0; c < checked.size(); ++c)
    analytic[c].assign(static_cast<size_t>(n_out * inputs[checked[c]].numel()), 0.0);
  if (out.requires_grad()) {
    for (int64_t o = 0; o < n_out; ++o) {
      Tensor seed = zeros(out.shape(), kFloat64);
      *element_address(seed, o) = 1.0;
      std::vector<Tensor> grads = grad({out}, wrt, {seed}, /*retain_graph=*/true);
      for (size_t c = 0; c < checked.size(); ++c) {
        const std::vector<double> g = grads[c].to_vector<double>();
        const int64_t n_in = inputs[checked[c]].numel();
        for (int64_t k = 0; k < n_in; ++k) analytic[c][static_cast<size_t>(o * n_in + k)] = g[static_cast<size_t>(k)];
      }
    }
  }
  out = Tensor();  // release the graph

  // Numeric Jacobian, one column per input element; compare as we go.
  GradcheckResult result;
  double worst_score = -std::numeric_limits<double>::infinity();
  NoGradGuard no_grad;
  for (size_t c = 0; c < checked.size(); ++c) {
    const Tensor& t = inputs[checked[c]];
    const int64_t n_in = t.numel();
    for (int64_t k = 0; k < n_in; ++k) {
      double* p = element_address(t, k);
      const double saved = *p;
      *p = saved + options.eps;
      const std::vector<double> plus = fn(inputs).to_vector<double>();
      *p = saved - options.eps;
      const std::vector<double> minus = fn(inputs).to_vector<double>();
      *p = saved;
      for (int64_t o = 0; o < n_out; ++o) {
        const double numeric = (plus[static_cast<size_t>(o)] - minus[static_cast<size_t>(o)]) / (2.0 * options.eps);
        const double a = analytic[c][static_cast<size_t>(o * n_in + k)];
        const double abs_err = std::fabs(a - numeric);
        const double allowed = options.atol + options.rtol * std::fabs(numeric);
        const bool ok = abs_err <= allowed && std::isfinite(a) == std::isfinite(numeric);
        result.max_abs_error = std::max(result.max_abs_error, std::isnan(abs_err) ? INFINITY : abs_err);
        const double rel = abs_err / std::max(std::fabs(numeric), options.atol);
        result.max_rel_error = std::max(result.max_rel_error, std::isnan(rel) ? INFINITY : rel);
        const double score = std::isnan(abs_err) ? INFINITY : abs_err - allowed;
        if (!ok) result.passed = false;
        if (score > worst_score) {
          worst_score = score;
          result.worst_input = checked[c];
          result.worst_input_element = k;
          result.worst_output_element = o;
          result.worst_analytic = a;
          result.worst_numeric = numeric;
        }
      }
    }
  }
  if (!result.passed) {
    result.message = fmt::format(
        "d(output[{}])/d(input {}[{}]): backward gives {:.10g}, finite differences give {:.10g} (|error| {:.3g}, "
        "allowed {:.3g})",
        result.worst_output_element, result.worst_input, result.worst_input_element, result.worst_analytic,
        result.worst_numeric, std::fabs(result.worst_analytic - result.worst_numeric),
        options.atol + options.rtol * std::fabs(result.worst_numeric));
  }
  return result;
}

}  // namespace heed
