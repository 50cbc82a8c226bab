// tools/op_cases.cpp — input generation, the registry, and the built-in gradient-check cases.
//
// Invariants: every differentiable op of heed/ops.h and heed/functional.h has at least one
// case here; inputs are small (a Jacobian costs one backward per output element and two
// forwards per input element); values come from splitmix64 streams keyed by (seed, case
// name, input index), never from the default generator, so running a subset of cases gives
// the same inputs as running them all.
#include "op_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace heed::op_cases {

// ---- random streams -------------------------------------------------------------------------

namespace {

// splitmix64: tiny, portable, and good enough for test inputs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<double> uniform_values(const InputSpec& spec, int64_t n, SplitMix64& rng) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    bool ok = false;
    for (int attempt = 0; attempt < 10000 && !ok; ++attempt) {
      x = spec.low + (spec.high - spec.low) * rng.uniform01();
      ok = std::all_of(spec.kinks.begin(), spec.kinks.end(), [&](double k) { return std::fabs(x - k) >= spec.margin; });
    }
    HEED_CHECK(ok, "op_cases", "cannot draw values in [{}, {}) at least {} away from the kinks {}", spec.low, spec.high,
               spec.margin, fmt::join(spec.kinks, ", "));
  }
  return v;
}

// A random permutation of the grid (i - n/2 + offset) * step, i = 0..n-1. Grids of different
// sizes stay aligned to multiples of `step`, so offsets 0 and 0.5 never meet.
std::vector<double> distinct_values(const InputSpec& spec, int64_t n, SplitMix64& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = (static_cast<double>(order[static_cast<size_t>(i)] - n / 2) + spec.offset) * spec.step;
  return v;
}

// `logical` laid out as the spec asks: a detached view of a private buffer.
Tensor apply_layout(const Tensor& logical, const InputSpec& spec) {
  switch (spec.layout) {
    case Layout::Contiguous:
      return logical;
    case Layout::Transposed: {
      HEED_CHECK(logical.dim() >= 2, "op_cases", "a transposed input needs >= 2 dims, got shape {}",
                 shape_str(logical.shape()));
      // The buffer holds the transpose contiguously; its transpose is the logical tensor.
      Tensor buffer = logical.transpose(-1, -2).contiguous();
      return buffer.transpose(-1, -2).detach();
    }
    case Layout::Strided: {
      HEED_CHECK(logical.dim() >= 1, "op_cases", "a strided input needs >= 1 dim");
      Dims buffer_shape = logical.shape();
      const int64_t last = buffer_shape.back();
      buffer_shape[buffer_shape.size() - 1] = 2 * last;
      // The skipped elements hold values no correct op ever reads: NaN for floats, an
      // invalid index for integers.
      const double filler = is_floating(logical.dtype()) ? std::numeric_limits<double>::quiet_NaN()
                            : logical.dtype() == kBool   ? 1.0
                                                         : -7777.0;
      Tensor buffer = full(buffer_shape, filler, logical.dtype());
      Tensor view = buffer.slice(-1, 0, 2 * last, 2);
      view.copy_(logical);
      return view.detach();
    }
  }
  return logical;
}

}  // namespace

// ---- InputSpec ------------------------------------------------------------------------------

InputSpec InputSpec::uniform(Dims shape, double low, double high) {
  InputSpec s;
  s.shape = shape;
  s.low = low;
  s.high = high;
  return s;
}
InputSpec InputSpec::positive(Dims shape, double low, double high) { return uniform(shape, low, high); }
InputSpec InputSpec::away_from(Dims shape, std::vector<double> kinks, double margin, double low, double high) {
  InputSpec s = uniform(shape, low, high);
  s.kinks = std::move(kinks);
  s.margin = margin;
  return s;
}
InputSpec InputSpec::distinct(Dims shape, double offset, double step) {
  InputSpec s;
  s.kind = Kind::Distinct;
  s.shape = shape;
  s.offset = offset;
  s.step = step;
  return s;
}
InputSpec InputSpec::indices(Dims shape, int64_t low, int64_t high) {
  InputSpec s;
  s.kind = Kind::Index;
  s.shape = shape;
  s.low = static_cast<double>(low);
  s.high = static_cast<double>(high);
  s.requires_grad = false;
  return s;
}
InputSpec InputSpec::fixed_indices(Dims shape, std::vector<int64_t> values) {
  InputSpec s = indices(shape, 0, 1);
  s.values = std::move(values);
  return s;
}
InputSpec InputSpec::mask(Dims shape, double probability) {
  InputSpec s;
  s.kind = Kind::Mask;
  s.shape = shape;
  s.probability = probability;
  s.requires_grad = false;
  return s;
}
InputSpec InputSpec::transposed() const {
  InputSpec s = *this;
  s.layout = Layout::Transposed;
  return s;
}
InputSpec InputSpec::strided() const {
  InputSpec s = *this;
  s.layout = Layout::Strided;
  return s;
}
InputSpec InputSpec::no_grad() const {
  InputSpec s = *this;
  s.requires_grad = false;
  return s;
}

std::string InputSpec::describe() const {
  const char* type = kind == Kind::Index ? "i64" : kind == Kind::Mask ? "bool" : "f64";
  std::string text = fmt::format("{}[{}]", type, fmt::join(shape, ","));
  if (layout == Layout::Transposed) text += ":T";
  if (layout == Layout::Strided) text += ":s2";
  return text;
}

