// framework/src/ops/flash_attention.cpp — F::flash_attention and F::flash_attention_packed: the
// fused attention kernel as differentiable ops (forward and backward side by side).
//
// Invariants: operands are passed to the kernel as strided views (only the feature dim must
// be contiguous), so head splits and merges never copy; the output is allocated as
// (B, T, H, Dv) so merging heads back to (B, T, H*Dv) is free; saved for backward are q, k, v,
// the output and the per-row log-sum-exp — O(T) memory, never the (T, S) weights; masks are
// views that broadcast to (B, H, T, S); dropout keeps only its Philox (seed, offset), and the
// composed path with the same seed draws the same mask. The packed op writes dq, dk, dv
// straight into one (B, T, 3C) gradient. float16/bfloat16 operands go to the kernel as they are
// where the device takes them (CUDA tensor cores, kernel_dtype), with the log-sum-exp and the
// additive mask in float32; elsewhere they compute in float32.
#include <cmath>

#include "heed/attention.h"
#include "heed/autograd.h"
#include "heed/random.h"
#include "internal.h"
#include "kernels/cuda/cuda_backend.h"

namespace heed::F {

namespace {

// (B, L, D) single head -> (B, 1, L, D)
Tensor as_4d(const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; }

// The dtype of the log-sum-exp and of the additive mask: float32 for 16-bit operands.
DType statistics_dtype(DType compute) { return is_half(compute) ? kFloat32 : compute; }

struct PreparedMasks {
  Tensor keep;         // bool, broadcastable to (B,H,T,S), or undefined
  Tensor additive;     // statistics_dtype(compute), broadcastable, or undefined
  Tensor key_lengths;  // int64 host copy (B), or undefined
};

// Validates the masks against the scores' shape as the caller sees it ((B, H, T, S), or
// (B, T, S) for 3-D inputs) and returns them ready to broadcast to (B, H, T, S).
PreparedMasks prepare_masks(const AttentionMask& mask, const Dims& user_scores, DType compute, Device device,
                            const char* name) {
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
    attention_keep_mask(lengths_only, user_scores, device, name);  // validates shape, dtype and range
    out.key_lengths = mask.key_lengths.to(kCPU).to(kInt64).contiguous();
  }
  if (mask.additive.defined()) {
    check_additive_mask(mask.additive, user_scores, name);
    out.additive = to_4d(mask.additive.detach().to(statistics_dtype(compute)));
  }
  return out;
}

kernels::StridedView optional_view(const Tensor& t, const Dims& shape) {
  return t.defined() ? detail::broadcast_view(t, shape) : kernels::StridedView{};
}

// The dtype the kernel computes in: 16-bit operands of one dtype stay 16-bit where the device's
// kernel takes them for these head dims (tensor cores on CUDA), otherwise float32.
DType kernel_dtype(DType promoted, Device device, std::initializer_list<DType> operands, int64_t D, int64_t Dv) {
  bool native = is_half(promoted) && device.is_cuda() && kernels::cuda::flash_attention_takes_16bit(D, Dv);
  for (DType t : operands) native = native && t == promoted;
  return native ? promoted : detail::compute_dtype(promoted);
}

// A (B, H, L, D) operand in the compute dtype with a contiguous feature dim (no copy when it
// already is one).
Tensor kernel_operand(const Tensor& t, DType compute) {
  Tensor c = t.dtype() == compute ? t.detach() : t.detach().to(compute);
  return c.stride(-1) == 1 || c.size(-1) == 1 ? c : c.contiguous();
}

kernels::AttentionLayout layout_of(const Tensor& t4) { return {t4.stride(0), t4.stride(1), t4.stride(2)}; }

// Everything the backward closure needs to re-run the kernel.
struct FlashState {
  kernels::FlashAttentionArgs args;  // geometry, scale, masks flags, dropout state
  SavedTensor q, k, v, out, lse, keep, additive, key_lengths;
  SavedTensor probs;  // forward's softmax, kept for backward where keep_probabilities allows; else undefined
};

// Whether forward keeps P for backward (FlashAttentionArgs::probs): on the CPU, where there is a
// backward, and with at most kFlashKeptProbsMaxKeys keys (one key block: at most 64 values per
// query row, the size of a 64-wide output row, so memory stays linear in the sequence length).
// Backward then skips the score products and their exps (charlm's attention, T = S = 64: forward
// + backward in 0.86x the time, 1% of its training step, on a Zen 3: docs/performance-log.md, stop 50).
bool keep_probabilities(bool backward, Device device, int64_t S) {
  return backward && device.is_cpu() && S > 0 && S <= kernels::kFlashKeptProbsMaxKeys;
}

void bind_masks(kernels::FlashAttentionArgs& a, const PreparedMasks& m, const Dims& scores) {
  a.key_lengths = m.key_lengths.defined() ? m.key_lengths.data_ptr<int64_t>() : nullptr;
  a.keep = optional_view(m.keep, scores);
  a.additive = optional_view(m.additive, scores);
}

// Runs the forward kernel on 4-D strided operands; returns the output as (B, T, H, Dv)
// contiguous and fills `lse` (B, H, T), and `probs` (B, H, T, S) where it is not null
// (keep_probabilities).
Tensor run_forward(kernels::FlashAttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                   const PreparedMasks& masks, Tensor* lse, Tensor* probs) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), S = k.size(2), Dv = v.size(3);
  Tensor out = detail::make_empty({B, T, H, Dv}, args.dtype, q.device());
  *lse = detail::make_empty({B, H, T}, statistics_dtype(args.dtype), q.device());
  args.probs = nullptr;
  if (probs != nullptr) {
    *probs = detail::make_empty({B, H, T, S}, args.dtype, q.device());
    args.probs = probs->raw_data();
  }
  args.q = q.raw_data();
  args.k = k.raw_data();
  args.v = v.raw_data();
  args.q_layout = layout_of(q);
  args.k_layout = layout_of(k);
  args.v_layout = layout_of(v);
  args.out = out.raw_data();
  args.out_layout = {T * H * Dv, Dv, H * Dv};
  args.lse = lse->raw_data();
  bind_masks(args, masks, {B, H, T, S});
  if (out.numel() > 0) {
    if (S > 0) {
      HEED_KERNEL(q.device(), flash_attention_forward)(args);
    } else {
      out.zero_();
      lse->fill_(-INFINITY);
    }
  }
  return out;
}

