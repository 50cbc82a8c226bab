// kernels/cuda/elementwise.cu — unary (forward and backward), binary (with broadcasting), where
// and arange on the GPU. The unary and binary formulas are the HEED_HD rows of
// kernels/elementwise_table.h, the same code the CPU kernels run.
//
// Invariants: every element is computed independently by a grid-stride loop, with the same
// formula as kernels/cpu/elementwise.cpp in the same compute type (16-bit floats in float32),
// so results match the CPU up to the last-bit differences of the device math library;
// NaN propagates through maximum/minimum/clamp/relu as on the CPU. One kernel per dtype with
// the op as a run-time switch keeps the number of instantiations small.
#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

// ---- unary ------------------------------------------------------------------------------------

// True when the row of `op` accepts `dtype` (elementwise_table.h); checked on the host before
// a launch.
bool unary_defined(UnaryOp op, DType dtype) {
  bool defined = false;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
#define HEED_UNARY_DEFINED(Row, function)   \
  case UnaryOp::Row:                        \
    defined = row_accepts<unary::Row, T>(); \
    break;
      HEED_FOR_EACH_UNARY_OP(HEED_UNARY_DEFINED)
#undef HEED_UNARY_DEFINED
      case UnaryOp::Count:
        break;
    }
  });
  return defined;
}

template <typename T>
__device__ compute_t<T> apply_unary(UnaryOp op, compute_t<T> x, compute_t<T> a) {
  using C = compute_t<T>;
  switch (op) {
#define HEED_UNARY_CASE(Row, function)                                               \
  case UnaryOp::Row:                                                                 \
    if constexpr (row_accepts<unary::Row, T>()) return unary::Row::forward<C>(x, a); \
    break;
    HEED_FOR_EACH_UNARY_OP(HEED_UNARY_CASE)
#undef HEED_UNARY_CASE
    case UnaryOp::Count:
      break;
  }
  return x;  // unreachable: the host checks unary_defined first
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* in, T* out, int64_t n, compute_t<T> a) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    store(out + i, apply_unary<T>(op, load(in + i), a));
}

// dL/dx of the row of `op` from g and the saved value s (x or y as the row saves).
template <typename T>
__device__ compute_t<T> apply_unary_backward(UnaryOp op, compute_t<T> g, compute_t<T> s, compute_t<T> a) {
  using C = compute_t<T>;
  switch (op) {
#define HEED_UNARY_BACKWARD_CASE(Row, function)                                         \
  case UnaryOp::Row:                                                                    \
    if constexpr (row_accepts<unary::Row, T>() && grad_runs_kernel(unary::Row::grad)) { \
      constexpr bool reads_x = grad_reads_input(unary::Row::grad);                      \
      constexpr bool reads_y = grad_reads_output(unary::Row::grad);                     \
      return unary::Row::backward<C>(g, reads_x ? s : C(0), reads_y ? s : C(0), a);     \
    }                                                                                   \
    break;
    HEED_FOR_EACH_UNARY_OP(HEED_UNARY_BACKWARD_CASE)
#undef HEED_UNARY_BACKWARD_CASE
    case UnaryOp::Count:
      break;
  }
  return g;  // unreachable: the host checks unary_defined first
}

template <typename T>
__global__ void unary_backward_kernel(UnaryOp op, const T* grad, const T* saved, T* grad_in, int64_t n,
                                      compute_t<T> a) {
  using C = compute_t<T>;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const C s = saved ? load(saved + i) : C(0);
    store(grad_in + i, apply_unary_backward<T>(op, load(grad + i), s, a));
  }
}

// ---- binary -----------------------------------------------------------------------------------

bool binary_defined(BinaryOp op, DType dtype) {
  bool defined = false;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
#define HEED_BINARY_DEFINED(Row)             \
  case BinaryOp::Row:                        \
    defined = row_accepts<binary::Row, T>(); \
    break;
      HEED_FOR_EACH_BINARY_OP(HEED_BINARY_DEFINED)
#undef HEED_BINARY_DEFINED
      case BinaryOp::Count:
        break;
    }
  });
  return defined;
}

