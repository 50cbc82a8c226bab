// framework/src/ops/factory.cpp — tensor factories and the triangle masks.
//
// Invariants: random factories draw from the default Philox generator and advance it by
// exactly numel counters, so the same seed gives the same tensors in the same order.
#include <cmath>
#include <limits>

#include "heed/cuda.h"
#include "heed/ops.h"
#include "heed/random.h"
#include "internal.h"

namespace heed {

namespace {
// Checks a factory's shape and options before anything is allocated.
void check_factory(const Dims& shape, const TensorOptions& options, const char* op) {
  int64_t numel = 1;
  for (int64_t s : shape) {
    HEED_CHECK(s >= 0, op, "negative size {} in shape {}", s, shape_str(shape));
    HEED_CHECK(s == 0 || numel <= std::numeric_limits<int64_t>::max() / 8 / s, op, "shape {} has too many elements",
               shape_str(shape));
    numel *= s;
  }
  HEED_CHECK(!options.requires_grad() || is_floating(options.dtype()), op,
             "only floating-point tensors can require grad (got {})", dtype_name(options.dtype()));
  if (options.device().is_cuda()) {
    // Probed once (the runtime call is not free); any CUDA error means "no device".
    static const int count = cuda::device_count();
    HEED_CHECK(options.device().index >= 0 &&
                       options.device()
                           .index<count, op, "CUDA device {} is not available ({} device(s) found: {})",
                                  options.device().index, count, count> 0
                   ? std::string("bad device index")
                   : cuda::unavailable_reason());
  }
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor full_named(const Dims& shape, double value, TensorOptions options, const char* op) {
  HEED_PROFILE_OP(op);
  check_factory(shape, options, op);
  Tensor t = detail::make_empty(shape, options.dtype(), options.device());
  if (t.numel() > 0) HEED_KERNEL(t.device(), fill)(detail::view_of(t), value);
  return finish(t, options);
}
}  // namespace

Tensor empty(const Dims& shape, TensorOptions options) {
  check_factory(shape, options, "empty");
  return finish(detail::make_empty(shape, options.dtype(), options.device()), options);
}

Tensor full(const Dims& shape, double value, TensorOptions options) {
  return full_named(shape, value, options, "full");
}
Tensor zeros(const Dims& shape, TensorOptions options) { return full_named(shape, 0.0, options, "zeros"); }
Tensor ones(const Dims& shape, TensorOptions options) { return full_named(shape, 1.0, options, "ones"); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.options()); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  HEED_PROFILE_OP("arange");
  HEED_CHECK(step != 0.0 && std::isfinite(step), "arange", "step must be finite and non-zero, got {}", step);
  HEED_CHECK(std::isfinite(start) && std::isfinite(end), "arange", "start and end must be finite");
  check_factory({}, options, "arange");
  const double count = std::ceil((end - start) / step);
  HEED_CHECK(count < 9.2e18, "arange", "[{}, {}) in steps of {} has too many elements", start, end, step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor t = detail::make_empty({n}, options.dtype(), options.device());
  if (n > 0) HEED_KERNEL(t.device(), arange)(t.dtype(), t.raw_data(), n, start, step);
  return finish(t, options);
}

namespace {
// `integers`: randint (an integer dtype, [a, b) integers); otherwise a floating dtype.
Tensor random_tensor(Generator& gen, const Dims& shape, kernels::RandomKind kind, double a, double b,
                     TensorOptions options, const char* name, bool integers = false) {
  HEED_PROFILE_OP(name);
  check_factory(shape, options, name);
  if (integers) {
    HEED_CHECK(is_integral(options.dtype()), name, "expects an integer dtype, got {}", dtype_name(options.dtype()));
  } else {
    HEED_CHECK(is_floating(options.dtype()), name, "expects a floating dtype, got {}", dtype_name(options.dtype()));
  }
  Tensor t = detail::make_empty(shape, options.dtype(), options.device());
  const Generator::Draw draw = gen.reserve(static_cast<uint64_t>(t.numel()));
  const kernels::PhiloxState state{draw.seed, draw.first};
  if (t.numel() > 0) HEED_KERNEL(t.device(), random)(kind, t.dtype(), t.raw_data(), t.numel(), a, b, state);
  return finish(t, options);
}
}  // namespace

Tensor randn(const Dims& shape, Generator& generator, TensorOptions options) {
  return random_tensor(generator, shape, kernels::RandomKind::Normal, 0.0, 1.0, options, "randn");
}
Tensor rand(const Dims& shape, Generator& generator, TensorOptions options) {
  return random_tensor(generator, shape, kernels::RandomKind::Uniform, 0.0, 1.0, options, "rand");
}
Tensor uniform(const Dims& shape, double low, double high, Generator& generator, TensorOptions options) {
  HEED_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform",
             "expected finite low <= high, got low {} and high {}", low, high);
  return random_tensor(generator, shape, kernels::RandomKind::Uniform, low, high, options, "uniform");
}
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator& generator, TensorOptions options) {
  HEED_CHECK(low < high, "randint", "low {} must be below high {}", low, high);
  // The bounds travel to the kernel as doubles: keep them exact (|bound| <= 2^53).
  constexpr int64_t kExact = int64_t{1} << 53;
  HEED_CHECK(low >= -kExact && high <= kExact, "randint", "bounds must lie in [-2^53, 2^53], got [{}, {})", low, high);
  if (options.dtype() == kInt32)
    HEED_CHECK(low >= std::numeric_limits<int32_t>::min() && high - 1 <= std::numeric_limits<int32_t>::max(), "randint",
               "[{}, {}) does not fit int32", low, high);
  return random_tensor(generator, shape, kernels::RandomKind::Uniform, static_cast<double>(low),
                       static_cast<double>(high), options, "randint", /*integers=*/true);
}