// ---- inputs ---------------------------------------------------------------------------------

Tensor make_input(const InputSpec& spec, uint64_t seed) {
  SplitMix64 rng(seed);
  const int64_t n = shape_numel(spec.shape);
  Tensor logical;
  switch (spec.kind) {
    case InputSpec::Kind::Uniform:
      logical = from_vector(uniform_values(spec, n, rng), spec.shape);
      break;
    case InputSpec::Kind::Distinct:
      logical = from_vector(distinct_values(spec, n, rng), spec.shape);
      break;
    case InputSpec::Kind::Index: {
      std::vector<int64_t> v = spec.values;
      if (v.empty()) {
        const auto low = static_cast<int64_t>(spec.low), high = static_cast<int64_t>(spec.high);
        HEED_CHECK(low < high || n == 0, "op_cases", "empty index range [{}, {})", low, high);
        v.resize(static_cast<size_t>(n));
        for (int64_t& x : v) x = low + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(high - low));
      }
      logical = from_vector(v, spec.shape);
      break;
    }
    case InputSpec::Kind::Mask: {
      std::vector<bool> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = rng.uniform01() < spec.probability;
      logical = from_vector(v, spec.shape);
      break;
    }
  }
  Tensor t = apply_layout(logical, spec);
  if (is_floating(t.dtype()) && spec.requires_grad) t.requires_grad_(true);
  return t;
}

std::vector<Tensor> make_inputs(const OpCase& op_case, uint64_t seed) {
  if (op_case.custom_inputs) return op_case.custom_inputs(seed ^ fnv1a(op_case.name));
  SplitMix64 keys(seed ^ fnv1a(op_case.name));
  std::vector<Tensor> inputs;
  for (const InputSpec& spec : op_case.inputs) inputs.push_back(make_input(spec, keys.next()));
  return inputs;
}

GradcheckResult run_case(const OpCase& op_case, uint64_t seed) {
  try {
    return gradcheck(op_case.fn, make_inputs(op_case, seed), op_case.options);
  } catch (const std::exception& e) {
    GradcheckResult failed;
    failed.passed = false;
    failed.max_abs_error = std::numeric_limits<double>::infinity();
    failed.max_rel_error = std::numeric_limits<double>::infinity();
    failed.message = fmt::format("error: {}", e.what());
    return failed;
  }
}

// ---- registry -------------------------------------------------------------------------------

namespace {
void register_builtin_cases(OpCaseRegistry& registry) {
  add_elementwise_cases(registry);
  add_reduce_cases(registry);
  add_matmul_cases(registry);
  add_nn_function_cases(registry);
  add_shape_cases(registry);
  add_attention_function_cases(registry);
  add_layer_cases(registry);
}
}  // namespace

OpCaseRegistry& OpCaseRegistry::global() {
  static OpCaseRegistry registry = [] {
    OpCaseRegistry r;
    register_builtin_cases(r);
    return r;
  }();
  return registry;
}

void OpCaseRegistry::add(OpCase op_case) {
  HEED_CHECK(!op_case.name.empty(), "op_cases", "a case needs a name");
  HEED_CHECK(find(op_case.name) == nullptr, "op_cases", "a case named '{}' is already registered", op_case.name);
  HEED_CHECK(!op_case.inputs.empty() || op_case.custom_inputs, "op_cases", "case '{}' has no inputs", op_case.name);
  HEED_CHECK(static_cast<bool>(op_case.fn), "op_cases", "case '{}' has no function", op_case.name);
  cases_.push_back(std::move(op_case));
}

const OpCase* OpCaseRegistry::find(std::string_view name) const {
  for (const OpCase& c : cases_)
    if (c.name == name) return &c;
  return nullptr;
}

std::vector<const OpCase*> OpCaseRegistry::select(std::string_view pattern) const {
  if (const OpCase* exact = find(pattern)) return {exact};
  std::vector<const OpCase*> matches;
  for (const OpCase& c : cases_)
    if (std::string_view(c.name).substr(0, pattern.size()) == pattern) matches.push_back(&c);
  return matches;
}

const std::vector<OpCase>& all_cases() { return OpCaseRegistry::global().cases(); }
std::vector<const OpCase*> select_cases(std::string_view pattern) { return OpCaseRegistry::global().select(pattern); }

// ---- the built-in cases ---------------------------------------------------------------------

namespace {
using In = const std::vector<Tensor>&;
using S = InputSpec;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A fixed bool mask from 0/1 values.
Tensor bool_mask(const std::vector<int>& bits, const Dims& shape) {
  std::vector<bool> v(bits.begin(), bits.end());
  return from_vector(v, shape);
}
}  // namespace

