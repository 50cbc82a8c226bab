// framework/src/ops/matmul.cpp — matmul with torch.matmul semantics on BLAS, and its backward.
//
// Invariants: operands whose last two dims are row-major or transposed (one unit stride)
// go to the gemm kernel as they are, with a transpose flag and leading dimension; batch
// dims must collapse to a single stride (0 for broadcast), otherwise the operand is copied
// once. A 2-D right operand with a batched left operand is one big gemm, (B*M,K) @ (K,N).
// Under amp::Autocast the operands are cast to the autocast dtype first (16-bit output,
// float32 accumulation); backward uses matmul_raw and never autocasts. On CUDA 16-bit operands
// go to the gemm as they are (float32 accumulation in cuBLAS); on the CPU they are widened to
// float32. F::linear's bias is a gemm epilogue (detail::linear_with_bias) and its gradient the
// row-sum epilogue of the weight gradient's gemm (kernels.h, GemmArgs). Left operands whose
// rows sit at one stride (contiguous, or padded rows) are one gemm over all their rows; only
// F::feed_forward's hidden activations are ever made with padded rows (padded_rows), and never
// leave its node.
#include "heed/autocast.h"
#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

namespace {

// A matrix operand as gemm sees it.
struct GemmOperand {
  Tensor storage_owner;  // keeps the data alive
  const void* data = nullptr;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// Tries to express the last two dims of `t` (rows, cols) as a BLAS matrix.
bool matrix_layout(const Tensor& t, bool* trans, int64_t* ld) {
  const int n = t.dim();
  const int64_t rows = t.shape()[n - 2], cols = t.shape()[n - 1];
  const int64_t rs = t.strides()[n - 2], cs = t.strides()[n - 1];
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    *trans = false;
    *ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    *trans = true;
    *ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

// The single stride that walks the (broadcast) batch dims of `t` in row-major batch order:
// 0 when every batch dim is broadcast, -1 when the dims do not collapse to one stride.
int64_t collapsed_batch_stride(const Tensor& t, const Dims& batch_shape) {
  const int nb = batch_shape.size();
  const int shift = nb - (t.dim() - 2);
  int64_t stride = -1, later_elements = 1;
  bool any_real = false, any_broadcast = false, chain_ok = true;
  for (int i = nb - 1; i >= 0; --i) {
    if (batch_shape[i] == 1) continue;
    const int j = i - shift;
    const int64_t s = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
    (s == 0 ? any_broadcast : any_real) = true;
    if (stride < 0)
      stride = s;
    else if (s != stride * later_elements)
      chain_ok = false;
    later_elements *= batch_shape[i];
  }
  if (!any_real) return 0;
  return (any_broadcast || !chain_ok) ? -1 : stride;
}

GemmOperand make_operand(const Tensor& t, const Dims& batch_shape) {
  GemmOperand op;
  int64_t batch_stride = collapsed_batch_stride(t, batch_shape);
  bool trans = false;
  int64_t ld = 0;
  if (batch_stride < 0 || !matrix_layout(t, &trans, &ld)) {
    Dims full = batch_shape;
    full.push_back(t.shape()[t.dim() - 2]);
    full.push_back(t.shape()[t.dim() - 1]);
    Tensor c = t.expand(full).contiguous();
    HEED_INTERNAL_ASSERT(matrix_layout(c, &trans, &ld));
    batch_stride = shape_numel(batch_shape) > 1 ? c.shape()[c.dim() - 2] * c.shape()[c.dim() - 1] : 0;
    op.storage_owner = c;
  } else {
    op.storage_owner = t;
  }
  op.data = op.storage_owner.raw_data();
  op.trans = trans;
  op.ld = ld;
  op.batch_stride = batch_stride;
  return op;
}

// What matmul_raw adds to the product (kernels.h, GemmArgs).
struct Epilogue {
  Tensor bias;  // (N), detached
  kernels::GemmActivation activation = kernels::GemmActivation::None;
  Tensor* pre_activation = nullptr;  // receives z, the activation's input (with an activation)
  Tensor* a_row_sums = nullptr;      // receives the row sums of a, or stays undefined
  // CPU-only epilogues for products that are one gemm with K >= 1 (F::feed_forward checks):
  Tensor* activation_derivative = nullptr;  // with the erf GELU: receives gelu'(z) (z is not kept)
  Tensor c_multiplier;                      // alone: out = (a @ b) * c_multiplier (out's shape and strides)
  // float32 on the CPU: rows of out (and of z, gelu'(z)) a multiple of 2 KiB long laid out
  // kRowPadFloats further apart (padded_rows): for F::feed_forward's hidden activations only.
  bool pad_aliasing_rows = false;
};

// Rows a multiple of 2 KiB apart fall into a few L1 sets (two sets per line on a 32 KiB, 8-way
// L1), so a gemm panel of 14 such rows evicts itself; heed's AVX-512 gemm packs such operands
// instead of reading them in place (sgemm.cpp, l1_aliasing and reads_a_in_place_512).
// F::feed_forward's hidden activations (h and dz: 1024 wide in the lm step, 512 in charlm) are
// exactly such operands of the weight gradients' A^T B products; laid out 64 bytes further
// apart they are read in place: with operands from memory those products ran 8-11% faster
// (lm) and 5-10% (charlm) on a Zen 4 (docs/performance-log.md, stop 46).
constexpr int64_t kAliasingRowFloats = 512, kRowPadFloats = 16;

// An uninitialised tensor of `shape` whose rows are `row_length` elements apart (>= the last
// dim): make_empty's when they are equal, else a view of the first columns of a wider one.
Tensor padded_rows(const Dims& shape, int64_t row_length, DType dtype, Device device) {
  const int64_t cols = shape[shape.size() - 1];
  if (row_length == cols) return detail::make_empty(shape, dtype, device);
  Dims wide = shape;
  wide[wide.size() - 1] = row_length;
  return detail::make_empty(wide, dtype, device).narrow(-1, 0, cols);
}

// The row stride of `t` (..., M, K) when its rows, batch dims included, sit at one stride with
// unit-stride rows (contiguous, or rows padded: padded_rows), so (..., M, K) is one (B*M, K)
// matrix; 0 otherwise.
int64_t uniform_row_stride(const Tensor& t, const Dims& batch_shape) {
  bool trans = false;
  int64_t ld = 0;
  if (!matrix_layout(t, &trans, &ld) || trans) return 0;
  const int64_t batch_stride = collapsed_batch_stride(t, batch_shape);
  const int64_t rows = t.shape()[t.dim() - 2];
  const bool one_matrix = batch_stride == 0 && shape_numel(batch_shape) == 1;  // not a broadcast one
  return one_matrix || batch_stride == rows * ld ? ld : 0;
}

kernels::UnaryOp unary_row_of(kernels::GemmActivation activation) {
  return activation == kernels::GemmActivation::GeluTanh ? kernels::UnaryOp::GeluTanh : kernels::UnaryOp::GeluErf;
}

// Forward of a matmul of two >= 2-D tensors of the same floating dtype (no autograd), in the
// device's gemm dtype (16-bit operands widened on the CPU only). With a bias (1-D, the output's
// last dim): out = a @ b + bias, in the gemm's bias epilogue when the product is one gemm, else
// written into the output first with the gemm accumulating onto it (beta = 1): never a second
// pass. With an activation: out = gelu(z), z = a @ b (+ bias) handed back in *pre_activation, the
// GELU in the gemm's epilogue when the product is one gemm (else a pass after it). With
// a_row_sums and a product that is one gemm (and no other epilogue): *a_row_sums = the row sums
// of a (its last dim summed), from the gemm's row-sum epilogue; left undefined otherwise (the
// caller sums itself).
Tensor matmul_raw(const Tensor& a, const Tensor& b, const Epilogue& epilogue = Epilogue()) {
  const int na = a.dim(), nb = b.dim();
  const int64_t m = a.shape()[na - 2], k = a.shape()[na - 1], n = b.shape()[nb - 1];
  const Dims batch_a(a.shape().begin(), a.shape().begin() + na - 2);
  const Dims batch_b(b.shape().begin(), b.shape().begin() + nb - 2);
  const Dims batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Dims out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  const DType dtype = a.dtype();
  const DType compute = detail::gemm_dtype(dtype, a.device());
  const bool pad_rows = epilogue.pad_aliasing_rows && compute == kFloat32 && dtype == compute &&
                        a.device().type == DeviceType::CPU && n % kAliasingRowFloats == 0;
  const int64_t ldc = pad_rows ? n + kRowPadFloats : n;
  Tensor out = padded_rows(out_shape, ldc, compute, a.device());
  const kernels::GemmActivation activation = epilogue.activation;
  // The activation as a pass of its own over z (products that are not one gemm, K = 0).
  const auto activation_pass = [&](const Tensor& z_any) {
    const Tensor z = z_any.contiguous();  // (padded rows: pad_aliasing_rows)
    Tensor h = detail::make_empty(out_shape, compute, a.device());
    HEED_KERNEL(a.device(), unary)(unary_row_of(activation), compute, z.raw_data(), h.raw_data(), h.numel(), 0.0);
    return h;
  };
  // Hands z back and returns the result in the operands' dtype.
  const auto finish = [&](const Tensor& result, const Tensor& z) {
    if (epilogue.pre_activation) *epilogue.pre_activation = dtype == compute ? z : z.to(dtype);
    return dtype == compute ? result : result.to(dtype);
  };
  if (out.numel() == 0) return finish(out, out);
  const Tensor bias_c = epilogue.bias.defined() ? epilogue.bias.to(compute).contiguous() : Tensor();
  if (k == 0) {
    if (bias_c.defined())
      out.copy_(bias_c.expand(out_shape));
    else
      out.fill_(0.0);
    return activation == kernels::GemmActivation::None ? finish(out, out) : finish(activation_pass(out), out);
  }
  const Tensor A = dtype == compute ? a : a.to(compute);
  const Tensor B = dtype == compute ? b : b.to(compute);

  kernels::GemmArgs args;
  args.dtype = compute;
  args.m = m;
  args.n = n;
  args.k = k;
  args.c = out.raw_data();
  args.ldc = ldc;
  args.batch = shape_numel(batch);
  args.batch_stride_c = m * ldc;
  // (..., M, K) @ (K, N) with the left rows at one stride (contiguous or padded_rows): one gemm
  // over all B*M rows.
  const int64_t a_row_stride = batch_b.empty() && !batch.empty() ? uniform_row_stride(A, batch) : 0;
  Tensor a_rows = a_row_stride > 0 ? A : Tensor();
  if (a_rows.defined()) {
    GemmOperand ob = make_operand(B, {});
    args.m = m * args.batch;
    args.batch = 1;
    args.a = a_rows.raw_data();
    args.lda = a_row_stride;
    args.trans_a = false;
    args.b = ob.data;
    args.ldb = ob.ld;
    args.trans_b = ob.trans;
  }
  GemmOperand oa, ob;  // keep copied operands alive through the call
  if (!a_rows.defined()) {
    oa = make_operand(A, batch);
    ob = make_operand(B, batch);
    args.a = oa.data;
    args.lda = oa.ld;
    args.trans_a = oa.trans;
    args.batch_stride_a = oa.batch_stride;
    args.b = ob.data;
    args.ldb = ob.ld;
    args.trans_b = ob.trans;
    args.batch_stride_b = ob.batch_stride;
  }
  if (bias_c.defined()) {
    if (args.batch == 1) {
      args.bias = bias_c.raw_data();
    } else {
      out.copy_(bias_c.expand(out_shape));
      args.beta = 1.0;
    }
  }
  Tensor row_sums, z;
  if (epilogue.a_row_sums && args.batch == 1 && !bias_c.defined() && activation == kernels::GemmActivation::None) {
    row_sums = detail::make_empty({args.m}, compute, a.device());
    args.a_row_sums = row_sums.raw_data();
  }
  Tensor derivative;
  const bool cpu_only_epilogue = epilogue.activation_derivative || epilogue.c_multiplier.defined();
  if (cpu_only_epilogue)
    HEED_CHECK(a.device().type == DeviceType::CPU && args.batch == 1 && dtype == compute, "matmul",
               "the derivative and multiplier epilogues need one CPU gemm in the operands' dtype");
  if (activation != kernels::GemmActivation::None && args.batch == 1) {
    args.activation = activation;
    if (epilogue.activation_derivative) {
      // gelu'(z) instead of z: z lives in the output's block until gelu(z) replaces it.
      derivative = padded_rows(out_shape, ldc, compute, a.device());
      args.activation_derivative = derivative.raw_data();
    } else {
      z = padded_rows(out_shape, ldc, compute, a.device());
      args.pre_activation = z.raw_data();
    }
  }
  if (epilogue.c_multiplier.defined()) {
    HEED_CHECK(epilogue.c_multiplier.shape() == out_shape && epilogue.c_multiplier.strides() == out.strides() &&
                   epilogue.c_multiplier.dtype() == compute,
               "matmul", "the multiplier epilogue needs a {} of shape {} and strides {}, got shape {} and strides {}",
               dtype_name(compute), shape_str(out_shape), shape_str(out.strides()),
               shape_str(epilogue.c_multiplier.shape()), shape_str(epilogue.c_multiplier.strides()));
    args.c_multiplier = epilogue.c_multiplier.raw_data();
  }
  HEED_KERNEL(a.device(), gemm)(args);
  if (epilogue.activation_derivative) *epilogue.activation_derivative = derivative;
  if (epilogue.a_row_sums)
    *epilogue.a_row_sums = row_sums.defined() && dtype != compute ? row_sums.to(dtype) : row_sums;
  if (activation == kernels::GemmActivation::None) return finish(out, out);
  if (derivative.defined()) return finish(out, Tensor());
  if (!z.defined()) return finish(activation_pass(out), out);
  return finish(out, z);
}

// What the backward of out = a @ b (+ bias) keeps, and the gradients it computes from dC.
struct MatmulBackward {
  bool need_a = false, need_b = false;
  SavedTensor saved_a, saved_b;  // a only if b needs a gradient, and the other way round
  Dims shape_a, shape_b;
  // b a transposed view of a contiguous matrix (Linear's weight.t()): dB is computed in that
  // layout too, so the transpose's backward hands the weight a contiguous gradient it can
  // keep without a copy (autograd.cpp, accumulate_into_leaf).
  bool b_transposed = false;

  MatmulBackward(const Tensor& a, const Tensor& b, const char* op)
      : need_a(a.requires_grad()),
        need_b(b.requires_grad()),
        saved_a(need_b ? a : Tensor(), op),
        saved_b(need_a ? b : Tensor(), op),
        shape_a(a.shape()),
        shape_b(b.shape()),
        b_transposed(shape_b.size() == 2 && b.strides()[0] == 1 && b.strides()[1] == shape_b[0]) {}

  // {dA, dB} from dC (undefined where not needed). With `row_sums_of_g` (Linear's bias gradient,
  // dC summed over every dim but the last): filled from the dB gemm's row-sum epilogue when dB is
  // computed in b's transposed layout (dB^T = dC^T A, whose A operand is dC^T); left undefined
  // otherwise.
  std::vector<Tensor> operator()(const Tensor& g, Tensor* row_sums_of_g = nullptr) const {
    Tensor ga, gb;
    if (need_a) {
      Tensor b = saved_b.get();
      ga = sum_to(matmul_raw(g, b.transpose(-1, -2)), shape_a);
    }
    if (need_b) {
      Tensor a = saved_a.get();
      if (shape_b.size() == 2) {
        // dB = A^T dC summed over the batch: one gemm over the flattened rows
        // (or (dC^T A)^T, the same product written in b's transposed layout).
        const int64_t k = shape_a.back(), n = g.shape().back();
        const Tensor a_rows = a.reshape({-1, k}), g_rows = g.reshape({-1, n});
        Epilogue sums;
        sums.a_row_sums = row_sums_of_g;
        gb = b_transposed ? matmul_raw(g_rows.t(), a_rows, sums).t() : matmul_raw(a_rows.t(), g_rows);
      } else {
        gb = sum_to(matmul_raw(a.transpose(-1, -2), g), shape_b);
      }
    }
    return {ga, gb};
  }
};

// Differentiable matmul of two >= 2-D tensors.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Tensor out = matmul_raw(a.detach(), b.detach());
  if (any_requires_grad({&a, &b}))
    detail::record("matmul", {&a, &b}, out,
                   [backward = MatmulBackward(a, b, "matmul")](const Tensor& g) { return backward(g); });
  return out;
}

}  // namespace

// x (..., K) @ w_t (K, N) + bias (N) in one gemm (the bias epilogue), one recorded "linear" node:
// its backward is the matmul's plus the bias's row sum, taken from the weight gradient's gemm
// (its row-sum epilogue) when the weight needs a gradient too. The caller checks that x, w_t and
// bias share one device and a dtype the device's gemm takes as it is (gemm_dtype).
Tensor detail::linear_with_bias(const Tensor& x, const Tensor& w_t, const Tensor& bias) {
  const Tensor a = x.dim() == 1 ? x.unsqueeze(0) : x;
  Epilogue with_bias;
  with_bias.bias = bias.detach();
  Tensor out = matmul_raw(a.detach(), w_t.detach(), with_bias);
  if (any_requires_grad({&a, &w_t, &bias})) {
    const bool need_bias = bias.requires_grad();
    const Dims bias_shape = bias.shape();
    detail::record("linear", {&a, &w_t, &bias}, out,
                   [backward = MatmulBackward(a, w_t, "linear"), need_bias, bias_shape](const Tensor& g) {
                     Tensor bias_grad;
                     std::vector<Tensor> grads = backward(g, need_bias ? &bias_grad : nullptr);
                     if (need_bias && !bias_grad.defined()) bias_grad = sum_to(g, bias_shape);
                     grads.push_back(bias_grad);
                     return grads;
                   });
  }
  return x.dim() == 1 ? out.squeeze(0) : out;
}

// gelu(x (..., K) @ w_t (K, N) (+ bias (N))) with the GELU in the gemm's epilogue, one recorded
// "linear_gelu" node that keeps z, the GELU's input (as the separate gelu op would). Backward:
// dz = g * gelu'(z) (the unary row's backward kernel), then the linear's backward on dz, the bias
// gradient from the weight gradient's gemm. The caller checks devices and dtypes as for
// linear_with_bias (bias may be undefined).
Tensor detail::linear_gelu_fused(const Tensor& x, const Tensor& w_t, const Tensor& bias,
                                 GeluApproximation approximation) {
  const Tensor a = x.dim() == 1 ? x.unsqueeze(0) : x;
  Epilogue gelu;
  gelu.bias = bias.defined() ? bias.detach() : Tensor();
  gelu.activation =
      approximation == GeluApproximation::Tanh ? kernels::GemmActivation::GeluTanh : kernels::GemmActivation::GeluErf;
  Tensor z;
  gelu.pre_activation = &z;
  Tensor out = matmul_raw(a.detach(), w_t.detach(), gelu);
  const bool with_bias = bias.defined();
  if (any_requires_grad({&a, &w_t}) || (with_bias && bias.requires_grad())) {
    const bool need_bias = with_bias && bias.requires_grad();
    const Dims bias_shape = with_bias ? bias.shape() : Dims{};
    const kernels::UnaryOp row = unary_row_of(gelu.activation);
    SavedTensor saved_z(z, "linear_gelu");
    auto backward = [linear = MatmulBackward(a, w_t, "linear_gelu"), saved_z, row, with_bias, need_bias,
                     bias_shape](const Tensor& g) {
      // dz = g * gelu'(z): the gelu row's own backward, as the separate gelu op runs it.
      const Tensor z = saved_z.get();
      const Tensor dz = detail::unary_row_backward(row, g, z, 0.0, z.dtype());
      Tensor bias_grad;
      std::vector<Tensor> grads = linear(dz, need_bias ? &bias_grad : nullptr);
      if (need_bias && !bias_grad.defined()) bias_grad = sum_to(dz, bias_shape);
      if (with_bias) grads.push_back(bias_grad);
      return grads;
    };
    if (with_bias)
      detail::record("linear_gelu", {&a, &w_t, &bias}, out, backward);
    else
      detail::record("linear_gelu", {&a, &w_t}, out, backward);
  }
  return x.dim() == 1 ? out.squeeze(0) : out;
}

// F::feed_forward's fused path: y = gelu(x (..., K) @ w1_t (K, F) (+ b1)) @ w2_t (F, N) (+ b2), the
// GELU in the first gemm's epilogue and b2 in the second's, one recorded "feed_forward" node.
// With a gradient to compute, the first gemm's epilogue also writes gelu'(z), which the node
// keeps instead of z (the same bytes), and the backward's dz = (dY @ w2_t^T) * gelu'(z) is one
// gemm with a multiplier epilogue: the GELU's backward pass (an erf, an exp and a division per
// element, compute-bound on AVX-512) is gone for one exp more in the forward. dW2 and b2's
// gradient (the row sums of dY^T) come from dY and the kept h, then linear_gelu's backward on
// dz. Every output and gradient has the bits of linear_gelu followed by linear. CPU, float32 or
// float64, the erf GELU, K >= 1 only (F::feed_forward checks; else the two ops), x contiguous
// (F::feed_forward passes x.contiguous(): the bits of the two ops on those rows).
Tensor detail::feed_forward_fused(const Tensor& x, const Tensor& w1_t, const Tensor& b1, const Tensor& w2_t,
                                  const Tensor& b2) {
  const Tensor a = x.dim() == 1 ? x.unsqueeze(0) : x;
  const bool need_b1 = b1.defined() && b1.requires_grad(), need_b2 = b2.defined() && b2.requires_grad();
  const bool need_dz = a.requires_grad() || w1_t.requires_grad() || need_b1;
  const bool needs_node = need_dz || w2_t.requires_grad() || need_b2;
  Epilogue fc1_epilogue;
  fc1_epilogue.bias = b1.defined() ? b1.detach() : Tensor();
  fc1_epilogue.activation = kernels::GemmActivation::GeluErf;
  fc1_epilogue.pad_aliasing_rows = true;  // h and gelu'(z): read in place by the weight gradients
  Tensor derivative;                      // gelu'(z); z, the GELU's input, is never handed back
  if (need_dz) fc1_epilogue.activation_derivative = &derivative;
  const Tensor h = matmul_raw(a.detach(), w1_t.detach(), fc1_epilogue);  // (..., F)
  Epilogue fc2_epilogue;
  fc2_epilogue.bias = b2.defined() ? b2.detach() : Tensor();
  Tensor out = matmul_raw(h, w2_t.detach(), fc2_epilogue);  // (..., N)
  if (needs_node) {
    const Dims b1_shape = b1.defined() ? b1.shape() : Dims{}, b2_shape = b2.defined() ? b2.shape() : Dims{};
    const bool with_b1 = b1.defined(), with_b2 = b2.defined();
    auto backward = [fc1 = MatmulBackward(a, w1_t, "feed_forward"), fc2 = MatmulBackward(h, w2_t, "feed_forward"),
                     saved_derivative = SavedTensor(derivative, "feed_forward"),
                     saved_w2_t = SavedTensor(need_dz ? w2_t : Tensor(), "feed_forward"), need_dz, need_b1, need_b2,
                     with_b1, with_b2, b1_shape, b2_shape](const Tensor& g_in) {
      const Tensor g = g_in.contiguous();  // (..., N): one gemm below
      Tensor b1_grad, b2_grad;
      std::vector<Tensor> fc1_grads(2);
      if (need_dz) {
        // dz = (g @ w2_t^T) * gelu'(z): the product linear's backward computes for h, times
        // the factor the gelu row's backward would compute, in one gemm.
        Epilogue times_derivative;
        times_derivative.c_multiplier = saved_derivative.get();
        times_derivative.pad_aliasing_rows = true;  // dz as gelu'(z): read in place by dW1's product
        const Tensor dz = matmul_raw(g, saved_w2_t.get().transpose(-1, -2), times_derivative);
        fc1_grads = fc1(dz, need_b1 ? &b1_grad : nullptr);
        if (need_b1 && !b1_grad.defined()) b1_grad = sum_to(dz, b1_shape);
      }
      const std::vector<Tensor> fc2_grads = fc2(g, need_b2 ? &b2_grad : nullptr);  // h has no gradient
      if (need_b2 && !b2_grad.defined()) b2_grad = sum_to(g, b2_shape);
      std::vector<Tensor> grads = {fc1_grads[0], fc1_grads[1]};
      if (with_b1) grads.push_back(b1_grad);
      grads.push_back(fc2_grads[1]);
      if (with_b2) grads.push_back(b2_grad);
      return grads;
    };
    std::vector<const Tensor*> inputs = {&a, &w1_t};
    if (with_b1) inputs.push_back(&b1);
    inputs.push_back(&w2_t);
    if (with_b2) inputs.push_back(&b2);
    detail::record("feed_forward", inputs, out, backward);
  }
  return x.dim() == 1 ? out.squeeze(0) : out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  HEED_PROFILE_OP("matmul", &a, &b);
  detail::check_defined(a, "matmul");
  detail::check_defined(b, "matmul");
  detail::check_same_device(a, b, "matmul");
  HEED_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "both operands need at least 1 dim, got shapes {} and {}",
             shape_str(a.shape()), shape_str(b.shape()));
  HEED_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), "matmul",
             "expects floating-point operands, got {} and {}", dtype_name(a.dtype()), dtype_name(b.dtype()));
  const int64_t ka = a.shape()[a.dim() - 1];
  const int64_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  HEED_CHECK(ka == kb, "matmul", "shapes {} and {} cannot be multiplied: expected a.size(-1) == b.size(-2) ({} vs {})",
             shape_str(a.shape()), shape_str(b.shape()), ka, kb);
  // Autocast: float32/16-bit operands in the autocast dtype (weights through the cast cache);
  // the gemm still accumulates in float32.
  const bool autocast = amp::autocast_enabled();
  const Tensor a_in = autocast ? amp::cast_to_autocast_dtype(a) : a;
  const Tensor b_in = autocast ? amp::cast_to_autocast_dtype(b) : b;
  const DType dtype = promote_types(a_in.dtype(), b_in.dtype());
  const Tensor A = a_in.dtype() == dtype ? a_in : a_in.to(dtype);
  const Tensor B = b_in.dtype() == dtype ? b_in : b_in.to(dtype);
  const Tensor a2 = A.dim() == 1 ? A.unsqueeze(0) : A;
  const Tensor b2 = B.dim() == 1 ? B.unsqueeze(1) : B;
  Tensor out = matmul_nd(a2, b2);
  if (B.dim() == 1) out = out.squeeze(-1);
  if (A.dim() == 1) out = out.squeeze(A.dim() == 1 && B.dim() == 1 ? -1 : -2);
  return out;
}

}  // namespace heed
