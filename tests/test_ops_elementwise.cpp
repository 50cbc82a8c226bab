// tests/test_ops_elementwise.cpp — element-wise ops against naive float64 loops: binary ops with
// broadcasting and non-contiguous operands, unary and scalar ops, where/masked_fill,
// comparisons, dtype promotion, float32 against the float64 reference, special values and
// misuse. Gradients are checked by tests/test_gradcheck.cpp (tools/op_cases.cpp).
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "op_cases.h"

using namespace heed;
using op_cases::InputSpec;
using op_cases::Layout;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Row-major coordinates of element k of `shape`.
std::vector<int64_t> coords_of(int64_t k, const Dims& shape) {
  std::vector<int64_t> c(static_cast<size_t>(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) {
    c[static_cast<size_t>(d)] = k % shape[d];
    k /= shape[d];
  }
  return c;
}

// Row-major index in `shape` of the element that a broadcast result reads at `coords`
// (shapes right-aligned, size-1 dims read index 0).
int64_t source_index(const std::vector<int64_t>& coords, const Dims& shape) {
  const int shift = static_cast<int>(coords.size()) - shape.size();
  int64_t k = 0;
  for (int d = 0; d < shape.size(); ++d)
    k = k * shape[d] + (shape[d] == 1 ? 0 : coords[static_cast<size_t>(d + shift)]);
  return k;
}

// NumPy broadcasting, written out for the reference.
Dims naive_broadcast(const Dims& a, const Dims& b) {
  const int n = std::max(a.size(), b.size());
  Dims out;
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.size()), ib = i - (n - b.size());
    const int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
    out.push_back(sa == 1 ? sb : sa);
  }
  return out;
}

bool same_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Checks shape and every value; reports the first mismatch.
void check_values(const Tensor& got, const Dims& shape, const std::vector<double>& want, double rtol = 1e-12,
                  double atol = 1e-12) {
  REQUIRE(got.shape() == shape);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!same_value(v[i], want[i], rtol, atol)) {
      FAIL_CHECK("element " << i << " of shape " << shape_str(shape) << ": got " << v[i] << ", expected " << want[i]);
      return;
    }
  }
}

InputSpec with_shape(InputSpec spec, const Dims& shape, Layout layout) {
  spec.shape = shape;
  spec.layout = layout;
  spec.requires_grad = false;
  return spec;
}

// The layouts a shape can be given (transposed needs 2 dims, strided 1).
std::vector<Layout> layouts_for(const Dims& shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  if (shape.size() >= 1) out.push_back(Layout::Strided);
  return out;
}

const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "strided";
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  InputSpec a, b;
};

std::vector<BinaryCase> binary_cases() {
  const InputSpec u = InputSpec::uniform({}, -2.0, 2.0);
  const InputSpec nonzero = InputSpec::away_from({}, {0.0}, 0.25, -2.0, 2.0);
  return {
      {"add", [](auto& a, auto& b) { return add(a, b); }, [](double a, double b) { return a + b; }, u, u},
      {"add_alpha", [](auto& a, auto& b) { return add(a, b, -1.5); }, [](double a, double b) { return a - 1.5 * b; }, u,
       u},
      {"sub", [](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; }, u, u},
      {"mul", [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; }, u, u},
      {"div", [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; }, u, nonzero},
      {"pow", [](auto& a, auto& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
       InputSpec::positive({}), u},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }, [](double a, double b) { return a > b ? a : b; }, u,
       u},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }, [](double a, double b) { return a < b ? a : b; }, u,
       u},
  };
}

const std::vector<std::pair<Dims, Dims>> kBinaryShapes = {
    {{3, 4}, {3, 4}}, {{2, 3, 4}, {3, 1}}, {{4, 1, 3}, {2, 1}}, {{5}, {2, 3, 5}},      {{}, {2, 3}},
    {{2, 3}, {}},     {{1}, {3, 1}},       {{0, 3}, {3}},       {{2, 1, 4}, {1, 3, 1}}};

std::vector<double> binary_reference(const BinaryCase& c, const Tensor& a, const Tensor& b, const Dims& out_shape) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
  for (int64_t k = 0; k < shape_numel(out_shape); ++k) {
    const std::vector<int64_t> at = coords_of(k, out_shape);
    want[static_cast<size_t>(k)] = c.ref(va[static_cast<size_t>(source_index(at, a.shape()))],
                                         vb[static_cast<size_t>(source_index(at, b.shape()))]);
  }
  return want;
}

}  // namespace

