// tests/test_ops_matmul.cpp — matmul (torch.matmul semantics) against a naive float64 triple
// loop: 1-D/2-D/batched operands, broadcast batch dims, transposed/strided/expanded operands
// (BLAS flags, copies, stride-0 batches), empty and K = 0 products, float32 and 16-bit
// against the float64 reference, promotion and misuse; the gemm kernel's epilogues (the bias
// and the row sums of op(A)) against float64, and F::linear's use of them (the bias gradient
// summed in the weight gradient's gemm). Gradients: tests/test_gradcheck.cpp.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
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

namespace {

// A matrix with its rows `ld` apart (ld >= cols), the padding filled with NaN.
template <typename T>
std::vector<T> padded_matrix(int64_t rows, int64_t cols, int64_t ld, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> m(static_cast<size_t>(rows * ld), std::numeric_limits<T>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r * ld + c)] = static_cast<T>(uniform(rng));
  return m;
}

template <typename T>
void check_gemm_epilogues(DType dtype, double rtol) {
  std::mt19937 rng(2026);
  // (m, n, k): a single element, ragged sizes, a product big enough for several gemm tasks, and
  // k over two of heed's 256-deep slices.
  const int64_t sizes[][3] = {{1, 1, 1}, {37, 70, 5}, {260, 330, 97}, {45, 70, 300}};
  for (const auto& size : sizes)
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        const int64_t m = size[0], n = size[1], k = size[2];
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(trans_a);
        CAPTURE(trans_b);
        // Stored shapes of A and B with padded leading dimensions.
        const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
        const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
        const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = n + 2;
        const std::vector<T> a = padded_matrix<T>(a_rows, a_cols, lda, rng);
        const std::vector<T> b = padded_matrix<T>(b_rows, b_cols, ldb, rng);
        const std::vector<T> bias = padded_matrix<T>(1, n, n, rng);
        const auto op_a = [&](int64_t i, int64_t p) { return double(trans_a ? a[p * lda + i] : a[i * lda + p]); };
        const auto op_b = [&](int64_t p, int64_t j) { return double(trans_b ? b[j * ldb + p] : b[p * ldb + j]); };

        kernels::GemmArgs args;
        args.dtype = dtype;
        args.trans_a = trans_a;
        args.trans_b = trans_b;
        args.m = m;
        args.n = n;
        args.k = k;
        args.a = a.data();
        args.lda = lda;
        args.b = b.data();
        args.ldb = ldb;
        args.ldc = ldc;
        args.alpha = 0.5;
        // Bias epilogue: C starts as NaN everywhere (beta = 0: never read), padding untouched.
        std::vector<T> c(static_cast<size_t>(m * ldc), std::numeric_limits<T>::quiet_NaN());
        args.c = c.data();
        args.bias = bias.data();
        kernels::cpu::gemm(args);
        int bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              want += op_a(i, p) * op_b(p, j);
              magnitude += std::abs(op_a(i, p) * op_b(p, j));
            }
            want = 0.5 * want + double(bias[j]);
            const double got = c[static_cast<size_t>(i * ldc + j)];
            if (!(std::abs(got - want) <= rtol * (0.5 * magnitude + std::abs(double(bias[j])) + 1.0))) ++bad;
          }
          for (int64_t j = n; j < ldc; ++j) bad += !std::isnan(double(c[static_cast<size_t>(i * ldc + j)]));
        }
        CHECK(bad == 0);

        // Row-sum epilogue (alpha 1), next to a plain product.
        std::vector<T> sums(static_cast<size_t>(m) + 1, std::numeric_limits<T>::quiet_NaN());
        std::fill(c.begin(), c.end(), std::numeric_limits<T>::quiet_NaN());
        args.bias = nullptr;
        args.alpha = 1.0;
        args.a_row_sums = sums.data();
        kernels::cpu::gemm(args);
        for (int64_t i = 0; i < m; ++i) {
          double want = 0.0, magnitude = 0.0;
          for (int64_t p = 0; p < k; ++p) {
            want += op_a(i, p);
            magnitude += std::abs(op_a(i, p));
          }
          CHECK(std::abs(double(sums[static_cast<size_t>(i)]) - want) <= rtol * (magnitude + 1.0));
          double product = 0.0;
          for (int64_t p = 0; p < k; ++p) product += op_a(i, p) * op_b(p, n - 1);
          CHECK(std::abs(double(c[static_cast<size_t>(i * ldc + n - 1)]) - product) <= rtol * (double(k) + 1.0));
        }
        CHECK(std::isnan(double(sums[static_cast<size_t>(m)])));  // nothing written past m

        // The erf GELU with its derivative (C contiguous): z against float64, gelu(z) and gelu'(z)
        // with the bits of the gelu row's unary and unary_backward kernels (times ones) on that z.
        const size_t mn = static_cast<size_t>(m * n);
        std::vector<T> z(mn), h(mn), derivative(mn), ones(mn, T(1)), want_h(mn), want_derivative(mn);
        args.a_row_sums = nullptr;
        args.bias = bias.data();
        args.ldc = n;
        args.c = h.data();
        args.activation = kernels::GemmActivation::GeluErf;
        args.pre_activation = z.data();
        args.activation_derivative = derivative.data();
        kernels::cpu::gemm(args);
        kernels::cpu::unary(kernels::UnaryOp::GeluErf, dtype, z.data(), want_h.data(), m * n, 0.0);
        kernels::cpu::unary_backward(kernels::UnaryOp::GeluErf, dtype, ones.data(), z.data(), want_derivative.data(),
                                     m * n, 0.0);
        CHECK(std::memcmp(h.data(), want_h.data(), mn * sizeof(T)) == 0);
        CHECK(std::memcmp(derivative.data(), want_derivative.data(), mn * sizeof(T)) == 0);
        // Without pre_activation: z formed in C's block and replaced there, the same bits.
        std::vector<T> h_in_place(mn, std::numeric_limits<T>::quiet_NaN()), derivative_in_place(mn);
        args.c = h_in_place.data();
        args.pre_activation = nullptr;
        args.activation_derivative = derivative_in_place.data();
        kernels::cpu::gemm(args);
        CHECK(std::memcmp(h_in_place.data(), want_h.data(), mn * sizeof(T)) == 0);
        CHECK(std::memcmp(derivative_in_place.data(), want_derivative.data(), mn * sizeof(T)) == 0);
        bad = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = double(bias[j]), magnitude = std::abs(double(bias[j]));
            for (int64_t p = 0; p < k; ++p) {
              want += op_a(i, p) * op_b(p, j);
              magnitude += std::abs(op_a(i, p) * op_b(p, j));
            }
            bad += !(std::abs(double(z[static_cast<size_t>(i * n + j)]) - want) <= rtol * (magnitude + 1.0));
          }
        CHECK(bad == 0);

        // The multiplier epilogue: C = (op(A) op(B)) * factor, against float64; C never read.
        const std::vector<T> factor = padded_matrix<T>(m, n, n, rng);
        std::vector<T> product(mn, std::numeric_limits<T>::quiet_NaN());
        args.bias = nullptr;
        args.activation = kernels::GemmActivation::None;
        args.pre_activation = nullptr;
        args.activation_derivative = nullptr;
        args.c = product.data();
        args.c_multiplier = factor.data();
        kernels::cpu::gemm(args);
        bad = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              want += op_a(i, p) * op_b(p, j);
              magnitude += std::abs(op_a(i, p) * op_b(p, j));
            }
            const double f = double(factor[static_cast<size_t>(i * n + j)]);
            bad += !(std::abs(double(product[static_cast<size_t>(i * n + j)]) - want * f) <=
                     rtol * (magnitude + 1.0) * (std::abs(f) + 1.0));
          }
        CHECK(bad == 0);

        // The GELU (with its derivative) and multiplier epilogues with C's rows padded (ldc > n,
        // as F::feed_forward lays out its hidden activations): the contiguous results' bits in
        // every row, the padding never written.
        const int64_t ld = n + 3;
        const size_t padded = static_cast<size_t>(m * ld);
        const T nan = std::numeric_limits<T>::quiet_NaN();
        std::vector<T> h_padded(padded, nan), derivative_padded(padded, nan), factor_padded(padded, nan),
            product_padded(padded, nan);
        for (int64_t i = 0; i < m; ++i) std::copy_n(factor.begin() + i * n, n, factor_padded.begin() + i * ld);
        args.ldc = ld;
        args.bias = bias.data();
        args.activation = kernels::GemmActivation::GeluErf;
        args.c = h_padded.data();
        args.activation_derivative = derivative_padded.data();
        args.c_multiplier = nullptr;
        kernels::cpu::gemm(args);
        args.bias = nullptr;
        args.activation = kernels::GemmActivation::None;
        args.activation_derivative = nullptr;
        args.c = product_padded.data();
        args.c_multiplier = factor_padded.data();
        kernels::cpu::gemm(args);
        args.c_multiplier = nullptr;
        bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          const size_t row = static_cast<size_t>(i * ld), dense = static_cast<size_t>(i * n);
          bad += std::memcmp(&h_padded[row], &want_h[dense], n * sizeof(T)) != 0;
          bad += std::memcmp(&derivative_padded[row], &want_derivative[dense], n * sizeof(T)) != 0;
          bad += std::memcmp(&product_padded[row], &product[dense], n * sizeof(T)) != 0;
          for (int64_t j = n; j < ld; ++j)
            bad += !std::isnan(double(h_padded[row + j])) + !std::isnan(double(derivative_padded[row + j])) +
                   !std::isnan(double(product_padded[row + j]));
        }
        CHECK(bad == 0);
      }
}

}  // namespace