void add_elementwise_cases(OpCaseRegistry& r) {
  // binary arithmetic
  r.add({"add", "a + b, same shapes", {S::uniform({3, 4}), S::uniform({3, 4})}, [](In x) { return add(x[0], x[1]); }});
  r.add({"add_broadcast",
         "a + b, b broadcast over a leading dim and a size-1 dim",
         {S::uniform({2, 3, 4}), S::uniform({3, 1})},
         [](In x) { return x[0] + x[1]; }});
  r.add({"add_broadcast_both", "a + b, both operands broadcast", {S::uniform({4, 1, 3}), S::uniform({2, 1})}, [](In x) {
           return x[0] + x[1];
         }});
  r.add({"add_alpha", "add(a, b, alpha = -2.5) with b broadcast", {S::uniform({3, 4}), S::uniform({4})}, [](In x) {
           return add(x[0], x[1], -2.5);
         }});
  r.add({"add_noncontiguous",
         "a + b, a transposed and b strided in memory",
         {S::uniform({3, 4}).transposed(), S::uniform({3, 4}).strided()},
         [](In x) { return x[0] + x[1]; }});
  r.add({"add_scalar", "x + 1.5", {S::uniform({3, 4})}, [](In x) { return x[0] + 1.5; }});
  r.add({"sub", "a - b", {S::uniform({3, 4}), S::uniform({3, 4})}, [](In x) { return sub(x[0], x[1]); }});
  r.add({"sub_broadcast", "a - b, both operands broadcast", {S::uniform({2, 1, 4}), S::uniform({3, 1})}, [](In x) {
           return x[0] - x[1];
         }});
  r.add({"sub_scalar", "x - 0.75", {S::uniform({3, 4})}, [](In x) { return x[0] - 0.75; }});
  r.add({"rsub_scalar", "2 - x (rsub_scalar)", {S::uniform({3, 4})}, [](In x) { return rsub_scalar(x[0], 2.0); }});
  r.add({"mul", "a * b", {S::uniform({3, 4}), S::uniform({3, 4})}, [](In x) { return mul(x[0], x[1]); }});
  r.add({"mul_broadcast",
         "a * b, b broadcast over the middle dim",
         {S::uniform({2, 3, 4}), S::uniform({2, 1, 4})},
         [](In x) { return x[0] * x[1]; }});
  r.add({"mul_noncontiguous",
         "a * b, a strided and b transposed in memory",
         {S::uniform({4, 3}).strided(), S::uniform({4, 3}).transposed()},
         [](In x) { return x[0] * x[1]; }});
  r.add({"mul_same_input", "x * x (one input used twice: gradients accumulate)", {S::uniform({3, 4})}, [](In x) {
           return x[0] * x[0];
         }});
  r.add({"mul_scalar", "x * -3 and 0.5 * x", {S::uniform({3, 4})}, [](In x) {
           return mul_scalar(x[0], -3.0) + 0.5 * x[0];
         }});
  r.add({"div", "a / b, b away from 0", {S::uniform({3, 4}), S::away_from({3, 4}, {0.0}, 0.5, -2.0, 2.0)}, [](In x) {
           return div(x[0], x[1]);
         }});
  r.add({"div_broadcast",
         "a / b, both broadcast, b away from 0",
         {S::uniform({3, 1}), S::away_from({2, 1, 4}, {0.0}, 0.5, -2.0, 2.0)},
         [](In x) { return x[0] / x[1]; }});
  r.add({"div_scalar", "x / 4", {S::uniform({3, 4})}, [](In x) { return x[0] / 4.0; }});
  r.add({"rdiv_scalar", "2 / x, x away from 0", {S::away_from({3, 4}, {0.0}, 0.5, -2.0, 2.0)}, [](In x) {
           return 2.0 / x[0];
         }});

  // unary
  r.add({"neg", "-x", {S::uniform({3, 4})}, [](In x) { return neg(x[0]); }});
  r.add({"neg_strided", "-x of a strided input", {S::uniform({3, 4}).strided()}, [](In x) { return -x[0]; }});
  r.add({"exp", "exp(x)", {S::uniform({3, 4}, -2.0, 2.0)}, [](In x) { return exp(x[0]); }});
  r.add({"exp_transposed", "exp(x) of a transposed input", {S::uniform({3, 4}, -2.0, 2.0).transposed()}, [](In x) {
           return x[0].exp();
         }});
  r.add({"log", "log(x), x > 0", {S::positive({3, 4})}, [](In x) { return log(x[0]); }});
  r.add({"sqrt", "sqrt(x), x > 0", {S::positive({3, 4})}, [](In x) { return sqrt(x[0]); }});
  r.add({"rsqrt", "1/sqrt(x), x > 0", {S::positive({3, 4})}, [](In x) { return rsqrt(x[0]); }});
  r.add({"pow_scalar", "x^2.5, x > 0", {S::positive({3, 4})}, [](In x) { return pow(x[0], 2.5); }});
  r.add({"pow_scalar_negative", "x^-1.5, x > 0", {S::positive({3, 4})}, [](In x) { return pow(x[0], -1.5); }});
  r.add({"pow_scalar_square", "x^2 (the squared fast path), any sign", {S::uniform({3, 4})}, [](In x) {
           return pow(x[0], 2.0);
         }});
  r.add({"pow_scalar_cube", "x^3 with negative bases", {S::uniform({3, 4})}, [](In x) { return x[0].pow(3.0); }});
  r.add({"pow_tensor", "a^b, a > 0", {S::positive({3, 4}), S::uniform({3, 4}, -2.0, 2.0)}, [](In x) {
           return pow(x[0], x[1]);
         }});
  r.add({"pow_tensor_broadcast",
         "a^b, a > 0, b broadcast",
         {S::positive({2, 3, 4}), S::uniform({4}, -2.0, 2.0)},
         [](In x) { return pow(x[0], x[1]); }});
  r.add({"pow_tensor_base_only",
         "a^b with b not requiring grad",
         {S::positive({3, 4}), S::uniform({3, 4}, -2.0, 2.0).no_grad()},
         [](In x) { return x[0].pow(x[1]); }});
  r.add({"abs", "|x|, x away from 0", {S::away_from({3, 4}, {0.0})}, [](In x) { return abs(x[0]); }});
  r.add({"sign", "sign(x): zero gradient", {S::away_from({3, 4}, {0.0})}, [](In x) { return sign(x[0]); }});
  r.add({"relu", "relu(x), x away from 0", {S::away_from({3, 4}, {0.0})}, [](In x) { return relu(x[0]); }});
  r.add({"relu_transposed",
         "relu(x) of a transposed input, x away from 0",
         {S::away_from({3, 4}, {0.0}).transposed()},
         [](In x) { return F::relu(x[0]); }});
  r.add({"gelu", "gelu(x), exact (erf) form", {S::uniform({3, 4}, -3.0, 3.0)}, [](In x) { return gelu(x[0]); }});
  r.add({"gelu_tanh", "gelu(x), tanh approximation", {S::uniform({3, 4}, -3.0, 3.0)}, [](In x) {
           return F::gelu(x[0], GeluApproximation::Tanh);
         }});
  r.add({"gelu_strided", "gelu(x) of a strided input", {S::uniform({3, 4}, -3.0, 3.0).strided()}, [](In x) {
           return F::gelu(x[0]);
         }});
  r.add({"tanh", "tanh(x)", {S::uniform({3, 4}, -3.0, 3.0)}, [](In x) { return tanh(x[0]); }});
  r.add({"sigmoid", "sigmoid(x)", {S::uniform({3, 4}, -4.0, 4.0)}, [](In x) { return sigmoid(x[0]); }});
  r.add({"silu", "silu(x) = x * sigmoid(x)", {S::uniform({3, 4}, -4.0, 4.0)}, [](In x) { return silu(x[0]); }});
  r.add({"softplus", "softplus(x) = log(1 + exp(x))", {S::uniform({3, 4}, -4.0, 4.0)}, [](In x) {
           return softplus(x[0]);
         }});
  r.add(
      {"softplus_linear_region", "softplus(x) = x above the threshold 20", {S::uniform({2, 3}, 21.0, 25.0)}, [](In x) {
         return softplus(x[0]);
       }});
  r.add({"clamp",
         "clamp(x, -0.5, 0.7), x away from the bounds",
         {S::away_from({4, 5}, {-0.5, 0.7}, 0.05, -1.5, 1.5)},
         [](In x) { return clamp(x[0], -0.5, 0.7); }});
  r.add({"square", "square(x)", {S::uniform({3, 4})}, [](In x) { return square(x[0]); }});
  r.add({"maximum", "maximum(a, b), no ties", {S::distinct({3, 4}), S::distinct({3, 4}, 0.5)}, [](In x) {
           return maximum(x[0], x[1]);
         }});
  r.add({"maximum_broadcast",
         "maximum(a, b), b broadcast, no ties",
         {S::distinct({2, 3, 4}), S::distinct({3, 1}, 0.5)},
         [](In x) { return maximum(x[0], x[1]); }});
  r.add({"minimum", "minimum(a, b), no ties", {S::distinct({3, 4}), S::distinct({3, 4}, 0.5)}, [](In x) {
           return minimum(x[0], x[1]);
         }});
  r.add({"minimum_broadcast",
         "minimum(a, b), a broadcast, no ties",
         {S::distinct({4}), S::distinct({3, 4}, 0.5)},
         [](In x) { return minimum(x[0], x[1]); }});
  r.add({"where", "where(cond, a, b)", {S::mask({3, 4}), S::uniform({3, 4}), S::uniform({3, 4})}, [](In x) {
           return where(x[0], x[1], x[2]);
         }});
  r.add({"where_broadcast",
         "where(cond, a, b), all three broadcast",
         {S::mask({3, 1}), S::uniform({2, 3, 4}), S::uniform({4})},
         [](In x) { return where(x[0], x[1], x[2]); }});
  r.add({"masked_fill", "masked_fill(x, mask, -7)", {S::uniform({3, 4}), S::mask({3, 4})}, [](In x) {
           return masked_fill(x[0], x[1], -7.0);
         }});
  r.add({"masked_fill_broadcast",
         "masked_fill with a mask broadcast over rows",
         {S::uniform({2, 3, 4}), S::mask({3, 1})},
         [](In x) { return x[0].masked_fill(x[1], 3.0); }});
}

