// kernels/elementwise_table.h — the element-wise op table: one row per unary and binary
// op, with its name, the dtypes it accepts, its forward formula and (unary ops) its derivative.
//
// Everything element-wise comes from these rows: the UnaryOp / BinaryOp enums and their names
// (kernels.h), the dtype rules of the ops layer (framework/src/ops/elementwise.cpp), the CPU and
// CUDA functors (kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu: both call the
// HEED_HD formulas below, so the formula exists once), the generic unary backward kernel, and,
// for the rows of HEED_UNARY_FUNCTION_OPS, the public function `Tensor fn(const Tensor&)` with
// its autograd record.
//
// Adding a unary op (see the README's "How to add an op"): one HEED_UNARY_ROW below plus its
// line in HEED_UNARY_FUNCTION_OPS, its declaration in heed/ops.h, and one gradient-check case in
// tools/op_cases.cpp (the CUDA comparison comes from the same case).
//
// Invariants:
//  * A formula computes in the compute type C (float for 16-bit floats, the dtype otherwise) and
//    is instantiated only for the dtypes of its domain (row_accepts).
//  * Row names are the names autograd records and error messages print; they are unique.
//  * backward(g, x, y, a) returns dL/dx from the incoming gradient g; only what the row saves
//    (x for SavesInput, y for SavesOutput) holds a value, the other argument is 0.
//  * Includes nothing from framework/.
#pragma once

#include <cstdint>
#include <type_traits>

#include "heed/hd.h"

namespace heed::kernels {

// Which dtypes a row accepts, and what the ops layer does with the others.
enum class OpDomain : uint8_t {
  Float,               // floating dtypes; integer inputs are computed in float32
  Numeric,             // every dtype but bool; integers stay integers (the result is exact)
  NumericIntegralArg,  // as Numeric when the scalar argument is integral, else as Float
  Comparison,          // binary, every dtype (bool compared as int32); the result is bool
  Bool,                // bool only; the result is bool
};

// What a unary row keeps for its backward.
enum class OpGrad : uint8_t {
  SavesNothing,       // the derivative needs neither x nor y (it may use the scalar a)
  SavesInput,         // backward reads x
  SavesOutput,        // backward reads y
  Passthrough,        // the gradient is g itself: no kernel runs
  NotDifferentiable,  // no autograd record (sign, logical_not)
  Custom,             // the public function records its own backward (clamp)
};

namespace elementwise {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2*pi)
constexpr double kGeluCubic = 0.044715;
constexpr double kSoftplusThreshold = 20.0;  // PyTorch's: softplus(x) = x above it

template <typename C>
HEED_HD C sigmoid(C x) {
  // Two forms so exp never overflows.
  if (x >= C(0)) return C(1) / (C(1) + math_exp(-x));
  const C e = math_exp(x);
  return e / (C(1) + e);
}
template <typename C>
HEED_HD C gelu_tanh(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  return C(0.5) * x * (C(1) + math_tanh(u));
}
template <typename C>
HEED_HD C gelu_tanh_grad(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  const C t = math_tanh(u);
  const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}
template <typename C>
HEED_HD C gelu_erf(C x) {
  return C(0.5) * x * (C(1) + math_erf(x * C(kInvSqrt2)));
}
template <typename C>
HEED_HD C gelu_erf_grad(C x) {
  const C cdf = C(0.5) * (C(1) + math_erf(x * C(kInvSqrt2)));
  const C pdf = C(kInvSqrt2Pi) * math_exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}
template <typename C>
HEED_HD C pow_scalar_grad(C g, C x, C a) {
  if (a == C(0)) return C(0);
  if (a == C(1)) return g;
  if (a == C(2)) return g * x * C(2);
  return g * math_pow(x, a - C(1)) * a;
}

}  // namespace elementwise

// ---- unary rows -----------------------------------------------------------------------------
// HEED_UNARY_ROW(Row, "name", domain, grad, forward of (x, a), backward of (g, x, y, a)).
#define HEED_UNARY_ROW(Row, text, row_domain, row_grad, forward_formula, backward_formula)      \
  struct Row {                                                                                  \
    static constexpr const char* name = text;                                                   \
    static constexpr OpDomain domain = OpDomain::row_domain;                                    \
    static constexpr OpGrad grad = OpGrad::row_grad;                                            \
    template <typename C>                                                                       \
    HEED_HD static C forward([[maybe_unused]] C x, [[maybe_unused]] C a) {                      \
      return forward_formula;                                                                   \
    }                                                                                           \
    template <typename C>                                                                       \
    HEED_HD static C backward([[maybe_unused]] C g, [[maybe_unused]] C x, [[maybe_unused]] C y, \
                              [[maybe_unused]] C a) {                                           \
      return backward_formula;                                                                  \
    }                                                                                           \
  };

