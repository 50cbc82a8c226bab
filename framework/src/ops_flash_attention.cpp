// framework/src/ops_flash_attention.cpp — F::flash_attention: the fused attention kernel as a
// differentiable op (forward and backward side by side).
//
// Invariants: saves q, k, v (contiguous, compute dtype), the output and the per-row
// log-sum-exp — O(T) memory, never the (T, S) weights; masks are passed as views that
// broadcast to (B, H, T, S) without materialising them; dropout keeps only its Philox
// (seed, offset), and the composed path with the same seed draws the same mask.
#include <cmath>

#include "heed/attention.h"
#include "heed/autograd.h"
#include "heed/random.h"
#include "internal.h"

namespace heed::F {

namespace {

// (B, L, D) single head -> (B, 1, L, D)
Tensor as_4d(const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; }

struct PreparedMasks {
  Tensor keep;         // bool, broadcastable to (B,H,T,S), or undefined
  Tensor additive;     // compute dtype, broadcastable, or undefined
  Tensor key_lengths;  // int64 host copy (B), or undefined
};

// Validates the masks against the scores' shape as the caller sees it ((B, H, T, S), or
// (B, T, S) for 3-D inputs) and returns them ready to broadcast to (B, H, T, S).
PreparedMasks prepare_masks(const AttentionMask& mask, const Dims& user_scores, DType compute,
                            Device device, const char* name) {
  PreparedMasks out;
  const bool three_d = user_scores.size() == 3;
  auto to_4d = [&](const Tensor& t) { return three_d && t.dim() == 3 ? t.unsqueeze(1) : t; };
  // The boolean part (key_padding + keep); causal, window and lengths run in the kernel.
  AttentionMask boolean;
  boolean.key_padding = mask.key_padding;
  boolean.keep = mask.keep;
  const Tensor keep = attention_keep_mask(boolean, user_scores, device, name);
  if (keep.defined()) out.keep = to_4d(keep);
  if (mask.key_lengths.defined()) {
    AttentionMask lengths_only;
    lengths_only.key_lengths = mask.key_lengths;
    attention_keep_mask(lengths_only, user_scores, device,
                        name);  // validates shape, dtype and range
    out.key_lengths = mask.key_lengths.to(kCPU).to(kInt64).contiguous();
  }
  if (mask.additive.defined()) {
    check_additive_mask(mask.additive, user_scores, name);
    out.additive = to_4d(mask.additive.detach().to(compute));
  }
  return out;
}

kernels::StridedView optional_view(const Tensor& t, const Dims& shape) {
  return t.defined() ? detail::broadcast_view(t, shape) : kernels::StridedView{};
}

}  // namespace

bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (!kernels::kernel_table(q.device().type).flash_attention_forward) return false;
  if (q.device() != k.device() || q.device() != v.device()) return false;
  if (q.dim() != k.dim() || q.dim() != v.dim() || (q.dim() != 3 && q.dim() != 4)) return false;
  if (!is_floating(q.dtype()) || !is_floating(k.dtype()) || !is_floating(v.dtype())) return false;
  for (int d = 0; d < q.dim() - 2; ++d)
    if (q.size(d) != k.size(d) || q.size(d) != v.size(d)) return false;
  return q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2);
}

