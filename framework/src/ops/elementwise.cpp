// framework/src/ops/elementwise.cpp — element-wise ops with broadcasting; each forward is
// followed by its backward.
//
// Invariants: inputs are promoted to a common dtype (integers to float32 for float-only
// math); gradients are reduced back to each input's shape (sum_to) and dtype; the backward
// closures capture SavedTensors only.
#include <cmath>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

using kernels::BinaryOp;
using kernels::UnaryOp;

namespace detail {

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_defined(a, name);
  check_defined(b, name);
  check_same_device(a, b, name);
  DType dtype = promote_types(a.dtype(), b.dtype());
  const kernels::OpDomain domain = kernels::binary_domain(op);
  if (domain == kernels::OpDomain::Bool) {
    HEED_CHECK(a.dtype() == kBool && b.dtype() == kBool, name, "expects bool tensors, got {} and {}",
               dtype_name(a.dtype()), dtype_name(b.dtype()));
  } else if (domain == kernels::OpDomain::Comparison) {
    if (dtype == kBool) dtype = kInt32;
  } else {
    HEED_CHECK(dtype != kBool, name, "arithmetic on bool tensors is not supported (shapes {} and {})",
               shape_str(a.shape()), shape_str(b.shape()));
    if (domain == kernels::OpDomain::Float && !is_floating(dtype)) dtype = kFloat32;
  }
  const Dims out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  const Tensor A = a.dtype() == dtype ? a : a.detach().to(dtype);
  const Tensor B = b.dtype() == dtype ? b : b.detach().to(dtype);
  const DType out_dtype = kernels::binary_gives_bool(op) ? kBool : dtype;
  Tensor out = make_empty(out_shape, out_dtype, a.device());
  if (out.numel() > 0)
    HEED_KERNEL(a.device(), binary)(op, broadcast_view(A, out_shape), broadcast_view(B, out_shape), view_of(out));
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double alpha, const char* name) {
  check_defined(x, name);
  DType dtype = x.dtype();
  const kernels::OpDomain domain = kernels::unary_domain(op);
  if (domain == kernels::OpDomain::Bool) {
    HEED_CHECK(dtype == kBool, name, "expects a bool tensor, got {}", dtype_name(dtype));
  } else {
    HEED_CHECK(dtype != kBool, name, "arithmetic on a bool tensor is not supported (shape {})", shape_str(x.shape()));
    // Integers stay integers where the result is exact (PyTorch promotes the rest to float):
    // the scalar must be a finite integer the dtype holds (inf, 1e10 on int32: float32).
    const double dtype_limit = dtype == kInt32 ? 2147483647.0 : 9223372036854774784.0;  // < 2^63
    const bool integral_alpha = std::isfinite(alpha) && alpha == std::floor(alpha) && std::fabs(alpha) <= dtype_limit;
    const bool integer_ok =
        domain == kernels::OpDomain::Numeric || (domain == kernels::OpDomain::NumericIntegralArg && integral_alpha);
    if (!is_floating(dtype) && !integer_ok) dtype = kFloat32;
  }
  const Tensor src = (dtype == x.dtype() ? x.detach() : x.detach().to(dtype)).contiguous();
  Tensor out = make_empty(x.shape(), dtype, x.device());
  if (out.numel() > 0) HEED_KERNEL(x.device(), unary)(op, dtype, src.raw_data(), out.raw_data(), out.numel(), alpha);
  return out;
}

}  // namespace detail

using detail::binary_raw;
using detail::unary_raw;

