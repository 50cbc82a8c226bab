// kernels/kernels.h — the raw compute interface every backend implements.
//
// Kernels see pointers, dtypes, sizes and strides only: no Tensor, no autograd.
// Each backend fills a KernelTable; an entry left null means "not implemented
// on this device", and dispatch turns that into a heed::Error naming the
// kernel and the device (see kernel_or_throw). test_kernel_coverage reads
// the table (kernel_support) so nothing is silently missing.
//
// Conventions: `out` buffers are contiguous unless a StridedView says
// otherwise; half types are read and written as float16/bfloat16 but computed
// in float32; every kernel is deterministic for a fixed input, whatever the
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "heed/config.h"
#include "heed/device.h"
#include "heed/dtype.h"
#include "kernels/elementwise_table.h"

namespace heed::kernels {

// A tensor as the kernels see it: the element pointer (offset applied), dtype, shape, strides.
struct StridedView {
  void* data = nullptr;
  DType dtype = kFloat32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
};

// The element-wise ops, one enum value per row of kernels/elementwise_table.h.
#define HEED_UNARY_ENUM_VALUE(Row, function) Row,
enum class UnaryOp : uint8_t { HEED_FOR_EACH_UNARY_OP(HEED_UNARY_ENUM_VALUE) Count };
#undef HEED_UNARY_ENUM_VALUE
#define HEED_BINARY_ENUM_VALUE(Row) Row,
enum class BinaryOp : uint8_t { HEED_FOR_EACH_BINARY_OP(HEED_BINARY_ENUM_VALUE) Count };
#undef HEED_BINARY_ENUM_VALUE

// A row's name, domain and gradient kind by enum value.
#define HEED_UNARY_NAME(Row, function) unary::Row::name,
#define HEED_UNARY_DOMAIN(Row, function) unary::Row::domain,
#define HEED_UNARY_GRAD(Row, function) unary::Row::grad,
inline constexpr const char* kUnaryOpNames[] = {HEED_FOR_EACH_UNARY_OP(HEED_UNARY_NAME)};
inline constexpr OpDomain kUnaryOpDomains[] = {HEED_FOR_EACH_UNARY_OP(HEED_UNARY_DOMAIN)};
inline constexpr OpGrad kUnaryOpGrads[] = {HEED_FOR_EACH_UNARY_OP(HEED_UNARY_GRAD)};
#undef HEED_UNARY_NAME
#undef HEED_UNARY_DOMAIN
#undef HEED_UNARY_GRAD
#define HEED_BINARY_NAME(Row) binary::Row::name,
#define HEED_BINARY_DOMAIN(Row) binary::Row::domain,
inline constexpr const char* kBinaryOpNames[] = {HEED_FOR_EACH_BINARY_OP(HEED_BINARY_NAME)};
inline constexpr OpDomain kBinaryOpDomains[] = {HEED_FOR_EACH_BINARY_OP(HEED_BINARY_DOMAIN)};
#undef HEED_BINARY_NAME
#undef HEED_BINARY_DOMAIN

constexpr const char* unary_op_name(UnaryOp op) { return kUnaryOpNames[static_cast<int>(op)]; }
constexpr OpDomain unary_domain(UnaryOp op) { return kUnaryOpDomains[static_cast<int>(op)]; }
constexpr OpGrad unary_grad(UnaryOp op) { return kUnaryOpGrads[static_cast<int>(op)]; }
constexpr const char* binary_op_name(BinaryOp op) { return kBinaryOpNames[static_cast<int>(op)]; }
constexpr OpDomain binary_domain(BinaryOp op) { return kBinaryOpDomains[static_cast<int>(op)]; }
// True for the rows that write bool (comparisons, logical and/or).
constexpr bool binary_gives_bool(BinaryOp op) {
  return binary_domain(op) == OpDomain::Comparison || binary_domain(op) == OpDomain::Bool;
}

enum class ReduceOp : uint8_t { Sum, Max, Min, ArgMax, ArgMin, Count };

enum class RandomKind : uint8_t { Uniform, Normal };

// Philox4x32-10 stream position: the same (seed, offset) gives the same numbers on every
// device and thread count. Element i of a draw uses counter offset + i.
struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// ---- kernel signatures ----------------------------------------------------------------------

using AllocateFn = void* (*)(size_t nbytes);
using DeallocateFn = void (*)(void* ptr, size_t nbytes);
// Copies nbytes between this device and the host (to_host=true: device -> host).
using CopyHostFn = void (*)(void* dst, const void* src, size_t nbytes, bool to_host);
// dst[i] = value for every element of the (possibly strided) view.
using FillFn = void (*)(const StridedView& dst, double value);
// dst = src elementwise, converting dtypes; both views have the same shape.
using CopyFn = void (*)(const StridedView& dst, const StridedView& src);
// out = op(in) with scalar alpha; in and out contiguous with n elements.
using UnaryFn = void (*)(UnaryOp op, DType dtype, const void* in, void* out, int64_t n, double alpha);
// grad_in = dL/dx of a unary row from grad (dL/dy) and what the row saves (x or y; null when it
// saves nothing); grad, saved and grad_in contiguous with n elements of one floating dtype.
using UnaryBackwardFn = void (*)(UnaryOp op, DType dtype, const void* grad, const void* saved, void* grad_in, int64_t n,
                                 double alpha);
// out = op(a, b); a and b are views broadcast (stride 0) to out's shape; out contiguous.
using BinaryFn = void (*)(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out);
// out = cond ? a : b; all views broadcast to out's shape; cond is bool; out contiguous.
using WhereFn = void (*)(const StridedView& cond, const StridedView& a, const StridedView& b, const StridedView& out);
// in is contiguous (outer, extent, inner); out is contiguous (outer, inner).
// Arg-reductions write int64 indices into `out`; Max/Min also write indices to `indices`
// when it is non-null. Sums accumulate in double for float32/float64.
using ReduceFn = void (*)(ReduceOp op, DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner,
                          void* out, int64_t* indices);
// Variance along `extent` of a contiguous (outer, extent, inner) tensor with a correction.
using VarianceFn = void (*)(DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner,
                            double correction, void* out);
// C = alpha * op(A) @ op(B) + beta * C, row-major, repeated over `batch` with element strides
// between batches (stride 0 broadcasts). dtype float32 or float64 (CPU); the CUDA backend also
// takes float16/bfloat16 operands and C, accumulating in float32.
// Epilogues (the row sums alone, or bias and/or activation; batch == 1, beta == 0 and k >= 1
// only; with m == 0 or n == 0 nothing is written; Linear's forward and weight gradient), in C's
// dtype:
//  * bias (n elements, contiguous; beta must be 0): C = alpha * op(A) @ op(B) + bias, the bias
//    added to every row with no second pass over C (CUDA: cuBLASLt's BIAS epilogue; CPU: C
//    filled with the bias block by block before each block's gemm accumulates onto it).
//  * activation (GeluErf or GeluTanh; with or without bias; beta 0; CUDA: C contiguous, ldc == n;
//    CPU: any ldc >= n, the buffers below then rows ldc apart as C's): pre_activation (m x n)
//    receives z = alpha * op(A) @ op(B) (+ bias) and C receives gelu(z), computed as the unary
//    rows gelu / gelu_tanh compute it (CUDA: cuBLASLt's GELU_AUX(_BIAS) epilogue for the tanh
//    form, whose GELU that is; the erf form as the gemm into pre_activation and the unary kernel
//    after it; CPU: block by block while the block of z is in cache).
//  * activation_derivative (CPU, GeluErf only; with the activation epilogue): also
//    receives gelu'(z) (m x n), the factor the gelu row's backward multiplies its
//    incoming gradient by, with that kernel's bits (for a backward that keeps it instead of z);
//    pre_activation may then be null (z is formed in C's block and replaced by gelu(z)).
//  * c_multiplier (CPU only; alone, beta 0): C = (alpha * op(A) @ op(B)) * c_multiplier element
//    by element (m x n, rows ldc apart as C's), block by block while the block of C is in cache:
//    the gradient of a GELU whose derivative the forward kept (F::feed_forward).
//    The CUDA backend refuses both.
//  * a_row_sums (m elements, contiguous; written, not accumulated; alpha must be 1):
//    sum_p op(A)[i, p], the bias gradient of a Linear whose weight gradient is this gemm
//    (op(A) = dY^T) (CUDA: cuBLASLt's BGRADB epilogue, summed in float32; CPU: in float64).
enum class GemmActivation : uint8_t { None, GeluErf, GeluTanh };
struct GemmArgs {
  DType dtype = kFloat32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  int64_t batch = 1;
  double alpha = 1.0, beta = 0.0;
  const void* bias = nullptr;
  GemmActivation activation = GemmActivation::None;
  void* pre_activation = nullptr;
  void* a_row_sums = nullptr;
  void* activation_derivative = nullptr;
  const void* c_multiplier = nullptr;
};
using GemmFn = void (*)(const GemmArgs& args);
// Row-wise softmax (or log-softmax) of a contiguous (rows, cols) tensor. A row of all -inf
// gives zeros (softmax) or all -inf (log-softmax), never NaN.
using SoftmaxForwardFn = void (*)(DType dtype, const void* in, void* out, int64_t rows, int64_t cols, bool log);
// grad_in from the forward output y and grad_out: softmax: y*(g - sum(g*y));
// log-softmax: g - exp(y)*sum(g).
using SoftmaxBackwardFn = void (*)(DType dtype, const void* y, const void* grad_out, void* grad_in, int64_t rows,
                                   int64_t cols, bool log);
// Per-row loss and log-sum-exp of logits (rows, classes) against int64 targets.
// loss_i = -(1-s)*logp[t] - s/C * sum_c logp[c]; rows with target == ignore_index give 0.
// row_loss and row_lse are in the compute dtype (float32 for float16/bfloat16 logits).
using CrossEntropyForwardFn = void (*)(DType dtype, const void* logits, const int64_t* targets, int64_t rows,
                                       int64_t classes, int64_t ignore_index, double smoothing, void* row_loss,
                                       void* row_lse);
// grad_logits = scale * (softmax - (1-s)*onehot - s/C) per non-ignored row; 0 for ignored rows.
using CrossEntropyBackwardFn = void (*)(DType dtype, const void* logits, const int64_t* targets, const void* row_lse,
                                        int64_t rows, int64_t classes, int64_t ignore_index, double smoothing,
                                        double scale, void* grad_logits);
// out(outer, index_count, inner) = in(outer, index[j], inner); indices already validated.
using IndexSelectFn = void (*)(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner,
                               const int64_t* index, int64_t index_count, void* out);
// out(outer, index[j], inner) += src(outer, j, inner); deterministic order.
using IndexAddFn = void (*)(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner,
                            const int64_t* index, int64_t index_count, const void* src);
// gather along the middle dim: out(o, j, i) = in(o, index(o, j, i), i); scatter_add is its adjoint.
using GatherFn = void (*)(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner,
                          const int64_t* index, int64_t index_extent, void* out);
using ScatterAddFn = void (*)(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner,
                              const int64_t* index, int64_t index_extent, const void* src);
// Fills a contiguous buffer with uniform [low, high) or normal(mean=a, std=b) numbers.
using RandomFn = void (*)(RandomKind kind, DType dtype, void* out, int64_t n, double a, double b, PhiloxState state);
// keep[i] = uniform(state, i) >= p, as 0/1 bytes; the same mask on every device.
using DropoutMaskFn = void (*)(uint8_t* keep, int64_t n, double p, PhiloxState state);
// out[i] = start + i * step.
using ArangeFn = void (*)(DType dtype, void* out, int64_t n, double start, double step);
// One Adam/AdamW update of a contiguous parameter in a single pass (param, grad, moments
// all float32 or all float64, n elements). decoupled_weight_decay: AdamW (p -= lr*wd*p)
// instead of L2 added to the gradient. `step` counts from 1 (bias correction).
// max_exp_avg_sq is null unless amsgrad.
struct AdamStepArgs {
  DType dtype = kFloat32;
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* max_exp_avg_sq = nullptr;
  int64_t n = 0;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  int64_t step = 1;
};
// Updates `count` parameters in one call (on the CPU one parallel loop over all their elements,
// so a step costs one fork and join however many small parameters the model has).
using AdamStepFn = void (*)(const AdamStepArgs* tensors, int count);
// LayerNorm over the last dim of contiguous x (rows, cols): y = (x - mean) * rstd * w + b.
// weight/bias may be null (no affine). mean and rstd (rows) are written in the compute dtype
// (float32 for 16-bit x) for backward.
using LayerNormForwardFn = void (*)(DType dtype, const void* x, const void* weight, const void* bias, int64_t rows,
                                    int64_t cols, double eps, void* y, void* mean, void* rstd);
// dx (rows, cols); dweight/dbias (cols) are overwritten (not accumulated) when non-null.
using LayerNormBackwardFn = void (*)(DType dtype, const void* x, const void* weight, const void* mean, const void* rstd,
                                     const void* dy, int64_t rows, int64_t cols, void* dx, void* dweight, void* dbias);

// Fused (flash-style) attention over q (B,H,T,D), k (B,H,S,D), v (B,H,S,Dv) (strided, see
// AttentionLayout):
// online softmax over key blocks; only the per-row log-sum-exp is kept for backward; blocks
// that causal/window/key-length masks exclude are skipped. Masks: causal (bottom-right
// aligned: query i sits at i + S - T), window (|pos_i - j| <= window, -1 = off),
// key_lengths (B, int64, null = off), keep (bool view broadcast to (B,H,T,S), data null =
// off) and additive (compute-dtype view broadcast to (B,H,T,S), data null = off). Dropout
// on the attention weights uses philox_uniform(seed, offset + ((b*H + h)*T + i)*S + j) >= p,
// the same mask F::dropout draws for a (B,H,T,S) tensor. A fully masked row gives output 0
// and lse -inf. dtype float32 or float64.
// Kept probabilities (probs, optional, CPU kernel): with at most kFlashKeptProbsMaxKeys keys (one
// key block, so each row's softmax is final after it), forward also writes P = softmax(scores)
// before dropout, contiguous (B,H,T,S) with 0 wherever a mask hides a key, at most as many values
// per query row as a 64-wide output row; backward then reads P instead of recomputing the scores
// and their exps. Null: backward recomputes P from lse (the only choice for more keys).
inline constexpr int64_t kFlashKeptProbsMaxKeys = 64;
// Element strides of a (B, H, L, D) operand whose last dim is contiguous; all zero means
// the contiguous layout (H*L*D, L*D, D).
struct AttentionLayout {
  int64_t batch = 0, head = 0, seq = 0;
};
struct FlashAttentionArgs {
  DType dtype = kFloat32;
  int64_t batch = 0, heads = 0, queries = 0, keys = 0, head_dim = 0, value_dim = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  double scale = 1.0;
  bool causal = false;
  int64_t window = -1;
  const int64_t* key_lengths = nullptr;
  StridedView keep;
  StridedView additive;
  double dropout_p = 0.0;
  PhiloxState dropout_state;
  // forward outputs / backward inputs
  void* out = nullptr;    // (B,H,T,Dv)
  void* lse = nullptr;    // (B,H,T)
  void* probs = nullptr;  // (B,H,T,S) contiguous, S <= kFlashKeptProbsMaxKeys, or null (see above)
  // backward only
  const void* grad_out = nullptr;  // (B,H,T,Dv)
  void* grad_q = nullptr;          // written (not accumulated)
  void* grad_k = nullptr;
  void* grad_v = nullptr;
  // Layouts of q, k, v, out, grad_out, grad_q, grad_k, grad_v (lse is always contiguous).
  AttentionLayout q_layout, k_layout, v_layout, out_layout, grad_out_layout, grad_q_layout, grad_k_layout,
      grad_v_layout;
};
using FlashAttentionFn = void (*)(const FlashAttentionArgs& args);

// The global-norm reduction of clip_grad_norm_ over a list of contiguous floating tensors on
// one device, with one host synchronisation per call (not one per tensor). Returns, in
// float64, sum_t sum_i |x_ti|^p for a finite norm_type p > 0 (squares for p = 2, absolute
// values for p = 1), or max_t max_i |x_ti| for p = INFINITY (NaN when any element is NaN).
// Each tensor is summed in a fixed order (deterministic for a fixed input).
struct NormInput {
  const void* data = nullptr;
  DType dtype = kFloat32;
  int64_t n = 0;
};
using GlobalNormFn = double (*)(const NormInput* inputs, int count, double norm_type);

// One kernel per line (clang-format would fold the rows together).
// clang-format off
#define HEED_FOR_EACH_KERNEL(X)                     \
  X(allocate, AllocateFn)                           \
  X(deallocate, DeallocateFn)                       \
  X(copy_host, CopyHostFn)                          \
  X(fill, FillFn)                                   \
  X(copy, CopyFn)                                   \
  X(unary, UnaryFn)                                 \
  X(unary_backward, UnaryBackwardFn)                \
  X(binary, BinaryFn)                               \
  X(where, WhereFn)                                 \
  X(reduce, ReduceFn)                               \
  X(variance, VarianceFn)                           \
  X(gemm, GemmFn)                                   \
  X(softmax_forward, SoftmaxForwardFn)              \
  X(softmax_backward, SoftmaxBackwardFn)            \
  X(cross_entropy_forward, CrossEntropyForwardFn)   \
  X(cross_entropy_backward, CrossEntropyBackwardFn) \
  X(index_select, IndexSelectFn)                    \
  X(index_add, IndexAddFn)                          \
  X(gather, GatherFn)                               \
  X(scatter_add, ScatterAddFn)                      \
  X(random, RandomFn)                               \
  X(dropout_mask, DropoutMaskFn)                    \
  X(arange, ArangeFn)                               \
  X(adam_step, AdamStepFn)                          \
  X(layer_norm_forward, LayerNormForwardFn)         \
  X(layer_norm_backward, LayerNormBackwardFn)       \
  X(flash_attention_forward, FlashAttentionFn)      \
  X(flash_attention_backward, FlashAttentionFn)     \
  X(global_norm, GlobalNormFn)
// clang-format on

// Declares every kernel of the table as a function of a backend namespace (cpu_kernels.h,
// cuda_kernels.h): `std::remove_pointer_t<FillFn> fill;` declares
// `void fill(const StridedView& dst, double value);`.
#define HEED_DECLARE_KERNEL_FUNCTION(name, type) std::remove_pointer_t<type> name;

struct KernelTable {
#define HEED_KERNEL_FIELD(name, type) type name = nullptr;
  HEED_FOR_EACH_KERNEL(HEED_KERNEL_FIELD)
#undef HEED_KERNEL_FIELD
};

// The table of a device type. CUDA's table is empty when heed was built without CUDA.
const KernelTable& kernel_table(DeviceType type);

[[noreturn]] void throw_missing_kernel(const char* kernel, Device device);

// Name and presence of every kernel for a device type, in declaration order.
struct KernelSupport {
  const char* name;
  bool implemented;
};
int kernel_count();
KernelSupport kernel_support(DeviceType type, int i);

}  // namespace heed::kernels

// Fetches a kernel for a device or throws "kernel 'x' is not implemented for device y".
#define HEED_KERNEL(device, name)                                  \
  ([&]() {                                                         \
    auto fn__ = ::heed::kernels::kernel_table((device).type).name; \
    if (!fn__) [[unlikely]]                                        \
      ::heed::kernels::throw_missing_kernel(#name, (device));      \
    return fn__;                                                   \
  }())
