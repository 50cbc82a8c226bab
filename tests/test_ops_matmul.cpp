// tests/test_ops_matmul.cpp — matmul (torch.matmul semantics) against a naive float64 triple
// loop: 1-D/2-D/batched operands, broadcast batch dims, transposed/strided/expanded operands
// (BLAS flags, copies, stride-0 batches), empty and K = 0 products, float32 and 16-bit
// against the float64 reference, promotion and misuse. Gradients: tests/test_gradcheck.cpp.
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

// Row-major index into `shape` read by broadcast batch coordinates (right-aligned).
int64_t batch_source(const std::vector<int64_t>& coords, const Dims& shape) {
  const int shift = static_cast<int>(coords.size()) - shape.size();
  int64_t k = 0;
  for (int d = 0; d < shape.size(); ++d)
    k = k * shape[d] + (shape[d] == 1 ? 0 : coords[static_cast<size_t>(d + shift)]);
  return k;
}

// torch.matmul written out: promote 1-D operands, broadcast the batch dims, multiply with a
// triple loop in double, drop the added dims. Returns the values and sets *out_shape.
std::vector<double> naive_matmul(const Tensor& a_in, const Tensor& b_in, Dims* out_shape) {
  const std::vector<double> va = a_in.to_vector<double>(), vb = b_in.to_vector<double>();
  Dims sa = a_in.shape(), sb = b_in.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(0, 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa[sa.size() - 1], n = sb[sb.size() - 1];
  const Dims batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  Dims batch;
  const int nb = std::max(batch_a.size(), batch_b.size());
  for (int i = 0; i < nb; ++i) {
    const int ia = i - (nb - batch_a.size()), ib = i - (nb - batch_b.size());
    const int64_t x = ia >= 0 ? batch_a[ia] : 1, y = ib >= 0 ? batch_b[ib] : 1;
    batch.push_back(x == 1 ? y : x);
  }
  std::vector<double> out;
  for (int64_t bi = 0; bi < shape_numel(batch); ++bi) {
    const std::vector<int64_t> c = coords_of(bi, batch);
    const int64_t base_a = batch_source(c, batch_a) * m * k, base_b = batch_source(c, batch_b) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += va[static_cast<size_t>(base_a + i * k + p)] * vb[static_cast<size_t>(base_b + p * n + j)];
        out.push_back(s);
      }
  }
  *out_shape = batch;
  if (!a_vec) out_shape->push_back(m);
  if (!b_vec) out_shape->push_back(n);
  return out;
}

void check_close(const Tensor& got, const Dims& shape, const std::vector<double>& want, double rtol, double atol) {
  REQUIRE(got.shape() == shape);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::fabs(v[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      FAIL_CHECK("element " << i << " of shape " << shape_str(shape) << ": got " << v[i] << ", expected " << want[i]);
      return;
    }
  }
}

Tensor input(const Dims& shape, Layout layout, uint64_t seed) {
  InputSpec s = InputSpec::uniform(shape);
  s.layout = layout;
  s.requires_grad = false;
  return op_cases::make_input(s, seed);
}

std::vector<Layout> layouts_for(const Dims& shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  out.push_back(Layout::Strided);
  return out;
}

const std::vector<std::pair<Dims, Dims>> kShapes = {{{4}, {4}},
                                                    {{4}, {4, 3}},
                                                    {{3, 4}, {4}},
                                                    {{3, 4}, {4, 5}},
                                                    {{1, 4}, {4, 1}},
                                                    {{2, 3, 4}, {2, 4, 5}},
                                                    {{2, 1, 3, 4}, {3, 4, 2}},
                                                    {{2, 3, 4}, {4, 5}},
                                                    {{3, 4}, {2, 4, 5}},
                                                    {{4}, {2, 4, 3}},
                                                    {{2, 3, 4}, {4}},
                                                    {{1, 3, 4}, {2, 4, 5}},
                                                    {{2, 2, 3, 4}, {2, 1, 4, 5}},
                                                    {{5, 7}, {7, 6}}};

}  // namespace

TEST_CASE("matmul: matches a float64 triple loop for every operand form and layout") {
  uint64_t seed = 1;
  for (const auto& [sa, sb] : kShapes) {
    for (Layout la : layouts_for(sa)) {
      for (Layout lb : layouts_for(sb)) {
        CAPTURE(shape_str(sa));
        CAPTURE(shape_str(sb));
        CAPTURE(static_cast<int>(la));
        CAPTURE(static_cast<int>(lb));
        const Tensor a = input(sa, la, ++seed), b = input(sb, lb, ++seed);
        Dims shape;
        const std::vector<double> want = naive_matmul(a, b, &shape);
        const Tensor out = matmul(a, b);
        CHECK(out.dtype() == kFloat64);
        check_close(out, shape, want, 1e-12, 1e-13);
      }
    }
  }
}