void add_reduce_cases(OpCaseRegistry& r) {
  r.add({"sum_all", "sum of every element", {S::uniform({3, 4})}, [](In x) { return sum(x[0]); }});
  r.add({"sum_dim", "sum over dim 1", {S::uniform({2, 3, 4})}, [](In x) { return sum(x[0], {1}); }});
  r.add({"sum_dims_keepdim", "sum over dims 0 and 2, keepdim", {S::uniform({2, 3, 4})}, [](In x) {
           return sum(x[0], {0, 2}, true);
         }});
  r.add({"sum_negative_dim", "sum over dim -1", {S::uniform({2, 3, 4})}, [](In x) { return x[0].sum({-1}); }});
  r.add({"sum_transposed", "sum over dim 0 of a transposed input", {S::uniform({3, 4}).transposed()}, [](In x) {
           return sum(x[0], {0});
         }});
  r.add({"sum_to", "sum_to a broadcast-compatible shape", {S::uniform({2, 3, 4})}, [](In x) {
           return sum_to(x[0], {3, 1});
         }});
  r.add({"mean_all", "mean of every element", {S::uniform({3, 4})}, [](In x) { return mean(x[0]); }});
  r.add({"mean_dim", "mean over dim 0", {S::uniform({3, 4})}, [](In x) { return mean(x[0], {0}); }});
  r.add({"mean_keepdim", "mean over dims 1 and 2, keepdim", {S::uniform({2, 3, 4})}, [](In x) {
           return x[0].mean({1, 2}, true);
         }});
  r.add({"mean_strided", "mean over dim 1 of a strided input", {S::uniform({3, 4}).strided()}, [](In x) {
           return mean(x[0], {1});
         }});
  r.add({"var_dim", "unbiased variance over dim 1", {S::uniform({3, 5})}, [](In x) { return var(x[0], {1}); }});
  r.add({"var_all", "unbiased variance of every element", {S::uniform({3, 4})}, [](In x) { return var(x[0], {}); }});
  r.add({"var_population_keepdim",
         "population variance (correction 0) over dims 0, 2, keepdim",
         {S::uniform({2, 3, 4})},
         [](In x) {
           return x[0].var({0, 2}, true, 0.0);
         }});
  r.add({"var_transposed", "variance over dim 0 of a transposed input", {S::uniform({4, 3}).transposed()}, [](In x) {
           return var(x[0], {0});
         }});
  r.add({"max_all", "largest element, no ties", {S::distinct({3, 4})}, [](In x) { return max(x[0]); }});
  r.add({"min_all", "smallest element, no ties", {S::distinct({3, 4})}, [](In x) { return x[0].min(); }});
  r.add({"max_dim", "max over dim 1 (values)", {S::distinct({2, 3, 4})}, [](In x) { return max(x[0], 1).values; }});
  r.add({"max_dim_keepdim", "max over dim 0, keepdim (values)", {S::distinct({3, 4})}, [](In x) {
           return max(x[0], 0, true).values;
         }});
  r.add({"max_dim_transposed", "max over dim 1 of a transposed input", {S::distinct({3, 4}).transposed()}, [](In x) {
           return max(x[0], 1).values;
         }});
  r.add({"min_dim", "min over dim -1 (values)", {S::distinct({2, 3, 4})}, [](In x) { return min(x[0], -1).values; }});
  r.add({"min_dim_keepdim", "min over dim 1, keepdim (values)", {S::distinct({3, 4})}, [](In x) {
           return min(x[0], 1, true).values;
         }});
}