TEST_CASE("elementwise: binary ops match a float64 loop with broadcasting and any layout") {
  uint64_t seed = 100;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [shape_a, shape_b] : kBinaryShapes) {
      for (Layout la : layouts_for(shape_a)) {
        for (Layout lb : layouts_for(shape_b)) {
          CAPTURE(c.name);
          CAPTURE(shape_str(shape_a));
          CAPTURE(shape_str(shape_b));
          CAPTURE(layout_name(la));
          CAPTURE(layout_name(lb));
          const Tensor a = op_cases::make_input(with_shape(c.a, shape_a, la), ++seed);
          const Tensor b = op_cases::make_input(with_shape(c.b, shape_b, lb), ++seed);
          const Dims out_shape = naive_broadcast(shape_a, shape_b);
          const Tensor out = c.op(a, b);
          CHECK(out.dtype() == kFloat64);
          check_values(out, out_shape, binary_reference(c, a, b, out_shape));
        }
      }
    }
  }
}

TEST_CASE("elementwise: float32 binary results are close to the float64 reference") {
  uint64_t seed = 500;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [shape_a, shape_b] : kBinaryShapes) {
      CAPTURE(c.name);
      CAPTURE(shape_str(shape_a));
      const Tensor a = op_cases::make_input(with_shape(c.a, shape_a, Layout::Contiguous), ++seed);
      const Tensor b = op_cases::make_input(with_shape(c.b, shape_b, Layout::Contiguous), ++seed);
      const Tensor out = c.op(a.to(kFloat32), b.to(kFloat32));
      CHECK(out.dtype() == kFloat32);
      const Dims out_shape = naive_broadcast(shape_a, shape_b);
      check_values(out, out_shape, binary_reference(c, a, b, out_shape), 2e-6, 1e-6);
    }
  }
}

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  InputSpec spec;
};