Tensor randn(const Dims& shape, TensorOptions options) { return randn(shape, default_generator(), options); }
Tensor rand(const Dims& shape, TensorOptions options) { return rand(shape, default_generator(), options); }
Tensor uniform(const Dims& shape, double low, double high, TensorOptions options) {
  return uniform(shape, low, high, default_generator(), options);
}
Tensor randint(int64_t low, int64_t high, const Dims& shape, TensorOptions options) {
  return randint(low, high, shape, default_generator(), options);
}

Tensor eye(int64_t n, TensorOptions options) {
  HEED_CHECK(n >= 0, "eye", "size must be non-negative, got {}", n);
  check_factory({n, n}, options, "eye");
  Tensor t = zeros({n, n}, options.requires_grad(false));
  if (n > 0) {
    Tensor diagonal = detail::make_alias(t, {n}, {n + 1}, 0);
    diagonal.fill_(1.0);
  }
  return finish(t, options);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  std::vector<double> v(values);
  return from_vector(v, {static_cast<int64_t>(v.size())}, options);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options) {
  std::vector<double> v;
  int64_t cols = -1;
  for (const auto& row : rows) {
    HEED_CHECK(cols < 0 || static_cast<int64_t>(row.size()) == cols, "tensor",
               "rows have different lengths ({} and {})", cols, row.size());
    cols = static_cast<int64_t>(row.size());
    v.insert(v.end(), row.begin(), row.end());
  }
  return from_vector(v, {static_cast<int64_t>(rows.size()), std::max<int64_t>(cols, 0)}, options);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape, TensorOptions options) {
  check_factory(shape, options, "from_vector");
  HEED_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector",
             "{} values cannot fill shape {} ({} elements)", values.size(), shape_str(shape), shape_numel(shape));
  // Stage as the source type on the CPU, then convert dtype and device.
  Tensor host = detail::make_empty(shape, dtype_of<T>, kCPU);
  if (!values.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      bool* p = host.data_ptr<bool>();
      for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    } else {
      std::copy(values.begin(), values.end(), host.data_ptr<T>());
    }
  }
  return finish(host.to(options.dtype()).to(options.device()), options);
}

template Tensor from_vector<float>(const std::vector<float>&, const Dims&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Dims&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Dims&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Dims&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Dims&, TensorOptions);

namespace {
// keep[i][j] = (j - i <= diagonal) for tril, (j - i >= diagonal) for triu, on the last two dims.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* name) {
  detail::check_defined(x, name);
  HEED_CHECK(x.dim() >= 2, name, "expects at least 2 dims, got shape {}", shape_str(x.shape()));
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  const TensorOptions idx = TensorOptions(kInt64).device(x.device());
  Tensor r = arange(static_cast<double>(rows), idx).unsqueeze(1);
  Tensor c = arange(static_cast<double>(cols), idx).unsqueeze(0);
  Tensor offset = c - r;  // (rows, cols)
  Tensor keep = lower ? le(offset, scalar_tensor(static_cast<double>(diagonal), idx))
                      : ge(offset, scalar_tensor(static_cast<double>(diagonal), idx));
  return where(keep, x, zeros({}, x.options()));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

}  // namespace heed