TEST_CASE(
    "gemm epilogues (CPU kernel): bias, the row sums of op(A), GELU with its derivative and the multiplier against "
    "float64") {
  SUBCASE("float32, under each CPU gemm choice") {
    const CpuGemm saved = cpu_gemm();
    for (CpuGemm choice : {CpuGemm::Openblas, CpuGemm::HeedAvx2, CpuGemm::HeedAvx512}) {
      if (choice != CpuGemm::Openblas &&
          !kernels::cpu::heed_sgemm_supported(choice == CpuGemm::HeedAvx2 ? kernels::cpu::SgemmKernel::Avx2
                                                                          : kernels::cpu::SgemmKernel::Avx512)) {
        MESSAGE("skipped a heed sgemm kernel this CPU or build lacks: ", static_cast<int>(choice));
        continue;
      }
      CAPTURE(static_cast<int>(choice));
      set_cpu_gemm(choice);
      check_gemm_epilogues<float>(kFloat32, 1e-6);
    }
    set_cpu_gemm(saved);
  }
  SUBCASE("float64") { check_gemm_epilogues<double>(kFloat64, 1e-14); }
  SUBCASE("misuse") {
    float a = 1, b = 1, c = 0, v = 0;
    kernels::GemmArgs args;
    args.m = args.n = args.k = 1;
    args.a = &a;
    args.b = &b;
    args.c = &c;
    args.lda = args.ldb = args.ldc = 1;
    args.bias = &v;
    args.a_row_sums = &v;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args),
                         doctest::Contains("heed::gemm: the row sums of A are an epilogue of their own"), Error);
    args.bias = nullptr;
    args.alpha = 2.0;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("the row-sum epilogue needs alpha 1 and beta 0"),
                         Error);
    args.alpha = 1.0;
    args.bias = &v;
    args.a_row_sums = nullptr;
    args.activation = kernels::GemmActivation::GeluErf;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("the activation epilogue needs pre_activation"),
                         Error);
    args.pre_activation = &v;
    args.ldc = 0;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("C's rows ldc 0 >= n 1 apart"), Error);
    args.ldc = 1;
    args.activation = kernels::GemmActivation::None;
    args.pre_activation = nullptr;
    args.beta = 1.0;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("the bias epilogue needs beta == 0"), Error);
    args.beta = 0.0;
    args.batch = 2;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("need batch == 1, got batch 2"), Error);
    args.batch = 1;
    args.k = 0;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("the epilogues need k >= 1"), Error);
    args.k = 1;
    args.bias = nullptr;
    args.activation_derivative = &v;  // without the erf GELU epilogue
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args),
                         doctest::Contains("the activation_derivative epilogue is for the erf GELU epilogue"), Error);
    args.activation = kernels::GemmActivation::GeluTanh;
    args.pre_activation = &v;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args),
                         doctest::Contains("the activation_derivative epilogue is for the erf GELU epilogue"), Error);
    args.activation = kernels::GemmActivation::None;
    args.pre_activation = nullptr;
    args.activation_derivative = nullptr;
    args.c_multiplier = &v;
    args.bias = &v;  // the multiplier comes alone
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("the c_multiplier epilogue needs batch 1"), Error);
    args.bias = nullptr;
    args.ldc = 0;
    CHECK_THROWS_WITH_AS(kernels::cpu::gemm(args), doctest::Contains("C's rows ldc 0 >= n 1 apart"), Error);
  }
}

