// tests/test_ops_index.cpp — index_select, gather and F::embedding against naive loops: every
// dim, repeated and empty indices, int32 and non-contiguous indices and inputs, the scatter-add
// backward against a hand-written accumulation, 16-bit copies, and misuse (out-of-range and
// negative indices, wrong dtypes and ranks). Finite differences: tests/test_gradcheck.cpp.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <string>
#include <vector>

#include "op_cases.h"

using namespace heed;
using op_cases::InputSpec;
using op_cases::Layout;

namespace {

std::vector<int64_t> coords_of(int64_t k, const Dims& shape) {
  std::vector<int64_t> c(static_cast<size_t>(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) {
    c[static_cast<size_t>(d)] = k % shape[d];
    k /= shape[d];
  }
  return c;
}

int64_t flat_index(const std::vector<int64_t>& c, const Dims& shape) {
  int64_t k = 0;
  for (int d = 0; d < shape.size(); ++d) k = k * shape[d] + c[static_cast<size_t>(d)];
  return k;
}

void check_values(const Tensor& got, const Dims& shape, const std::vector<double>& want, double tol = 0.0) {
  REQUIRE(got.shape() == shape);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::fabs(v[i] - want[i]) <= tol)) {
      FAIL_CHECK("element " << i << " of shape " << shape_str(shape) << ": got " << v[i] << ", expected " << want[i]);
      return;
    }
  }
}

Tensor values_input(const Dims& shape, Layout layout, uint64_t seed, bool grad = false) {
  InputSpec s = InputSpec::uniform(shape);
  s.layout = layout;
  s.requires_grad = grad;
  return op_cases::make_input(s, seed);
}

Tensor index_input(const Dims& shape, int64_t high, Layout layout, uint64_t seed) {
  InputSpec s = InputSpec::indices(shape, 0, high);
  s.layout = layout;
  return op_cases::make_input(s, seed);
}

std::vector<Layout> layouts_for(const Dims& shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  if (shape.size() >= 1) out.push_back(Layout::Strided);
  return out;
}

// out[..., j, ...] = x[..., index[j], ...] along `dim`.
std::vector<double> naive_index_select(const Tensor& x, int dim, const std::vector<int64_t>& index, Dims* out_shape) {
  const std::vector<double> v = x.to_vector<double>();
  *out_shape = x.shape();
  (*out_shape)[dim] = static_cast<int64_t>(index.size());
  std::vector<double> out(static_cast<size_t>(shape_numel(*out_shape)));
  for (int64_t k = 0; k < shape_numel(*out_shape); ++k) {
    std::vector<int64_t> c = coords_of(k, *out_shape);
    c[static_cast<size_t>(dim)] = index[static_cast<size_t>(c[static_cast<size_t>(dim)])];
    out[static_cast<size_t>(k)] = v[static_cast<size_t>(flat_index(c, x.shape()))];
  }
  return out;
}

}  // namespace

TEST_CASE("index: index_select matches a loop along every dim, with repeats and empty indices") {
  uint64_t seed = 10;
  const Dims shape{3, 4, 5};
  for (int dim = 0; dim < 3; ++dim) {
    for (int64_t count : {0, 1, 4, 7}) {
      for (Layout layout : layouts_for(shape)) {
        for (Layout index_layout : {Layout::Contiguous, Layout::Strided}) {
          CAPTURE(dim);
          CAPTURE(count);
          CAPTURE(static_cast<int>(layout));
          const Tensor x = values_input(shape, layout, ++seed);
          const Tensor index = index_input({count}, shape[dim], index_layout, ++seed);
          Dims out_shape;
          const std::vector<double> want = naive_index_select(x, dim, index.to_vector<int64_t>(), &out_shape);
          check_values(index_select(x, dim, index), out_shape, want);
          check_values(index_select(x, dim - 3, index.to(kInt32)), out_shape,
                       want);  // negative dim
        }
      }
    }
  }
  // A 0-D index keeps the dim with size 1.
  const Tensor x = values_input({4, 2}, Layout::Contiguous, 1);
  Dims out_shape;
  const std::vector<double> want = naive_index_select(x, 0, {2}, &out_shape);
  check_values(index_select(x, 0, scalar_tensor(2.0, kInt64)), out_shape, want);
}

TEST_CASE("index: gather matches a loop along every dim") {
  uint64_t seed = 200;
  const Dims shape{3, 4, 5};
  for (int dim = 0; dim < 3; ++dim) {
    for (int64_t extent : {1, 2, 6}) {
      for (Layout layout : layouts_for(shape)) {
        for (Layout index_layout : {Layout::Contiguous, Layout::Transposed}) {
          CAPTURE(dim);
          CAPTURE(extent);
          const Tensor x = values_input(shape, layout, ++seed);
          Dims index_shape = shape;
          index_shape[dim] = extent;
          const Tensor index = index_input(index_shape, shape[dim], index_layout, ++seed);
          const std::vector<double> v = x.to_vector<double>();
          const std::vector<int64_t> vi = index.to_vector<int64_t>();
          std::vector<double> want(vi.size());
          for (int64_t k = 0; k < shape_numel(index_shape); ++k) {
            std::vector<int64_t> c = coords_of(k, index_shape);
            c[static_cast<size_t>(dim)] = vi[static_cast<size_t>(k)];
            want[static_cast<size_t>(k)] = v[static_cast<size_t>(flat_index(c, shape))];
          }
          check_values(gather(x, dim, index), index_shape, want);
          check_values(gather(x, dim, index.to(kInt32)), index_shape, want);
        }
      }
    }
  }
}

