// tests/test_edge_cases.cpp — numerical edge cases and their documented results:
//  * softmax / log_softmax: a row that is entirely -inf gives 0 / -inf and a zero gradient;
//    -inf entries of a row get probability exactly 0; a NaN or +inf in a row makes that row
//    NaN (as in PyTorch) and leaves the other rows alone; huge finite logits do not overflow.
//  * attention: a fully masked query row gives output 0, weights 0 and zero gradients on
//    every path (fused, composed, explicit flash), also through padding lengths of 0.
//  * cross_entropy: log-softmax is never computed as log(softmax), so a probability that
//    underflows to 0 still gives the exact finite loss; a -inf logit on a non-target class
//    has gradient exactly 0; a -inf logit on the target gives +inf (finite gradient); with
//    label smoothing any -inf logit gives +inf (as in PyTorch); all targets ignored: loss 0.
//    float32 rows take the vectorised path (exp in vector lanes, the sum in double): close to
//    float64 also for a confident row over 50,000 classes, and a NaN anywhere in a row still
//    gives a NaN loss.
//  * log(0) = -inf, log(x < 0) = NaN, d/dx log at 0 = +inf; sqrt'(0) = +inf.
//  * clip_grad_norm_: all-zero gradients give norm 0 and stay zero (no 0/0); max_norm 0
//    zeroes the gradients; NaN/Inf gradients return the non-finite norm untouched or raise.
//  * layer_norm of a constant row: output = bias, finite gradient (variance 0 + eps).
// References are computed here in float64.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace heed;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

// Softmax of one row in float64, -inf entries giving exactly 0.
std::vector<double> reference_softmax(const std::vector<double>& row) {
  double mx = -kInf;
  for (double v : row) mx = std::max(mx, v);
  std::vector<double> out(row.size());
  double total = 0;
  for (size_t i = 0; i < row.size(); ++i) total += out[i] = std::exp(row[i] - mx);
  for (double& v : out) v /= total;
  return out;
}

}  // namespace

TEST_CASE("softmax: -inf entries, fully masked rows, NaN and +inf rows, huge logits") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    const std::vector<std::vector<double>> rows = {
        {1.0, -kInf, 2.0, -kInf},      // partly masked
        {-kInf, -kInf, -kInf, -kInf},  // fully masked
        {1.0, kNaN, 0.0, 3.0},         // NaN
        {kInf, 1.0, 0.0, -kInf},       // +inf
        {1e30, -1e30, 1e30, 0.0},      // huge but finite (float32 holds 1e30)
    };
    std::vector<double> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    Tensor x = from_vector(flat, {5, 4}).to(dtype).requires_grad_();
    const Tensor y = F::softmax(x, -1);
    const Tensor logy = F::log_softmax(x, -1);
    const std::vector<double> got = values_of(y), got_log = values_of(logy);
    const std::vector<double> partly = reference_softmax(rows[0]);
    for (int c = 0; c < 4; ++c) {
      CHECK(got[c] == doctest::Approx(partly[c]).epsilon(1e-6));
      CHECK(got[4 + c] == 0.0);        // fully masked: zeros
      CHECK(got_log[4 + c] == -kInf);  // and -inf log-probabilities
      CHECK(std::isnan(got[8 + c]));   // NaN row
      CHECK(std::isnan(got[12 + c]));  // +inf row (inf - inf)
    }
    CHECK(got[1] == 0.0);  // -inf entries get exactly 0
    CHECK(got[3] == 0.0);
    CHECK(got_log[1] == -kInf);
    // 1e30 twice: 0.5 each, the others exactly 0 after underflow, and log-softmax finite
    // where the probability underflows (log(0) is never taken).
    CHECK(got[16] == doctest::Approx(0.5));
    CHECK(got[18] == doctest::Approx(0.5));
    CHECK(got[17] == 0.0);
    CHECK(got_log[16] == doctest::Approx(-std::log(2.0)));
    CHECK(got_log[17] == doctest::Approx(-2e30).epsilon(1e-6));
    CHECK(std::isfinite(got_log[19]));

    // Gradients of the well-defined rows: the fully masked row gets exactly zero, the partly
    // masked row gets zero on its -inf entries.
    const Tensor weights = from_vector(std::vector<double>{0.3, -1.0, 0.7, 2.0}, {1, 4}).to(dtype);
    Tensor picked = cat({y.slice(0, 0, 2), logy.slice(0, 1, 2).masked_fill(logy.slice(0, 1, 2) == -kInf, 0.0)}, 0);
    (picked * weights).sum().backward();
    const std::vector<double> g = values_of(x.grad());
    CHECK(g[1] == 0.0);
    CHECK(g[3] == 0.0);
    for (int c = 0; c < 4; ++c) CHECK(g[4 + c] == 0.0);
    // Softmax gradient of row 0 in float64: dy_j/dx_i = y_j (delta_ij - y_i).
    for (int i : {0, 2}) {
      double expected = 0;
      for (int j = 0; j < 4; ++j)
        expected += (j == 0 ? 0.3 : j == 1 ? -1.0 : j == 2 ? 0.7 : 2.0) * partly[j] * ((i == j) - partly[i]);
      CHECK(g[i] == doctest::Approx(expected).epsilon(1e-5));
    }
  }
}

