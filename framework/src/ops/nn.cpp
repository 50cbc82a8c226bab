// framework/src/ops/nn.cpp — softmax, log_softmax, cross_entropy, dropout, embedding and
// linear: the functional API (heed::F), each forward beside its backward.
//
// Invariants: softmax-family kernels work on contiguous rows along the last dim (another
// dim is transposed there and back); cross_entropy saves only the per-row log-sum-exp;
// dropout saves only its Philox (seed, offset) and regenerates the mask in backward.
// linear_gelu is linear followed by gelu with the GELU in the gemm's epilogue (one node that keeps
// the GELU's input, as gelu alone would); feed_forward is linear_gelu then linear as one node,
// the GELU's gradient in the gemm that computes it.
// Under amp::Autocast, linear computes in the autocast dtype and the softmax family in
// float32 (cross_entropy always computes 16-bit logits in float32 and returns float32).
#include <cmath>

#include "heed/autocast.h"
#include "heed/autograd.h"
#include "heed/functional.h"
#include "heed/random.h"
#include "internal.h"

namespace heed::F {

namespace {

// softmax or log_softmax along `dim`.
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* name) {
  HEED_PROFILE_OP(name, &x);
  detail::check_defined(x, name);
  detail::check_floating(x, name);
  // Autocast runs the softmax family in float32: 16-bit inputs are cast up (differentiably).
  if (amp::autocast_enabled() && is_half(x.dtype())) [[unlikely]]
    return softmax_impl(amp::cast_to_float32(x), dim, log, name);
  if (x.dim() == 0) return softmax_impl(x.reshape({1}), 0, log, name).reshape({});
  const int d = normalize_dim(dim, x.dim(), name);
  const bool last = d == x.dim() - 1;
  const Tensor rows = (last ? x.detach() : x.detach().transpose(d, -1)).contiguous();
  const int64_t cols = rows.shape().back();
  const int64_t nrows = cols == 0 ? 0 : rows.numel() / cols;
  Tensor y = detail::make_empty(rows.shape(), x.dtype(), x.device());
  if (y.numel() > 0)
    HEED_KERNEL(x.device(), softmax_forward)(x.dtype(), rows.raw_data(), y.raw_data(), nrows, cols, log);
  Tensor out = last ? y : y.transpose(d, -1);
  if (any_requires_grad({&x})) {
    SavedTensor sy(y, name);
    detail::record(detail::OpName::registered(name), {&x}, out,
                   [sy, d, last, nrows, cols, log](const Tensor& g) -> std::vector<Tensor> {
                     Tensor y = sy.get();
                     Tensor g_rows = (last ? g : g.transpose(d, -1)).contiguous();
                     Tensor gx = detail::make_empty(y.shape(), y.dtype(), y.device());
                     if (gx.numel() > 0) HEED_KERNEL(y.device(), softmax_backward)
                     (y.dtype(), y.raw_data(), g_rows.raw_data(), gx.raw_data(), nrows, cols, log);
                     return {last ? gx : gx.transpose(d, -1)};
                   });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true, "log_softmax"); }
Tensor relu(const Tensor& x) { return heed::relu(x); }
Tensor gelu(const Tensor& x, GeluApproximation approximation) { return heed::gelu(x, approximation); }

namespace {

// The checks F::linear and F::linear_gelu share, in `op`'s name.
void check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  detail::check_defined(x, op);
  detail::check_defined(weight, op, "weight");
  detail::check_floating(x, op);
  detail::check_floating(weight, op);
  detail::check_same_device(x, weight, op);
  HEED_CHECK(weight.dim() == 2, op, "weight must be 2-D (out_features, in_features), got shape {}",
             shape_str(weight.shape()));
  HEED_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], op,
             "input of shape {} does not match weight of shape {}: expected input.size(-1) == {}", shape_str(x.shape()),
             shape_str(weight.shape()), weight.shape()[1]);
  if (bias.defined())
    HEED_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], op, "bias must have shape [{}], got {}",
               weight.shape()[0], shape_str(bias.shape()));
}

// Input, weight and bias as the product sees them: in the autocast dtype inside an autocast
// scope (the weight and bias, parameters, through the cast cache), else as given.
struct LinearOperands {
  Tensor x, weight, bias;
};
LinearOperands linear_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!amp::autocast_enabled()) [[likely]]
    return {x, weight, bias};
  return {amp::cast_to_autocast_dtype(x), amp::cast_to_autocast_dtype(weight),
          bias.defined() ? amp::cast_to_autocast_dtype(bias) : Tensor()};
}

