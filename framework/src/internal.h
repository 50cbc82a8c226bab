// framework/src/internal.h — helpers shared by the op implementations (not installed).
//
// Invariants: make_empty returns a contiguous tensor with fresh storage and no autograd
// state; view_of/broadcast_view describe a tensor to the kernels without copying.
#pragma once

#include <string>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "kernels/kernels.h"
#include "kernels/trace.h"

namespace heed::detail {

Tensor make_empty(const Dims& shape, DType dtype, Device device);
// A tensor sharing `base`'s storage with the given geometry (no autograd recording).
Tensor make_alias(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset);

kernels::StridedView view_of(const Tensor& t);
// `t` seen with `out_shape` (right-aligned broadcasting; broadcast dims get stride 0).
kernels::StridedView broadcast_view(const Tensor& t, const Dims& out_shape);

inline void check_defined(const Tensor& t, const char* op, const char* what = "input") {
  HEED_CHECK(t.defined(), op, "the {} is an undefined Tensor", what);
}
inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  HEED_CHECK(a.device() == b.device(), op, "expected all tensors on the same device, got {} and {} (use .to(device))",
             a.device().str(), b.device().str());
}
inline void check_floating(const Tensor& t, const char* op) {
  HEED_CHECK(is_floating(t.dtype()), op, "expected a floating-point tensor, got {} of shape {}", dtype_name(t.dtype()),
             shape_str(t.shape()));
}
inline void check_index_dtype(const Tensor& t, const char* op, const char* what = "index") {
  HEED_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, op,
             "expected the {} to be int64 (or int32), got {} of shape {}", what, dtype_name(t.dtype()),
             shape_str(t.shape()));
}
// Validates that every index is in [0, extent) and returns a contiguous int64 copy/alias.
Tensor checked_indices(const Tensor& index, int64_t extent, const char* op);

// Refuses in-place writes the tape cannot represent; bumps the version counter.
void prepare_inplace(const Tensor& target, const char* op, std::initializer_list<const Tensor*> others = {});

// The dtype kernels compute in for a storage dtype: float32 for the 16-bit floats.
inline DType compute_dtype(DType t) { return is_half(t) ? kFloat32 : t; }
// The dtype a gemm on `device` takes its operands and writes its result in: 16-bit floats stay
// 16-bit on CUDA (cuBLAS accumulates them in float32, on tensor cores); the CPU's OpenBLAS gemm
// has float32/float64 only, so 16-bit operands are widened there.
inline DType gemm_dtype(DType t, Device device) { return device.is_cuda() ? t : compute_dtype(t); }

