// tests/test_clip.cpp — clip_grad_norm_ and clip_grad_value_ against float64 references.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

std::vector<double> random_values(size_t n, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

Tensor param_with_grad(const Dims& shape, const std::vector<double>& grad, DType dtype = kFloat64) {
  Tensor p = zeros(shape, dtype);
  p.requires_grad_();
  if (!grad.empty() || shape_numel(shape) == 0) p.set_grad(from_vector(grad, shape, TensorOptions(dtype)));
  return p;
}

// The norm of order p of all values as one vector (p = INFINITY: the largest |x|).
double reference_norm(const std::vector<std::vector<double>>& grads, double p) {
  double acc = 0.0;
  for (const auto& g : grads)
    for (double x : g) acc = std::isinf(p) ? std::max(acc, std::abs(x)) : acc + std::pow(std::abs(x), p);
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

void check_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i << ": " << actual[i] << " vs " << expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= rtol * std::abs(expected[i]) + 1e-300);
  }
}

}  // namespace

TEST_CASE("clip_grad_norm_ scales every gradient by max_norm / (total + 1e-6)") {
  std::mt19937_64 rng(1);
  const std::vector<Dims> shapes = {{3, 4}, {7}, {2, 2, 2}, {}};
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type " << norm_type);
    std::vector<std::vector<double>> grads;
    std::vector<Tensor> params;
    for (const Dims& shape : shapes) {
      grads.push_back(random_values(static_cast<size_t>(shape_numel(shape)), rng, 2.0));
      params.push_back(param_with_grad(shape, grads.back()));
    }
    const double total = reference_norm(grads, norm_type);
    const double max_norm = total / 3.0;
    const double returned = nn::clip_grad_norm_(params, max_norm, norm_type);
    CHECK(returned == doctest::Approx(total).epsilon(1e-12));
    const double coefficient = max_norm / (total + 1e-6);
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> expected = grads[k];
      for (double& x : expected) x *= coefficient;
      check_close(params[k].grad().to_vector<double>(), expected, 1e-12);
    }
    // After clipping the norm is max_norm (up to the 1e-6 guard).
    std::vector<std::vector<double>> clipped;
    for (const Tensor& p : params) clipped.push_back(p.grad().to_vector<double>());
    CHECK(reference_norm(clipped, norm_type) == doctest::Approx(max_norm).epsilon(1e-6));
  }
}

TEST_CASE("clip_grad_norm_ over several 16384-element blocks with a ragged tail, any thread count") {
  // The kernel sums each block in interleaved lanes: sizes that are not multiples of the lane
  // count or the block, in float64 and float32, against the float64 reference; the result must
  // not depend on the number of threads.
  std::mt19937_64 rng(7);
  const int saved_threads = get_num_threads();
  for (DType dtype : {kFloat64, kFloat32}) {
    for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      INFO((dtype == kFloat64 ? "float64" : "float32") << ", norm_type " << norm_type);
      Tensor a = param_with_grad({40003}, random_values(40003, rng, 1.5), dtype);
      Tensor b = param_with_grad({5}, random_values(5, rng, 1.5), dtype);
      const std::vector<std::vector<double>> exact = {a.grad().to_vector<double>(), b.grad().to_vector<double>()};
      const double expected = reference_norm(exact, norm_type);
      double by_threads[2] = {0.0, 0.0};
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        by_threads[threads - 1] = nn::clip_grad_norm_({a, b}, 1e30, norm_type);  // never clips
      }
      set_num_threads(saved_threads);
      CHECK(by_threads[0] == doctest::Approx(expected).epsilon(1e-12));
      CHECK(by_threads[0] == by_threads[1]);
    }
  }
}

TEST_CASE("total_grad_norm: the norm clip_grad_norm_ would clip by, gradients untouched") {
  std::mt19937_64 rng(11);
  const std::vector<double> ga = random_values(300, rng, 1.0), gb = random_values(7, rng, 3.0);
  Tensor a = param_with_grad({300}, ga), b = param_with_grad({7}, gb), none = zeros({4}, kFloat64);
  none.requires_grad_();
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type " << norm_type);
    CHECK(nn::total_grad_norm({a, none, b}, norm_type) ==
          doctest::Approx(reference_norm({ga, gb}, norm_type)).epsilon(1e-13));
  }
  check_close(a.grad().to_vector<double>(), ga, 0.0);  // unchanged
  // A gradient shared by two parameters counts once, as in clip_grad_norm_.
  Tensor c = zeros({300}, kFloat64);
  c.requires_grad_();
  c.set_grad(a.grad());
  CHECK(nn::total_grad_norm({a, c}) == doctest::Approx(reference_norm({ga}, 2.0)).epsilon(1e-13));
  CHECK(nn::total_grad_norm({none}) == 0.0);
  CHECK(nn::total_grad_norm(std::vector<Tensor>{}) == 0.0);
  Tensor bad = param_with_grad({2}, {1.0, std::nan("")});
  CHECK(std::isnan(nn::total_grad_norm({bad})));
  CHECK(contains(error_message([&] { nn::total_grad_norm({a}, 0.0); }), "total_grad_norm"));
  CHECK(contains(error_message([&] { nn::total_grad_norm({a, Tensor()}); }), "undefined"));
}

TEST_CASE("clip_grad_norm_ leaves gradients below max_norm untouched") {
  Tensor a = param_with_grad({2}, {3.0, 4.0});  // norm 5
  const double total = nn::clip_grad_norm_({a}, 5.0);
  CHECK(total == doctest::Approx(5.0).epsilon(1e-15));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3.0, 4.0});
  CHECK(nn::clip_grad_norm_({a}, 100.0) == doctest::Approx(5.0).epsilon(1e-15));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3.0, 4.0});
  // Just above max_norm it clips.
  nn::clip_grad_norm_({a}, 4.0);
  check_close(a.grad().to_vector<double>(), {3.0 * 4.0 / (5.0 + 1e-6), 4.0 * 4.0 / (5.0 + 1e-6)}, 1e-14);
}