template <typename T, typename Out>
__device__ Out apply_binary(BinaryOp op, compute_t<T> x, compute_t<T> y) {
  using C = compute_t<T>;
  switch (op) {
#define HEED_BINARY_CASE(Row)                                                     \
  case BinaryOp::Row:                                                             \
    if constexpr (row_accepts<binary::Row, T>()) {                                \
      using RowResult = decltype(binary::Row::forward(C{}, C{}));                 \
      if constexpr (std::is_same_v<RowResult, bool> == std::is_same_v<Out, bool>) \
        return convert<Out>(binary::Row::forward<C>(x, y));                       \
    }                                                                             \
    break;
    HEED_FOR_EACH_BINARY_OP(HEED_BINARY_CASE)
#undef HEED_BINARY_CASE
    case BinaryOp::Count:
      break;
  }
  return convert<Out>(x);  // unreachable: the host checks binary_defined first
}

template <typename T, typename Out>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, Out* out, Geometry<3> g, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[3];
    offsets_of(g, i, offset);
    out[offset[0]] = apply_binary<T, Out>(op, load(a + offset[1]), load(b + offset[2]));
  }
}

// ---- where ------------------------------------------------------------------------------------

template <typename Bits>
__global__ void where_kernel(const bool* cond, const Bits* a, const Bits* b, Bits* out, Geometry<4> g, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[4];
    offsets_of(g, i, offset);
    out[offset[0]] = cond[offset[1]] ? a[offset[2]] : b[offset[3]];
  }
}

template <typename T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    store(out + i, start + static_cast<double>(i) * step);
}

[[noreturn]] void not_defined(const char* kernel, const char* op, DType dtype) {
  std::string message = std::string("op ") + op + " is not defined for " + std::string(dtype_name(dtype));
  throw_error(kernel, message.c_str());
}

}  // namespace

void unary(UnaryOp op, DType dtype, const void* in, void* out, int64_t n, double alpha) {
  if (!unary_defined(op, dtype)) not_defined("unary", unary_op_name(op), dtype);
  if (n <= 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    HEED_LAUNCH(grid_for(n), kThreads, 0, unary_kernel<T>)
    (op, static_cast<const T*>(in), static_cast<T*>(out), n, static_cast<C>(alpha));
  });
  check_launch("unary");
}

void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* saved, void* grad_in, int64_t n,
                    double alpha) {
  if (!unary_defined(op, dtype) || !grad_runs_kernel(unary_grad(op)))
    not_defined("unary_backward", unary_op_name(op), dtype);
  if (n <= 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    HEED_LAUNCH(grid_for(n), kThreads, 0, unary_backward_kernel<T>)
    (op, static_cast<const T*>(grad), static_cast<const T*>(saved), static_cast<T*>(grad_in), n, static_cast<C>(alpha));
  });
  check_launch("unary_backward");
}

void binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  if (!binary_defined(op, a.dtype)) not_defined("binary", binary_op_name(op), a.dtype);
  const int64_t n = numel_of(out);
  if (n == 0) return;
  const StridedView* views[3] = {&out, &a, &b};
  const Geometry<3> g = make_geometry(views);
  dispatch_all(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (binary_gives_bool(op)) {
      HEED_LAUNCH(grid_for(n), kThreads, 0, binary_kernel<T, bool>)
      (op, static_cast<const T*>(a.data), static_cast<const T*>(b.data), static_cast<bool*>(out.data), g, n);
    } else if constexpr (!std::is_same_v<T, bool>) {
      HEED_LAUNCH(grid_for(n), kThreads, 0, binary_kernel<T, T>)
      (op, static_cast<const T*>(a.data), static_cast<const T*>(b.data), static_cast<T*>(out.data), g, n);
    }
  });
  check_launch("binary");
}

void where(const StridedView& cond, const StridedView& a, const StridedView& b, const StridedView& out) {
  const int64_t n = numel_of(out);
  if (n == 0) return;
  const StridedView* views[4] = {&out, &cond, &a, &b};
  const Geometry<4> g = make_geometry(views);
  auto launch = [&](auto bits_tag) {
    using Bits = decltype(bits_tag);
    HEED_LAUNCH(grid_for(n), kThreads, 0, where_kernel<Bits>)
    (static_cast<const bool*>(cond.data), static_cast<const Bits*>(a.data), static_cast<const Bits*>(b.data),
     static_cast<Bits*>(out.data), g, n);
  };
  switch (dtype_size(out.dtype)) {
    case 1:
      launch(uint8_t{});
      break;
    case 2:
      launch(uint16_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    default:
      launch(uint64_t{});
      break;
  }
  check_launch("where");
}

void arange(DType dtype, void* out, int64_t n, double start, double step) {
  if (n <= 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    HEED_LAUNCH(grid_for(n), kThreads, 0, arange_kernel<T>)(static_cast<T*>(out), n, start, step);
  });
  check_launch("arange");
}

}  // namespace heed::kernels::cuda