TEST_CASE("linear: the bias in the gemm's epilogue, its gradient in the weight gradient's gemm") {
  // float64 inputs: the fused results must equal matmul + bias and the summed upstream gradient.
  const auto run = [](const Dims& x_shape, bool weight_grad, bool x_contiguous) {
    CAPTURE(shape_str(x_shape));
    CAPTURE(weight_grad);
    CAPTURE(x_contiguous);
    manual_seed(77);
    Tensor x = randn(x_shape, kFloat64);
    if (!x_contiguous) x = randn({x_shape[1], x_shape[0], x_shape[2]}, kFloat64).transpose(0, 1);
    x.requires_grad_();
    Tensor w = randn({7, x_shape.back()}, kFloat64).requires_grad_(weight_grad);
    Tensor b = randn({7}, kFloat64).requires_grad_();
    profile::Profiler profiler;
    const Tensor out = F::linear(x, w, b);
    Dims out_shape = x_shape;
    out_shape[out_shape.size() - 1] = 7;
    const Tensor upstream = randn(out_shape, kFloat64);
    out.backward(upstream);
    profiler.stop();
    const Tensor want = add(matmul(x.detach(), w.detach().t()), b.detach());
    CHECK(max(abs(sub(out.detach(), want))).item<double>() <= 1e-13);
    const Tensor want_db = sum(upstream.reshape({-1, 7}), {0});
    CHECK(max(abs(sub(b.grad(), want_db))).item<double>() <= 1e-12);
    // Which gemms carried an epilogue (the profiler's kernel spans name them).
    int with_bias = 0, with_row_sums = 0;
    for (const profile::Event& e : profiler.events()) {
      if (e.kind != profile::Kind::Kernel || e.name != "gemm") continue;
      with_bias += e.shapes.find("+bias") != std::string::npos;
      with_row_sums += e.shapes.find("+row_sums(A)") != std::string::npos;
    }
    // The bias is an epilogue when the product is one gemm (x's rows contiguous, or 2-D).
    CHECK(with_bias == (x_contiguous || x_shape.size() == 2 ? 1 : 0));
    // The bias gradient comes from the weight gradient's gemm when the weight needs one.
    CHECK(with_row_sums == (weight_grad ? 1 : 0));
  };
  run({3, 5, 12}, true, true);
  run({3, 5, 12}, false, true);
  run({4, 12}, true, true);
  run({3, 5, 12}, true, false);
}