TEST_CASE("clip_grad_norm_: zero gradients, parameters without gradients, no gradients") {
  Tensor zero = param_with_grad({3}, {0.0, 0.0, 0.0});
  Tensor none = zeros({4}, kFloat64);
  none.requires_grad_();
  Tensor empty_grad = param_with_grad({0}, {});
  Tensor g = param_with_grad({2}, {6.0, 8.0});
  CHECK(nn::clip_grad_norm_({zero}, 1.0) == 0.0);
  CHECK(zero.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});
  CHECK(nn::clip_grad_norm_({none}, 1.0) == 0.0);
  CHECK_FALSE(none.grad().defined());
  // The parameter without a gradient does not count and still has none afterwards.
  CHECK(nn::clip_grad_norm_({zero, none, empty_grad, g}, 1.0) == doctest::Approx(10.0).epsilon(1e-15));
  CHECK_FALSE(none.grad().defined());
  check_close(g.grad().to_vector<double>(), {0.6 / (1.0 + 1e-7), 0.8 / (1.0 + 1e-7)}, 1e-14);
  CHECK(nn::clip_grad_norm_(std::vector<Tensor>{}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm_ on float32 gradients") {
  std::mt19937_64 rng(9);
  const std::vector<double> values = random_values(1000, rng, 1.0);
  Tensor p = param_with_grad({1000}, values, kFloat32);
  const std::vector<double> rounded = p.grad().to_vector<double>();
  const double total = reference_norm({rounded}, 2.0);
  CHECK(nn::clip_grad_norm_({p}, 1.0) == doctest::Approx(total).epsilon(1e-12));
  std::vector<double> expected = rounded;
  for (double& x : expected) x *= 1.0 / (total + 1e-6);
  check_close(p.grad().to_vector<double>(), expected, 1e-6);
}

TEST_CASE("clip_grad_norm_ with Inf/NaN gradients reports instead of clipping") {
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {inf, -inf, std::nan("")}) {
    for (double norm_type : {2.0, inf}) {
      INFO("bad value " << bad << ", norm_type " << norm_type);
      Tensor a = param_with_grad({3}, {1.0, bad, 2.0});
      Tensor b = param_with_grad({2}, {5.0, 5.0});
      const double total = nn::clip_grad_norm_({a, b}, 1.0, norm_type);
      CHECK_FALSE(std::isfinite(total));
      if (std::isnan(bad))
        CHECK(std::isnan(total));
      else
        CHECK(total == inf);
      // Untouched.
      CHECK(b.grad().to_vector<double>() == std::vector<double>{5.0, 5.0});
      const std::vector<double> a_after = a.grad().to_vector<double>();
      CHECK(a_after[0] == 1.0);
      CHECK(a_after[2] == 2.0);
      const std::string message = error_message([&] { nn::clip_grad_norm_({a, b}, 1.0, norm_type, true); });
      CHECK(contains(message, "heed::clip_grad_norm_: "));
      CHECK(contains(message, "non-finite"));
      CHECK(b.grad().to_vector<double>() == std::vector<double>{5.0, 5.0});
    }
  }
}

TEST_CASE("clip_grad_norm_ argument checks") {
  Tensor a = param_with_grad({2}, {1.0, 1.0});
  CHECK(contains(error_message([&] { nn::clip_grad_norm_({a}, -1.0); }), "max_norm"));
  CHECK(contains(error_message([&] { nn::clip_grad_norm_({a}, 1.0, 0.0); }), "norm_type"));
  CHECK(contains(error_message([&] { nn::clip_grad_norm_({a}, 1.0, -2.0); }), "norm_type"));
  CHECK(contains(error_message([&] { nn::clip_grad_norm_({a}, 1.0, std::nan("")); }), "norm_type"));
  CHECK(contains(error_message([&] { nn::clip_grad_norm_({Tensor()}, 1.0); }), "heed::clip_grad_norm_"));
}

TEST_CASE("clip_grad_value_ clamps every element") {
  std::mt19937_64 rng(4);
  const std::vector<double> ga = random_values(12, rng, 3.0), gb = random_values(5, rng, 3.0);
  Tensor a = param_with_grad({3, 4}, ga), b = param_with_grad({5}, gb, kFloat32);
  Tensor none = zeros({2}, kFloat64);
  none.requires_grad_();
  const std::vector<double> gb_rounded = b.grad().to_vector<double>();
  nn::clip_grad_value_({a, b, none}, 1.5);
  auto clamp_ref = [](std::vector<double> v) {
    for (double& x : v) x = std::min(1.5, std::max(-1.5, x));
    return v;
  };
  CHECK(a.grad().to_vector<double>() == clamp_ref(ga));
  CHECK(b.grad().to_vector<double>() == clamp_ref(gb_rounded));
  CHECK_FALSE(none.grad().defined());
  // NaN stays NaN, infinities clamp.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor c = param_with_grad({3}, {std::nan(""), inf, -inf});
  nn::clip_grad_value_({c}, 2.0);
  const std::vector<double> after = c.grad().to_vector<double>();
  CHECK(std::isnan(after[0]));
  CHECK(after[1] == 2.0);
  CHECK(after[2] == -2.0);
  const std::string message = error_message([&] { nn::clip_grad_value_({c}, -1.0); });
  CHECK(contains(message, "heed::clip_grad_value_: "));
  CHECK(contains(message, "clip_value"));
}