// Runs the backward kernel, writing gradients into the given strided (B, H, L, D) views.
void run_backward(const FlashState& st, const Tensor& grad_out_bhtd, const Tensor& dq, const Tensor& dk,
                  const Tensor& dv) {
  kernels::FlashAttentionArgs a = st.args;
  const Tensor q = st.q.get(), k = st.k.get(), v = st.v.get(), o = st.out.get(), l = st.lse.get();
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), S = k.size(2);
  a.q = q.raw_data();
  a.k = k.raw_data();
  a.v = v.raw_data();
  a.out = o.raw_data();
  a.lse = l.raw_data();
  const Tensor probs = st.probs.get();
  a.probs = probs.defined() ? probs.raw_data() : nullptr;
  a.grad_out = grad_out_bhtd.raw_data();
  a.grad_out_layout = layout_of(grad_out_bhtd);
  a.grad_q = dq.raw_data();
  a.grad_k = dk.raw_data();
  a.grad_v = dv.raw_data();
  a.grad_q_layout = layout_of(dq);
  a.grad_k_layout = layout_of(dk);
  a.grad_v_layout = layout_of(dv);
  const PreparedMasks m{st.keep.get(), st.additive.get(), st.key_lengths.get()};
  bind_masks(a, m, {B, H, T, S});
  if (T > 0 && S > 0) {
    HEED_KERNEL(q.device(), flash_attention_backward)(a);
  } else {
    // Nothing attends: every gradient is zero (written through the views).
    NoGradGuard no_grad;
    for (const Tensor* g : {&dq, &dk, &dv})
      if (g->numel() > 0) Tensor(*g).zero_();
  }
}

