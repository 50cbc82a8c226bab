// framework/src/ops/reduce.cpp — sum, mean, var, max/min, argmax/argmin and sum_to, each
// forward beside its backward.
//
// Invariants: a reduction is planned as a contiguous (outer, extent, inner) block; when the
// reduced dims are not one contiguous run, the input is permuted so they come last. Every
// output element is reduced by one thread in a fixed order, so results do not depend on the
// thread count. Under amp::Autocast, sum/mean/var of 16-bit inputs run in float32 and return
// float32; sum_to (the gradient helper) never autocasts.
#include <algorithm>
#include <cmath>
#include <limits>

#include "heed/autocast.h"
#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

using kernels::ReduceOp;

namespace {

struct ReducePlan {
  Tensor input;  // contiguous, laid out as (outer, extent, inner)
  int64_t outer = 1, extent = 1, inner = 1;
  Dims out_shape;   // without the reduced dims
  Dims keep_shape;  // with the reduced dims kept as size 1
  std::vector<bool> reduced;
};

ReducePlan plan_reduction(const Tensor& x, const Dims& dims, const char* op) {
  detail::check_defined(x, op);
  const int n = x.dim();
  ReducePlan plan;
  plan.reduced.assign(std::max(n, 1), dims.empty());
  for (int64_t d : dims) {
    const int k = normalize_dim(d, n, op);
    HEED_CHECK(!(plan.reduced[k] && !dims.empty()), op, "dim {} appears twice in {}", k, shape_str(dims));
    plan.reduced[k] = true;
  }
  int lo = n, hi = -1;
  for (int i = 0; i < n; ++i) {
    if (plan.reduced[i]) {
      lo = std::min(lo, i);
      hi = std::max(hi, i);
      plan.keep_shape.push_back(1);
    } else {
      plan.out_shape.push_back(x.shape()[i]);
      plan.keep_shape.push_back(x.shape()[i]);
    }
  }
  if (n == 0) {  // a scalar: one element, nothing to permute
    plan.input = x.detach();
    return plan;
  }
  bool one_run = true;
  for (int i = lo; i <= hi; ++i) one_run = one_run && plan.reduced[i];
  if (one_run && x.is_contiguous()) {
    plan.input = x.detach();
    plan.outer = detail::prod(x.shape(), 0, lo);
    plan.extent = detail::prod(x.shape(), lo, hi + 1);
    plan.inner = detail::prod(x.shape(), hi + 1, n);
    return plan;
  }
  Dims order;
  for (int i = 0; i < n; ++i)
    if (!plan.reduced[i]) order.push_back(i);
  for (int i = 0; i < n; ++i)
    if (plan.reduced[i]) order.push_back(i);
  plan.input = x.detach().permute(order).contiguous();
  plan.outer = shape_numel(plan.out_shape);
  plan.extent = 1;
  for (int i = 0; i < n; ++i)
    if (plan.reduced[i]) plan.extent *= x.shape()[i];
  plan.inner = 1;
  return plan;
}

// Runs a reduction kernel; `indices` (int64, out-shaped) is filled for Max/Min when defined.
Tensor run_reduce(ReduceOp op, const ReducePlan& plan, DType out_dtype, Tensor* indices, const char* name) {
  const Tensor& in = plan.input;
  Tensor out = detail::make_empty(plan.out_shape, out_dtype, in.device());
  if (indices) *indices = detail::make_empty(plan.out_shape, kInt64, in.device());
  if (out.numel() == 0) return out;
  if (plan.extent == 0) {
    HEED_CHECK(op == ReduceOp::Sum, name, "cannot reduce over an empty dimension (input shape {})",
               shape_str(in.shape()));
    out.fill_(0.0);
    return out;
  }
  HEED_KERNEL(in.device(), reduce)
  (op, in.dtype(), in.raw_data(), plan.outer, plan.extent, plan.inner, out.raw_data(),
   indices ? indices->data_ptr<int64_t>() : nullptr);
  return out;
}

DType sum_dtype(DType t) { return (t == kBool || is_integral(t)) ? kInt64 : t; }

// Under autocast, reductions of 16-bit inputs run in (and return) float32.
bool autocast_to_float32(const Tensor& x) { return amp::autocast_enabled() && x.defined() && is_half(x.dtype()); }

// sum and mean without autocast: gradient helpers (sum_to, var's backward) keep dtypes even
// when backward runs inside an autocast scope.
Tensor sum_impl(const Tensor& x, const Dims& dims, bool keepdim) {
  ReducePlan plan = plan_reduction(x, dims, "sum");
  Tensor out = run_reduce(ReduceOp::Sum, plan, sum_dtype(x.dtype()), nullptr, "sum");
  if (keepdim) out = out.view(plan.keep_shape);
  if (any_requires_grad({&x})) {
    const Dims in_shape = x.shape(), keep_shape = plan.keep_shape;
    detail::record("sum", {&x}, out, [in_shape, keep_shape](const Tensor& g) -> std::vector<Tensor> {
      return {g.reshape(keep_shape).expand(in_shape).contiguous()};
    });
  }
  return out;
}

Tensor mean_impl(const Tensor& x, const Dims& dims, bool keepdim) {
  detail::check_defined(x, "mean");
  const Tensor xf = is_floating(x.dtype()) ? x : x.to(kFloat32);
  ReducePlan plan = plan_reduction(xf, dims, "mean");
  const int64_t count = plan.extent;
  Tensor total = sum_impl(xf, dims, keepdim);
  return mul_scalar(total, count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / count);
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  HEED_PROFILE_OP("sum", &x);
  if (autocast_to_float32(x)) [[unlikely]]
    return sum_impl(amp::cast_to_float32(x), dims, keepdim);
  return sum_impl(x, dims, keepdim);
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  HEED_PROFILE_OP("mean", &x);
  if (autocast_to_float32(x)) [[unlikely]]
    return mean_impl(amp::cast_to_float32(x), dims, keepdim);
  return mean_impl(x, dims, keepdim);
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor var(const Tensor& x, const Dims& dims, bool keepdim, double correction) {
  HEED_PROFILE_OP("var", &x);
  detail::check_defined(x, "var");
  detail::check_floating(x, "var");
  if (autocast_to_float32(x)) [[unlikely]]
    return var(amp::cast_to_float32(x), dims, keepdim, correction);
  ReducePlan plan = plan_reduction(x, dims, "var");
  Tensor out = detail::make_empty(plan.out_shape, x.dtype(), x.device());
  if (out.numel() > 0) HEED_KERNEL(x.device(), variance)
  (x.dtype(), plan.input.raw_data(), plan.outer, plan.extent, plan.inner, correction, out.raw_data());
  if (keepdim) out = out.view(plan.keep_shape);
  if (any_requires_grad({&x})) {
    SavedTensor sx(x, "var");
    const Dims keep_shape = plan.keep_shape;
    const Dims reduce_dims = dims;
    const double denom = static_cast<double>(plan.extent) - correction;
    detail::record("var", {&x}, out, [sx, keep_shape, reduce_dims, denom](const Tensor& g) -> std::vector<Tensor> {
      // d var / dx_i = 2 (x_i - mean) / (N - correction)
      Tensor x = sx.get();
      Tensor centered = x - mean_impl(x, reduce_dims, true);
      return {g.reshape(keep_shape) * centered * (2.0 / denom)};
    });
  }
  return out;
}

// ---- max / min ------------------------------------------------------------------------------

namespace {

// Gradient of an extremum: g scattered to the winning positions (one per output element).
Tensor scatter_to_winners(const Tensor& g, const Tensor& indices, const Dims& in_shape, int dim) {
  Tensor grad = zeros(in_shape, g.options());
  const Tensor gc = g.contiguous(), ic = indices.contiguous();
  if (dim < 0) {  // a full reduction: index into the flattened input
    HEED_KERNEL(g.device(), index_add)
    (g.dtype(), grad.raw_data(), 1, shape_numel(in_shape), 1, ic.data_ptr<int64_t>(), 1, gc.raw_data());
    return grad;
  }
  const int64_t outer = detail::prod(in_shape, 0, dim), extent = in_shape[dim],
                inner = detail::prod(in_shape, dim + 1, in_shape.size());
  HEED_KERNEL(g.device(), scatter_add)
  (g.dtype(), grad.raw_data(), outer, extent, inner, ic.data_ptr<int64_t>(), 1, gc.raw_data());
  return grad;
}

Tensor full_extremum(const Tensor& x, ReduceOp op, const char* name) {
  HEED_PROFILE_OP(name, &x);
  detail::check_defined(x, name);
  HEED_CHECK(x.numel() > 0, name, "cannot take the {} of an empty tensor (shape {})", name, shape_str(x.shape()));
  ReducePlan plan = plan_reduction(x.detach().contiguous().reshape({x.numel()}), {}, name);
  Tensor index;
  Tensor out = run_reduce(op, plan, x.dtype(), &index, name);
  if (any_requires_grad({&x})) {
    const Dims in_shape = x.shape();
    SavedTensor si(index, name);
    detail::record(detail::OpName::registered(name), {&x}, out, [in_shape, si](const Tensor& g) -> std::vector<Tensor> {
      return {scatter_to_winners(g, si.get(), in_shape, -1)};
    });
  }
  return out;
}

ValuesIndices dim_extremum(const Tensor& x, int64_t dim, bool keepdim, ReduceOp op, const char* name) {
  HEED_PROFILE_OP(name, &x);
  detail::check_defined(x, name);
  const int d = normalize_dim(dim, x.dim(), name);
  if (x.dim() > 0)
    HEED_CHECK(x.shape()[d] > 0, name, "cannot reduce over dim {} of size 0 (shape {})", d, shape_str(x.shape()));
  const Tensor src = x.detach().contiguous();
  ReducePlan plan = plan_reduction(src, {d}, name);
  Tensor index;
  Tensor values = run_reduce(op, plan, x.dtype(), &index, name);
  if (keepdim) {
    values = values.view(plan.keep_shape);
    index = index.view(plan.keep_shape);
  }
  if (any_requires_grad({&x})) {
    const Dims in_shape = x.shape();
    SavedTensor si(index, name);
    const int rd = x.dim() == 0 ? -1 : d;
    detail::record(detail::OpName::registered(name), {&x}, values,
                   [in_shape, si, rd](const Tensor& g) -> std::vector<Tensor> {
                     return {scatter_to_winners(g, si.get(), in_shape, rd)};
                   });
  }
  return {values, index};
}

}  // namespace

Tensor max(const Tensor& x) { return full_extremum(x, ReduceOp::Max, "max"); }
Tensor min(const Tensor& x) { return full_extremum(x, ReduceOp::Min, "min"); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return dim_extremum(x, dim, keepdim, ReduceOp::Max, "max");
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return dim_extremum(x, dim, keepdim, ReduceOp::Min, "min");
}

namespace {
Tensor arg_extremum(const Tensor& x, int64_t dim, bool keepdim, ReduceOp op, const char* name) {
  HEED_PROFILE_OP(name, &x);
  detail::check_defined(x, name);
  const int d = normalize_dim(dim, x.dim(), name);
  if (x.dim() > 0)
    HEED_CHECK(x.shape()[d] > 0, name, "cannot reduce over dim {} of size 0 (shape {})", d, shape_str(x.shape()));
  ReducePlan plan = plan_reduction(x.detach().contiguous(), {d}, name);
  Tensor out = run_reduce(op, plan, kInt64, nullptr, name);
  return keepdim ? out.view(plan.keep_shape) : out;
}
}  // namespace

Tensor argmax(const Tensor& x) {
  detail::check_defined(x, "argmax");
  HEED_CHECK(x.numel() > 0, "argmax", "cannot take the argmax of an empty tensor");
  return arg_extremum(x.detach().contiguous().reshape({x.numel()}), 0, false, ReduceOp::ArgMax, "argmax");
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum(x, dim, keepdim, ReduceOp::ArgMax, "argmax");
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum(x, dim, keepdim, ReduceOp::ArgMin, "argmin");
}

// ---- sum_to ---------------------------------------------------------------------------------

Tensor sum_to(const Tensor& x, const Dims& shape) {
  HEED_PROFILE_OP("sum_to", &x);
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.size();
  HEED_CHECK(lead >= 0, "sum_to", "cannot reduce shape {} to the larger shape {}", shape_str(x.shape()),
             shape_str(shape));
  Dims dims;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      dims.push_back(i);
    } else {
      HEED_CHECK(shape[i - lead] == x.shape()[i], "sum_to", "shape {} does not broadcast to {}", shape_str(shape),
                 shape_str(x.shape()));
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum_impl(x, dims, true).reshape(shape);
}

}  // namespace heed