TEST_CASE("attention: a fully masked query row gives zeros and zero gradients on every path") {
  manual_seed(5);
  const int64_t B = 2, H = 2, T = 3, S = 4, D = 8;
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);
    Tensor q = randn({B, H, T, D}, kFloat64).requires_grad_();
    Tensor k = randn({B, H, S, D}, kFloat64).requires_grad_();
    Tensor v = randn({B, H, S, D}, kFloat64).requires_grad_();
    F::AttentionMask mask;
    // Query row 1 may attend nothing; batch 1 has no valid keys at all (length 0).
    mask.keep =
        from_vector(std::vector<int64_t>{1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0}, {T, S}) == full({T, S}, 1.0, kInt64);
    mask.key_lengths = from_vector(std::vector<int64_t>{S, 0}, {B});
    Tensor out, weights;
    if (path == 0) {
      out = F::scaled_dot_product_attention(q, k, v, mask);
    } else if (path == 1) {
      F::AttentionResult r = F::scaled_dot_product_attention_with_weights(q, k, v, mask);
      out = r.output;
      weights = r.weights;
    } else {
      out = F::flash_attention(q, k, v, mask);
    }
    CHECK(isfinite_all(out));
    // Masked rows: output exactly 0.
    CHECK(values_of(out.select(2, 1).abs().sum()) == std::vector<double>{0.0});
    CHECK(values_of(out.select(0, 1).abs().sum()) == std::vector<double>{0.0});
    if (weights.defined()) {
      CHECK(values_of(weights.select(2, 1).abs().sum()) == std::vector<double>{0.0});
      CHECK(values_of(weights.select(0, 1).abs().sum()) == std::vector<double>{0.0});
    }
    (out * randn(out.shape(), kFloat64)).sum().backward();
    for (const Tensor* t : {&q, &k, &v}) CHECK(isfinite_all(t->grad()));
    CHECK(values_of(q.grad().select(2, 1).abs().sum()) == std::vector<double>{0.0});
    CHECK(values_of(q.grad().select(0, 1).abs().sum()) == std::vector<double>{0.0});
    CHECK(values_of(k.grad().select(0, 1).abs().sum()) == std::vector<double>{0.0});
    CHECK(values_of(v.grad().select(0, 1).abs().sum()) == std::vector<double>{0.0});
    // Keys 2 and 3 of batch 0 are visible only to query 2 (key 0) and query 0 (keys 0, 1, 3):
    // key 2 is masked for every query, so it gets no gradient.
    CHECK(values_of(k.grad().select(0, 0).select(1, 2).abs().sum()) == std::vector<double>{0.0});
    CHECK(values_of(v.grad().select(0, 0).select(1, 2).abs().sum()) == std::vector<double>{0.0});
  }
}