namespace {

// Gradient for an input of (shape, dtype) from a gradient of the broadcast result.
Tensor to_input(const Tensor& g, const Dims& shape, DType dtype) {
  Tensor r = sum_to(g, shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

struct InputInfo {
  Dims shape;
  DType dtype;
  bool needs_grad;
  explicit InputInfo(const Tensor& t) : shape(t.shape()), dtype(t.dtype()), needs_grad(t.requires_grad()) {}
};

}  // namespace

// ---- binary arithmetic ----------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  HEED_PROFILE_OP("add", &a, &b);
  Tensor out = binary_raw(BinaryOp::Add, a, alpha == 1.0 ? b : unary_raw(UnaryOp::MulScalar, b, alpha, "add"), "add");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    detail::record("add", {&a, &b}, out, [ia, ib, alpha](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(alpha == 1.0 ? g : g * alpha, ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  HEED_PROFILE_OP("sub", &a, &b);
  Tensor out = binary_raw(BinaryOp::Sub, a, b, "sub");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    detail::record("sub", {&a, &b}, out, [ia, ib](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(neg(g), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  HEED_PROFILE_OP("mul", &a, &b);
  Tensor out = binary_raw(BinaryOp::Mul, a, b, "mul");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sa(ib.needs_grad ? a : Tensor(), "mul"), sb(ia.needs_grad ? b : Tensor(), "mul");
    detail::record("mul", {&a, &b}, out, [ia, ib, sa, sb](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g * sb.get(), ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(g * sa.get(), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  HEED_PROFILE_OP("div", &a, &b);
  Tensor out = binary_raw(BinaryOp::Div, a, b, "div");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sb(b, "div"), sout(ib.needs_grad ? out : Tensor(), "div");
    detail::record("div", {&a, &b}, out, [ia, ib, sb, sout](const Tensor& g) -> std::vector<Tensor> {
      Tensor b = sb.get();
      Tensor ga = g / b;
      return {ia.needs_grad ? to_input(ga, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(neg(ga * sout.get()), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor pow(const Tensor& base, const Tensor& exponent) {
  HEED_PROFILE_OP("pow", &base, &exponent);
  Tensor out = binary_raw(BinaryOp::Pow, base, exponent, "pow");
  if (any_requires_grad({&base, &exponent})) {
    InputInfo ia(base), ib(exponent);
    SavedTensor sa(base, "pow"), sb(exponent, "pow"), sout(out, "pow");
    detail::record("pow", {&base, &exponent}, out, [ia, ib, sa, sb, sout](const Tensor& g) -> std::vector<Tensor> {
      Tensor a = sa.get(), b = sb.get();
      Tensor ga, gb;
      if (ia.needs_grad) ga = to_input(g * b * pow(a, b - 1.0), ia.shape, ia.dtype);
      if (ib.needs_grad) {
        // d/db a^b = a^b log a; define it as 0 where a == 0 (as PyTorch does) instead of NaN.
        Tensor log_a = where(eq(a, zeros({}, a.options())), zeros({}, a.options()), log(a));
        gb = to_input(g * sout.get() * log_a, ib.shape, ib.dtype);
      }
      return {ga, gb};
    });
  }
  return out;
}

namespace {
Tensor extremum(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  HEED_PROFILE_OP(name, &a, &b);
  Tensor out = binary_raw(op, a, b, name);
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sa(a, name), sb(b, name);
    const bool is_max = op == BinaryOp::Maximum;
    detail::record(detail::OpName::registered(name), {&a, &b}, out,
                   [ia, ib, sa, sb, is_max](const Tensor& g) -> std::vector<Tensor> {
                     // The winner takes the gradient; a tie splits it in half.
                     Tensor a = sa.get(), b = sb.get();
                     Tensor a_wins = is_max ? gt(a, b) : lt(a, b), tie = eq(a, b);
                     Tensor zero = zeros({}, g.options()), half_g = g * 0.5;
                     Tensor ga = where(a_wins, g, where(tie, half_g, zero));
                     Tensor gb = where(a_wins, zero, where(tie, half_g, g));
                     return {ia.needs_grad ? to_input(ga, ia.shape, ia.dtype) : Tensor(),
                             ib.needs_grad ? to_input(gb, ib.shape, ib.dtype) : Tensor()};
                   });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Maximum, a, b, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Minimum, a, b, "minimum"); }

// ---- unary: every op from its row of kernels/elementwise_table.h -------------------------

// A unary row's grad_in from g and what the row saved (unary_backward kernel), computed in the
// wider of g's and the saved tensor's dtypes (a float32 gradient reaching a float16 node is not
// rounded to float16 first), then converted to the input's dtype.
Tensor detail::unary_row_backward(UnaryOp op, const Tensor& g, const Tensor& saved, double alpha, DType in_dtype) {
  const DType dtype = saved.defined() ? promote_types(g.dtype(), saved.dtype()) : g.dtype();
  const Tensor grad = (g.dtype() == dtype ? g : g.to(dtype)).contiguous();
  const Tensor saved_value =
      !saved.defined() ? Tensor() : (saved.dtype() == dtype ? saved : saved.to(dtype)).contiguous();
  Tensor grad_in = detail::make_empty(grad.shape(), dtype, grad.device());
  if (grad_in.numel() > 0) HEED_KERNEL(grad.device(), unary_backward)
  (op, dtype, grad.raw_data(), saved_value.defined() ? saved_value.raw_data() : nullptr, grad_in.raw_data(),
   grad_in.numel(), alpha);
  return grad_in.dtype() == in_dtype ? grad_in : grad_in.to(in_dtype);
}

namespace {

// Forward of the row `op` on x with scalar alpha, and its autograd record as the row says
// (saves x, y or nothing; passthrough; not differentiable).
Tensor unary_from_table(UnaryOp op, const Tensor& x, double alpha) {
  HEED_PROFILE_OP(kernels::unary_op_name(op), &x);
  const char* name = kernels::unary_op_name(op);
  Tensor out = unary_raw(op, x, alpha, name);
  const kernels::OpGrad grad = kernels::unary_grad(op);
  if (!detail::table_row_records(grad) || !any_requires_grad({&x})) return out;
  const DType in_dtype = x.dtype();
  const detail::OpName op_name = detail::OpName::registered(name);
  if (grad == kernels::OpGrad::Passthrough) {
    detail::record(op_name, {&x}, out, [in_dtype](const Tensor& g) -> std::vector<Tensor> {
      return {g.dtype() == in_dtype ? g : g.to(in_dtype)};
    });
    return out;
  }
  // An integer input computed in float32 is saved as the float32 values the row saw.
  const Tensor saved_value = grad == kernels::OpGrad::SavesOutput ? out
                             : grad == kernels::OpGrad::SavesInput
                                 ? (x.dtype() == out.dtype() ? x : x.detach().to(out.dtype()))
                                 : Tensor();
  SavedTensor saved(saved_value, name);
  detail::record(op_name, {&x}, out, [op, saved, alpha, in_dtype](const Tensor& g) -> std::vector<Tensor> {
    return {detail::unary_row_backward(op, g, saved.defined() ? saved.get() : Tensor(), alpha, in_dtype)};
  });
  return out;
}

}  // namespace

// The public functions of HEED_UNARY_FUNCTION_OPS: `Tensor exp(const Tensor& x)` and so on.
#define HEED_DEFINE_UNARY_FUNCTION(Row, function) \
  Tensor function(const Tensor& x) { return unary_from_table(UnaryOp::Row, x, 0.0); }
HEED_UNARY_FUNCTION_OPS(HEED_DEFINE_UNARY_FUNCTION)
#undef HEED_DEFINE_UNARY_FUNCTION

// The rows with a scalar argument or a mode (HEED_UNARY_SPECIAL_OPS).
Tensor add_scalar(const Tensor& x, double value) { return unary_from_table(UnaryOp::AddScalar, x, value); }
Tensor mul_scalar(const Tensor& x, double value) { return unary_from_table(UnaryOp::MulScalar, x, value); }
Tensor rsub_scalar(const Tensor& x, double value) { return unary_from_table(UnaryOp::RSubScalar, x, value); }
Tensor rdiv_scalar(const Tensor& x, double value) { return unary_from_table(UnaryOp::RDivScalar, x, value); }
Tensor pow(const Tensor& base, double exponent) { return unary_from_table(UnaryOp::PowScalar, base, exponent); }
Tensor square(const Tensor& x) { return pow(x, 2.0); }
Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  return unary_from_table(approximation == GeluApproximation::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x, 0.0);
}

Tensor clamp(const Tensor& x, double min_value, double max_value) {
  HEED_PROFILE_OP("clamp", &x);
  HEED_CHECK(!(min_value > max_value), "clamp", "min {} is larger than max {}", min_value, max_value);
  Tensor out = unary_raw(UnaryOp::ClampMax, unary_raw(UnaryOp::ClampMin, x, min_value, "clamp"), max_value, "clamp");
  if (any_requires_grad({&x})) {
    SavedTensor sx(x, "clamp");
    detail::record("clamp", {&x}, out, [sx, min_value, max_value](const Tensor& g) -> std::vector<Tensor> {
      Tensor x = sx.get();
      const TensorOptions bound_options = TensorOptions(x.dtype()).device(x.device());
      Tensor inside =
          logical_and(ge(x, scalar_tensor(min_value, bound_options)), le(x, scalar_tensor(max_value, bound_options)));
      return {where(inside, g, zeros({}, g.options()))};
    });
  }
  return out;
}

// ---- comparisons and logic ------------------------------------------------------------------

namespace {
// A non-differentiable binary row (bool result), with its profiler span.
Tensor comparison_or_logic(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  HEED_PROFILE_OP(name, &a, &b);
  return binary_raw(op, a, b, name);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return comparison_or_logic(BinaryOp::Ge, a, b, "ge"); }
Tensor logical_not(const Tensor& x) { return unary_from_table(UnaryOp::LogicalNot, x, 0.0); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return comparison_or_logic(BinaryOp::LogicalAnd, a, b, "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return comparison_or_logic(BinaryOp::LogicalOr, a, b, "logical_or");
}

bool isfinite_all(const Tensor& x) {
  HEED_PROFILE_OP("isfinite_all", &x);
  detail::check_defined(x, "isfinite_all");
  if (!is_floating(x.dtype()) || x.numel() == 0) return true;
  NoGradGuard no_grad;
  // x * 0 is NaN exactly where x is NaN or +-Inf, and the sum of zeros stays 0.
  return std::isfinite(sum(mul_scalar(x, 0.0)).item<double>());
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  detail::check_defined(a, "allclose");
  detail::check_defined(b, "allclose");
  const Dims shape = broadcast_shapes(a.shape(), b.shape(), "allclose");
  std::vector<double> va = a.expand(shape).to_vector<double>(), vb = b.expand(shape).to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return false;
    if (va[i] == vb[i]) continue;
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

// ---- where / masked_fill --------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  HEED_PROFILE_OP("where", &condition, &a, &b);
  detail::check_defined(condition, "where", "condition");
  detail::check_defined(a, "where");
  detail::check_defined(b, "where");
  detail::check_same_device(condition, a, "where");
  detail::check_same_device(a, b, "where");
  HEED_CHECK(condition.dtype() == kBool, "where", "condition must be bool, got {} of shape {}",
             dtype_name(condition.dtype()), shape_str(condition.shape()));
  const DType dtype = promote_types(a.dtype(), b.dtype());
  const Dims out_shape = broadcast_shapes(condition.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  const Tensor A = a.dtype() == dtype ? a : a.detach().to(dtype);
  const Tensor B = b.dtype() == dtype ? b : b.detach().to(dtype);
  Tensor out = detail::make_empty(out_shape, dtype, a.device());
  if (out.numel() > 0) HEED_KERNEL(a.device(), where)
  (detail::broadcast_view(condition, out_shape), detail::broadcast_view(A, out_shape),
   detail::broadcast_view(B, out_shape), detail::view_of(out));
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sc(condition, "where");
    detail::record("where", {&a, &b}, out, [ia, ib, sc](const Tensor& g) -> std::vector<Tensor> {
      Tensor c = sc.get(), zero = zeros({}, g.options());
      return {ia.needs_grad ? to_input(where(c, g, zero), ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(where(c, zero, g), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  HEED_PROFILE_OP("masked_fill", &x, &mask);
  detail::check_defined(x, "masked_fill");
  detail::check_defined(mask, "masked_fill", "mask");
  detail::check_same_device(x, mask, "masked_fill");
  HEED_CHECK(mask.dtype() == kBool, "masked_fill", "mask must be bool, got {} of shape {}", dtype_name(mask.dtype()),
             shape_str(mask.shape()));
  HEED_CHECK(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(), "masked_fill",
             "mask of shape {} must broadcast to the input's shape {}", shape_str(mask.shape()), shape_str(x.shape()));
  Tensor fill_value = scalar_tensor(value, TensorOptions(x.dtype()).device(x.device()));
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) HEED_KERNEL(x.device(), where)
  (detail::broadcast_view(mask, x.shape()), detail::broadcast_view(fill_value, x.shape()), detail::view_of(x),
   detail::view_of(out));
  if (any_requires_grad({&x})) {
    SavedTensor sm(mask, "masked_fill");
    detail::record("masked_fill", {&x}, out, [sm](const Tensor& g) -> std::vector<Tensor> {
      return {where(sm.get(), zeros({}, g.options()), g)};
    });
  }
  return out;
}

// ---- operators ------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add_scalar(a, b); }
Tensor operator-(const Tensor& a, double b) { return add_scalar(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul_scalar(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul_scalar(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add_scalar(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub_scalar(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul_scalar(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv_scalar(b, a); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, double b) {
  return lt(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator>(const Tensor& a, double b) {
  return gt(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator<=(const Tensor& a, double b) {
  return le(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator>=(const Tensor& a, double b) {
  return ge(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator==(const Tensor& a, double b) {
  return eq(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator!=(const Tensor& a, double b) {
  return ne(a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())));
}
Tensor operator!(const Tensor& a) { return logical_not(a); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

}  // namespace heed