namespace unary {
using namespace elementwise;
// clang-format off
// Rows with a public function `Tensor fn(const Tensor& x)` generated from them:
HEED_UNARY_ROW(Neg,      "neg",      Numeric, SavesNothing, static_cast<C>(-x), static_cast<C>(-g))
HEED_UNARY_ROW(Exp,      "exp",      Float,   SavesOutput,  math_exp(x),        g * y)
HEED_UNARY_ROW(Log,      "log",      Float,   SavesInput,   math_log(x),        g / x)
HEED_UNARY_ROW(Sqrt,     "sqrt",     Float,   SavesOutput,  math_sqrt(x),       g * C(0.5) / y)
HEED_UNARY_ROW(Rsqrt,    "rsqrt",    Float,   SavesOutput,  C(1) / math_sqrt(x), g * math_pow(y, C(3)) * C(-0.5))
HEED_UNARY_ROW(Abs,      "abs",      Numeric, SavesInput,   x < C(0) ? static_cast<C>(-x) : x,
               g * static_cast<C>((x > C(0)) - (x < C(0))))
HEED_UNARY_ROW(Sign,     "sign",     Numeric, NotDifferentiable, static_cast<C>((x > C(0)) - (x < C(0))), C(0))
HEED_UNARY_ROW(Relu,     "relu",     Float,   SavesInput,   x > C(0) ? x : (x == x ? C(0) : x), x > C(0) ? g : C(0))
HEED_UNARY_ROW(Tanh,     "tanh",     Float,   SavesOutput,  math_tanh(x),       g * (C(1) - y * y))
HEED_UNARY_ROW(Sigmoid,  "sigmoid",  Float,   SavesOutput,  sigmoid(x),         g * y * (C(1) - y))
HEED_UNARY_ROW(Silu,     "silu",     Float,   SavesInput,   x * sigmoid(x),
               g * (sigmoid(x) * (C(1) + x * (C(1) - sigmoid(x)))))
HEED_UNARY_ROW(Softplus, "softplus", Float,   SavesInput,
               x > C(kSoftplusThreshold) ? x : math_log1p(math_exp(x)),
               x > C(kSoftplusThreshold) ? g : g * sigmoid(x))
// Rows whose public function is written by hand (a scalar argument, a mode, a composite record):
HEED_UNARY_ROW(GeluTanh,   "gelu_tanh",   Float, SavesInput, gelu_tanh(x), g * gelu_tanh_grad(x))
HEED_UNARY_ROW(GeluErf,    "gelu",        Float, SavesInput, gelu_erf(x),  g * gelu_erf_grad(x))
HEED_UNARY_ROW(AddScalar,  "add_scalar",  NumericIntegralArg, Passthrough,  static_cast<C>(x + a), g)
HEED_UNARY_ROW(MulScalar,  "mul_scalar",  NumericIntegralArg, SavesNothing, static_cast<C>(x * a), g * a)
HEED_UNARY_ROW(RSubScalar, "rsub_scalar", NumericIntegralArg, SavesNothing, static_cast<C>(a - x), static_cast<C>(-g))
HEED_UNARY_ROW(PowScalar,  "pow_scalar",  Float, SavesInput, a == C(2) ? x * x : math_pow(x, a), pow_scalar_grad(g, x, a))
HEED_UNARY_ROW(RDivScalar, "rdiv_scalar", Float, SavesInput, a / x,        -(g * (a / x) / x))
HEED_UNARY_ROW(ClampMin,   "clamp_min",   NumericIntegralArg, Custom, x < a ? a : x, C(0))  // NaN < a is false
HEED_UNARY_ROW(ClampMax,   "clamp_max",   NumericIntegralArg, Custom, x > a ? a : x, C(0))
HEED_UNARY_ROW(LogicalNot, "logical_not", Bool,  NotDifferentiable, static_cast<C>(!x), C(0))
// clang-format on
}  // namespace unary

// X(Row, function): the rows above whose public function is generated (framework/src/ops/elementwise.cpp).
#define HEED_UNARY_FUNCTION_OPS(X) \
  X(Neg, neg)                      \
  X(Exp, exp)                      \
  X(Log, log)                      \
  X(Sqrt, sqrt)                    \
  X(Rsqrt, rsqrt)                  \
  X(Abs, abs)                      \
  X(Sign, sign)                    \
  X(Relu, relu)                    \
  X(Tanh, tanh)                    \
  X(Sigmoid, sigmoid)              \
  X(Silu, silu)                    \
  X(Softplus, softplus)

