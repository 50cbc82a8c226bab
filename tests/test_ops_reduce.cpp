// tests/test_ops_reduce.cpp — sum, mean, var, max/min (+indices), argmax/argmin and sum_to
// against naive float64 loops: every dim subset, keepdim, negative dims, non-contiguous
// inputs, ties and NaN, integer and empty inputs, float32 against the float64 reference,
// thread-count independence and misuse. Gradients: tests/test_gradcheck.cpp.
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<int64_t> coords_of(int64_t k, const Dims& shape) {
  std::vector<int64_t> c(static_cast<size_t>(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) {
    c[static_cast<size_t>(d)] = k % shape[d];
    k /= shape[d];
  }
  return c;
}

bool same_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

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

// The elements of `values` (row-major in `shape`) grouped by output element of a reduction
// over `dims` (empty = all), each group in increasing order along the reduced dims.
struct Grouped {
  std::vector<std::vector<double>> groups;
  Dims out_shape, keep_shape;
};

Grouped group_by_output(const std::vector<double>& values, const Dims& shape, const Dims& dims) {
  std::vector<bool> reduced(static_cast<size_t>(shape.size()), dims.empty());
  for (int64_t d : dims) reduced[static_cast<size_t>(d < 0 ? d + shape.size() : d)] = true;
  Grouped g;
  for (int d = 0; d < shape.size(); ++d) {
    g.keep_shape.push_back(reduced[static_cast<size_t>(d)] ? 1 : shape[d]);
    if (!reduced[static_cast<size_t>(d)]) g.out_shape.push_back(shape[d]);
  }
  g.groups.resize(static_cast<size_t>(shape_numel(g.out_shape)));
  for (int64_t k = 0; k < shape_numel(shape); ++k) {
    const std::vector<int64_t> c = coords_of(k, shape);
    int64_t out = 0;
    for (int d = 0; d < shape.size(); ++d)
      if (!reduced[static_cast<size_t>(d)]) out = out * shape[d] + c[static_cast<size_t>(d)];
    g.groups[static_cast<size_t>(out)].push_back(values[static_cast<size_t>(k)]);
  }
  return g;
}

double naive_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double naive_var(const std::vector<double>& v, double correction) {
  const double m = naive_sum(v) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return ss / (static_cast<double>(v.size()) - correction);
}
// Index of the first maximum (or minimum).
int64_t naive_arg_extremum(const std::vector<double>& v, bool is_max) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (is_max ? v[i] > v[static_cast<size_t>(best)] : v[i] < v[static_cast<size_t>(best)])
      best = static_cast<int64_t>(i);
  return best;
}

InputSpec spec_of(const InputSpec& base, const Dims& shape, Layout layout) {
  InputSpec s = base;
  s.shape = shape;
  s.layout = layout;
  s.requires_grad = false;
  return s;
}

std::vector<Layout> layouts_for(const Dims& shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  if (shape.size() >= 1) out.push_back(Layout::Strided);
  return out;
}

struct ShapeDims {
  Dims shape;
  Dims dims;
};
const std::vector<ShapeDims> kReductions = {{{2, 3, 4}, {}},
                                            {{2, 3, 4}, {0}},
                                            {{2, 3, 4}, {1}},
                                            {{2, 3, 4}, {2}},
                                            {{2, 3, 4}, {-1}},
                                            {{2, 3, 4}, {0, 2}},
                                            {{2, 3, 4}, {2, 0}},
                                            {{2, 3, 4}, {1, 2}},
                                            {{2, 3, 4}, {0, 1, 2}},
                                            {{3, 4}, {0}},
                                            {{3, 4}, {-2, -1}},
                                            {{5}, {0}},
                                            {{5}, {}},
                                            {{}, {}},
                                            {{4, 1, 3}, {1}},
                                            {{2, 5, 1, 3}, {1, 3}}};

}  // namespace

