// tests/test_ops_nn.cpp — the functional API (heed::F) against naive float64 loops: softmax and
// log_softmax (any dim and layout, stability, -inf masks with fully masked rows giving zeros
// and no NaN gradient), cross_entropy (ignore_index, label smoothing, (B,T,C), all-ignored
// batch), linear, dropout (statistics, determinism, eval identity, backward mask) and misuse.
// Finite-difference gradients: tests/test_gradcheck.cpp.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_cases.h"

using namespace heed;
using op_cases::InputSpec;
using op_cases::Layout;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

void check_values(const Tensor& got, const Dims& shape, const std::vector<double>& want, double rtol = 1e-12,
                  double atol = 1e-13) {
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

Tensor input(InputSpec spec, const Dims& shape, Layout layout, uint64_t seed, bool grad = false) {
  spec.shape = shape;
  spec.layout = layout;
  spec.requires_grad = grad;
  return op_cases::make_input(spec, seed);
}

// Softmax (or log-softmax) along `dim` of row-major `v`, max-subtracted, in double; a line
// whose maximum is -inf gives zeros (log: -inf).
std::vector<double> naive_softmax(const std::vector<double>& v, const Dims& shape, int dim, bool log) {
  if (shape.size() == 0) return {log ? 0.0 : 1.0};
  const int64_t n = shape[dim];
  int64_t stride = 1;
  for (int d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  std::vector<double> out(v.size());
  for (int64_t k = 0; k < static_cast<int64_t>(v.size()); ++k) {
    if ((k / stride) % n != 0) continue;  // k starts a line along `dim`
    double mx = -kInf;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, v[static_cast<size_t>(k + j * stride)]);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += std::exp(v[static_cast<size_t>(k + j * stride)] - mx);
    for (int64_t j = 0; j < n; ++j) {
      const double x = v[static_cast<size_t>(k + j * stride)];
      double y;
      if (mx == -kInf)
        y = log ? -kInf : 0.0;
      else
        y = log ? x - mx - std::log(total) : std::exp(x - mx) / total;
      out[static_cast<size_t>(k + j * stride)] = y;
    }
  }
  return out;
}

// Mean cross-entropy over non-ignored rows of (rows, classes) logits; 0 when all ignored.
double naive_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t classes,
                           int64_t ignore_index, double smoothing) {
  double total = 0;
  int64_t valid = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore_index) continue;
    const double* row = x.data() + r * static_cast<size_t>(classes);
    double mx = -kInf, sum_x = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, row[c]);
    double s = 0;
    for (int64_t c = 0; c < classes; ++c) {
      s += std::exp(row[c] - mx);
      sum_x += row[c];
    }
    const double lse = mx + std::log(s);
    total += lse - (1.0 - smoothing) * row[t[r]] - smoothing / static_cast<double>(classes) * sum_x;
    ++valid;
  }
  return valid == 0 ? 0.0 : total / static_cast<double>(valid);
}

// d loss / d logits of the mean cross-entropy: (softmax - (1-s) onehot - s/C) / valid.
std::vector<double> naive_cross_entropy_grad(const std::vector<double>& x, const std::vector<int64_t>& t,
                                             int64_t classes, int64_t ignore_index, double smoothing) {
  int64_t valid = 0;
  for (int64_t target : t) valid += target != ignore_index;
  std::vector<double> g(x.size(), 0.0);
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore_index) continue;
    const std::vector<double> row(x.begin() + static_cast<int64_t>(r) * classes,
                                  x.begin() + static_cast<int64_t>(r + 1) * classes);
    const std::vector<double> p = naive_softmax(row, {classes}, 0, false);
    for (int64_t c = 0; c < classes; ++c)
      g[r * static_cast<size_t>(classes) + static_cast<size_t>(c)] =
          (p[static_cast<size_t>(c)] - (c == t[r] ? 1.0 - smoothing : 0.0) - smoothing / static_cast<double>(classes)) /
          static_cast<double>(valid);
  }
  return g;
}

std::vector<Layout> layouts_for(const Dims& shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  if (shape.size() >= 1) out.push_back(Layout::Strided);
  return out;
}

}  // namespace

// ---- softmax / log_softmax --------------------------------------------------------------------

