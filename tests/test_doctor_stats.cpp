// tests/test_doctor_stats.cpp — attention statistics against hand-computed values: a uniform
// row, a one-hot row, a one-hot row whose other weights underflowed to exactly 0, a masked
// row and a fully masked row. The visible keys come from the mask, never from weight > 0.
#include <doctest/doctest.h>
#include <heed/diagnostics.h>
#include <heed/heed.h>

#include <cmath>

using namespace heed;

namespace {

// One head, one query row over four keys: weights (1, 1, 1, 4) and keep (1, 1, 1, 4).
diagnostics::HeadStats row_stats(const std::vector<double>& weights, const std::vector<bool>& keep = {}) {
  const Tensor w = from_vector(weights, {1, 1, 1, static_cast<int64_t>(weights.size())});
  Tensor mask;
  if (!keep.empty()) {
    std::vector<double> flags(keep.begin(), keep.end());
    mask = from_vector(flags, {1, 1, 1, static_cast<int64_t>(keep.size())}).to(kBool);
  }
  return diagnostics::attention_head_stats(w, mask, 2)[0];
}

}  // namespace

TEST_CASE("attention statistics of a uniform row") {
  const auto s = row_stats({0.25, 0.25, 0.25, 0.25});
  CHECK(s.rows == 1);
  CHECK(s.entropy == doctest::Approx(std::log(4.0)));
  CHECK(s.uniform_entropy == doctest::Approx(std::log(4.0)));
  CHECK(s.normalized_entropy == doctest::Approx(1.0));
  CHECK(s.max_mean_ratio == doctest::Approx(1.0));
  CHECK(s.top_k_mass == doctest::Approx(0.5));
}

TEST_CASE("attention statistics of a one-hot row") {
  // Not exactly one-hot: softmax never gives exact zeros without underflow.
  const double e = 1e-6;
  const auto s = row_stats({1 - 3 * e, e, e, e});
  const double entropy = -(1 - 3 * e) * std::log(1 - 3 * e) - 3 * e * std::log(e);
  CHECK(s.entropy == doctest::Approx(entropy).epsilon(1e-9));
  CHECK(s.normalized_entropy == doctest::Approx(entropy / std::log(4.0)).epsilon(1e-9));
  CHECK(s.max_mean_ratio == doctest::Approx(4 * (1 - 3 * e)));
  CHECK(s.top_k_mass == doctest::Approx(1 - 2 * e));
}

TEST_CASE("an underflowed one-hot row counts all its visible keys") {
  // The bug this guards against: zeros read as masked keys, so the row looked like one visible
  // key, "uniform" (entropy 0 = log 1) with max/mean 1:1.
  const auto s = row_stats({0.0, 1.0, 0.0, 0.0});
  CHECK(s.rows == 1);
  CHECK(s.entropy == 0.0);
  CHECK(s.uniform_entropy == doctest::Approx(std::log(4.0)));
  CHECK(s.normalized_entropy == 0.0);
  CHECK(s.max_mean_ratio == doctest::Approx(4.0));
  CHECK(s.top_k_mass == doctest::Approx(1.0));
  // The same row through a real softmax of huge scores.
  const Tensor w = F::softmax(tensor({0.0, 3000.0, -10.0, 5.0}).view({1, 1, 1, 4}), -1);
  const auto t = diagnostics::attention_head_stats(w)[0];
  CHECK(t.max_mean_ratio == doctest::Approx(4.0));
  CHECK(t.normalized_entropy < 1e-6);
}

TEST_CASE("attention statistics of a masked row use the mask's visible keys") {
  // Two visible keys, the other two masked (weights 0 there).
  const auto s = row_stats({0.75, 0.0, 0.25, 0.0}, {true, false, true, false});
  const double entropy = -0.75 * std::log(0.75) - 0.25 * std::log(0.25);
  CHECK(s.rows == 1);
  CHECK(s.entropy == doctest::Approx(entropy));
  CHECK(s.uniform_entropy == doctest::Approx(std::log(2.0)));
  CHECK(s.normalized_entropy == doctest::Approx(entropy / std::log(2.0)));
  CHECK(s.max_mean_ratio == doctest::Approx(1.5));
  CHECK(s.top_k_mass == doctest::Approx(1.0));
  // A visible key whose weight underflowed still counts: one-hot over the two visible keys.
  const auto u = row_stats({1.0, 0.0, 0.0, 0.0}, {true, false, true, false});
  CHECK(u.max_mean_ratio == doctest::Approx(2.0));
  CHECK(u.normalized_entropy == 0.0);
}

TEST_CASE("a fully masked row and a single-key row are left out") {
  const auto s = row_stats({0.0, 0.0, 0.0, 0.0}, {false, false, false, false});
  CHECK(s.rows == 0);
  CHECK(s.trivial_rows == 1);
  CHECK(s.entropy == 0.0);
  const auto one = row_stats({1.0, 0.0, 0.0, 0.0}, {true, false, false, false});
  CHECK(one.rows == 0);
  CHECK(one.trivial_rows == 1);
}

TEST_CASE("rows with NaN weights are counted apart") {
  const auto s = row_stats({NAN, 0.5, 0.5, 0.0});
  CHECK(s.rows == 0);
  CHECK(s.nonfinite_rows == 1);
}

TEST_CASE("attention statistics take the causal mask from F::attention_keep_mask") {
  // A (1, 1, 3, 3) causal softmax of zero scores: rows see 1, 2 and 3 keys, each uniform.
  F::AttentionMask mask;
  mask.causal = true;
  const F::AttentionResult r =
      F::scaled_dot_product_attention_with_weights(zeros({1, 1, 3, 4}), zeros({1, 1, 3, 4}), zeros({1, 1, 3, 4}), mask);
  const Tensor keep = F::attention_keep_mask(mask, r.weights.shape(), kCPU);
  const auto s = diagnostics::attention_head_stats(r.weights, keep)[0];
  CHECK(s.rows == 2);
  CHECK(s.trivial_rows == 1);
  CHECK(s.normalized_entropy == doctest::Approx(1.0));
  CHECK(s.uniform_entropy == doctest::Approx(0.5 * (std::log(2.0) + std::log(3.0))));
}