TEST_CASE("index: embedding picks rows for indices of any shape") {
  uint64_t seed = 400;
  for (const Dims& index_shape : {Dims{5}, Dims{2, 3}, Dims{}, Dims{2, 0}}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      CAPTURE(shape_str(index_shape));
      const Tensor weight = values_input({10, 4}, layout, ++seed);
      const Tensor indices = index_input(index_shape, 10, Layout::Contiguous, ++seed);
      const std::vector<double> w = weight.to_vector<double>();
      std::vector<double> want;
      for (int64_t r : indices.to_vector<int64_t>())
        for (int64_t c = 0; c < 4; ++c) want.push_back(w[static_cast<size_t>(r * 4 + c)]);
      Dims out_shape = index_shape;
      out_shape.push_back(4);
      check_values(F::embedding(weight, indices), out_shape, want);
      check_values(F::embedding(weight, indices.to(kInt32)), out_shape, want);
      // 16-bit tables are copied exactly.
      const Tensor half = weight.to(kBFloat16);
      const std::vector<double> wh = half.to_vector<double>();
      std::vector<double> want_h;
      for (int64_t r : indices.to_vector<int64_t>())
        for (int64_t c = 0; c < 4; ++c) want_h.push_back(wh[static_cast<size_t>(r * 4 + c)]);
      const Tensor out_h = F::embedding(half, indices);
      CHECK(out_h.dtype() == kBFloat16);
      check_values(out_h, out_shape, want_h);
    }
  }
}

TEST_CASE("index: backward scatter-adds into repeated rows") {
  // index_select / embedding: d sum(w * out) / d x[r] = sum of w over the positions picking r.
  Tensor table = values_input({6, 3}, Layout::Contiguous, 1, true);
  const Tensor indices = from_vector<int64_t>({4, 0, 4, 2, 4, 0}, {2, 3});
  const Tensor w = values_input({2, 3, 3}, Layout::Contiguous, 2);
  sum(F::embedding(table, indices) * w).backward();
  const std::vector<double> vw = w.to_vector<double>();
  std::vector<double> want(18, 0.0);
  const std::vector<int64_t> vi = indices.to_vector<int64_t>();
  for (size_t j = 0; j < vi.size(); ++j)
    for (size_t c = 0; c < 3; ++c) want[static_cast<size_t>(vi[j]) * 3 + c] += vw[j * 3 + c];
  check_values(table.grad(), {6, 3}, want, 1e-15);

  // gather along dim 1 of a transposed input: the same accumulation per row.
  Tensor x = values_input({3, 4}, Layout::Transposed, 3, true);
  const Tensor gi = from_vector<int64_t>({1, 1, 3, 0, 2, 2, 2, 2, 3, 0, 0, 1}, {3, 4});
  const Tensor gw = values_input({3, 4}, Layout::Contiguous, 4);
  sum(gather(x, 1, gi) * gw).backward();
  const std::vector<int64_t> vgi = gi.to_vector<int64_t>();
  const std::vector<double> vgw = gw.to_vector<double>();
  std::vector<double> want_x(12, 0.0);
  for (size_t k = 0; k < 12; ++k) want_x[(k / 4) * 4 + static_cast<size_t>(vgi[k])] += vgw[k];
  check_values(x.grad(), {3, 4}, want_x, 1e-15);
}

TEST_CASE("index: misuse raises heed::Error naming the op") {
  const Tensor x = zeros({5, 3});
  const auto idx = [](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return from_vector(v, {n});
  };
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({0, 5})),
                       doctest::Contains("heed::index_select: index 5 at position 1 is out of range"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({-1})), doctest::Contains("heed::index_select: index -1"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 1, idx({3})), doctest::Contains("heed::index_select:"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, tensor({1.0})),
                       doctest::Contains("heed::index_select: expected the index to be int64"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, zeros({2, 2}, kInt64)),
                       doctest::Contains("heed::index_select: index must be 0-D or 1-D"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 2, idx({0})), doctest::Contains("heed::index_select: dim 2"), Error);
  CHECK_THROWS_WITH_AS(index_select(scalar_tensor(1.0), 0, idx({0})), doctest::Contains("heed::index_select:"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, Tensor()), doctest::Contains("heed::index_select:"), Error);

  const Tensor gi = zeros({5, 2}, kInt64);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({5}, kInt64)),
                       doctest::Contains("heed::gather: index must have as many dims as the input"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({4, 2}, kInt64)), doctest::Contains("heed::gather: index shape [4, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, full({5, 2}, 3.0, kInt64)),
                       doctest::Contains("heed::gather: index 3 at position 0 is out of range"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, full({5, 2}, -2.0, kInt64)), doctest::Contains("heed::gather: index -2"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({5, 2})), doctest::Contains("heed::gather:"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 2, gi), doctest::Contains("heed::gather: dim 2"), Error);
  CHECK_THROWS_WITH_AS(gather(scalar_tensor(1.0), 0, zeros({}, kInt64)), doctest::Contains("heed::gather:"), Error);

  const Tensor table = zeros({10, 4});
  CHECK_THROWS_WITH_AS(F::embedding(table, idx({3, 10})),
                       doctest::Contains("heed::embedding: index 10 at position 1 is out of range"), Error);
  CHECK_THROWS_WITH_AS(F::embedding(table, idx({-1, 2})), doctest::Contains("heed::embedding: index -1"), Error);
  CHECK_THROWS_WITH_AS(F::embedding(table, tensor({1.0, 2.0})),
                       doctest::Contains("heed::embedding: expected the indices to be int64"), Error);
  CHECK_THROWS_WITH_AS(F::embedding(zeros({10}), idx({1})), doctest::Contains("heed::embedding: weight must be 2-D"),
                       Error);
  CHECK_THROWS_WITH_AS(F::embedding(table, Tensor()), doctest::Contains("heed::embedding:"), Error);
}