TEST_CASE("cross_entropy: no log(0), -inf logits, ignored targets, label smoothing") {
  // The target's probability underflows to 0 in float32 (exp(-2000)), yet the loss is exact.
  Tensor logits = tensor({{1000.0, -1000.0}, {0.0, 0.0}}).requires_grad_();
  const Tensor targets = from_vector(std::vector<int64_t>{1, 0}, {2});
  Tensor loss = F::cross_entropy(logits, targets);
  CHECK(loss.item<double>() == doctest::Approx((2000.0 + std::log(2.0)) / 2.0));
  loss.backward();
  CHECK(isfinite_all(logits.grad()));
  // d/dlogits = (softmax - onehot) / N
  CHECK(logits.grad().at({0, 0}) == doctest::Approx(0.5));
  CHECK(logits.grad().at({0, 1}) == doctest::Approx(-0.5));

  // A masked (-inf) class that is not the target: finite loss, exactly zero gradient there.
  Tensor masked = tensor({{2.0, -kInf, 0.5}}).requires_grad_();
  const Tensor target0 = from_vector(std::vector<int64_t>{0}, {1});
  Tensor masked_loss = F::cross_entropy(masked, target0);
  const double lse = std::log(std::exp(2.0) + std::exp(0.5));
  CHECK(masked_loss.item<double>() == doctest::Approx(lse - 2.0));
  masked_loss.backward();
  CHECK(masked.grad().at({0, 1}) == 0.0);
  CHECK(masked.grad().at({0, 0}) == doctest::Approx(std::exp(2.0 - lse) - 1.0));

  // The target itself masked: +inf, the gradient stays finite (softmax - onehot).
  Tensor target_masked = tensor({{2.0, -kInf, 0.5}}).requires_grad_();
  Tensor inf_loss = F::cross_entropy(target_masked, from_vector(std::vector<int64_t>{1}, {1}));
  CHECK(inf_loss.item<double>() == kInf);
  inf_loss.backward();
  CHECK(isfinite_all(target_masked.grad()));
  CHECK(target_masked.grad().at({0, 1}) == -1.0);

  // Label smoothing averages log-probabilities over every class: a -inf logit makes it +inf.
  Tensor smoothed = tensor({{2.0, -kInf, 0.5}}).requires_grad_();
  CHECK(F::cross_entropy(smoothed, target0, {.label_smoothing = 0.1}).item<double>() == kInf);

  // Every target ignored: 0 with a zero gradient (PyTorch gives NaN).
  Tensor all_ignored = tensor({{1.0, 2.0}, {3.0, 4.0}}).requires_grad_();
  Tensor zero_loss = F::cross_entropy(all_ignored, from_vector(std::vector<int64_t>{-100, -100}, {2}));
  CHECK(zero_loss.item<double>() == 0.0);
  zero_loss.backward();
  CHECK(values_of(all_ignored.grad()) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("cross_entropy in float32: the vectorised rows (vector loops and a scalar tail) against float64") {
  for (int64_t classes : {3, 16, 37, 300}) {
    for (double smoothing : {0.0, 0.1}) {
      CAPTURE(classes);
      CAPTURE(smoothing);
      const int64_t rows = 5;
      std::vector<double> flat(static_cast<size_t>(rows * classes));
      for (size_t i = 0; i < flat.size(); ++i) flat[i] = 4.0 * std::sin(0.37 * static_cast<double>(i) + 1.0);
      std::vector<int64_t> target_ids(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) target_ids[static_cast<size_t>(r)] = (r * 7 + 1) % classes;
      const Tensor targets = from_vector(target_ids, {rows});
      Tensor x64 = from_vector(flat, {rows, classes}).requires_grad_();
      Tensor x32 = from_vector(flat, {rows, classes}).to(kFloat32).requires_grad_();
      Tensor loss64 = F::cross_entropy(x64, targets, {.label_smoothing = smoothing});
      Tensor loss32 = F::cross_entropy(x32, targets, {.label_smoothing = smoothing});
      CHECK(loss32.item<double>() == doctest::Approx(loss64.item<double>()).epsilon(2e-6));
      loss64.backward();
      loss32.backward();
      const std::vector<double> g64 = values_of(x64.grad()), g32 = values_of(x32.grad());
      double worst = 0;
      for (size_t i = 0; i < g64.size(); ++i) worst = std::max(worst, std::abs(g64[i] - g32[i]));
      CHECK(worst < 1e-7);  // gradients are (p - onehot) / rows: at most 1 / rows in size
    }
  }
  // A NaN logit anywhere in a row makes the loss NaN (the vectorised maximum skips it; the sum
  // does not); a -inf class keeps a zero gradient; a -inf target gives +inf.
  std::vector<double> row(37);
  for (size_t i = 0; i < row.size(); ++i) row[i] = 0.1 * static_cast<double>(i);
  const Tensor target3 = from_vector(std::vector<int64_t>{3}, {1});
  for (size_t nan_at : {size_t{0}, size_t{20}, size_t{36}}) {
    std::vector<double> with_nan = row;
    with_nan[nan_at] = kNaN;
    CHECK(std::isnan(F::cross_entropy(from_vector(with_nan, {1, 37}).to(kFloat32), target3).item<double>()));
  }
  std::vector<double> masked = row;
  masked[20] = -kInf;
  Tensor masked32 = from_vector(masked, {1, 37}).to(kFloat32).requires_grad_();
  Tensor masked_loss = F::cross_entropy(masked32, target3);
  CHECK(std::isfinite(masked_loss.item<double>()));
  masked_loss.backward();
  CHECK(masked32.grad().at({0, 20}) == 0.0);
  Tensor masked_target = from_vector(masked, {1, 37}).to(kFloat32).requires_grad_();
  Tensor inf_loss = F::cross_entropy(masked_target, from_vector(std::vector<int64_t>{20}, {1}));
  CHECK(inf_loss.item<double>() == kInf);
  inf_loss.backward();
  CHECK(isfinite_all(masked_target.grad()));
  CHECK(masked_target.grad().at({0, 20}) == -1.0);

  // A confident row over a large vocabulary: the target 20 above 49,999 others. The loss,
  // log1p(49999 e^-20) = 1.03e-4, is the sum of the many tiny terms next to exp(0) = 1: summed
  // in float they would round away (up to all of them in one lane); in double they are kept.
  const int64_t vocab = 50000;
  std::vector<double> confident(static_cast<size_t>(vocab), 0.0);
  confident[123] = 20.0;
  const double want = std::log1p(static_cast<double>(vocab - 1) * std::exp(-20.0));
  const double got =
      F::cross_entropy(from_vector(confident, {1, vocab}).to(kFloat32), from_vector(std::vector<int64_t>{123}, {1}))
          .item<double>();
  CHECK(std::abs(got - want) <= 1e-4 * want);  // relative (doctest's Approx adds 1 to the scale)
}

TEST_CASE("log and sqrt at the edges of their domain") {
  Tensor x = tensor({0.0, -1.0, 1.0}).requires_grad_();
  const std::vector<double> y = values_of(log(x));
  CHECK(y[0] == -kInf);
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == 0.0);
  log(x).sum().backward();
  CHECK(x.grad().at({0}) == kInf);  // 1/0
  CHECK(x.grad().at({1}) == -1.0);
  Tensor z = tensor({0.0, 4.0}).requires_grad_();
  sqrt(z).sum().backward();
  CHECK(z.grad().at({0}) == kInf);
  CHECK(z.grad().at({1}) == doctest::Approx(0.25));
}

TEST_CASE("clip_grad_norm_: zero-norm gradients, max_norm 0, non-finite gradients") {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2, 2}).requires_grad_();
  a.set_grad(zeros({3}));
  b.set_grad(zeros({2, 2}));
  CHECK(nn::clip_grad_norm_({a, b}, 1.0) == 0.0);
  CHECK(nn::clip_grad_norm_({a, b}, 0.0) == 0.0);
  CHECK(nn::clip_grad_norm_({a, b}, 1.0, INFINITY) == 0.0);
  CHECK(nn::clip_grad_norm_({a, b}, 1.0, 1.0) == 0.0);
  CHECK(isfinite_all(a.grad()));
  CHECK(values_of(a.grad()) == std::vector<double>{0, 0, 0});
  CHECK(values_of(b.grad()) == std::vector<double>{0, 0, 0, 0});

  // No parameter with a gradient: norm 0.
  Tensor c = zeros({2}).requires_grad_();
  CHECK(nn::clip_grad_norm_({c}, 1.0) == 0.0);
  CHECK_FALSE(c.grad().defined());

  // max_norm 0 with a non-zero gradient: every gradient becomes exactly 0.
  a.set_grad(tensor({3.0, 0.0, 4.0}));
  CHECK(nn::clip_grad_norm_({a}, 0.0) == doctest::Approx(5.0));
  CHECK(values_of(a.grad()) == std::vector<double>{0, 0, 0});

  // Non-finite gradients: the norm comes back non-finite and the gradients are untouched,
  // or heed::Error when error_if_nonfinite.
  a.set_grad(tensor({1.0, kNaN, 2.0}));
  b.set_grad(tensor({{kInf, 0.0}, {0.0, 0.0}}));
  CHECK(std::isnan(nn::clip_grad_norm_({a, b}, 1.0)));
  CHECK(nn::clip_grad_norm_({b}, 1.0) == kInf);
  CHECK(a.grad().at({0}) == 1.0);
  CHECK(a.grad().at({2}) == 2.0);
  CHECK(b.grad().at({0, 0}) == kInf);
  try {
    nn::clip_grad_norm_({a, b}, 1.0, 2.0, /*error_if_nonfinite=*/true);
    FAIL("expected heed::Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("heed::clip_grad_norm_") == 0);
    CHECK(std::string(e.what()).find("non-finite") != std::string::npos);
  }
}

TEST_CASE("layer_norm of a constant row: output = bias, finite gradient") {
  Tensor x = full({2, 4}, 3.0, kFloat64).requires_grad_();
  Tensor w = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).requires_grad_();
  Tensor b = tensor({0.5, -0.5, 0.0, 1.0}, kFloat64).requires_grad_();
  Tensor y = F::layer_norm(x, w, b);
  CHECK(values_of(y.select(0, 0)) == values_of(b));
  (y * randn({2, 4}, kFloat64)).sum().backward();
  CHECK(isfinite_all(x.grad()));
  CHECK(isfinite_all(w.grad()));
  // The normalised value is 0 everywhere, so the weight gets no gradient.
  CHECK(values_of(w.grad()) == std::vector<double>{0, 0, 0, 0});
}