double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  const InputSpec u = InputSpec::uniform({}, -3.0, 3.0);
  const InputSpec pos = InputSpec::positive({}, 0.1, 4.0);
  const InputSpec nonzero = InputSpec::away_from({}, {0.0}, 0.25, -3.0, 3.0);
  return {
      {"neg", [](auto& x) { return neg(x); }, [](double x) { return -x; }, u},
      {"operator-", [](auto& x) { return -x; }, [](double x) { return -x; }, u},
      {"exp", [](auto& x) { return exp(x); }, [](double x) { return std::exp(x); }, u},
      {"log", [](auto& x) { return log(x); }, [](double x) { return std::log(x); }, pos},
      {"sqrt", [](auto& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, pos},
      {"rsqrt", [](auto& x) { return rsqrt(x); }, [](double x) { return 1.0 / std::sqrt(x); }, pos},
      {"abs", [](auto& x) { return abs(x); }, [](double x) { return std::fabs(x); }, u},
      {"sign", [](auto& x) { return sign(x); }, [](double x) { return x > 0   ? 1.0
                                                                      : x < 0 ? -1.0
                                                                              : 0.0; }, u},
      {"relu", [](auto& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, u},
      {"gelu", [](auto& x) { return gelu(x); }, gelu_erf_ref, u},
      {"gelu_tanh", [](auto& x) { return gelu(x, GeluApproximation::Tanh); }, gelu_tanh_ref, u},
      {"tanh", [](auto& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, u},
      {"sigmoid", [](auto& x) { return sigmoid(x); }, [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
       InputSpec::uniform({}, -8.0, 8.0)},
      {"silu", [](auto& x) { return silu(x); }, [](double x) { return x / (1.0 + std::exp(-x)); },
       InputSpec::uniform({}, -8.0, 8.0)},
      {"softplus", [](auto& x) { return softplus(x); }, [](double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); },
       InputSpec::uniform({}, -8.0, 24.0)},
      {"square", [](auto& x) { return square(x); }, [](double x) { return x * x; }, u},
      {"pow_2.5", [](auto& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, pos},
      {"pow_3", [](auto& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, u},
      {"pow_-1.5", [](auto& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, pos},
      {"pow_0", [](auto& x) { return pow(x, 0.0); }, [](double) { return 1.0; }, u},
      {"clamp", [](auto& x) { return clamp(x, -0.3, 0.4); },
       [](double x) { return x < -0.3  ? -0.3
                             : x > 0.4 ? 0.4
                                       : x; }, u},
      {"add_scalar", [](auto& x) { return add_scalar(x, 1.5); }, [](double x) { return x + 1.5; }, u},
      {"x-s", [](auto& x) { return x - 0.25; }, [](double x) { return x - 0.25; }, u},
      {"mul_scalar", [](auto& x) { return mul_scalar(x, -3.0); }, [](double x) { return -3.0 * x; }, u},
      {"s*x", [](auto& x) { return 0.5 * x; }, [](double x) { return 0.5 * x; }, u},
      {"rsub_scalar", [](auto& x) { return rsub_scalar(x, 2.0); }, [](double x) { return 2.0 - x; }, u},
      {"rdiv_scalar", [](auto& x) { return rdiv_scalar(x, 2.0); }, [](double x) { return 2.0 / x; }, nonzero},
      {"x/s", [](auto& x) { return x / 4.0; }, [](double x) { return x / 4.0; }, u},
  };
}

const std::vector<Dims> kUnaryShapes = {{3, 4}, {2, 3, 4}, {7}, {}, {0, 2}, {1, 5}};

}  // namespace

TEST_CASE("elementwise: unary and scalar ops match a float64 loop in any layout") {
  uint64_t seed = 1000;
  for (const UnaryCase& c : unary_cases()) {
    for (const Dims& shape : kUnaryShapes) {
      for (Layout layout : layouts_for(shape)) {
        CAPTURE(c.name);
        CAPTURE(shape_str(shape));
        CAPTURE(layout_name(layout));
        const Tensor x = op_cases::make_input(with_shape(c.spec, shape, layout), ++seed);
        const std::vector<double> vx = x.to_vector<double>();
        std::vector<double> want(vx.size());
        for (size_t i = 0; i < vx.size(); ++i) want[i] = c.ref(vx[i]);
        const Tensor out = c.op(x);
        CHECK(out.dtype() == kFloat64);
        check_values(out, shape, want, 1e-13, 1e-14);
      }
    }
  }
}

TEST_CASE("elementwise: float32 unary results are close to the float64 reference") {
  uint64_t seed = 2000;
  for (const UnaryCase& c : unary_cases()) {
    CAPTURE(c.name);
    const Tensor x = op_cases::make_input(with_shape(c.spec, {4, 9}, Layout::Transposed), ++seed);
    const std::vector<double> vx = x.to(kFloat32).to_vector<double>();  // the float32 inputs
    std::vector<double> want(vx.size());
    for (size_t i = 0; i < vx.size(); ++i) want[i] = c.ref(vx[i]);
    const Tensor out = c.op(x.to(kFloat32));
    CHECK(out.dtype() == kFloat32);
    check_values(out, {4, 9}, want, 2e-6, 1e-6);
  }
}

TEST_CASE("elementwise: 16-bit floats compute in float32 and round once") {
  const Tensor x = op_cases::make_input(with_shape(InputSpec::uniform({}, -2.0, 2.0), {5, 6}, Layout::Contiguous), 7);
  for (DType dtype : {kFloat16, kBFloat16}) {
    const Tensor xh = x.to(dtype);
    const std::vector<double> vx = xh.to_vector<double>();
    std::vector<double> want(vx.size());
    for (size_t i = 0; i < vx.size(); ++i) want[i] = std::exp(vx[i]) * vx[i];
    const Tensor out = exp(xh) * xh;
    CHECK(out.dtype() == dtype);
    // Each of exp and mul rounds to the 16-bit type once: 2^-11 (fp16) or 2^-8 (bf16).
    check_values(out, {5, 6}, want, dtype == kFloat16 ? 2e-3 : 1.6e-2, 1e-3);
  }
}

TEST_CASE("elementwise: special values") {
  const Tensor x = tensor({-1000.0, -1.0, 0.0, 1.0, 1000.0, kNaN}, kFloat64);
  check_values(sigmoid(x), {6}, {0.0, 1.0 / (1.0 + std::exp(1.0)), 0.5, 1.0 / (1.0 + std::exp(-1.0)), 1.0, kNaN});
  check_values(relu(x), {6}, {0.0, 0.0, 0.0, 1.0, 1000.0, kNaN});
  check_values(clamp(x, -2.0, 2.0), {6}, {-2.0, -1.0, 0.0, 1.0, 2.0, kNaN});
  check_values(exp(x), {6}, {0.0, std::exp(-1.0), 1.0, std::exp(1.0), kInf, kNaN});
  check_values(tanh(x), {6}, {-1.0, std::tanh(-1.0), 0.0, std::tanh(1.0), 1.0, kNaN});
  check_values(silu(x), {6}, {0.0, -1.0 / (1.0 + std::exp(1.0)), 0.0, 1.0 / (1.0 + std::exp(-1.0)), 1000.0, kNaN});
  check_values(softplus(x), {6},
               {0.0, std::log1p(std::exp(-1.0)), std::log(2.0), std::log1p(std::exp(1.0)), 1000.0, kNaN});
  const Tensor ones6 = ones({6}, kFloat64);
  check_values(maximum(x, ones6), {6}, {1.0, 1.0, 1.0, 1.0, 1000.0, kNaN});
  check_values(maximum(ones6, x), {6}, {1.0, 1.0, 1.0, 1.0, 1000.0, kNaN});
  check_values(minimum(x, ones6), {6}, {-1000.0, -1.0, 0.0, 1.0, 1.0, kNaN});
  check_values(log(tensor({0.0, -1.0}, kFloat64)), {2}, {-kInf, kNaN});
  check_values(sqrt(tensor({-1.0, 4.0}, kFloat64)), {2}, {kNaN, 2.0});
  // float32 sigmoid saturates without overflow.
  check_values(sigmoid(tensor({-200.0f, 200.0f})), {2}, {0.0, 1.0});
  CHECK_FALSE(isfinite_all(x));
  CHECK(isfinite_all(tensor({1.0, -2.0})));
}

TEST_CASE("elementwise: where and masked_fill broadcast and accept non-contiguous operands") {
  uint64_t seed = 3000;
  const std::vector<std::array<Dims, 3>> shapes = {
      {Dims{3, 4}, Dims{3, 4}, Dims{3, 4}},
      {Dims{3, 1}, Dims{2, 3, 4}, Dims{4}},
      {Dims{2, 1, 4}, Dims{3, 1}, Dims{}},
  };
  for (const auto& s : shapes) {
    for (Layout lc : layouts_for(s[0])) {
      CAPTURE(shape_str(s[0]));
      CAPTURE(layout_name(lc));
      const Tensor cond = op_cases::make_input(with_shape(InputSpec::mask({}), s[0], lc), ++seed);
      const Tensor a = op_cases::make_input(with_shape(InputSpec::uniform({}), s[1], layouts_for(s[1]).back()), ++seed);
      const Tensor b = op_cases::make_input(with_shape(InputSpec::uniform({}), s[2], Layout::Contiguous), ++seed);
      const Dims out_shape = naive_broadcast(s[0], naive_broadcast(s[1], s[2]));
      const std::vector<double> vc = cond.to_vector<double>(), va = a.to_vector<double>(), vb = b.to_vector<double>();
      std::vector<double> want(static_cast<size_t>(shape_numel(out_shape)));
      for (int64_t k = 0; k < shape_numel(out_shape); ++k) {
        const auto at = coords_of(k, out_shape);
        want[static_cast<size_t>(k)] = vc[static_cast<size_t>(source_index(at, s[0]))] != 0.0
                                           ? va[static_cast<size_t>(source_index(at, s[1]))]
                                           : vb[static_cast<size_t>(source_index(at, s[2]))];
      }
      check_values(where(cond, a, b), out_shape, want);
    }
  }
  // where promotes a float32 and a float64 branch to float64.
  const Tensor mixed = where(tensor({1.0, 0.0}) > 0.5, tensor({1.5f, 2.5f}), tensor({-1.0, -2.0}, kFloat64));
  CHECK(mixed.dtype() == kFloat64);
  check_values(mixed, {2}, {1.5, -2.0});

  for (const Dims& mask_shape : {Dims{2, 3, 4}, Dims{3, 1}, Dims{1, 4}, Dims{4}, Dims{}}) {
    for (Layout lx : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
      CAPTURE(shape_str(mask_shape));
      CAPTURE(layout_name(lx));
      const Tensor x = op_cases::make_input(with_shape(InputSpec::uniform({}), {2, 3, 4}, lx), ++seed);
      const Tensor mask = op_cases::make_input(with_shape(InputSpec::mask({}), mask_shape, Layout::Contiguous), ++seed);
      const std::vector<double> vx = x.to_vector<double>(), vm = mask.to_vector<double>();
      std::vector<double> want(vx.size());
      for (int64_t k = 0; k < 24; ++k)
        want[static_cast<size_t>(k)] = vm[static_cast<size_t>(source_index(coords_of(k, {2, 3, 4}), mask_shape))] != 0.0
                                           ? -kInf
                                           : vx[static_cast<size_t>(k)];
      check_values(masked_fill(x, mask, -kInf), {2, 3, 4}, want);
      // The input is untouched.
      check_values(x, {2, 3, 4}, vx);
    }
  }
  // Integer tensors keep their dtype.
  const Tensor xi = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  const Tensor filled = masked_fill(xi, tensor({1.0, 0.0}) > 0.5, 9.0);
  CHECK(filled.dtype() == kInt64);
  CHECK(filled.to_vector<int64_t>() == std::vector<int64_t>{9, 2, 9, 4});
}

TEST_CASE("elementwise: comparisons and logic give bool tensors with broadcasting") {
  const Tensor a = op_cases::make_input(with_shape(InputSpec::distinct({}), {3, 4}, Layout::Transposed), 1);
  // b is row 1 of a (a strided view), so row 1 compares equal and the other rows do not.
  const Tensor b = a.select(0, 1);
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  struct Cmp {
    Tensor out;
    std::function<bool(double, double)> ref;
  };
  const std::vector<Cmp> cmps = {
      {eq(a, b), [](double x, double y) { return x == y; }}, {ne(a, b), [](double x, double y) { return x != y; }},
      {lt(a, b), [](double x, double y) { return x < y; }},  {a <= b, [](double x, double y) { return x <= y; }},
      {gt(a, b), [](double x, double y) { return x > y; }},  {a >= b, [](double x, double y) { return x >= y; }},
  };
  bool any_equal = false;
  for (const Cmp& c : cmps) {
    CHECK(c.out.dtype() == kBool);
    std::vector<double> want(12);
    for (int64_t k = 0; k < 12; ++k) {
      const double x = va[static_cast<size_t>(k)], y = vb[static_cast<size_t>(k % 4)];
      want[static_cast<size_t>(k)] = c.ref(x, y) ? 1.0 : 0.0;
      any_equal = any_equal || x == y;
    }
    check_values(c.out, {3, 4}, want);
  }
  CHECK(any_equal);
  const Tensor p = a > 0.0, q = b < 0.1;
  std::vector<double> want_and(12), want_or(12), want_not(12);
  for (int64_t k = 0; k < 12; ++k) {
    const bool x = va[static_cast<size_t>(k)] > 0.0, y = vb[static_cast<size_t>(k % 4)] < 0.1;
    want_and[static_cast<size_t>(k)] = x && y;
    want_or[static_cast<size_t>(k)] = x || y;
    want_not[static_cast<size_t>(k)] = !x;
  }
  check_values(logical_and(p, q), {3, 4}, want_and);
  check_values(p | q, {3, 4}, want_or);
  check_values(!p, {3, 4}, want_not);
}

TEST_CASE("elementwise: dtype promotion") {
  const Tensor i32 = from_vector<int32_t>({1, 2, 3}, {3});
  const Tensor i64 = from_vector<int64_t>({4, 5, 6}, {3});
  const Tensor f32 = tensor({0.5, 1.5, 2.5});
  const Tensor f64 = tensor({0.25, 0.5, 0.75}, kFloat64);
  CHECK((i32 + i64).dtype() == kInt64);
  CHECK((i32 + i64).to_vector<int64_t>() == std::vector<int64_t>{5, 7, 9});
  CHECK((i32 + f32).dtype() == kFloat32);
  CHECK((f32 + f64).dtype() == kFloat64);
  check_values(f32 * f64, {3}, {0.125, 0.75, 1.875});
  // Division of integers is true division in float32.
  const Tensor q = i64 / i32;
  CHECK(q.dtype() == kFloat32);
  check_values(q, {3}, {4.0, 2.5, 2.0}, 1e-7, 0);
  CHECK((f32.to(kFloat16) + f32.to(kBFloat16)).dtype() == kFloat32);
  CHECK(neg(i32).dtype() == kInt32);
  CHECK(exp(i32).dtype() == kFloat32);
  // A scalar argument keeps an integer tensor integral only when the dtype holds it exactly.
  CHECK(add_scalar(i32, 2.0).dtype() == kInt32);
  CHECK(add_scalar(i32, 2.5).dtype() == kFloat32);
  const Tensor big = add_scalar(i32, 1e10);  // beyond int32: computed in float32, no overflow
  CHECK(big.dtype() == kFloat32);
  check_values(big, {3}, {1e10, 1e10, 1e10}, 1e-7, 0);
  CHECK(add_scalar(i64, 1e10).dtype() == kInt64);
  const Tensor clamped = clamp(i32, -std::numeric_limits<double>::infinity(), 2.0);  // an infinite bound
  CHECK(clamped.dtype() == kFloat32);
  check_values(clamped, {3}, {1.0, 2.0, 2.0});
}

TEST_CASE("elementwise: misuse raises heed::Error naming the op") {
  const Tensor a = zeros({3, 4}, kFloat64), b = zeros({2, 4}, kFloat64);
  CHECK_THROWS_WITH_AS(add(a, b), doctest::Contains("heed::add: shapes [3, 4] and [2, 4]"), Error);
  CHECK_THROWS_WITH_AS(add(a, b, 2.0), doctest::Contains("heed::add:"), Error);
  CHECK_THROWS_WITH_AS(sub(a, b), doctest::Contains("heed::sub:"), Error);
  CHECK_THROWS_WITH_AS(a * b, doctest::Contains("heed::mul:"), Error);
  CHECK_THROWS_WITH_AS(a / b, doctest::Contains("heed::div:"), Error);
  CHECK_THROWS_WITH_AS(pow(a, b), doctest::Contains("heed::pow:"), Error);
  CHECK_THROWS_WITH_AS(maximum(a, b), doctest::Contains("heed::maximum:"), Error);
  CHECK_THROWS_WITH_AS(minimum(a, b), doctest::Contains("heed::minimum:"), Error);
  CHECK_THROWS_WITH_AS(lt(a, b), doctest::Contains("heed::lt:"), Error);
  CHECK_THROWS_WITH_AS(add(a, Tensor()), doctest::Contains("heed::add:"), Error);
  CHECK_THROWS_WITH_AS(exp(Tensor()), doctest::Contains("heed::exp:"), Error);

  const Tensor flags = a > 0.0;  // bool
  CHECK_THROWS_WITH_AS(flags + flags, doctest::Contains("heed::add:"), Error);
  CHECK_THROWS_WITH_AS(exp(flags), doctest::Contains("heed::exp:"), Error);
  CHECK_THROWS_WITH_AS(relu(flags), doctest::Contains("heed::relu:"), Error);
  CHECK_THROWS_WITH_AS(logical_and(a, a), doctest::Contains("heed::logical_and:"), Error);
  CHECK_THROWS_WITH_AS(logical_not(a), doctest::Contains("heed::logical_not:"), Error);
  CHECK_THROWS_WITH_AS(clamp(a, 1.0, -1.0), doctest::Contains("heed::clamp: min 1"), Error);

  CHECK_THROWS_WITH_AS(where(a, a, a), doctest::Contains("heed::where: condition must be bool"), Error);
  CHECK_THROWS_WITH_AS(where(zeros({3, 4}, kBool), a, b), doctest::Contains("heed::where:"), Error);
  CHECK_THROWS_WITH_AS(where(zeros({5}, kBool), a, a), doctest::Contains("heed::where:"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(a, zeros({3, 4}, kInt64), 1.0),
                       doctest::Contains("heed::masked_fill: mask must be bool"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(a, zeros({2, 3, 4}, kBool), 1.0), doctest::Contains("heed::masked_fill:"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(a, zeros({3, 5}, kBool), 1.0), doctest::Contains("heed::masked_fill:"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(a, Tensor(), 1.0), doctest::Contains("heed::masked_fill:"), Error);
}