TEST_CASE("nn: softmax and log_softmax match a float64 loop along any dim and layout") {
  struct ShapeDim {
    Dims shape;
    int64_t dim;
  };
  const std::vector<ShapeDim> cases = {{{3, 5}, -1}, {{4, 3}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, 0}, {{2, 3, 4}, 2},
                                       {{7}, 0},     {{}, 0},     {{3, 1}, 1},    {{1, 6}, 0}};
  uint64_t seed = 10;
  for (const ShapeDim& c : cases) {
    for (Layout layout : layouts_for(c.shape)) {
      CAPTURE(shape_str(c.shape));
      CAPTURE(c.dim);
      CAPTURE(static_cast<int>(layout));
      const Tensor x = input(InputSpec::uniform({}, -4.0, 4.0), c.shape, layout, ++seed);
      const int dim = c.shape.size() == 0 ? 0 : static_cast<int>(c.dim < 0 ? c.dim + c.shape.size() : c.dim);
      const std::vector<double> v = x.to_vector<double>();
      check_values(F::softmax(x, c.dim), c.shape, naive_softmax(v, c.shape, dim, false));
      check_values(F::log_softmax(x, c.dim), c.shape, naive_softmax(v, c.shape, dim, true));
      check_values(x.softmax(c.dim), c.shape, naive_softmax(v, c.shape, dim, false));
    }
  }
}

TEST_CASE("nn: softmax is stable for large logits and float32 stays close to float64") {
  const Tensor big = tensor({{1000.0, 1001.0, 1002.0}, {-1000.0, -1001.0, -1002.0}}, kFloat64);
  const std::vector<double> v = big.to_vector<double>();
  check_values(F::softmax(big), {2, 3}, naive_softmax(v, {2, 3}, 1, false));
  check_values(F::log_softmax(big), {2, 3}, naive_softmax(v, {2, 3}, 1, true));
  CHECK(isfinite_all(F::softmax(big.to(kFloat32))));

  const Tensor x = input(InputSpec::uniform({}, -6.0, 6.0), {5, 33}, Layout::Transposed, 3);
  const std::vector<double> vf = x.to(kFloat32).to_vector<double>();
  for (int dim : {0, 1}) {
    check_values(F::softmax(x.to(kFloat32), dim), {5, 33}, naive_softmax(vf, {5, 33}, dim, false), 1e-5, 1e-7);
    check_values(F::log_softmax(x.to(kFloat32), dim), {5, 33}, naive_softmax(vf, {5, 33}, dim, true), 1e-5, 1e-5);
  }
  const std::vector<double> vh = x.to(kFloat16).to_vector<double>();
  const Tensor yh = F::softmax(x.to(kFloat16), 1);
  CHECK(yh.dtype() == kFloat16);
  check_values(yh, {5, 33}, naive_softmax(vh, {5, 33}, 1, false), 2e-3, 1e-4);
}