TEST_CASE("matmul: views as operands (transpose inside, expanded and permuted batches)") {
  // q @ k^T with the transpose taken on a 4-D view, as attention does.
  const Tensor q = input({2, 3, 5, 4}, Layout::Contiguous, 50), k = input({2, 3, 6, 4}, Layout::Contiguous, 51);
  Dims shape;
  std::vector<double> want = naive_matmul(q, k.transpose(-1, -2).contiguous(), &shape);
  check_close(matmul(q, k.transpose(-1, -2)), shape, want, 1e-12, 1e-13);

  // A batch broadcast by expand (stride 0) and one whose batch dims do not collapse.
  const Tensor w = input({1, 4, 5}, Layout::Contiguous, 52).expand({3, 4, 5});
  const Tensor x = input({3, 2, 4}, Layout::Contiguous, 53);
  want = naive_matmul(x, w.contiguous(), &shape);
  check_close(matmul(x, w), shape, want, 1e-12, 1e-13);
  const Tensor permuted = input({3, 2, 2, 4}, Layout::Contiguous, 54).permute({1, 0, 2, 3});  // (2,3,2,4)
  const Tensor right = input({2, 3, 4, 3}, Layout::Transposed, 55);
  want = naive_matmul(permuted.contiguous(), right, &shape);
  check_close(matmul(permuted, right), shape, want, 1e-12, 1e-13);

  // A sliced row block of a bigger matrix (leading dimension larger than the width).
  const Tensor big = input({6, 9}, Layout::Contiguous, 56);
  const Tensor block = big.slice(0, 1, 4).slice(1, 2, 7);  // (3, 5), row stride 9
  const Tensor rhs = input({5, 2}, Layout::Contiguous, 57);
  want = naive_matmul(block.contiguous(), rhs, &shape);
  check_close(matmul(block, rhs), shape, want, 1e-12, 1e-13);
  want = naive_matmul(rhs.t().contiguous(), block.t().contiguous(), &shape);
  check_close(matmul(rhs.t(), block.t()), shape, want, 1e-12, 1e-13);
}

TEST_CASE("matmul: empty operands and K = 0") {
  check_close(matmul(zeros({3, 0}, kFloat64), zeros({0, 4}, kFloat64)), {3, 4}, std::vector<double>(12, 0.0), 0, 0);
  CHECK(matmul(zeros({0, 4}), zeros({4, 5})).shape() == Dims{0, 5});
  CHECK(matmul(zeros({2, 0, 4}), zeros({4, 5})).shape() == Dims{2, 0, 5});
  CHECK(matmul(zeros({3, 4}), zeros({4, 0})).shape() == Dims{3, 0});
  check_close(matmul(zeros({0}, kFloat64), zeros({0}, kFloat64)), {}, {0.0}, 0, 0);
}

TEST_CASE("matmul: float32 and 16-bit results are close to the float64 reference") {
  uint64_t seed = 300;
  for (const auto& [sa, sb] : kShapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    const Tensor a = input(sa, Layout::Contiguous, ++seed);
    const Tensor b = input(sb, sb.size() >= 2 ? Layout::Transposed : Layout::Strided, ++seed);
    Dims shape;
    const std::vector<double> want = naive_matmul(a.to(kFloat32), b.to(kFloat32), &shape);
    const Tensor out = matmul(a.to(kFloat32), b.to(kFloat32));
    CHECK(out.dtype() == kFloat32);
    check_close(out, shape, want, 1e-5, 1e-6);
    for (DType half : {kFloat16, kBFloat16}) {
      const Tensor ah = a.to(half), bh = b.to(half);
      const std::vector<double> want_h = naive_matmul(ah, bh, &shape);
      const Tensor out_h = matmul(ah, bh);
      CHECK(out_h.dtype() == half);
      // Products accumulate in float32 and round once to the 16-bit type.
      check_close(out_h, shape, want_h, half == kFloat16 ? 1e-3 : 8e-3, 1e-3);
    }
  }
}

TEST_CASE("matmul: mixed dtypes promote") {
  const Tensor a = input({2, 3}, Layout::Contiguous, 1), b = input({3, 2}, Layout::Contiguous, 2);
  const Tensor out = matmul(a.to(kFloat32), b);
  CHECK(out.dtype() == kFloat64);
  Dims shape;
  const std::vector<double> want = naive_matmul(a.to(kFloat32), b, &shape);
  check_close(out, shape, want, 1e-12, 1e-13);
}

TEST_CASE("matmul: misuse raises heed::Error naming the op") {
  const Tensor a = zeros({3, 4}), b = zeros({5, 6});
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("heed::matmul: shapes [3, 4] and [5, 6] cannot be multiplied"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({4}), zeros({5})), doctest::Contains("heed::matmul:"), Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({3, 4}), zeros({3})), doctest::Contains("heed::matmul:"), Error);
  CHECK_THROWS_WITH_AS(matmul(scalar_tensor(1.0), zeros({3})), doctest::Contains("heed::matmul:"), Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), doctest::Contains("heed::matmul:"),
                       Error);  // batch 2 vs 3
  CHECK_THROWS_WITH_AS(matmul(zeros({3, 4}, kInt64), zeros({4, 2}, kInt64)),
                       doctest::Contains("heed::matmul: expects floating-point"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, Tensor()), doctest::Contains("heed::matmul:"), Error);
}
