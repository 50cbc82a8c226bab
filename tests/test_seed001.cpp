// tests/test_seed001.cpp — seed 001's worked example (sec. 3: 3 tokens, d_model 4, d_k 2)
// through heed's API, against values computed here with plain float64 loops (the document's
// own intermediate numbers for K, V, the scores and the weights are wrong).
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <vector>

using namespace heed;

namespace {

using Matrix = std::vector<std::vector<double>>;

const Matrix kX = {{1.0, 0.5, -0.2, 1.2}, {0.3, -1.0, 0.8, 0.4}, {-0.7, 0.6, 1.1, -0.5}};
const Matrix kWq = {{0.1, 0.4}, {-0.2, 0.3}, {0.5, -0.1}, {0.2, 0.1}};
const Matrix kWk = {{-0.3, 0.2}, {0.1, 0.5}, {0.4, -0.2}, {-0.1, 0.3}};
const Matrix kWv = {{0.2, -0.1}, {0.3, 0.4}, {-0.2, 0.1}, {0.5, -0.3}};

Matrix multiply(const Matrix& a, const Matrix& b) {
  Matrix c(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b[0].size(); ++j)
      for (size_t k = 0; k < b.size(); ++k) c[i][j] += a[i][k] * b[k][j];
  return c;
}

Tensor to_tensor(const Matrix& m, DType dtype) {
  std::vector<double> flat;
  for (const auto& row : m) flat.insert(flat.end(), row.begin(), row.end());
  return from_vector(flat, {static_cast<int64_t>(m.size()), static_cast<int64_t>(m[0].size())}, dtype);
}

void check_close(const Tensor& actual, const Matrix& expected, double tol) {
  REQUIRE(actual.dim() == 2);
  REQUIRE(actual.size(0) == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    for (size_t j = 0; j < expected[i].size(); ++j)
      CHECK(actual.at<double>({static_cast<int64_t>(i), static_cast<int64_t>(j)}) ==
            doctest::Approx(expected[i][j]).epsilon(tol));
}

}  // namespace

TEST_CASE("seed 001 worked example: attention of 3 tokens with d_k = 2") {
  // Reference in float64 loops.
  const Matrix q = multiply(kX, kWq), k = multiply(kX, kWk), v = multiply(kX, kWv);
  Matrix weights(3, std::vector<double>(3));
  for (int i = 0; i < 3; ++i) {
    double scores[3], max_score = -1e300, total = 0;
    for (int j = 0; j < 3; ++j) {
      scores[j] = (q[i][0] * k[j][0] + q[i][1] * k[j][1]) / std::sqrt(2.0);  // scale by sqrt(d_k)
      max_score = std::max(max_score, scores[j]);
    }
    for (int j = 0; j < 3; ++j) total += std::exp(scores[j] - max_score);
    for (int j = 0; j < 3; ++j) weights[i][j] = std::exp(scores[j] - max_score) / total;
  }
  const Matrix output = multiply(weights, v);

  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
    Tensor x = to_tensor(kX, dtype);
    Tensor Q = matmul(x, to_tensor(kWq, dtype));                   // (L,d_k)
    Tensor K = matmul(x, to_tensor(kWk, dtype));                   // (L,d_k)
    Tensor V = matmul(x, to_tensor(kWv, dtype));                   // (L,d_k)
    Tensor A = F::softmax(matmul(Q, K.t()) / std::sqrt(2.0), -1);  // (L,L)
    Tensor out = matmul(A, V);                                     // (L,d_k)
    check_close(Q, q, tol);
    check_close(K, k, tol);
    check_close(V, v, tol);
    check_close(A, weights, tol);
    check_close(out, output, tol);
  }

  // The first token's Q row is the one the document gets right: [0.14, 0.69].
  CHECK(q[0][0] == doctest::Approx(0.14));
  CHECK(q[0][1] == doctest::Approx(0.69));
  // Its printed weights [0.339, 0.240, 0.421] do not follow from its inputs.
  CHECK(std::fabs(weights[0][0] - 0.339) > 0.05);
}

TEST_CASE("seed 001 softmax example: softmax([2, -1, 0.5])") {
  const double e0 = std::exp(2.0), e1 = std::exp(-1.0), e2 = std::exp(0.5), total = e0 + e1 + e2;
  Tensor p = F::softmax(tensor({2.0, -1.0, 0.5}, kFloat64), 0);
  CHECK(p.at<double>({0}) == doctest::Approx(e0 / total).epsilon(1e-14));
  CHECK(p.at<double>({1}) == doctest::Approx(e1 / total).epsilon(1e-14));
  CHECK(p.at<double>({2}) == doctest::Approx(e2 / total).epsilon(1e-14));
  CHECK(p.at<double>({0}) == doctest::Approx(0.7856).epsilon(1e-3));  // the document says 0.70
}