TEST_CASE("linear_gelu: the GELU in the gemm's epilogue gives gelu(linear(...)) bit for bit, and its gradients") {
  struct Case {
    Dims x_shape;
    bool bias, contiguous;
  };
  const Case cases[] = {
      {{3, 5, 12}, true, true}, {{9, 12}, false, true}, {{12}, true, true}, {{3, 5, 12}, true, false}};
  for (DType dtype : {kFloat32, kFloat64})
    for (GeluApproximation approximation : {GeluApproximation::None, GeluApproximation::Tanh})
      for (const Case& c : cases) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(approximation == GeluApproximation::Tanh);
        CAPTURE(shape_str(c.x_shape));
        CAPTURE(c.bias);
        CAPTURE(c.contiguous);
        manual_seed(91);
        Tensor x0 = mul_scalar(randn(c.x_shape, kFloat64), 2.0).to(dtype);
        if (!c.contiguous) x0 = x0.transpose(0, 1).contiguous().transpose(0, 1);
        const Tensor w0 = mul_scalar(randn({19, 12}, kFloat64), 0.3).to(dtype);
        const Tensor b0 = c.bias ? randn({19}, kFloat64).to(dtype) : Tensor();
        // The fused op and the two ops it replaces, on separate leaves.
        Tensor x1 = x0.detach().clone().requires_grad_(), w1 = w0.clone().requires_grad_();
        Tensor x2 = x0.detach().clone().requires_grad_(), w2 = w0.clone().requires_grad_();
        Tensor b1 = c.bias ? b0.clone().requires_grad_() : Tensor(),
               b2 = c.bias ? b0.clone().requires_grad_() : Tensor();
        if (!c.contiguous) {
          x1 = x0.detach().transpose(0, 1).contiguous().requires_grad_();
          x2 = x0.detach().transpose(0, 1).contiguous().requires_grad_();
        }
        const Tensor in1 = c.contiguous ? x1 : x1.transpose(0, 1), in2 = c.contiguous ? x2 : x2.transpose(0, 1);
        profile::Profiler profiler;
        const Tensor fused = F::linear_gelu(in1, w1, b1, approximation);
        profiler.stop();
        const Tensor separate = F::gelu(F::linear(in2, w2, b2), approximation);
        REQUIRE(fused.shape() == separate.shape());
        CHECK(fused.dtype() == dtype);
        // Same gemm, same GELU functions: identical values.
        CHECK(max(abs(sub(fused.detach(), separate.detach()))).item<double>() == 0.0);
        // The GELU rode in the gemm's epilogue when the product is one gemm.
        int fused_gemms = 0;
        for (const profile::Event& e : profiler.events())
          if (e.kind == profile::Kind::Kernel && e.name == "gemm")
            fused_gemms +=
                e.shapes.find(approximation == GeluApproximation::Tanh ? "+gelu_tanh" : "+gelu") != std::string::npos;
        CHECK(fused_gemms == (c.contiguous ? 1 : 0));
        // Gradients: dz from the same derivative kernel, then the same gemms; the bias gradient
        // summed in another order (float64 in the gemm's row sums).
        const Tensor upstream = randn(fused.shape(), kFloat64).to(dtype);
        fused.backward(upstream);
        separate.backward(upstream);
        const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
        const auto close = [tol](const Tensor& a, const Tensor& b) {
          return max(abs(sub(a, b))).item<double>() <= tol * (1.0 + max(abs(b)).item<double>());
        };
        CHECK(close(x1.grad(), x2.grad()));
        CHECK(close(w1.grad(), w2.grad()));
        if (c.bias) CHECK(close(b1.grad(), b2.grad()));
      }
}