void add_matmul_cases(OpCaseRegistry& r) {
  r.add({"matmul_1d", "dot product (4) @ (4)", {S::uniform({4}), S::uniform({4})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add(
      {"matmul_1d_2d", "(4) @ (4, 3)", {S::uniform({4}), S::uniform({4, 3})}, [](In x) { return matmul(x[0], x[1]); }});
  r.add(
      {"matmul_2d_1d", "(3, 4) @ (4)", {S::uniform({3, 4}), S::uniform({4})}, [](In x) { return matmul(x[0], x[1]); }});
  r.add({"matmul_2d", "(3, 4) @ (4, 5)", {S::uniform({3, 4}), S::uniform({4, 5})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add({"matmul_batched", "(2, 3, 4) @ (2, 4, 5)", {S::uniform({2, 3, 4}), S::uniform({2, 4, 5})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add({"matmul_batched_broadcast",
         "(2, 1, 3, 4) @ (3, 4, 2): batch dims broadcast",
         {S::uniform({2, 1, 3, 4}), S::uniform({3, 4, 2})},
         [](In x) { return matmul(x[0], x[1]); }});
  r.add({"matmul_batched_2d",
         "(2, 3, 4) @ (4, 5): one gemm over the flattened rows",
         {S::uniform({2, 3, 4}), S::uniform({4, 5})},
         [](In x) { return x[0].matmul(x[1]); }});
  r.add({"matmul_2d_batched", "(3, 4) @ (2, 4, 5)", {S::uniform({3, 4}), S::uniform({2, 4, 5})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add({"matmul_1d_batched", "(4) @ (2, 4, 3)", {S::uniform({4}), S::uniform({2, 4, 3})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add({"matmul_batched_1d", "(2, 3, 4) @ (4)", {S::uniform({2, 3, 4}), S::uniform({4})}, [](In x) {
           return matmul(x[0], x[1]);
         }});
  r.add({"matmul_transposed",
         "(3, 4) @ (4, 5), both stored transposed (BLAS trans flags)",
         {S::uniform({3, 4}).transposed(), S::uniform({4, 5}).transposed()},
         [](In x) { return matmul(x[0], x[1]); }});
  r.add({"matmul_strided",
         "(3, 4) @ (4, 5), both strided (copied for BLAS)",
         {S::uniform({3, 4}).strided(), S::uniform({4, 5}).strided()},
         [](In x) { return matmul(x[0], x[1]); }});
  r.add({"matmul_batched_transposed",
         "(2, 3, 4) @ (2, 4, 5), both stored transposed",
         {S::uniform({2, 3, 4}).transposed(), S::uniform({2, 4, 5}).transposed()},
         [](In x) { return matmul(x[0], x[1]); }});
  r.add({"matmul_transpose_view",
         "a @ b^T with the transpose taken inside (q @ k^T)",
         {S::uniform({2, 3, 4}), S::uniform({2, 5, 4})},
         [](In x) { return matmul(x[0], x[1].transpose(-1, -2)); }});
}

void add_nn_function_cases(OpCaseRegistry& r) {
  r.add(
      {"softmax", "softmax over the last dim", {S::uniform({3, 5}, -2.0, 2.0)}, [](In x) { return F::softmax(x[0]); }});
  r.add({"softmax_dim0", "softmax over dim 0", {S::uniform({4, 3}, -2.0, 2.0)}, [](In x) {
           return F::softmax(x[0], 0);
         }});
  r.add({"softmax_dim1_3d", "softmax over the middle dim of a 3-D input", {S::uniform({2, 3, 4}, -2.0, 2.0)}, [](In x) {
           return x[0].softmax(1);
         }});
  r.add({"softmax_transposed",
         "softmax over the last dim of a transposed input",
         {S::uniform({3, 5}, -2.0, 2.0).transposed()},
         [](In x) { return F::softmax(x[0]); }});
  r.add({"softmax_masked",
         "softmax after a -inf mask with one row fully masked",
         {S::uniform({3, 4}, -2.0, 2.0)},
         [](In x) {
           // Row 0 keeps one key, row 1 keeps three, row 2 keeps none.
           Tensor mask = bool_mask({0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1}, {3, 4}).to(x[0].device());
           return F::softmax(masked_fill(x[0], mask, -kInf));
         }});
  r.add({"log_softmax", "log_softmax over the last dim", {S::uniform({3, 5}, -2.0, 2.0)}, [](In x) {
           return F::log_softmax(x[0]);
         }});
  r.add({"log_softmax_dim0", "log_softmax over dim 0", {S::uniform({4, 3}, -2.0, 2.0)}, [](In x) {
           return F::log_softmax(x[0], 0);
         }});
  r.add({"log_softmax_dim1_3d",
         "log_softmax over the middle dim of a 3-D input",
         {S::uniform({2, 3, 4}, -2.0, 2.0).strided()},
         [](In x) { return x[0].log_softmax(1); }});
  r.add({"cross_entropy",
         "cross_entropy of (N, C) logits",
         {S::uniform({4, 5}, -2.0, 2.0), S::indices({4}, 0, 5)},
         [](In x) { return F::cross_entropy(x[0], x[1]); }});
  r.add({"cross_entropy_ignore_index",
         "cross_entropy with targets equal to ignore_index (-100)",
         {S::uniform({5, 4}, -2.0, 2.0), S::fixed_indices({5}, {1, -100, 3, 0, -100})},
         [](In x) { return F::cross_entropy(x[0], x[1]); }});
  r.add({"cross_entropy_smoothing",
         "cross_entropy with label smoothing 0.1",
         {S::uniform({4, 5}, -2.0, 2.0), S::indices({4}, 0, 5)},
         [](In x) { return F::cross_entropy(x[0], x[1], {.label_smoothing = 0.1}); }});
  r.add({"cross_entropy_3d",
         "cross_entropy of (B, T, C) logits with (B, T) targets",
         {S::uniform({2, 3, 4}, -2.0, 2.0), S::indices({2, 3}, 0, 4)},
         [](In x) { return F::cross_entropy(x[0], x[1]); }});
  r.add({"cross_entropy_3d_smoothing_ignore",
         "(B, T, C) cross_entropy, smoothing 0.2, custom ignore_index 2",
         {S::uniform({2, 3, 5}, -2.0, 2.0), S::fixed_indices({2, 3}, {2, 0, 4, 1, 2, 3})},
         [](In x) { return F::cross_entropy(x[0], x[1], {.ignore_index = 2, .label_smoothing = 0.2}); }});
  r.add({"cross_entropy_transposed",
         "cross_entropy of transposed logits",
         {S::uniform({4, 5}, -2.0, 2.0).transposed(), S::indices({4}, 0, 5)},
         [](In x) { return F::cross_entropy(x[0], x[1]); }});
  r.add({"linear", "x @ W^T + b", {S::uniform({3, 4}), S::uniform({5, 4}), S::uniform({5})}, [](In x) {
           return F::linear(x[0], x[1], x[2]);
         }});
  r.add({"linear_no_bias_1d", "x @ W^T for a 1-D x, no bias", {S::uniform({4}), S::uniform({3, 4})}, [](In x) {
           return F::linear(x[0], x[1]);
         }});
  r.add({"linear_3d", "(B, T, in) @ W^T + b", {S::uniform({2, 3, 4}), S::uniform({5, 4}), S::uniform({5})}, [](In x) {
           return F::linear(x[0], x[1], x[2]);
         }});
  r.add({"linear_gelu",
         "gelu(x @ W^T + b), erf form, the GELU in the gemm epilogue",
         {S::uniform({2, 3, 4}, -2.0, 2.0), S::uniform({5, 4}), S::uniform({5})},
         [](In x) { return F::linear_gelu(x[0], x[1], x[2]); }});
  r.add({"linear_gelu_tanh_no_bias_1d",
         "gelu_tanh(x @ W^T) for a 1-D x, no bias",
         {S::uniform({4}, -2.0, 2.0), S::uniform({3, 4})},
         [](In x) { return F::linear_gelu(x[0], x[1], Tensor(), GeluApproximation::Tanh); }});
  r.add({"linear_gelu_strided",
         "gelu(x @ W^T + b) for a transposed (non-contiguous) 3-D x",
         {S::uniform({3, 2, 4}, -2.0, 2.0), S::uniform({5, 4}), S::uniform({5})},
         [](In x) { return F::linear_gelu(x[0].transpose(0, 1), x[1], x[2]); }});
  r.add({"feed_forward",
         "gelu(x @ W1^T + b1) @ W2^T + b2 as one node (gelu'(z) kept, dz in one gemm)",
         {S::uniform({2, 3, 4}, -2.0, 2.0), S::uniform({6, 4}), S::uniform({6}), S::uniform({5, 6}), S::uniform({5})},
         [](In x) { return F::feed_forward(x[0], x[1], x[2], x[3], x[4]); }});
  r.add({"feed_forward_no_bias_strided",
         "gelu(x @ W1^T) @ W2^T for a transposed 3-D x, no biases",
         {S::uniform({3, 2, 4}, -2.0, 2.0), S::uniform({6, 4}), S::uniform({5, 6})},
         [](In x) { return F::feed_forward(x[0].transpose(0, 1), x[1], Tensor(), x[2], Tensor()); }});
  r.add({"embedding",
         "rows of a (6, 3) table picked by (2, 4) indices with repeats",
         {S::uniform({6, 3}), S::fixed_indices({2, 4}, {0, 5, 2, 2, 1, 0, 5, 3})},
         [](In x) { return F::embedding(x[0], x[1]); }});
  r.add({"embedding_1d", "rows picked by random 1-D indices", {S::uniform({6, 3}), S::indices({7}, 0, 6)}, [](In x) {
           return F::embedding(x[0], x[1]);
         }});
  r.add({"dropout",
         "dropout p=0.3 in training, reseeded so every call sees the same mask",
         {S::uniform({4, 5})},
         [](In x) {
           manual_seed(1234);
           return F::dropout(x[0], 0.3, true);
         }});
  r.add({"dropout_eval", "dropout in eval mode is the identity", {S::uniform({4, 5})}, [](In x) {
           return F::dropout(x[0], 0.3, false);
         }});
}

void add_shape_cases(OpCaseRegistry& r) {
  // indexing
  r.add({"index_select_dim0",
         "index_select rows with repeated indices",
         {S::uniform({5, 3}), S::fixed_indices({4}, {4, 0, 4, 2})},
         [](In x) { return index_select(x[0], 0, x[1]); }});
  r.add({"index_select_dim1",
         "index_select along the middle dim",
         {S::uniform({2, 5, 3}), S::indices({6}, 0, 5)},
         [](In x) { return index_select(x[0], 1, x[1]); }});
  r.add({"index_select_transposed",
         "index_select on a transposed input",
         {S::uniform({4, 5}).transposed(), S::fixed_indices({3}, {3, 1, 3})},
         [](In x) { return index_select(x[0], 1, x[1]); }});
  r.add({"gather_dim1", "gather along dim 1", {S::uniform({3, 4}), S::indices({3, 6}, 0, 4)}, [](In x) {
           return gather(x[0], 1, x[1]);
         }});
  r.add({"gather_dim0", "gather along dim 0", {S::uniform({4, 3}), S::indices({2, 3}, 0, 4)}, [](In x) {
           return gather(x[0], 0, x[1]);
         }});
  r.add({"gather_3d_strided",
         "gather along the middle dim of a strided 3-D input",
         {S::uniform({2, 4, 3}).strided(), S::indices({2, 5, 3}, 0, 4)},
         [](In x) { return gather(x[0], 1, x[1]); }});

  // joining and splitting
  r.add({"cat_dim0", "cat along dim 0", {S::uniform({2, 3}), S::uniform({4, 3})}, [](In x) {
           return cat({x[0], x[1]}, 0);
         }});
  r.add({"cat_dim1",
         "cat of three tensors along dim 1",
         {S::uniform({2, 1}), S::uniform({2, 3}), S::uniform({2, 2})},
         [](In x) {
           return cat({x[0], x[1], x[2]}, 1);
         }});
  r.add({"cat_noncontiguous",
         "cat of a transposed and a strided input along dim -1",
         {S::uniform({3, 4}).transposed(), S::uniform({3, 2}).strided()},
         [](In x) {
           return cat({x[0], x[1]}, -1);
         }});
  r.add({"stack_dim0",
         "stack of three tensors along a new dim 0",
         {S::uniform({2, 3}), S::uniform({2, 3}), S::uniform({2, 3})},
         [](In x) {
           return stack({x[0], x[1], x[2]}, 0);
         }});
  r.add({"stack_last", "stack along a new last dim", {S::uniform({2, 3}), S::uniform({2, 3})}, [](In x) {
           return stack({x[0], x[1]}, 2);
         }});
  r.add({"split", "split(3) along dim 1, pieces scaled and re-joined in another order", {S::uniform({3, 7})}, [](In x) {
           std::vector<Tensor> parts = split(x[0], 3, 1);  // widths 3, 3, 1
           return cat({parts[2] * 3.0, parts[0], parts[1] * -2.0}, 1);
         }});
  r.add({"split_sizes", "split into sizes {1, 4, 2} along dim 1", {S::uniform({3, 7})}, [](In x) {
           std::vector<Tensor> parts = x[0].split(std::vector<int64_t>{1, 4, 2}, 1);
           return cat({parts[1], parts[0] * 0.5, parts[2] * 4.0}, 1);
         }});
  r.add({"chunk", "chunk(3) along dim 0", {S::uniform({6, 2})}, [](In x) {
           std::vector<Tensor> parts = chunk(x[0], 3, 0);
           return cat({parts[2], parts[1] * 2.0, parts[0] * -1.0}, 0);
         }});

  // views
  r.add({"view", "view (3, 4) as (2, -1)", {S::uniform({3, 4})}, [](In x) { return x[0].view({2, -1}); }});
  r.add({"reshape", "reshape (2, 3, 4) to (4, 6)", {S::uniform({2, 3, 4})}, [](In x) { return x[0].reshape({4, 6}); }});
  r.add({"reshape_copy", "reshape of a transposed input (needs a copy)", {S::uniform({3, 4}).transposed()}, [](In x) {
           return x[0].reshape({12});
         }});
  r.add({"permute", "permute (2, 0, 1)", {S::uniform({2, 3, 4})}, [](In x) { return x[0].permute({2, 0, 1}); }});
  r.add({"transpose", "transpose(0, 2)", {S::uniform({2, 3, 4})}, [](In x) { return x[0].transpose(0, 2); }});
  r.add({"t", "2-D transpose", {S::uniform({3, 4})}, [](In x) { return x[0].t(); }});
  r.add({"slice_step", "slice(1, 1, 6, step 2)", {S::uniform({5, 6})}, [](In x) { return x[0].slice(1, 1, 6, 2); }});
  r.add({"slice_negative", "slice(0, -3, -1)", {S::uniform({5, 3})}, [](In x) { return x[0].slice(0, -3, -1); }});
  r.add({"narrow", "narrow(0, 1, 3)", {S::uniform({5, 3})}, [](In x) { return x[0].narrow(0, 1, 3); }});
  r.add({"select", "select(1, 2)", {S::uniform({3, 4, 2})}, [](In x) { return x[0].select(1, 2); }});
  r.add({"select_negative", "select(0, -1) of a strided input", {S::uniform({3, 4}).strided()}, [](In x) {
           return x[0].select(0, -1);
         }});
  r.add({"expand", "expand (3, 1) to (2, 3, 4)", {S::uniform({3, 1})}, [](In x) { return x[0].expand({2, 3, 4}); }});
  r.add({"squeeze", "squeeze every size-1 dim", {S::uniform({3, 1, 4, 1})}, [](In x) { return x[0].squeeze(); }});
  r.add({"squeeze_dim", "squeeze(1)", {S::uniform({3, 1, 4})}, [](In x) { return x[0].squeeze(1); }});
  r.add({"unsqueeze", "unsqueeze(1) and unsqueeze(-1)", {S::uniform({3, 4})}, [](In x) {
           return x[0].unsqueeze(1).unsqueeze(-1);
         }});
  r.add({"flatten", "flatten everything", {S::uniform({2, 3, 4})}, [](In x) { return x[0].flatten(); }});
  r.add({"flatten_range", "flatten(1, 2) of a transposed input", {S::uniform({2, 3, 4}).transposed()}, [](In x) {
           return x[0].flatten(1, 2);
         }});
  r.add({"unflatten", "unflatten(1, {3, 4})", {S::uniform({2, 12})}, [](In x) { return x[0].unflatten(1, {3, 4}); }});
  r.add({"contiguous", "contiguous() of a transposed input", {S::uniform({3, 4}).transposed()}, [](In x) {
           return contiguous(x[0]);
         }});
  r.add({"clone", "clone()", {S::uniform({3, 4})}, [](In x) { return x[0].clone() * 2.0; }});
  r.add({"to_dtype_roundtrip",
         "to(float32) and back to float64 (large eps and atol 1e-6: float32 rounding)",
         {S::uniform({3, 4})},
         [](In x) { return x[0].to(kFloat32).to(kFloat64); },
         GradcheckOptions{.eps = 0.05, .atol = 1e-6, .rtol = 1e-5}});
  r.add({"tril", "lower triangle", {S::uniform({4, 4})}, [](In x) { return tril(x[0]); }});
  r.add({"tril_diagonal", "tril(x, 1) of a (3, 5) input", {S::uniform({3, 5})}, [](In x) { return tril(x[0], 1); }});
  r.add({"triu", "upper triangle", {S::uniform({4, 4})}, [](In x) { return triu(x[0]); }});
  r.add({"triu_batched", "triu(x, -1) of a batch", {S::uniform({2, 3, 4})}, [](In x) { return triu(x[0], -1); }});
}

}  // namespace heed::op_cases