TEST_CASE("nn: -inf masks, fully masked rows give zeros and no NaN gradient") {
  // Row 0: one key kept; row 1: three kept; row 2: every key masked (a padded query).
  const std::vector<bool> masked = {false, true, true, true, true, false, false, false, true, true, true, true};
  const Tensor mask = from_vector(masked, {3, 4});
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    Tensor logits = input(InputSpec::uniform({}, -2.0, 2.0), {3, 4}, Layout::Contiguous, 5).to(dtype);
    logits.requires_grad_();
    const Tensor weights = input(InputSpec::uniform({}), {3, 4}, Layout::Contiguous, 6).to(dtype);
    const Tensor scores = masked_fill(logits, mask, -kInf);
    const std::vector<double> vs = scores.to_vector<double>();
    const Tensor y = F::softmax(scores);
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
    const std::vector<double> want = naive_softmax(vs, {3, 4}, 1, false);
    check_values(y, {3, 4}, want, tol, tol);
    for (int c = 0; c < 4; ++c) CHECK(y.at<double>({2, c}) == 0.0);
    check_values(F::log_softmax(scores), {3, 4}, naive_softmax(vs, {3, 4}, 1, true), tol, tol);

    // Backward: d sum(w * softmax) / d logits = y * (w - sum(w * y)), zero where masked.
    sum(y * weights).backward();
    REQUIRE(logits.grad().defined());
    CHECK(isfinite_all(logits.grad()));
    const std::vector<double> vw = weights.to_vector<double>();
    std::vector<double> want_grad(12, 0.0);
    for (int r = 0; r < 3; ++r) {
      double dot = 0;
      for (int c = 0; c < 4; ++c) dot += vw[static_cast<size_t>(r * 4 + c)] * want[static_cast<size_t>(r * 4 + c)];
      for (int c = 0; c < 4; ++c)
        want_grad[static_cast<size_t>(r * 4 + c)] =
            want[static_cast<size_t>(r * 4 + c)] * (vw[static_cast<size_t>(r * 4 + c)] - dot);
    }
    check_values(logits.grad(), {3, 4}, want_grad, tol, tol);

    // log_softmax: the masked outputs are -inf; a loss that ignores them has a finite gradient
    // that is zero on the fully masked row.
    logits.zero_grad();
    const Tensor logp = F::log_softmax(masked_fill(logits, mask, -kInf));
    sum(masked_fill(logp, mask, 0.0) * weights).backward();
    CHECK(isfinite_all(logits.grad()));
    for (int c = 0; c < 4; ++c) CHECK(logits.grad().at<double>({2, c}) == 0.0);
  }
  // A fully -inf input (no masked_fill in between) also has a zero gradient.
  Tensor all_masked = full({2, 3}, -kInf, kFloat64).requires_grad_();
  Tensor y = F::softmax(all_masked);
  check_values(y, {2, 3}, std::vector<double>(6, 0.0));
  sum(y).backward();
  check_values(all_masked.grad(), {2, 3}, std::vector<double>(6, 0.0));
  all_masked.zero_grad();
  Tensor logp = F::log_softmax(all_masked);
  check_values(logp, {2, 3}, std::vector<double>(6, -kInf));
  logp.backward(ones({2, 3}, kFloat64));
  check_values(all_masked.grad(), {2, 3}, std::vector<double>(6, 0.0));
}

TEST_CASE("nn: a NaN poisons only its own row") {
  const Tensor x = tensor({{1.0, kNaN, 0.0}, {0.5, 1.5, -1.0}}, kFloat64);
  const Tensor y = F::softmax(x);
  for (int c = 0; c < 3; ++c) CHECK(std::isnan(y.at<double>({0, c})));
  check_values(y.select(0, 1), {3}, naive_softmax({0.5, 1.5, -1.0}, {3}, 0, false));
}

// ---- cross_entropy --------------------------------------------------------------------------

TEST_CASE("nn: cross_entropy matches a float64 loop, with ignore_index and label smoothing") {
  struct Case {
    Dims logits_shape;
    std::vector<int64_t> targets;  // empty: random in [0, C)
    F::CrossEntropyOptions options;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {{4, 5}, {}, {}, Layout::Contiguous},
      {{6, 3}, {}, {}, Layout::Transposed},
      {{5, 4}, {1, -100, 3, 0, -100}, {}, Layout::Contiguous},
      {{5, 4}, {1, 2, 3, 0, 2}, {.ignore_index = 2}, Layout::Strided},
      {{4, 5}, {}, {.label_smoothing = 0.1}, Layout::Contiguous},
      {{4, 5}, {4, -100, 0, 2}, {.label_smoothing = 0.3}, Layout::Transposed},
      {{4, 5}, {}, {.label_smoothing = 1.0}, Layout::Contiguous},
      {{2, 3, 4}, {}, {}, Layout::Contiguous},  // (B, T, C)
      {{2, 3, 4}, {3, -100, 0, 1, 2, -100}, {.label_smoothing = 0.2}, Layout::Transposed},
      {{1, 1}, {0}, {}, Layout::Contiguous},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.logits_shape));
    CAPTURE(c.options.label_smoothing);
    CAPTURE(c.options.ignore_index);
    const int64_t classes = c.logits_shape.back();
    const Dims target_shape(c.logits_shape.begin(), c.logits_shape.end() - 1);
    Tensor logits = input(InputSpec::uniform({}, -3.0, 3.0), c.logits_shape, c.layout, ++seed, true);
    const Tensor targets = c.targets.empty()
                               ? op_cases::make_input(InputSpec::indices(target_shape, 0, classes), ++seed)
                               : from_vector(c.targets, target_shape);
    const std::vector<double> vx = logits.to_vector<double>();
    const std::vector<int64_t> vt = targets.to_vector<int64_t>();
    const Tensor loss = F::cross_entropy(logits, targets, c.options);
    CHECK(loss.dtype() == kFloat64);
    check_values(loss, {}, {naive_cross_entropy(vx, vt, classes, c.options.ignore_index, c.options.label_smoothing)});
    loss.backward();
    check_values(logits.grad().reshape({-1}), {shape_numel(c.logits_shape)},
                 naive_cross_entropy_grad(vx, vt, classes, c.options.ignore_index, c.options.label_smoothing));
    // int32 targets give the same loss; float32 logits stay close.
    check_values(F::cross_entropy(logits, targets.to(kInt32), c.options), {}, {loss.item<double>()});
    const std::vector<double> vx32 = logits.to(kFloat32).to_vector<double>();
    const Tensor loss32 = F::cross_entropy(logits.detach().to(kFloat32), targets, c.options);
    CHECK(loss32.dtype() == kFloat32);
    check_values(loss32, {},
                 {naive_cross_entropy(vx32, vt, classes, c.options.ignore_index, c.options.label_smoothing)}, 1e-5,
                 1e-6);
  }
}