TEST_CASE("feed_forward: one node with the bits of linear_gelu then linear, forward and every gradient") {
  struct Case {
    Dims x_shape;
    bool b1, b2, contiguous;
  };
  // 12 -> 37 -> 7: hidden rows of 37 floats exercise the 16-, 8-lane and scalar parts of the
  // GELU loops, and 3 x 5 x 12 with 2-3 threads row blocks of both kinds.
  const Case cases[] = {{{3, 5, 12}, true, true, true},
                        {{9, 12}, false, true, true},
                        {{12}, true, false, true},
                        {{3, 5, 12}, true, true, false},
                        {{40, 12}, false, false, true}};
  const int saved_threads = get_num_threads();
  for (int threads : {1, 3})
    for (DType dtype : {kFloat32, kFloat64})
      for (const Case& c : cases) {
        CAPTURE(threads);
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(c.x_shape));
        CAPTURE(c.b1);
        CAPTURE(c.b2);
        CAPTURE(c.contiguous);
        set_num_threads(threads);
        manual_seed(17);
        const Tensor x0 = mul_scalar(randn(c.x_shape, kFloat64), 2.0).to(dtype);
        const Tensor w1_0 = mul_scalar(randn({37, 12}, kFloat64), 0.3).to(dtype);
        const Tensor b1_0 = randn({37}, kFloat64).to(dtype);
        const Tensor w2_0 = mul_scalar(randn({7, 37}, kFloat64), 0.3).to(dtype);
        const Tensor b2_0 = randn({7}, kFloat64).to(dtype);
        struct Leaves {
          Tensor x, w1, b1, w2, b2;
        };
        const auto leaves = [&]() {
          Leaves l;
          l.x = (c.contiguous ? x0.clone() : x0.transpose(0, 1).contiguous()).requires_grad_();
          l.w1 = w1_0.clone().requires_grad_();
          l.b1 = c.b1 ? b1_0.clone().requires_grad_() : Tensor();
          l.w2 = w2_0.clone().requires_grad_();
          l.b2 = c.b2 ? b2_0.clone().requires_grad_() : Tensor();
          return l;
        };
        Leaves f = leaves(), s = leaves();
        const Tensor in_f = c.contiguous ? f.x : f.x.transpose(0, 1), in_s = c.contiguous ? s.x : s.x.transpose(0, 1);
        const Tensor fused = F::feed_forward(in_f, f.w1, f.b1, f.w2, f.b2);
        // F::feed_forward runs on x.contiguous(): one gemm over all rows. The two ops on a strided
        // x run one gemm per batch entry instead (M = 5 rather than 15), which OpenBLAS may round
        // differently (seen on a Zen 3 with OpenBLAS's Zen set), so the bits to match are those of
        // the two ops on the same contiguous rows.
        const Tensor separate = F::linear(F::linear_gelu(in_s.contiguous(), s.w1, s.b1), s.w2, s.b2);
        REQUIRE(fused.shape() == separate.shape());
        if (c.x_shape.size() > 1) CHECK(fused.grad_fn()->name() == std::string("feed_forward"));  // 1-D: a squeeze
        CHECK(max(abs(sub(fused.detach(), separate.detach()))).item<double>() == 0.0);
        const Tensor upstream = randn(fused.shape(), kFloat64).to(dtype);
        fused.backward(upstream);
        separate.backward(upstream);
        // The same gemms on the same operands, dz from the gelu row's own derivative: the same bits.
        const auto same = [](const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>() == 0.0; };
        CHECK(same(f.x.grad(), s.x.grad()));
        CHECK(same(f.w1.grad(), s.w1.grad()));
        CHECK(same(f.w2.grad(), s.w2.grad()));
        if (c.b1) CHECK(same(f.b1.grad(), s.b1.grad()));
        if (c.b2) CHECK(same(f.b2.grad(), s.b2.grad()));
        // Against float64: the fused float32 result within float32 rounding of the float64 one.
        if (dtype == kFloat32) {
          const Tensor reference = F::linear(F::linear_gelu(x0.to(kFloat64), w1_0.to(kFloat64), b1_0.to(kFloat64)),
                                             w2_0.to(kFloat64), b2_0.to(kFloat64));
          if (c.b1 && c.b2 && c.contiguous)
            CHECK(max(abs(sub(fused.detach().to(kFloat64), reference))).item<double>() <=
                  1e-5 * (1.0 + max(abs(reference)).item<double>()));
        }
      }
  set_num_threads(saved_threads);
}