namespace detail_flash {

Tensor flash_attention_impl(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                            const AttentionMask& mask, double dropout_p,
                            std::optional<double> scale, bool is_causal, const char* name) {
  for (const Tensor* t : {&q_in, &k_in, &v_in}) {
    detail::check_defined(*t, name);
    detail::check_floating(*t, name);
  }
  HEED_CHECK(flash_attention_supported(q_in, k_in, v_in), name,
             "needs q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv) on one device with a flash "
             "kernel; got {}, {}, {} "
             "on {}",
             shape_str(q_in.shape()), shape_str(k_in.shape()), shape_str(v_in.shape()),
             q_in.device().str());
  HEED_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, name, "dropout_p must be in [0, 1), got {}",
             dropout_p);
  HEED_CHECK(mask.window >= -1, name, "window must be >= 0 (or -1 for none), got {}", mask.window);
  const Tensor q = as_4d(q_in), k = as_4d(k_in), v = as_4d(v_in);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2),
                Dv = v.size(3);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  HEED_CHECK(std::isfinite(s), name, "scale must be finite, got {}", s);
  const DType compute =
      detail::compute_dtype(promote_types(promote_types(q.dtype(), k.dtype()), v.dtype()));
  const Device device = q.device();
  Dims user_scores(q_in.shape().begin(), q_in.shape().end() - 1);
  user_scores.push_back(S);
  const PreparedMasks masks = prepare_masks(mask, user_scores, compute, device, name);
  const Tensor qc = q.detach().to(compute).contiguous(), kc = k.detach().to(compute).contiguous(),
               vc = v.detach().to(compute).contiguous();
  Tensor out = detail::make_empty({B, H, T, Dv}, compute, device);
  Tensor lse = detail::make_empty({B, H, T}, compute, device);

  kernels::FlashAttentionArgs args;
  args.dtype = compute;
  args.batch = B;
  args.heads = H;
  args.queries = T;
  args.keys = S;
  args.head_dim = D;
  args.value_dim = Dv;
  args.scale = s;
  args.causal = mask.causal || is_causal;
  args.window = mask.window;
  args.dropout_p = dropout_p;
  if (dropout_p > 0.0) {
    Generator& gen = default_generator();
    args.dropout_state = {gen.seed(), gen.advance(static_cast<uint64_t>(B * H * T * S))};
  }
  auto bind_inputs = [&](kernels::FlashAttentionArgs& a, const Tensor& qq, const Tensor& kk,
                         const Tensor& vv, const PreparedMasks& m) {
    a.q = qq.raw_data();
    a.k = kk.raw_data();
    a.v = vv.raw_data();
    a.key_lengths = m.key_lengths.defined() ? m.key_lengths.data_ptr<int64_t>() : nullptr;
    a.keep = optional_view(m.keep, {B, H, T, S});
    a.additive = optional_view(m.additive, {B, H, T, S});
  };
  bind_inputs(args, qc, kc, vc, masks);
  args.out = out.raw_data();
  args.lse = lse.raw_data();
  if (out.numel() > 0 && T > 0) HEED_KERNEL(device, flash_attention_forward)(args);
  if (out.numel() > 0 && S == 0) out.zero_();

  if (any_requires_grad({&q_in, &k_in, &v_in})) {
    const bool need_q = q_in.requires_grad(), need_k = k_in.requires_grad(),
               need_v = v_in.requires_grad();
    const DType dq_type = q_in.dtype(), dk_type = k_in.dtype(), dv_type = v_in.dtype();
    const Dims q_shape = q_in.shape(), k_shape = k_in.shape(), v_shape = v_in.shape();
    SavedTensor sq(qc, name), sk(kc, name), sv(vc, name), sout(out, name), slse(lse, name);
    SavedTensor skeep(masks.keep, name), sadd(masks.additive, name), slen(masks.key_lengths, name);
    const kernels::FlashAttentionArgs saved_args = args;
    record_op(name, {&q_in, &k_in, &v_in}, out, [=](const Tensor& g) -> std::vector<Tensor> {
      kernels::FlashAttentionArgs a = saved_args;
      const Tensor qq = sq.get(), kk = sk.get(), vv = sv.get(), o = sout.get(), l = slse.get();
      PreparedMasks m{skeep.get(), sadd.get(), slen.get()};
      bind_inputs(a, qq, kk, vv, m);
      const Tensor gc = g.to(compute).contiguous();
      Tensor dq = detail::make_empty(qq.shape(), compute, qq.device());
      Tensor dk = detail::make_empty(kk.shape(), compute, kk.device());
      Tensor dv = detail::make_empty(vv.shape(), compute, vv.device());
      a.out = o.raw_data();
      a.lse = l.raw_data();
      a.grad_out = gc.raw_data();
      a.grad_q = dq.raw_data();
      a.grad_k = dk.raw_data();
      a.grad_v = dv.raw_data();
      if (dq.numel() + dk.numel() + dv.numel() > 0) {
        if (T > 0 && S > 0) {
          HEED_KERNEL(qq.device(), flash_attention_backward)(a);
        } else {
          dq.zero_();
          dk.zero_();
          dv.zero_();
        }
      }
      return {need_q ? dq.reshape(q_shape).to(dq_type) : Tensor(),
              need_k ? dk.reshape(k_shape).to(dk_type) : Tensor(),
              need_v ? dv.reshape(v_shape).to(dv_type) : Tensor()};
    });
  }
  Tensor result = q_in.dim() == 3 ? out.squeeze(1) : out;
  return result.dtype() == v_in.dtype() ? result : result.to(v_in.dtype());
}

}  // namespace detail_flash

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                       double dropout_p, std::optional<double> scale, bool is_causal) {
  return detail_flash::flash_attention_impl(q, k, v, mask, dropout_p, scale, is_causal,
                                            "flash_attention");
}

}  // namespace heed::F