TEST_CASE("nn: cross_entropy equals -mean(log_softmax picked at the targets)") {
  Tensor logits = input(InputSpec::uniform({}, -3.0, 3.0), {6, 7}, Layout::Contiguous, 7);
  const Tensor targets = op_cases::make_input(InputSpec::indices({6, 1}, 0, 7), 8);
  const Tensor composed = neg(mean(gather(F::log_softmax(logits), 1, targets)));
  check_values(F::cross_entropy(logits, targets.reshape({6})), {}, {composed.item<double>()});
}

TEST_CASE("nn: cross_entropy of an all-ignored batch is 0 with a zero gradient") {
  Tensor logits = input(InputSpec::uniform({}), {3, 4}, Layout::Contiguous, 9, true);
  const Tensor targets = from_vector<int64_t>({-100, -100, -100}, {3});
  const Tensor loss = F::cross_entropy(logits, targets);
  check_values(loss, {}, {0.0});
  loss.backward();
  REQUIRE(logits.grad().defined());
  check_values(logits.grad(), {3, 4}, std::vector<double>(12, 0.0));
  // Also with smoothing, and with no rows at all.
  check_values(F::cross_entropy(logits.detach(), targets, {.label_smoothing = 0.5}), {}, {0.0});
  check_values(F::cross_entropy(zeros({0, 4}, kFloat64), zeros({0}, kInt64)), {}, {0.0});
}

TEST_CASE("nn: cross_entropy is stable for large logits") {
  const Tensor logits = tensor({{1000.0, 0.0, -1000.0}, {-500.0, 500.0, 499.0}}, kFloat64);
  const Tensor targets = from_vector<int64_t>({0, 2}, {2});
  const double want = naive_cross_entropy(logits.to_vector<double>(), {0, 2}, 3, -100, 0.0);
  check_values(F::cross_entropy(logits, targets), {}, {want});
  CHECK(isfinite_all(F::cross_entropy(logits.to(kFloat32), targets)));
}

// ---- linear ---------------------------------------------------------------------------------

TEST_CASE("nn: linear matches x @ W^T + b written as loops") {
  uint64_t seed = 300;
  for (const Dims& x_shape : {Dims{3, 4}, Dims{2, 3, 4}, Dims{4}}) {
    for (bool with_bias : {true, false}) {
      CAPTURE(shape_str(x_shape));
      CAPTURE(with_bias);
      const Tensor x = input(InputSpec::uniform({}), x_shape, Layout::Strided, ++seed);
      const Tensor w = input(InputSpec::uniform({}), {5, 4}, Layout::Transposed, ++seed);
      const Tensor b = with_bias ? input(InputSpec::uniform({}), {5}, Layout::Contiguous, ++seed) : Tensor();
      const std::vector<double> vx = x.to_vector<double>(), vw = w.to_vector<double>();
      const std::vector<double> vb = with_bias ? b.to_vector<double>() : std::vector<double>(5, 0.0);
      const int64_t rows = x.numel() / 4;
      std::vector<double> want;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < 5; ++o) {
          double s = vb[static_cast<size_t>(o)];
          for (int64_t i = 0; i < 4; ++i) s += vx[static_cast<size_t>(r * 4 + i)] * vw[static_cast<size_t>(o * 4 + i)];
          want.push_back(s);
        }
      Dims out_shape = x_shape;
      out_shape[out_shape.size() - 1] = 5;
      check_values(F::linear(x, w, b), out_shape, want);
    }
  }
}