// Whether the fused kernels take the operands as they are: one dtype the device's gemm computes
// in as it is (gemm_dtype), the bias (if any) on the input's device.
bool gemm_takes_as_is(const LinearOperands& in) {
  return in.x.dtype() == in.weight.dtype() &&
         (!in.bias.defined() || (in.bias.dtype() == in.x.dtype() && in.bias.device() == in.x.device())) &&
         detail::gemm_dtype(in.x.dtype(), in.x.device()) == in.x.dtype();
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  HEED_PROFILE_OP("linear", &x, &weight);
  check_linear_args(x, weight, bias, "linear");
  const LinearOperands in = linear_operands(x, weight, bias);
  // The bias as the gemm's epilogue (and its gradient in the weight gradient's gemm).
  if (in.bias.defined() && gemm_takes_as_is(in)) return detail::linear_with_bias(in.x, in.weight.t(), in.bias);
  Tensor out = matmul(in.x, in.weight.t());
  return in.bias.defined() ? out + in.bias : out;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximation) {
  HEED_PROFILE_OP("linear_gelu", &x, &weight);
  check_linear_args(x, weight, bias, "linear_gelu");
  const LinearOperands in = linear_operands(x, weight, bias);
  if (gemm_takes_as_is(in)) return detail::linear_gelu_fused(in.x, in.weight.t(), in.bias, approximation);
  return heed::gelu(linear(in.x, in.weight, in.bias), approximation);  // the two ops
}

Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    GeluApproximation approximation) {
  HEED_PROFILE_OP("feed_forward", &x, &w1, &w2);
  check_linear_args(x, w1, b1, "feed_forward");
  detail::check_defined(w2, "feed_forward", "w2");
  HEED_CHECK(w2.dim() == 2 && w2.shape()[1] == w1.shape()[0], "feed_forward",
             "w2 must have shape [out, {}] (its in_features the hidden width of w1 of shape {}), got {}", w1.shape()[0],
             shape_str(w1.shape()), shape_str(w2.shape()));
  HEED_CHECK(!b2.defined() || (b2.dim() == 1 && b2.shape()[0] == w2.shape()[0]), "feed_forward",
             "b2 must have shape [{}], got {}", w2.shape()[0], shape_str(b2.shape()));
  detail::check_same_device(x, w2, "feed_forward");
  // One node where the CPU's gemm has the epilogues (float32/float64, the erf GELU, no autocast),
  // elsewhere the two ops.
  const DType dtype = x.dtype();
  const bool one_dtype = (dtype == kFloat32 || dtype == kFloat64) && w1.dtype() == dtype && w2.dtype() == dtype &&
                         (!b1.defined() || b1.dtype() == dtype) && (!b2.defined() || b2.dtype() == dtype);
  const bool all_cpu = x.device().type == DeviceType::CPU && (!b1.defined() || b1.device() == x.device()) &&
                       (!b2.defined() || b2.device() == x.device());
  if (approximation == GeluApproximation::None && one_dtype && all_cpu && !amp::autocast_enabled() && x.numel() > 0 &&
      w1.numel() > 0)
    return detail::feed_forward_fused(x.contiguous(), w1.t(), b1, w2.t(), b2);
  return linear(linear_gelu(x, w1, b1, approximation), w2, b2);  // the two ops
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  HEED_PROFILE_OP("embedding", &weight, &indices);
  detail::check_defined(weight, "embedding", "weight");
  detail::check_defined(indices, "embedding", "indices");
  HEED_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D (num_embeddings, dim), got shape {}",
             shape_str(weight.shape()));
  detail::check_index_dtype(indices, "embedding", "indices");
  detail::check_same_device(weight, indices, "embedding");
  // Validated here so that a bad index is reported as an embedding error.
  const Tensor rows = detail::checked_indices(indices, weight.shape()[0], "embedding");
  Dims out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  return index_select(weight, 0, rows.reshape({rows.numel()})).view(out_shape);
}

