// framework/src/ops_elementwise.cpp — element-wise ops with broadcasting; each forward is
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
  const bool logical = op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
  if (logical) {
    HEED_CHECK(a.dtype() == kBool && b.dtype() == kBool, name, "expects bool tensors, got {} and {}",
               dtype_name(a.dtype()), dtype_name(b.dtype()));
  } else if (kernels::is_comparison(op)) {
    if (dtype == kBool) dtype = kInt32;
  } else {
    HEED_CHECK(dtype != kBool, name, "arithmetic on bool tensors is not supported (shapes {} and {})",
               shape_str(a.shape()), shape_str(b.shape()));
    if ((op == BinaryOp::Div || op == BinaryOp::Pow || op >= BinaryOp::ReluBackward) && !is_floating(dtype))
      dtype = kFloat32;
  }
  const Dims out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  const Tensor A = a.dtype() == dtype ? a : a.detach().to(dtype);
  const Tensor B = b.dtype() == dtype ? b : b.detach().to(dtype);
  const DType out_dtype = (kernels::is_comparison(op) || logical) ? kBool : dtype;
  Tensor out = make_empty(out_shape, out_dtype, a.device());
  if (out.numel() > 0)
    HEED_KERNEL(a.device(), binary)(op, broadcast_view(A, out_shape), broadcast_view(B, out_shape), view_of(out));
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double alpha, const char* name) {
  check_defined(x, name);
  DType dtype = x.dtype();
  if (op == UnaryOp::LogicalNot) {
    HEED_CHECK(dtype == kBool, name, "expects a bool tensor, got {}", dtype_name(dtype));
  } else {
    HEED_CHECK(dtype != kBool, name, "arithmetic on a bool tensor is not supported (shape {})", shape_str(x.shape()));
    // Integers stay integers where the result is exact (PyTorch promotes the rest to float).
    const bool integral_alpha = alpha == std::floor(alpha);
    const bool integer_ok = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Sign ||
                            ((op == UnaryOp::ClampMin || op == UnaryOp::ClampMax || op == UnaryOp::AddScalar ||
                              op == UnaryOp::MulScalar || op == UnaryOp::RSubScalar) &&
                             integral_alpha);
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
  Tensor out = binary_raw(BinaryOp::Add, a, alpha == 1.0 ? b : unary_raw(UnaryOp::MulScalar, b, alpha, "add"), "add");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    record_op("add", {&a, &b}, out, [ia, ib, alpha](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(alpha == 1.0 ? g : g * alpha, ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Sub, a, b, "sub");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    record_op("sub", {&a, &b}, out, [ia, ib](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(neg(g), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Mul, a, b, "mul");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sa(ib.needs_grad ? a : Tensor(), "mul"), sb(ia.needs_grad ? b : Tensor(), "mul");
    record_op("mul", {&a, &b}, out, [ia, ib, sa, sb](const Tensor& g) -> std::vector<Tensor> {
      return {ia.needs_grad ? to_input(g * sb.get(), ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(g * sa.get(), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(BinaryOp::Div, a, b, "div");
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sb(b, "div"), sout(ib.needs_grad ? out : Tensor(), "div");
    record_op("div", {&a, &b}, out, [ia, ib, sb, sout](const Tensor& g) -> std::vector<Tensor> {
      Tensor b = sb.get();
      Tensor ga = g / b;
      return {ia.needs_grad ? to_input(ga, ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(neg(ga * sout.get()), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor pow(const Tensor& base, const Tensor& exponent) {
  Tensor out = binary_raw(BinaryOp::Pow, base, exponent, "pow");
  if (any_requires_grad({&base, &exponent})) {
    InputInfo ia(base), ib(exponent);
    SavedTensor sa(base, "pow"), sb(exponent, "pow"), sout(out, "pow");
    record_op("pow", {&base, &exponent}, out, [ia, ib, sa, sb, sout](const Tensor& g) -> std::vector<Tensor> {
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
  Tensor out = binary_raw(op, a, b, name);
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sa(a, name), sb(b, name);
    const bool is_max = op == BinaryOp::Maximum;
    record_op(name, {&a, &b}, out, [ia, ib, sa, sb, is_max](const Tensor& g) -> std::vector<Tensor> {
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

// ---- unary ----------------------------------------------------------------------------------

namespace {
// Records a unary op whose gradient is f(g, saved) with `saved` the input or the output.
template <typename GradFn>
Tensor unary_op(UnaryOp op, const Tensor& x, double alpha, const char* name, bool save_output, GradFn grad_fn) {
  Tensor out = unary_raw(op, x, alpha, name);
  if (any_requires_grad({&x})) {
    const DType in_dtype = x.dtype();
    SavedTensor saved(save_output ? out : x, name);
    record_op(name, {&x}, out, [saved, grad_fn, in_dtype](const Tensor& g) -> std::vector<Tensor> {
      Tensor r = grad_fn(g, saved.get());
      return {r.dtype() == in_dtype ? r : r.to(in_dtype)};
    });
  }
  return out;
}
// Records a unary op whose gradient needs no saved tensor.
template <typename GradFn>
Tensor unary_op_nosave(UnaryOp op, const Tensor& x, double alpha, const char* name, GradFn grad_fn) {
  Tensor out = unary_raw(op, x, alpha, name);
  if (any_requires_grad({&x}))
    record_op(name, {&x}, out, [grad_fn](const Tensor& g) -> std::vector<Tensor> { return {grad_fn(g)}; });
  return out;
}
}  // namespace

Tensor add_scalar(const Tensor& x, double value) {
  return unary_op_nosave(UnaryOp::AddScalar, x, value, "add_scalar", [](const Tensor& g) { return g; });
}
Tensor mul_scalar(const Tensor& x, double value) {
  return unary_op_nosave(UnaryOp::MulScalar, x, value, "mul_scalar", [value](const Tensor& g) { return g * value; });
}
Tensor rsub_scalar(const Tensor& x, double value) {
  return unary_op_nosave(UnaryOp::RSubScalar, x, value, "rsub_scalar", [](const Tensor& g) { return neg(g); });
}
Tensor rdiv_scalar(const Tensor& x, double value) {
  // d/dx (v / x) = -v / x^2 = -out / x
  Tensor out = unary_raw(UnaryOp::RDivScalar, x, value, "rdiv_scalar");
  if (any_requires_grad({&x})) {
    SavedTensor sx(x, "rdiv_scalar"), sout(out, "rdiv_scalar");
    record_op("rdiv_scalar", {&x}, out,
              [sx, sout](const Tensor& g) -> std::vector<Tensor> { return {neg(g * sout.get() / sx.get())}; });
  }
  return out;
}
Tensor neg(const Tensor& x) {
  return unary_op_nosave(UnaryOp::Neg, x, 0, "neg", [](const Tensor& g) { return neg(g); });
}
Tensor exp(const Tensor& x) {
  return unary_op(UnaryOp::Exp, x, 0, "exp", true, [](const Tensor& g, const Tensor& y) { return g * y; });
}
Tensor log(const Tensor& x) {
  return unary_op(UnaryOp::Log, x, 0, "log", false, [](const Tensor& g, const Tensor& x) { return g / x; });
}
Tensor sqrt(const Tensor& x) {
  return unary_op(UnaryOp::Sqrt, x, 0, "sqrt", true, [](const Tensor& g, const Tensor& y) { return g * 0.5 / y; });
}
Tensor rsqrt(const Tensor& x) {
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
  return unary_op(UnaryOp::Rsqrt, x, 0, "rsqrt", true,
                  [](const Tensor& g, const Tensor& y) { return g * pow(y, 3.0) * -0.5; });
}
Tensor abs(const Tensor& x) {
  return unary_op(UnaryOp::Abs, x, 0, "abs", false, [](const Tensor& g, const Tensor& x) { return g * sign(x); });
}
Tensor sign(const Tensor& x) { return unary_raw(UnaryOp::Sign, x, 0, "sign"); }
Tensor relu(const Tensor& x) {
  return unary_op(UnaryOp::Relu, x, 0, "relu", false, [](const Tensor& g, const Tensor& x) {
    return binary_raw(BinaryOp::ReluBackward, g, x, "relu_backward");
  });
}
Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::Tanh)
    return unary_op(UnaryOp::GeluTanh, x, 0, "gelu_tanh", false, [](const Tensor& g, const Tensor& x) {
      return binary_raw(BinaryOp::GeluTanhBackward, g, x, "gelu_tanh_backward");
    });
  return unary_op(UnaryOp::GeluErf, x, 0, "gelu", false, [](const Tensor& g, const Tensor& x) {
    return binary_raw(BinaryOp::GeluErfBackward, g, x, "gelu_backward");
  });
}
Tensor tanh(const Tensor& x) {
  return unary_op(UnaryOp::Tanh, x, 0, "tanh", true, [](const Tensor& g, const Tensor& y) {
    return binary_raw(BinaryOp::TanhBackward, g, y, "tanh_backward");
  });
}
Tensor sigmoid(const Tensor& x) {
  return unary_op(UnaryOp::Sigmoid, x, 0, "sigmoid", true, [](const Tensor& g, const Tensor& y) {
    return binary_raw(BinaryOp::SigmoidBackward, g, y, "sigmoid_backward");
  });
}
Tensor pow(const Tensor& base, double exponent) {
  return unary_op(UnaryOp::PowScalar, base, exponent, "pow_scalar", false,
                  [exponent](const Tensor& g, const Tensor& x) {
                    if (exponent == 0.0) return zeros_like(g);
                    if (exponent == 1.0) return g;
                    if (exponent == 2.0) return g * x * 2.0;
                    return g * pow(x, exponent - 1.0) * exponent;
                  });
}
Tensor square(const Tensor& x) { return pow(x, 2.0); }

Tensor clamp(const Tensor& x, double min_value, double max_value) {
  HEED_CHECK(!(min_value > max_value), "clamp", "min {} is larger than max {}", min_value, max_value);
  Tensor out = unary_raw(UnaryOp::ClampMax, unary_raw(UnaryOp::ClampMin, x, min_value, "clamp"), max_value, "clamp");
  if (any_requires_grad({&x})) {
    SavedTensor sx(x, "clamp");
    record_op("clamp", {&x}, out, [sx, min_value, max_value](const Tensor& g) -> std::vector<Tensor> {
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

Tensor eq(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::Ge, a, b, "ge"); }
Tensor logical_not(const Tensor& x) { return unary_raw(UnaryOp::LogicalNot, x, 0, "logical_not"); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::LogicalAnd, a, b, "logical_and"); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary_raw(BinaryOp::LogicalOr, a, b, "logical_or"); }

bool isfinite_all(const Tensor& x) {
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
  if (out.numel() > 0)
    HEED_KERNEL(a.device(), where)
    (detail::broadcast_view(condition, out_shape), detail::broadcast_view(A, out_shape),
     detail::broadcast_view(B, out_shape), detail::view_of(out));
  if (any_requires_grad({&a, &b})) {
    InputInfo ia(a), ib(b);
    SavedTensor sc(condition, "where");
    record_op("where", {&a, &b}, out, [ia, ib, sc](const Tensor& g) -> std::vector<Tensor> {
      Tensor c = sc.get(), zero = zeros({}, g.options());
      return {ia.needs_grad ? to_input(where(c, g, zero), ia.shape, ia.dtype) : Tensor(),
              ib.needs_grad ? to_input(where(c, zero, g), ib.shape, ib.dtype) : Tensor()};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined(x, "masked_fill");
  detail::check_defined(mask, "masked_fill", "mask");
  detail::check_same_device(x, mask, "masked_fill");
  HEED_CHECK(mask.dtype() == kBool, "masked_fill", "mask must be bool, got {} of shape {}", dtype_name(mask.dtype()),
             shape_str(mask.shape()));
  HEED_CHECK(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(), "masked_fill",
             "mask of shape {} must broadcast to the input's shape {}", shape_str(mask.shape()), shape_str(x.shape()));
  Tensor fill_value = scalar_tensor(value, TensorOptions(x.dtype()).device(x.device()));
  Tensor out = detail::make_empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0)
    HEED_KERNEL(x.device(), where)
    (detail::broadcast_view(mask, x.shape()), detail::broadcast_view(fill_value, x.shape()), detail::view_of(x),
     detail::view_of(out));
  if (any_requires_grad({&x})) {
    SavedTensor sm(mask, "masked_fill");
    record_op("masked_fill", {&x}, out,
              [sm](const Tensor& g) -> std::vector<Tensor> { return {where(sm.get(), zeros({}, g.options()), g)}; });
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