// ---- dropout --------------------------------------------------------------------------------

TEST_CASE("nn: dropout statistics") {
  manual_seed(123);
  const double p = 0.3;
  const Tensor x = ones({200, 500});
  const Tensor y = F::dropout(x, p, true);
  const std::vector<float> v = y.to_vector<float>();
  int64_t zeros_count = 0;
  bool kept_scaled = true;
  double total = 0;
  for (float f : v) {
    if (f == 0.0f) {
      ++zeros_count;
    } else {
      kept_scaled = kept_scaled && std::fabs(f - 1.0 / (1.0 - p)) < 1e-6;
    }
    total += f;
  }
  const double n = static_cast<double>(v.size());
  // 100000 Bernoulli(0.3) draws: standard deviation of the fraction is 0.00145.
  CHECK(std::fabs(static_cast<double>(zeros_count) / n - p) < 0.01);
  CHECK(kept_scaled);
  CHECK(std::fabs(total / n - 1.0) < 0.015);  // inverted dropout keeps the mean
  // Other probabilities.
  for (double q : {0.1, 0.5, 0.9}) {
    const std::vector<float> w = F::dropout(x, q, true).to_vector<float>();
    int64_t dropped = 0;
    for (float f : w) dropped += f == 0.0f;
    CHECK(std::fabs(static_cast<double>(dropped) / n - q) < 0.01);
  }
}

TEST_CASE("nn: dropout is deterministic for a seed and independent of the thread count") {
  const Tensor x = input(InputSpec::uniform({}, 0.5, 1.5), {37, 41}, Layout::Transposed, 11);
  manual_seed(5);
  const std::vector<double> first = F::dropout(x, 0.4).to_vector<double>();
  const std::vector<double> next = F::dropout(x, 0.4).to_vector<double>();
  CHECK(first != next);  // the generator advanced
  const int threads = get_num_threads();
  set_num_threads(1);
  manual_seed(5);
  CHECK(F::dropout(x, 0.4).to_vector<double>() == first);
  set_num_threads(threads);
  manual_seed(6);
  CHECK(F::dropout(x, 0.4).to_vector<double>() != first);
  // The mask depends on the position, not on the values or the dtype.
  manual_seed(5);
  const std::vector<double> doubled = F::dropout(x * 2.0, 0.4).to_vector<double>();
  manual_seed(5);
  const std::vector<float> as_float = F::dropout(x.to(kFloat32), 0.4).to_vector<float>();
  for (size_t i = 0; i < first.size(); ++i) {
    CHECK(doubled[i] == doctest::Approx(2.0 * first[i]));
    CHECK((as_float[i] == 0.0f) == (first[i] == 0.0));
  }
}