// X(Row, function): the rows whose public function is written by hand (named for reference).
#define HEED_UNARY_SPECIAL_OPS(X) \
  X(GeluTanh, gelu)               \
  X(GeluErf, gelu)                \
  X(AddScalar, add_scalar)        \
  X(MulScalar, mul_scalar)        \
  X(RSubScalar, rsub_scalar)      \
  X(PowScalar, pow)               \
  X(RDivScalar, rdiv_scalar)      \
  X(ClampMin, clamp)              \
  X(ClampMax, clamp)              \
  X(LogicalNot, logical_not)

// X(Row, function) for every unary row; the UnaryOp enum follows this order.
#define HEED_FOR_EACH_UNARY_OP(X) HEED_UNARY_FUNCTION_OPS(X) HEED_UNARY_SPECIAL_OPS(X)

// ---- binary rows ----------------------------------------------------------------------------
// HEED_BINARY_ROW(Row, "name", domain, forward of (x, y)). Comparison and Bool rows give bool.
// Their backward (with broadcasting and the reduction back to each input's shape) is written in
// framework/src/ops/elementwise.cpp.
#define HEED_BINARY_ROW(Row, text, row_domain, forward_formula) \
  struct Row {                                                  \
    static constexpr const char* name = text;                   \
    static constexpr OpDomain domain = OpDomain::row_domain;    \
    template <typename C>                                       \
    HEED_HD static auto forward(C x, C y) {                     \
      return forward_formula;                                   \
    }                                                           \
  };

namespace binary {
using namespace elementwise;
// clang-format off
HEED_BINARY_ROW(Add,        "add",         Numeric,    static_cast<C>(x + y))
HEED_BINARY_ROW(Sub,        "sub",         Numeric,    static_cast<C>(x - y))
HEED_BINARY_ROW(Mul,        "mul",         Numeric,    static_cast<C>(x * y))
HEED_BINARY_ROW(Div,        "div",         Float,      x / y)
HEED_BINARY_ROW(Pow,        "pow",         Float,      math_pow(x, y))
HEED_BINARY_ROW(Maximum,    "maximum",     Numeric,    (x != x || x > y) ? x : y)  // NaN wins
HEED_BINARY_ROW(Minimum,    "minimum",     Numeric,    (x != x || x < y) ? x : y)
HEED_BINARY_ROW(Eq,         "eq",          Comparison, x == y)
HEED_BINARY_ROW(Ne,         "ne",          Comparison, x != y)
HEED_BINARY_ROW(Lt,         "lt",          Comparison, x < y)
HEED_BINARY_ROW(Le,         "le",          Comparison, x <= y)
HEED_BINARY_ROW(Gt,         "gt",          Comparison, x > y)
HEED_BINARY_ROW(Ge,         "ge",          Comparison, x >= y)
HEED_BINARY_ROW(LogicalAnd, "logical_and", Bool,       static_cast<bool>(x) && static_cast<bool>(y))
HEED_BINARY_ROW(LogicalOr,  "logical_or",  Bool,       static_cast<bool>(x) || static_cast<bool>(y))
// clang-format on
}  // namespace binary

#define HEED_FOR_EACH_BINARY_OP(X) \
  X(Add)                           \
  X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) X(LogicalAnd) X(LogicalOr)

#undef HEED_UNARY_ROW
#undef HEED_BINARY_ROW

// ---- what the rows mean for dtypes ------------------------------------------------------------

// True when a row's formula is instantiated for compute type C (and element type T).
template <typename Row, typename T>
constexpr bool row_accepts() {
  if constexpr (Row::domain == OpDomain::Bool)
    return std::is_same_v<T, bool>;
  else if constexpr (Row::domain == OpDomain::Float)
    return std::is_floating_point_v<T> || !std::is_arithmetic_v<T>;
  else if constexpr (Row::domain == OpDomain::Comparison)
    return true;
  else
    return !std::is_same_v<T, bool>;
}

constexpr bool grad_reads_input(OpGrad g) { return g == OpGrad::SavesInput; }
constexpr bool grad_reads_output(OpGrad g) { return g == OpGrad::SavesOutput; }
constexpr bool grad_runs_kernel(OpGrad g) {
  return g == OpGrad::SavesNothing || g == OpGrad::SavesInput || g == OpGrad::SavesOutput;
}

}  // namespace heed::kernels
