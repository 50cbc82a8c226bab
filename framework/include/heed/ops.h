// heed/ops.h — tensor factories and differentiable tensor ops (the free-function API).
//
// Every op here checks its arguments and throws heed::Error naming the op, the shapes and
// what was expected; element-wise ops broadcast like NumPy/PyTorch; mixed dtypes promote
// (see promote_types); float16/bfloat16 compute in float32 and round back.
// Each op's backward sits beside its forward in framework/src/ops/*.cpp.
#pragma once

#include <utility>
#include <vector>

#include "heed/random.h"
#include "heed/tensor.h"

namespace heed {

// ---- factories ------------------------------------------------------------------------------
Tensor empty(const Dims& shape, TensorOptions options = {});
Tensor zeros(const Dims& shape, TensorOptions options = {});
Tensor ones(const Dims& shape, TensorOptions options = {});
Tensor full(const Dims& shape, double value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, TensorOptions options = {});
// [start, end) in steps; the default dtype is int64 as in PyTorch.
Tensor arange(double end, TensorOptions options = kInt64);
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = kInt64);
// Random numbers from the default generator (see random.h): same seed, same numbers,
// whatever the thread count.
Tensor randn(const Dims& shape, TensorOptions options = {});
Tensor rand(const Dims& shape, TensorOptions options = {});
Tensor uniform(const Dims& shape, double low, double high, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, const Dims& shape, TensorOptions options = kInt64);
// The same draws from an explicit generator (PyTorch's generator=): a thread with its own
// Generator gets reproducible numbers whatever other threads draw.
Tensor randn(const Dims& shape, Generator& generator, TensorOptions options = {});
Tensor rand(const Dims& shape, Generator& generator, TensorOptions options = {});
Tensor uniform(const Dims& shape, double low, double high, Generator& generator, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator& generator, TensorOptions options = kInt64);
Tensor eye(int64_t n, TensorOptions options = {});
// 1-D and 2-D literals: tensor({1, 2, 3}), tensor({{1, 2}, {3, 4}}, kF64).
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options = {});
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape, TensorOptions options);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape) {
  return from_vector(values, shape, TensorOptions(dtype_of<T>));
}
// Lower/upper triangle of the last two dims (other entries zero).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- element-wise ---------------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& base, const Tensor& exponent);
Tensor pow(const Tensor& base, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double value);
Tensor mul_scalar(const Tensor& x, double value);
Tensor rsub_scalar(const Tensor& x, double value);  // value - x
Tensor rdiv_scalar(const Tensor& x, double value);  // value / x
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // not differentiable (zero gradient)
Tensor relu(const Tensor& x);
enum class GeluApproximation { None, Tanh };  // None: x * Phi(x) with erf; Tanh: the GPT-2 form
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::None);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);      // x * sigmoid(x) (swish)
Tensor softplus(const Tensor& x);  // log(1 + exp(x)), x itself above 20 (PyTorch's threshold)
Tensor clamp(const Tensor& x, double min, double max);
Tensor square(const Tensor& x);

// Comparisons and logic (bool results, not differentiable).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
bool isfinite_all(const Tensor& x);  // true when no element is NaN or Inf
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` where mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- reductions -----------------------------------------------------------------------------
// dims may be negative; an empty dims list reduces over every dim.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Dims& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim = false);
// Variance with Bessel-style correction (1 = unbiased, as torch.var; 0 = population).
Tensor var(const Tensor& x, const Dims& dims, bool keepdim = false, double correction = 1.0);
Tensor max(const Tensor& x);  // the largest element (0-dim); NaN if any element is NaN
Tensor min(const Tensor& x);
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // flat index
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Reduces a gradient of a broadcast result back to `shape` (sums broadcast dims).
Tensor sum_to(const Tensor& x, const Dims& shape);

// ---- linear algebra -------------------------------------------------------------------------
// torch.matmul semantics: 1-D operands are promoted and the added dim removed; leading
// (batch) dims broadcast. Runs on BLAS with transpose flags instead of copies.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- joining, splitting, indexing -----------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Picks entries of `dim` by a 1-D int64 index; backward scatter-adds.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (torch.gather); backward scatter-adds.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// Shorthand used by the views and in-place methods of Tensor.
Tensor contiguous(const Tensor& x);

}  // namespace heed
