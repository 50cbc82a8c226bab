// layers/src/init.cpp — parameter initialisers.
#include "heed/nn/init.h"

#include <cmath>
#include <vector>

#include "heed/autograd.h"
#include "heed/ops.h"

namespace heed::nn::init {

namespace {
// Initialisation writes in place without recording history (allowed on parameters). On the
// same device the copy converts the dtype itself (no converted temporary).
Tensor& write(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values.device() == t.device() ? values : values.to(t.dtype()).to(t.device()));
  return t;
}
}  // namespace

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  HEED_CHECK(t.dim() >= 2, "init", "fan in and fan out need a tensor with at least 2 dims, got shape {}",
             shape_str(t.shape()));
  int64_t receptive = 1;
  for (int i = 2; i < t.dim(); ++i) receptive *= t.shape()[i];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

// Random draws only make sense in a floating tensor (an integer one would truncate them).
static Generator& generator_or_default(Generator* generator) { return generator ? *generator : default_generator(); }

static void check_floating_target(const Tensor& t, const char* op) {
  HEED_CHECK(t.defined() && is_floating(t.dtype()), op, "needs a defined floating-point tensor, got {} of shape {}",
             t.defined() ? dtype_name(t.dtype()) : "an undefined tensor", t.defined() ? shape_str(t.shape()) : "[]");
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* generator) {
  check_floating_target(t, "uniform_");
  return write(t, uniform(t.shape(), low, high, generator_or_default(generator), kFloat64));
}
Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  check_floating_target(t, "normal_");
  HEED_CHECK(std >= 0, "normal_", "std must be non-negative, got {}", std);
  Tensor values = randn(t.shape(), generator_or_default(generator), kFloat64);  // float64 draws, one buffer
  values.mul_(std).add_(mean);
  return write(t, values);
}
Tensor& constant_(Tensor& t, double value) { return write(t, full(t.shape(), value, kFloat64)); }
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* generator) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -a, a, generator);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* generator) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), generator);
}

Tensor& kaiming_uniform_(Tensor& t, double a, Generator* generator) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  return uniform_(t, -bound, bound, generator);
}

Tensor& orthogonal_(Tensor& t, double gain, Generator* generator) {
  HEED_CHECK(t.dim() >= 2, "orthogonal_", "needs a tensor with at least 2 dims, got shape {}", shape_str(t.shape()));
  const int64_t rows = t.shape()[0], cols = t.numel() / std::max<int64_t>(rows, 1);
  // Work on the tall orientation (m >= n) and transpose back.
  const bool transpose = rows < cols;
  const int64_t m = transpose ? cols : rows, n = transpose ? rows : cols;
  std::vector<double> a =
      randn({m, n}, generator_or_default(generator), kFloat64).to_vector<double>();  // column j: a[i*n + j]
  // Modified Gram-Schmidt: Q (m,n) with orthonormal columns, R's diagonal made positive.
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += a[i * n + k] * a[i * n + j];
      for (int64_t i = 0; i < m; ++i) a[i * n + j] -= dot * a[i * n + k];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[i * n + j] * a[i * n + j];
    norm = std::sqrt(norm);
    HEED_CHECK(norm > 1e-12, "orthogonal_", "degenerate random matrix (column {} vanished)", j);
    for (int64_t i = 0; i < m; ++i) a[i * n + j] /= norm;  // diag(R) = norm > 0
  }
  Tensor q = from_vector(a, {m, n}, kFloat64);
  if (transpose) q = q.t().contiguous();
  return write(t, (q * gain).reshape(t.shape()));
}

}  // namespace heed::nn::init
