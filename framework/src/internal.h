// framework/src/internal.h — helpers shared by the op implementations (not installed).
//
// Invariants: make_empty returns a contiguous tensor with fresh storage and no autograd
// state; view_of/broadcast_view describe a tensor to the kernels without copying.
#pragma once

#include <string>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "kernels/kernels.h"

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

// Product of shape[begin, end).
inline int64_t prod(const Dims& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[i];
  return p;
}

// Raw (non-recording) kernels used by op backwards.
Tensor binary_raw(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const char* name);
Tensor unary_raw(kernels::UnaryOp op, const Tensor& x, double alpha, const char* name);

}  // namespace heed::detail