kernels::FlashAttentionArgs base_args(const char* name, DType compute, int64_t B, int64_t H, int64_t T, int64_t S,
                                      int64_t D, int64_t Dv, const AttentionMask& mask, double dropout_p,
                                      std::optional<double> scale, bool is_causal) {
  HEED_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, name, "dropout_p must be in [0, 1), got {}", dropout_p);
  HEED_CHECK(mask.window >= -1, name, "window must be >= 0 (or -1 for none), got {}", mask.window);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(D))) * testing::attention_kernel_scale_fault;
  HEED_CHECK(std::isfinite(s), name, "scale must be finite, got {}", s);
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
    const Generator::Draw draw = default_generator().reserve(static_cast<uint64_t>(B * H * T * S));
    args.dropout_state = {draw.seed, draw.first};
  }
  return args;
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

Tensor flash_attention_impl(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionMask& mask,
                            double dropout_p, std::optional<double> scale, bool is_causal, const char* name) {
  for (const Tensor* t : {&q_in, &k_in, &v_in}) {
    detail::check_defined(*t, name);
    detail::check_floating(*t, name);
  }
  HEED_CHECK(flash_attention_supported(q_in, k_in, v_in), name,
             "needs q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv) on one device with a flash kernel; got {}, {}, {} "
             "on {}",
             shape_str(q_in.shape()), shape_str(k_in.shape()), shape_str(v_in.shape()), q_in.device().str());
  const DType compute =
      kernel_dtype(promote_types(promote_types(q_in.dtype(), k_in.dtype()), v_in.dtype()), q_in.device(),
                   {q_in.dtype(), k_in.dtype(), v_in.dtype()}, q_in.size(-1), v_in.size(-1));
  const Tensor q = kernel_operand(as_4d(q_in), compute), k = kernel_operand(as_4d(k_in), compute),
               v = kernel_operand(as_4d(v_in), compute);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2), Dv = v.size(3);
  kernels::FlashAttentionArgs args = base_args(name, compute, B, H, T, S, D, Dv, mask, dropout_p, scale, is_causal);
  Dims user_scores(q_in.shape().begin(), q_in.shape().end() - 1);
  user_scores.push_back(S);
  const PreparedMasks masks = prepare_masks(mask, user_scores, compute, q.device(), name);
  const bool backward = any_requires_grad({&q_in, &k_in, &v_in});
  Tensor lse, probs;
  const Tensor out_bthd = run_forward(args, q, k, v, masks, &lse,
                                      keep_probabilities(backward, q.device(), S) ? &probs : nullptr);  // (B,T,H,Dv)
  Tensor out = out_bthd.permute({0, 2, 1, 3});  // (B,H,T,Dv) view

  if (backward) {
    const bool need_q = q_in.requires_grad(), need_k = k_in.requires_grad(), need_v = v_in.requires_grad();
    const DType dq_type = q_in.dtype(), dk_type = k_in.dtype(), dv_type = v_in.dtype();
    const Dims q_shape = q_in.shape(), k_shape = k_in.shape(), v_shape = v_in.shape();
    auto st = std::make_shared<FlashState>(
        FlashState{args, SavedTensor(q, name), SavedTensor(k, name), SavedTensor(v, name), SavedTensor(out, name),
                   SavedTensor(lse, name), SavedTensor(masks.keep, name), SavedTensor(masks.additive, name),
                   SavedTensor(masks.key_lengths, name), SavedTensor(probs, name)});
    detail::record(detail::OpName::registered(name), {&q_in, &k_in, &v_in}, out,
                   [=](const Tensor& g) -> std::vector<Tensor> {
                     const Tensor gc = kernel_operand(g, compute);
                     Tensor dq = detail::make_empty({B, H, T, D}, compute, g.device());
                     Tensor dk = detail::make_empty({B, H, S, D}, compute, g.device());
                     Tensor dv = detail::make_empty({B, H, S, Dv}, compute, g.device());
                     run_backward(*st, gc, dq, dk, dv);
                     return {need_q ? dq.reshape(q_shape).to(dq_type) : Tensor(),
                             need_k ? dk.reshape(k_shape).to(dk_type) : Tensor(),
                             need_v ? dv.reshape(v_shape).to(dv_type) : Tensor()};
                   });
  }
  Tensor result = q_in.dim() == 3 ? out.squeeze(1) : out;
  return result.dtype() == v_in.dtype() ? result : result.to(v_in.dtype());
}

}  // namespace detail_flash

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double dropout_p,
                       std::optional<double> scale, bool is_causal) {
  HEED_PROFILE_OP("flash_attention", &q, &k, &v);
  return detail_flash::flash_attention_impl(q, k, v, mask, dropout_p, scale, is_causal, "flash_attention");
}