// ---- cross entropy --------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  HEED_PROFILE_OP("cross_entropy", &logits, &targets);
  const char* name = "cross_entropy";
  detail::check_defined(logits, name, "logits");
  detail::check_defined(targets, name, "targets");
  detail::check_floating(logits, name);
  detail::check_same_device(logits, targets, name);
  detail::check_index_dtype(targets, name, "targets");
  HEED_CHECK(logits.dim() >= 1, name, "logits need a class dim, got shape {}", shape_str(logits.shape()));
  Dims lead(logits.shape().begin(), logits.shape().end() - 1);
  HEED_CHECK(targets.shape() == lead, name,
             "targets of shape {} do not match logits of shape {}: expected targets of shape {} "
             "(classes are the last dim of the logits)",
             shape_str(targets.shape()), shape_str(logits.shape()), shape_str(lead));
  HEED_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, name,
             "label_smoothing must be in [0, 1], got {}", options.label_smoothing);
  const int64_t classes = logits.shape().back();
  const int64_t rows = targets.numel();
  HEED_CHECK(classes > 0 || rows == 0, name, "logits have no classes (shape {})", shape_str(logits.shape()));

  // Validate targets on the host and count the ones that are not ignored.
  Tensor t64 = (targets.device().is_cpu() ? targets : targets.to(kCPU)).to(kInt64).contiguous();
  int64_t valid = 0;
  {
    const int64_t* t = t64.data_ptr<int64_t>();
    for (int64_t i = 0; i < rows; ++i) {
      if (t[i] == options.ignore_index) continue;
      HEED_CHECK(t[i] >= 0 && t[i] < classes, name,
                 "target {} at position {} is out of range for {} classes (expected 0..{} or "
                 "ignore_index {})",
                 t[i], i, classes, classes - 1, options.ignore_index);
      ++valid;
    }
  }
  if (!targets.device().is_cpu()) t64 = t64.to(targets.device());

  const Tensor x = logits.detach().contiguous();
  // Per-row results in the compute dtype: float32 for 16-bit logits. This is already what
  // autocast asks of a loss (float32 arithmetic, float32 loss), so autocast needs no cast
  // here: the kernel widens 16-bit logits itself, and their gradient is computed in float32
  // and rounded once to the logits' dtype, as a cast's backward would do.
  const DType compute = detail::compute_dtype(x.dtype());
  Tensor row_loss = detail::make_empty({rows}, compute, x.device());
  Tensor row_lse = detail::make_empty({rows}, compute, x.device());
  if (rows > 0) HEED_KERNEL(x.device(), cross_entropy_forward)
  (x.dtype(), x.raw_data(), t64.data_ptr<int64_t>(), rows, classes, options.ignore_index, options.label_smoothing,
   row_loss.raw_data(), row_lse.raw_data());
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = valid == 0 ? zeros({}, TensorOptions(compute).device(x.device()))
                      : mul_scalar(sum(row_loss), 1.0 / static_cast<double>(valid));
  }
  if (any_requires_grad({&logits})) {
    SavedTensor sx(x, name), st(t64, name), slse(row_lse, name);
    const DType in_dtype = logits.dtype();
    const Dims in_shape = logits.shape();
    detail::record(
        detail::OpName::registered(name), {&logits}, loss,
        [sx, st, slse, rows, classes, valid, options, in_dtype, in_shape](const Tensor& g) -> std::vector<Tensor> {
          Tensor x = sx.get();
          Tensor grad = detail::make_empty(x.shape(), x.dtype(), x.device());
          if (valid == 0 || rows == 0) return {zeros(in_shape, TensorOptions(in_dtype).device(x.device()))};
          const double scale = g.item<double>() / static_cast<double>(valid);
          HEED_KERNEL(x.device(), cross_entropy_backward)
          (x.dtype(), x.raw_data(), st.get().data_ptr<int64_t>(), slse.get().raw_data(), rows, classes,
           options.ignore_index, options.label_smoothing, scale, grad.raw_data());
          return {grad};
        });
  }
  return loss;
}

// ---- dropout --------------------------------------------------------------------------------

namespace {
// The scaled keep-mask (0 or 1/(1-p)) of a Philox stream position, in `dtype`.
Tensor dropout_scale(const Dims& shape, DType dtype, Device device, double p, kernels::PhiloxState state) {
  const int64_t n = shape_numel(shape);
  Tensor keep = detail::make_empty(shape, kBool, device);
  if (n > 0) HEED_KERNEL(device, dropout_mask)(static_cast<uint8_t*>(keep.raw_data()), n, p, state);
  Tensor scale = keep.to(dtype);
  return detail::unary_raw(kernels::UnaryOp::MulScalar, scale, 1.0 / (1.0 - p), "dropout");
}
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  HEED_PROFILE_OP("dropout", &x);
  detail::check_defined(x, "dropout");
  HEED_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  detail::check_floating(x, "dropout");
  if (p == 1.0) return x * 0.0;
  const Generator::Draw draw = generator.reserve(static_cast<uint64_t>(x.numel()));
  const kernels::PhiloxState state{draw.seed, draw.first};
  Tensor out = detail::binary_raw(kernels::BinaryOp::Mul, x, dropout_scale(x.shape(), x.dtype(), x.device(), p, state),
                                  "dropout");
  if (any_requires_grad({&x})) {
    const Dims shape = x.shape();
    const DType dtype = x.dtype();
    detail::record("dropout", {&x}, out, [shape, dtype, p, state](const Tensor& g) -> std::vector<Tensor> {
      return {detail::binary_raw(kernels::BinaryOp::Mul, g, dropout_scale(shape, dtype, g.device(), p, state),
                                 "dropout_backward")};
    });
  }
  return out;
}

}  // namespace heed::F