TEST_CASE("nn: dropout in eval mode, p = 0 and p = 1") {
  const Tensor x = input(InputSpec::uniform({}), {4, 6}, Layout::Strided, 12);
  const std::vector<double> vx = x.to_vector<double>();
  const uint64_t offset = default_generator().offset();
  check_values(F::dropout(x, 0.5, false), {4, 6}, vx);
  check_values(F::dropout(x, 0.0, true), {4, 6}, vx);
  CHECK(default_generator().offset() == offset);  // no random numbers drawn
  check_values(F::dropout(x, 1.0, true), {4, 6}, std::vector<double>(24, 0.0));
  // Integer tensors pass through in eval mode.
  const Tensor ints = from_vector<int64_t>({1, 2, 3}, {3});
  CHECK(F::dropout(ints, 0.5, false).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("nn: dropout backward uses the forward mask") {
  Tensor x = input(InputSpec::uniform({}, 0.5, 1.5), {8, 9}, Layout::Contiguous, 13, true);
  const Tensor w = input(InputSpec::uniform({}), {8, 9}, Layout::Contiguous, 14);
  manual_seed(99);
  const double p = 0.25;
  const Tensor y = F::dropout(x, p);
  // Draw more numbers before backward: the mask must come from the saved stream position.
  (void)randn({100});
  sum(y * w).backward();
  const std::vector<double> vy = y.to_vector<double>(), vw = w.to_vector<double>();
  std::vector<double> want(vy.size());
  for (size_t i = 0; i < vy.size(); ++i) want[i] = vy[i] != 0.0 ? vw[i] / (1.0 - p) : 0.0;
  check_values(x.grad(), {8, 9}, want);
}

// ---- misuse ---------------------------------------------------------------------------------

TEST_CASE("nn: misuse raises heed::Error naming the op") {
  const Tensor logits = zeros({4, 5});
  const Tensor targets = zeros({4}, kInt64);
  CHECK_THROWS_WITH_AS(
      F::cross_entropy(logits, zeros({3}, kInt64)),
      doctest::Contains("heed::cross_entropy: targets of shape [3] do not match logits of shape [4, 5]"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(logits, from_vector<int64_t>({0, 5, 1, 1}, {4})),
                       doctest::Contains("heed::cross_entropy: target 5 at position 1"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(logits, from_vector<int64_t>({0, 1, -1, 1}, {4})),
                       doctest::Contains("heed::cross_entropy: target -1"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(logits, zeros({4})), doctest::Contains("heed::cross_entropy:"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(zeros({4, 5}, kInt64), targets), doctest::Contains("heed::cross_entropy:"),
                       Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(logits, targets, {.label_smoothing = 1.5}),
                       doctest::Contains("heed::cross_entropy: label_smoothing"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(logits, targets, {.label_smoothing = -0.1}),
                       doctest::Contains("heed::cross_entropy:"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(scalar_tensor(1.0), zeros({}, kInt64)),
                       doctest::Contains("heed::cross_entropy:"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(zeros({4, 0}), targets), doctest::Contains("heed::cross_entropy:"), Error);
  CHECK_THROWS_WITH_AS(F::cross_entropy(Tensor(), targets), doctest::Contains("heed::cross_entropy:"), Error);

  CHECK_THROWS_WITH_AS(F::softmax(zeros({3, 4}), 2), doctest::Contains("heed::softmax: dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(F::log_softmax(zeros({3, 4}), -3), doctest::Contains("heed::log_softmax:"), Error);
  CHECK_THROWS_WITH_AS(F::softmax(zeros({3}, kInt64)), doctest::Contains("heed::softmax:"), Error);
  CHECK_THROWS_WITH_AS(F::log_softmax(Tensor()), doctest::Contains("heed::log_softmax:"), Error);

  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}), zeros({4})), doctest::Contains("heed::linear: weight must be 2-D"),
                       Error);
  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}), zeros({5, 3})),
                       doctest::Contains("heed::linear: input of shape [3, 4] does not match weight of shape [5, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}), zeros({5, 4}), zeros({4})),
                       doctest::Contains("heed::linear: bias must have shape [5]"), Error);
  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}, kInt64), zeros({5, 4})),
                       doctest::Contains("heed::linear: expected a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}), zeros({5, 4}, kInt32)), doctest::Contains("heed::linear:"), Error);
  CHECK_THROWS_WITH_AS(F::linear(zeros({3, 4}), zeros({5, 4}), zeros({1, 5})), doctest::Contains("heed::linear:"),
                       Error);

  CHECK_THROWS_WITH_AS(F::dropout(logits, -0.1), doctest::Contains("heed::dropout: probability must be in [0, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(F::dropout(logits, 1.5), doctest::Contains("heed::dropout:"), Error);
  CHECK_THROWS_WITH_AS(F::dropout(targets, 0.5, true), doctest::Contains("heed::dropout:"), Error);
  CHECK_THROWS_WITH_AS(F::dropout(Tensor(), 0.5), doctest::Contains("heed::dropout:"), Error);
}