Tensor flash_attention_packed(const Tensor& qkv_in, int64_t heads, const AttentionMask& mask, double dropout_p,
                              std::optional<double> scale) {
  HEED_PROFILE_OP("flash_attention_packed", &qkv_in);
  const char* name = "flash_attention_packed";
  detail::check_defined(qkv_in, name);
  detail::check_floating(qkv_in, name);
  HEED_CHECK(qkv_in.dim() == 3 && heads > 0 && qkv_in.size(2) % (3 * heads) == 0, name,
             "expects packed projections (B, T, 3 * heads * d_head) with heads = {}, got shape {}", heads,
             shape_str(qkv_in.shape()));
  HEED_CHECK(kernels::kernel_table(qkv_in.device().type).flash_attention_forward, name,
             "device {} has no flash attention kernel", qkv_in.device().str());
  const int64_t head_dim = qkv_in.size(2) / (3 * heads);
  const DType compute = kernel_dtype(qkv_in.dtype(), qkv_in.device(), {qkv_in.dtype()}, head_dim, head_dim);
  Tensor qkv = qkv_in.dtype() == compute ? qkv_in.detach() : qkv_in.detach().to(compute);
  if (qkv.stride(2) != 1) qkv = qkv.contiguous();
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = heads, dh = C / H;
  // (B, T, C) slices seen as (B, H, T, dh) without copying.
  auto head_view = [&](int64_t part) { return qkv.narrow(2, part * C, C).view({B, T, H, dh}).permute({0, 2, 1, 3}); };
  const Tensor q = head_view(0), k = head_view(1), v = head_view(2);
  kernels::FlashAttentionArgs args = base_args(name, compute, B, H, T, T, dh, dh, mask, dropout_p, scale, false);
  const PreparedMasks masks = prepare_masks(mask, {B, H, T, T}, compute, qkv.device(), name);
  const bool backward = any_requires_grad({&qkv_in});
  Tensor lse, probs;
  const Tensor out_bthd = run_forward(args, q, k, v, masks, &lse,
                                      keep_probabilities(backward, qkv.device(), T) ? &probs : nullptr);  // (B,T,H,dh)
  Tensor out = out_bthd.view({B, T, C});
  if (backward) {
    const DType in_dtype = qkv_in.dtype();
    auto st = std::make_shared<FlashState>(FlashState{
        args, SavedTensor(q, name), SavedTensor(k, name), SavedTensor(v, name),
        SavedTensor(out_bthd.permute({0, 2, 1, 3}), name), SavedTensor(lse, name), SavedTensor(masks.keep, name),
        SavedTensor(masks.additive, name), SavedTensor(masks.key_lengths, name), SavedTensor(probs, name)});
    detail::record(detail::OpName::registered(name), {&qkv_in}, out, [=](const Tensor& g) -> std::vector<Tensor> {
      // g (B,T,C) as (B,H,T,dh); the three gradients land in one (B,T,3C) tensor.
      Tensor gc = kernel_operand(g, compute);
      const Tensor g4 = gc.view({B, T, H, dh}).permute({0, 2, 1, 3});
      Tensor dqkv = detail::make_empty({B, T, 3 * C}, compute, g.device());
      auto grad_view = [&](int64_t part) {
        return dqkv.narrow(2, part * C, C).view({B, T, H, dh}).permute({0, 2, 1, 3});
      };
      run_backward(*st, g4, grad_view(0), grad_view(1), grad_view(2));
      return {dqkv.dtype() == in_dtype ? dqkv : dqkv.to(in_dtype)};
    });
  }
  return out.dtype() == qkv_in.dtype() ? out : out.to(qkv_in.dtype());
}

}  // namespace heed::F
