// framework/src/ops/layer_norm.cpp — F::layer_norm, forward and backward on fused kernels.
//
// Invariants: normalizes over the last dim; saves the input, the per-row mean and 1/std
// (compute dtype) and the weight; backward produces dx, dweight and dbias in one kernel call.
// Under amp::Autocast it runs in float32 (16-bit inputs cast up, float32 output).
#include "heed/autocast.h"
#include "heed/autograd.h"
#include "heed/functional.h"
#include "internal.h"

namespace heed::F {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  HEED_PROFILE_OP("layer_norm", &x, &weight);
  const char* name = "layer_norm";
  detail::check_defined(x, name);
  detail::check_floating(x, name);
  // Autocast normalizes in float32: 16-bit input and parameters are cast up (differentiably).
  if (amp::autocast_enabled() && (is_half(x.dtype()) || (weight.defined() && is_half(weight.dtype())) ||
                                  (bias.defined() && is_half(bias.dtype())))) [[unlikely]] {
    return layer_norm(amp::cast_to_float32(x), amp::cast_to_float32(weight), amp::cast_to_float32(bias), eps);
  }
  HEED_CHECK(x.dim() >= 1 && x.shape().back() > 0, name, "expects a non-empty last dim, got shape {}",
             shape_str(x.shape()));
  HEED_CHECK(eps >= 0.0, name, "eps must be non-negative, got {}", eps);
  const int64_t cols = x.shape().back();
  const int64_t rows = x.numel() / cols;
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    detail::check_same_device(x, *p, name);
    HEED_CHECK(p->dim() == 1 && p->shape()[0] == cols, name,
               "weight and bias must have shape [{}] to match input of shape {}, got {}", cols, shape_str(x.shape()),
               shape_str(p->shape()));
  }
  // One dtype for the kernel: the promoted type of the input and the affine parameters.
  DType dtype = x.dtype();
  if (weight.defined()) dtype = promote_types(dtype, weight.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  const Tensor xc = x.detach().to(dtype).contiguous();
  const Tensor wc = weight.defined() ? weight.detach().to(dtype).contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.detach().to(dtype).contiguous() : Tensor();
  const DType stats_dtype = detail::compute_dtype(dtype);
  Tensor y = detail::make_empty(x.shape(), dtype, x.device());
  Tensor mean = detail::make_empty({rows}, stats_dtype, x.device());
  Tensor rstd = detail::make_empty({rows}, stats_dtype, x.device());
  if (rows > 0) HEED_KERNEL(x.device(), layer_norm_forward)
  (dtype, xc.raw_data(), wc.defined() ? wc.raw_data() : nullptr, bc.defined() ? bc.raw_data() : nullptr, rows, cols,
   eps, y.raw_data(), mean.raw_data(), rstd.raw_data());
  if (any_requires_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad();
    const bool need_w = weight.defined() && weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    const DType x_dtype = x.dtype();
    const DType w_dtype = weight.defined() ? weight.dtype() : dtype;
    const DType b_dtype = bias.defined() ? bias.dtype() : dtype;
    SavedTensor sx(xc, name), sw(wc, name), smean(mean, name), srstd(rstd, name);
    detail::record(detail::OpName::registered(name), {&x, &weight, &bias}, y,
                   [=](const Tensor& g) -> std::vector<Tensor> {
                     const Tensor xs = sx.get(), ws = sw.get();
                     const Tensor gc = g.to(dtype).contiguous();
                     Tensor dx = detail::make_empty(xs.shape(), dtype, xs.device());
                     Tensor dw = need_w ? detail::make_empty({cols}, dtype, xs.device()) : Tensor();
                     Tensor db = need_b ? detail::make_empty({cols}, dtype, xs.device()) : Tensor();
                     if (rows > 0) {
                       HEED_KERNEL(xs.device(), layer_norm_backward)
                       (dtype, xs.raw_data(), ws.defined() ? ws.raw_data() : nullptr, smean.get().raw_data(),
                        srstd.get().raw_data(), gc.raw_data(), rows, cols, dx.raw_data(),
                        need_w ? dw.raw_data() : nullptr, need_b ? db.raw_data() : nullptr);
                     } else {
                       if (need_w) dw.zero_();
                       if (need_b) db.zero_();
                     }
                     return {need_x ? dx.to(x_dtype) : Tensor(), need_w ? dw.to(w_dtype) : Tensor(),
                             need_b ? db.to(b_dtype) : Tensor()};
                   });
  }
  return y;
}

}  // namespace heed::F