// Product of shape[begin, end).
inline int64_t prod(const Dims& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// Raw (non-recording) kernels used by op backwards.
Tensor binary_raw(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const char* name);
Tensor unary_raw(kernels::UnaryOp op, const Tensor& x, double alpha, const char* name);
// A unary row's backward: grad_in from g and what the row saved, computed in the wider of their
// dtypes (16-bit in float32 inside the kernel), returned in `in_dtype` (ops/elementwise.cpp).
Tensor unary_row_backward(kernels::UnaryOp op, const Tensor& g, const Tensor& saved, double alpha, DType in_dtype);
// F::linear with a bias: x (..., K) @ w_t (K, N) + bias (N) with the bias as the gemm's epilogue,
// recorded as one "linear" node (ops/matmul.cpp); its backward sums the bias gradient in the
// weight gradient's gemm. x, w_t and bias on one device, in one dtype the device's gemm takes
// as it is (gemm_dtype): float32/float64, and float16/bfloat16 on CUDA (autocast's casts
// come first).
Tensor linear_with_bias(const Tensor& x, const Tensor& w_t, const Tensor& bias);
// F::linear_gelu's fused path: gelu(x @ w_t (+ bias)) with the GELU in the gemm's epilogue, one
// recorded "linear_gelu" node keeping the GELU's input (ops/matmul.cpp). Same conditions as
// linear_with_bias; bias may be undefined.
Tensor linear_gelu_fused(const Tensor& x, const Tensor& w_t, const Tensor& bias, GeluApproximation approximation);
// F::feed_forward's fused path: gelu(x @ w1_t (+ b1)) @ w2_t (+ b2) with the erf GELU, one recorded
// "feed_forward" node that keeps gelu'(z) instead of z and multiplies by it in the gemm that
// computes dz (ops/matmul.cpp). CPU, float32/float64, x contiguous with K >= 1; biases optional.
Tensor feed_forward_fused(const Tensor& x, const Tensor& w1_t, const Tensor& b1, const Tensor& w2_t, const Tensor& b2);

// ---- the op registry ------------------------------------------------------------------------
// Every name heed's own ops record on the tape: the differentiable rows of the element-wise
// table (kernels/elementwise_table.h) plus the ops written by hand below. heed's op code
// records through detail::record(OpName, ...) only (record_op is poisoned in files that include
// this header), and an OpName is built from a literal at compile time only when the registry
// holds it, so no op can record a name the registry does not know. tests/test_gradcheck.cpp
// reads the registry (heed::recorded_op_names) and requires a gradient-check case that runs
// each name.
// clang-format off
#define HEED_HAND_WRITTEN_RECORDED_OPS(X)                                                        \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(clamp) X(where) X(masked_fill)       \
  X(sum) X(var) X(max) X(min) X(matmul) X(linear) X(linear_gelu) X(feed_forward) X(layer_norm) X(softmax) X(log_softmax)        \
  X(cross_entropy) X(dropout) X(flash_attention) X(flash_attention_packed)                      \
  X(scaled_dot_product_attention) X(view) X(permute) X(slice) X(select) X(expand) X(cat) X(index_select) X(gather)               \
  X(to_dtype) X(to_device) X(contiguous) X(clone)
// clang-format on

constexpr bool table_row_records(kernels::OpGrad grad) {
  return grad != kernels::OpGrad::NotDifferentiable && grad != kernels::OpGrad::Custom;
}
struct RegistryEntry {
  const char* name;
  bool recorded;
};
#define HEED_TABLE_ENTRY(Row, function) {kernels::unary::Row::name, table_row_records(kernels::unary::Row::grad)},
#define HEED_HAND_ENTRY(name) {#name, true},
inline constexpr RegistryEntry kOpRegistry[] = {HEED_FOR_EACH_UNARY_OP(HEED_TABLE_ENTRY)
                                                    HEED_HAND_WRITTEN_RECORDED_OPS(HEED_HAND_ENTRY)};
#undef HEED_TABLE_ENTRY
#undef HEED_HAND_ENTRY

constexpr bool same_text(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
constexpr bool in_registry(const char* name) {
  for (const RegistryEntry& e : kOpRegistry)
    if (e.recorded && same_text(e.name, name)) return true;
  return false;
}

// A registered op name. From a literal: checked at compile time (a name missing from the
// registry does not compile). From a run-time string (an op helper shared by several names):
// OpName::registered, which throws an internal error for an unknown name.
class OpName {
 public:
  consteval OpName(const char* name) : name_(name) {  // NOLINT(google-explicit-constructor)
    if (!in_registry(name)) throw "op name missing from HEED_HAND_WRITTEN_RECORDED_OPS (framework/src/internal.h)";
  }
  static OpName registered(const char* name) {
    HEED_INTERNAL_ASSERT(in_registry(name));
    return OpName(name, 0);
  }
  const char* c_str() const { return name_; }

 private:
  OpName(const char* name, int) : name_(name) {}
  const char* name_;
};

inline void record(OpName op, std::initializer_list<const Tensor*> inputs, Tensor& output, Node::BackwardFn backward) {
  record_op(op.c_str(), std::vector<const Tensor*>(inputs), output, std::move(backward));
}
inline void record(OpName op, const std::vector<const Tensor*>& inputs, Tensor& output, Node::BackwardFn backward) {
  record_op(op.c_str(), inputs, output, std::move(backward));
}

// Live-bytes accounting (heed/memory.h), called by Storage's constructor and destructor.
void storage_created(Device device, size_t nbytes, MemoryCategory category);
void storage_freed(Device device, size_t nbytes, MemoryCategory category);

// The profiler's span around one op's forward (heed/profile.h): HEED_PROFILE_OP("matmul", &a, &b)
// as the first statement of a public op. Off, it costs one relaxed atomic load.
class OpSpan {
 public:
  OpSpan(const char* name, std::initializer_list<const Tensor*> inputs) {
    if (kernels::trace::active()) [[unlikely]]
      open(name, inputs);
  }
  ~OpSpan() {
    if (open_) close();
  }
  OpSpan(const OpSpan&) = delete;
  OpSpan& operator=(const OpSpan&) = delete;

 private:
  void open(const char* name, std::initializer_list<const Tensor*> inputs);
  void close();
  bool open_ = false;
};
// Adds a "memory MB (cpu)" counter sample (memory_stats by category) to the profile, if one
// is recording.
void sample_memory_counter();
#define HEED_PROFILE_OP(name, ...) const ::heed::detail::OpSpan heed_op_span_(name, {__VA_ARGS__})

}  // namespace heed::detail

// Op code records through detail::record (registered names only); autograd.cpp, which defines
// record_op, includes this header with HEED_DEFINES_RECORD_OP.
#ifndef HEED_DEFINES_RECORD_OP
#pragma GCC poison record_op
#endif