TEST_CASE("feed_forward: hidden rows a multiple of 2 KiB long are laid out padded, with the bits of the two ops") {
  // float32 hidden activations 512 or 1024 wide (charlm's and the lm step's h and dz) live in rows 16 floats longer
  // (matmul.cpp, padded_rows), which the weight gradients' gemms read in place: every output
  // and gradient must keep the bits of linear_gelu then linear (contiguous hidden rows), on 1
  // and 2 threads, for batched and 2-D inputs.
  const int saved_threads = get_num_threads();
  for (int threads : {1, 2})
    for (const Dims& x_shape : {Dims{2, 24, 8}, Dims{40, 8}})
      for (int64_t hidden : {512, 1024}) {
        CAPTURE(threads);
        CAPTURE(shape_str(x_shape));
        CAPTURE(hidden);
        set_num_threads(threads);
        manual_seed(23);
        const Tensor x0 = randn(x_shape), w1_0 = mul_scalar(randn({hidden, 8}), 0.3), b1_0 = randn({hidden});
        const Tensor w2_0 = mul_scalar(randn({5, hidden}), 0.05), b2_0 = randn({5});
        const auto leaf = [](const Tensor& t) { return t.clone().requires_grad_(); };
        const Tensor xf = leaf(x0), w1f = leaf(w1_0), b1f = leaf(b1_0), w2f = leaf(w2_0), b2f = leaf(b2_0);
        const Tensor xs = leaf(x0), w1s = leaf(w1_0), b1s = leaf(b1_0), w2s = leaf(w2_0), b2s = leaf(b2_0);
        const Tensor fused = F::feed_forward(xf, w1f, b1f, w2f, b2f);
        const Tensor separate = F::linear(F::linear_gelu(xs, w1s, b1s), w2s, b2s);
        CHECK(fused.grad_fn()->name() == std::string("feed_forward"));
        CHECK(fused.is_contiguous());  // only the hidden activations are padded
        const auto same = [](const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>() == 0.0; };
        CHECK(same(fused.detach(), separate.detach()));
        const Tensor upstream = randn(fused.shape());
        fused.backward(upstream);
        separate.backward(upstream);
        CHECK(same(xf.grad(), xs.grad()));
        CHECK(same(w1f.grad(), w1s.grad()));
        CHECK(same(b1f.grad(), b1s.grad()));
        CHECK(same(w2f.grad(), w2s.grad()));
        CHECK(same(b2f.grad(), b2s.grad()));
        CHECK(w1f.grad().is_contiguous());
      }
  set_num_threads(saved_threads);
}