TEST_CASE("reduce: sum, mean and var match float64 loops over every dim subset and layout") {
  uint64_t seed = 10;
  for (const ShapeDims& r : kReductions) {
    for (Layout layout : layouts_for(r.shape)) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(r.shape));
        CAPTURE(shape_str(r.dims));
        CAPTURE(keepdim);
        CAPTURE(static_cast<int>(layout));
        const Tensor x = op_cases::make_input(spec_of(InputSpec::uniform({}), r.shape, layout), ++seed);
        const Grouped g = group_by_output(x.to_vector<double>(), r.shape, r.dims);
        const Dims& shape = keepdim ? g.keep_shape : g.out_shape;
        std::vector<double> want_sum, want_mean, want_var1, want_var0;
        for (const auto& group : g.groups) {
          want_sum.push_back(naive_sum(group));
          want_mean.push_back(naive_sum(group) / static_cast<double>(group.size()));
          want_var1.push_back(group.size() > 1 ? naive_var(group, 1.0) : kNaN);
          want_var0.push_back(naive_var(group, 0.0));
        }
        check_values(sum(x, r.dims, keepdim), shape, want_sum);
        check_values(mean(x, r.dims, keepdim), shape, want_mean);
        check_values(var(x, r.dims, keepdim), shape, want_var1);
        check_values(var(x, r.dims, keepdim, 0.0), shape, want_var0);
        if (r.dims.empty() && !keepdim) {
          check_values(sum(x), {}, want_sum);
          check_values(x.mean(), {}, want_mean);
        }
      }
    }
  }
}

TEST_CASE("reduce: float32 sum/mean/var are close to the float64 reference") {
  const Tensor x = op_cases::make_input(spec_of(InputSpec::uniform({}, -3.0, 3.0), {6, 50, 7}, Layout::Transposed), 3);
  const std::vector<double> v = x.to(kFloat32).to_vector<double>();
  for (const Dims& dims : {Dims{}, Dims{1}, Dims{0, 2}, Dims{2}}) {
    CAPTURE(shape_str(dims));
    const Grouped g = group_by_output(v, {6, 50, 7}, dims);
    std::vector<double> want_sum, want_mean, want_var;
    for (const auto& group : g.groups) {
      want_sum.push_back(naive_sum(group));
      want_mean.push_back(naive_sum(group) / static_cast<double>(group.size()));
      want_var.push_back(naive_var(group, 1.0));
    }
    const Tensor xf = x.to(kFloat32);
    CHECK(sum(xf, dims).dtype() == kFloat32);
    check_values(sum(xf, dims), g.out_shape, want_sum, 1e-6, 1e-5);
    check_values(mean(xf, dims), g.out_shape, want_mean, 1e-6, 1e-6);
    check_values(var(xf, dims), g.out_shape, want_var, 1e-6, 1e-6);
  }
}

TEST_CASE("reduce: max/min/argmax/argmin over a dim give the first extremum") {
  uint64_t seed = 200;
  const std::vector<ShapeDims> cases = {{{2, 3, 4}, {0}},  {{2, 3, 4}, {1}}, {{2, 3, 4}, {2}},
                                        {{2, 3, 4}, {-1}}, {{5}, {0}},       {{3, 4}, {-2}}};
  for (const ShapeDims& r : cases) {
    for (Layout layout : layouts_for(r.shape)) {
      for (bool keepdim : {false, true}) {
        CAPTURE(shape_str(r.shape));
        CAPTURE(r.dims[0]);
        CAPTURE(keepdim);
        // Values on a coarse grid so ties happen and the first index must win.
        InputSpec spec = InputSpec::indices({}, -3, 4);
        const Tensor x = op_cases::make_input(spec_of(spec, r.shape, layout), ++seed).to(kFloat64);
        const Grouped g = group_by_output(x.to_vector<double>(), r.shape, r.dims);
        const Dims& shape = keepdim ? g.keep_shape : g.out_shape;
        std::vector<double> max_v, max_i, min_v, min_i;
        for (const auto& group : g.groups) {
          max_i.push_back(static_cast<double>(naive_arg_extremum(group, true)));
          min_i.push_back(static_cast<double>(naive_arg_extremum(group, false)));
          max_v.push_back(group[static_cast<size_t>(max_i.back())]);
          min_v.push_back(group[static_cast<size_t>(min_i.back())]);
        }
        const ValuesIndices mx = max(x, r.dims[0], keepdim), mn = min(x, r.dims[0], keepdim);
        CHECK(mx.indices.dtype() == kInt64);
        check_values(mx.values, shape, max_v);
        check_values(mx.indices, shape, max_i);
        check_values(mn.values, shape, min_v);
        check_values(mn.indices, shape, min_i);
        check_values(argmax(x, r.dims[0], keepdim), shape, max_i);
        check_values(argmin(x, r.dims[0], keepdim), shape, min_i);
      }
    }
  }
}