TEST_CASE("feed_forward: a weight alone needing its gradient, no grad mode, and the two ops where it cannot fuse") {
  manual_seed(5);
  const Tensor x = randn({4, 6}), w1 = randn({10, 6}), b1 = randn({10}), b2 = randn({3});
  Tensor w2 = randn({3, 10}).requires_grad_();
  const Tensor y = F::feed_forward(x, w1, b1, w2, b2);
  CHECK(y.grad_fn()->name() == std::string("feed_forward"));
  sum(y).backward();
  Tensor w2_separate = w2.detach().clone().requires_grad_();
  sum(F::linear(F::linear_gelu(x, w1, b1), w2_separate, b2)).backward();
  CHECK(max(abs(sub(w2.grad(), w2_separate.grad()))).item<double>() == 0.0);
  {
    NoGradGuard no_grad;
    const Tensor z = F::feed_forward(x, w1, b1, w2, b2);
    CHECK(!z.grad_fn());
    CHECK(max(abs(sub(z, y.detach()))).item<double>() == 0.0);
  }
  // The tanh GELU is not fused: linear_gelu then linear.
  Tensor w1g = w1.clone().requires_grad_();
  const Tensor t = F::feed_forward(x, w1g, b1, w2, b2, GeluApproximation::Tanh);
  CHECK(t.grad_fn()->name() == std::string("linear"));
}

TEST_CASE("feed_forward: misuse raises heed::Error naming the op") {
  CHECK_THROWS_WITH_AS(
      F::feed_forward(zeros({3, 4}), zeros({5, 6}), Tensor(), zeros({2, 5}), Tensor()),
      doctest::Contains("heed::feed_forward: input of shape [3, 4] does not match weight of shape [5, 6]"), Error);
  CHECK_THROWS_WITH_AS(F::feed_forward(zeros({3, 4}), zeros({5, 4}), Tensor(), zeros({2, 6}), Tensor()),
                       doctest::Contains("heed::feed_forward: w2 must have shape [out, 5]"), Error);
  CHECK_THROWS_WITH_AS(F::feed_forward(zeros({3, 4}), zeros({5, 4}), zeros({5}), zeros({2, 5}), zeros({3})),
                       doctest::Contains("heed::feed_forward: b2 must have shape [2], got [3]"), Error);
  CHECK_THROWS_WITH_AS(F::feed_forward(zeros({3, 4}), zeros({5, 4}), zeros({4}), zeros({2, 5}), Tensor()),
                       doctest::Contains("heed::feed_forward: bias must have shape [5], got [4]"), Error);
}

TEST_CASE("linear_gelu: misuse raises heed::Error naming the op") {
  CHECK_THROWS_WITH_AS(
      F::linear_gelu(zeros({3, 4}), zeros({5, 6})),
      doctest::Contains("heed::linear_gelu: input of shape [3, 4] does not match weight of shape [5, 6]"), Error);
  CHECK_THROWS_WITH_AS(F::linear_gelu(zeros({3, 4}), zeros({5, 4}), zeros({4})),
                       doctest::Contains("heed::linear_gelu: bias must have shape [5], got [4]"), Error);
  CHECK_THROWS_WITH_AS(F::linear_gelu(zeros({3, 4}, kInt64), zeros({5, 4})), doctest::Contains("heed::linear_gelu"),
                       Error);
}