TEST_CASE("reduce: full max/min/argmax, ties and NaN") {
  const Tensor x = op_cases::make_input(spec_of(InputSpec::uniform({}), {4, 5}, Layout::Transposed), 1);
  const std::vector<double> v = x.to_vector<double>();
  const int64_t imax = naive_arg_extremum(v, true), imin = naive_arg_extremum(v, false);
  check_values(max(x), {}, {v[static_cast<size_t>(imax)]});
  check_values(x.min(), {}, {v[static_cast<size_t>(imin)]});
  check_values(argmax(x), {}, {static_cast<double>(imax)});  // a flat row-major index

  const Tensor ties = tensor({{1.0, 3.0, 3.0, 2.0}, {5.0, 5.0, 1.0, 0.0}}, kFloat64);
  check_values(argmax(ties), {}, {4.0});
  check_values(max(ties, 1).indices, {2}, {1.0, 0.0});
  check_values(min(ties, 0).indices, {4}, {0.0, 0.0, 1.0, 1.0});

  const Tensor with_nan = tensor({1.0, kNaN, 3.0, kNaN}, kFloat64);
  CHECK(std::isnan(max(with_nan).item<double>()));
  CHECK(std::isnan(min(with_nan).item<double>()));
  CHECK(max(with_nan, 0).indices.item<int64_t>() == 1);
  CHECK(std::isnan(sum(with_nan).item<double>()));

  // 0-dim input.
  const Tensor scalar = scalar_tensor(2.5, kFloat64);
  check_values(max(scalar), {}, {2.5});
  check_values(max(scalar, 0).values, {}, {2.5});
  check_values(max(scalar, 0).indices, {}, {0.0});
}

TEST_CASE("reduce: integer, bool and empty inputs") {
  const Tensor xi = from_vector<int32_t>({1, -2, 3, 4, 5, -6}, {2, 3});
  CHECK(sum(xi).dtype() == kInt64);
  CHECK(sum(xi).item<int64_t>() == 5);
  CHECK(sum(xi, {0}).to_vector<int64_t>() == std::vector<int64_t>{5, 3, -3});
  const Tensor flags = xi > tensor({0.0});
  CHECK(sum(flags).dtype() == kInt64);
  CHECK(sum(flags).item<int64_t>() == 4);
  CHECK(mean(xi).dtype() == kFloat32);
  check_values(mean(xi, {1}), {2}, {2.0 / 3.0, 1.0}, 1e-7, 0);
  CHECK(max(xi).item<int64_t>() == 5);
  CHECK(argmin(xi, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});

  const Tensor empty_rows = zeros({0, 3}, kFloat64);
  check_values(sum(empty_rows, {0}), {3}, {0.0, 0.0, 0.0});
  check_values(sum(empty_rows), {}, {0.0});
  check_values(sum(empty_rows, {1}), {0}, {});
  CHECK(std::isnan(mean(empty_rows).item<double>()));
  // A single element has no unbiased variance.
  CHECK(std::isnan(var(ones({3, 1}, kFloat64), {1}).to_vector<double>()[0]));
}

TEST_CASE("reduce: sum_to reduces a broadcast shape back") {
  const Dims big{2, 3, 4};
  const Tensor x = op_cases::make_input(spec_of(InputSpec::uniform({}), big, Layout::Strided), 4);
  const std::vector<double> v = x.to_vector<double>();
  for (const Dims& target : {Dims{3, 1}, Dims{1, 4}, Dims{4}, Dims{}, Dims{2, 1, 1}, Dims{2, 3, 4}}) {
    CAPTURE(shape_str(target));
    std::vector<double> want(static_cast<size_t>(shape_numel(target)), 0.0);
    const int shift = big.size() - target.size();
    for (int64_t k = 0; k < 24; ++k) {
      const auto c = coords_of(k, big);
      int64_t t = 0;
      for (int d = 0; d < target.size(); ++d)
        t = t * target[d] + (target[d] == 1 ? 0 : c[static_cast<size_t>(d + shift)]);
      want[static_cast<size_t>(t)] += v[static_cast<size_t>(k)];
    }
    check_values(sum_to(x, target), target, want);
  }
}

TEST_CASE("reduce: results do not depend on the thread count") {
  const int threads = get_num_threads();
  manual_seed(77);
  const Tensor x = randn({3, 70001});
  const Tensor long_row = randn({200003});
  set_num_threads(1);
  const std::vector<float> one_rows = sum(x, {1}).to_vector<float>();
  const std::vector<float> one_cols = sum(x, {0}).to_vector<float>();
  const float one_all = sum(long_row).item<float>();
  const float one_var = var(long_row, {}).item<float>();
  set_num_threads(2);
  CHECK(sum(x, {1}).to_vector<float>() == one_rows);
  CHECK(sum(x, {0}).to_vector<float>() == one_cols);
  CHECK(sum(long_row).item<float>() == one_all);
  CHECK(var(long_row, {}).item<float>() == one_var);
  set_num_threads(threads);
  // And the long float32 sum is accurate (it accumulates in double).
  const std::vector<float> values = long_row.to_vector<float>();
  double reference = 0;
  for (float f : values) reference += f;
  CHECK(std::fabs(one_all - reference) <= 1e-7 * std::fabs(reference) + 1e-6);
}

TEST_CASE("reduce: misuse raises heed::Error naming the op") {
  const Tensor x = zeros({2, 3, 4}, kFloat64);
  CHECK_THROWS_WITH_AS(sum(x, {3}), doctest::Contains("heed::sum: dim 3 is out of range"), Error);
  CHECK_THROWS_WITH_AS(sum(x, {-4}), doctest::Contains("heed::sum:"), Error);
  CHECK_THROWS_WITH_AS(sum(x, {1, -2}), doctest::Contains("heed::sum: dim 1 appears twice"), Error);
  CHECK_THROWS_WITH_AS(sum(Tensor()), doctest::Contains("heed::sum:"), Error);
  CHECK_THROWS_WITH_AS(mean(x, {5}), doctest::Contains("heed::mean:"), Error);
  CHECK_THROWS_WITH_AS(var(x, {3}), doctest::Contains("heed::var:"), Error);
  CHECK_THROWS_WITH_AS(var(zeros({3}, kInt64), {0}), doctest::Contains("heed::var:"), Error);
  CHECK_THROWS_WITH_AS(max(x, 3), doctest::Contains("heed::max:"), Error);
  CHECK_THROWS_WITH_AS(min(x, -4), doctest::Contains("heed::min:"), Error);
  CHECK_THROWS_WITH_AS(argmax(x, 3), doctest::Contains("heed::argmax:"), Error);
  CHECK_THROWS_WITH_AS(argmin(x, 7), doctest::Contains("heed::argmin:"), Error);
  const Tensor empty = zeros({2, 0}, kFloat64);
  CHECK_THROWS_WITH_AS(max(empty), doctest::Contains("heed::max: cannot take the max of an empty"), Error);
  CHECK_THROWS_WITH_AS(min(empty), doctest::Contains("heed::min:"), Error);
  CHECK_THROWS_WITH_AS(max(empty, 1), doctest::Contains("heed::max:"), Error);
  CHECK_THROWS_WITH_AS(argmax(empty), doctest::Contains("heed::argmax:"), Error);
  CHECK_THROWS_WITH_AS(argmin(empty, 1), doctest::Contains("heed::argmin:"), Error);
  CHECK_THROWS_WITH_AS(sum_to(x, {1, 2, 3, 4}), doctest::Contains("heed::sum_to:"), Error);
  CHECK_THROWS_WITH_AS(sum_to(x, {5, 1}), doctest::Contains("heed::sum_to:"), Error);
}
