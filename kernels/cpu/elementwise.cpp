// kernels/cpu/elementwise.cpp — fill, copy/convert, unary (forward and backward), binary, where
// and arange on the CPU. The unary and binary formulas are the rows of
// kernels/elementwise_table.h (shared with the CUDA backend); the AVX2 gelu paths of
// vec_math.h are the only per-op code here.
//
// Invariants: every element is computed independently (thread count never matters); 16-bit
// floats compute in float32; NaN propagates through maximum/minimum/clamp.
#include <cmath>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {

template <typename T, typename F>
void map_contiguous(const T* in, T* out, int64_t n, F f) {
  parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) store(out + i, f(load(in + i)));
  });
}

// out = Row::forward(in, alpha) for the row of `op` (elementwise_table.h).
template <typename T>
void unary_typed(UnaryOp op, const T* in, T* out, int64_t n, double alpha) {
  using C = compute_t<T>;
  const C a = static_cast<C>(alpha);
  switch (op) {
#define HEED_UNARY_CASE(Row, function)                                                      \
  case UnaryOp::Row:                                                                        \
    if constexpr (row_accepts<unary::Row, T>())                                             \
      return map_contiguous(in, out, n, [a](C x) { return unary::Row::forward<C>(x, a); }); \
    break;
    HEED_FOR_EACH_UNARY_OP(HEED_UNARY_CASE)
#undef HEED_UNARY_CASE
    case UnaryOp::Count:
      break;
  }
  fail("unary", "op {} is not defined for {}", unary_op_name(op), dtype_name(dtype_of<T>));
}

// grad_in = Row::backward(grad, x or y, alpha) for the row of `op`.
template <typename T>
void unary_backward_typed(UnaryOp op, const T* grad, const T* saved, T* grad_in, int64_t n, double alpha) {
  using C = compute_t<T>;
  const C a = static_cast<C>(alpha);
  switch (op) {
#define HEED_UNARY_BACKWARD_CASE(Row, function)                                         \
  case UnaryOp::Row:                                                                    \
    if constexpr (row_accepts<unary::Row, T>() && grad_runs_kernel(unary::Row::grad)) { \
      parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {              \
        for (int64_t i = begin; i < end; ++i) {                                         \
          const C s = saved ? load(saved + i) : C(0);                                   \
          const C x = grad_reads_input(unary::Row::grad) ? s : C(0);                    \
          const C y = grad_reads_output(unary::Row::grad) ? s : C(0);                   \
          store(grad_in + i, unary::Row::backward<C>(load(grad + i), x, y, a));         \
        }                                                                               \
      });                                                                               \
      return;                                                                           \
    }                                                                                   \
    break;
    HEED_FOR_EACH_UNARY_OP(HEED_UNARY_BACKWARD_CASE)
#undef HEED_UNARY_BACKWARD_CASE
    case UnaryOp::Count:
      break;
  }
  fail("unary_backward", "op {} has no backward kernel for {}", unary_op_name(op), dtype_name(dtype_of<T>));
}

// out = f(a, b) over a broadcast loop; Out may differ from T (comparisons give bool).
template <typename T, typename Out, typename F>
void map_binary(const StridedView& a, const StridedView& b, const StridedView& out, F f) {
  const StridedView* views[3] = {&out, &a, &b};
  const StridedLoop<3> loop = make_loop(views);
  for_each_row(loop, [&](char* const* ptrs, const int64_t* inner, int64_t count) {
    Out* po = reinterpret_cast<Out*>(ptrs[0]);
    const char* pa = ptrs[1];
    const char* pb = ptrs[2];
    const int64_t sa = inner[1], sb = inner[2];
    if (inner[0] == static_cast<int64_t>(sizeof(Out)) && sa == static_cast<int64_t>(sizeof(T)) &&
        sb == static_cast<int64_t>(sizeof(T))) {
      const T* ta = reinterpret_cast<const T*>(pa);
      const T* tb = reinterpret_cast<const T*>(pb);
      for (int64_t i = 0; i < count; ++i) store(po + i, f(load(ta + i), load(tb + i)));
    } else if (inner[0] == static_cast<int64_t>(sizeof(Out)) && sa == static_cast<int64_t>(sizeof(T)) && sb == 0) {
      const T* ta = reinterpret_cast<const T*>(pa);
      const auto vb = load(reinterpret_cast<const T*>(pb));
      for (int64_t i = 0; i < count; ++i) store(po + i, f(load(ta + i), vb));
    } else {
      char* o = ptrs[0];
      for (int64_t i = 0; i < count; ++i)
        store(reinterpret_cast<Out*>(o + i * inner[0]),
              f(load(reinterpret_cast<const T*>(pa + i * sa)), load(reinterpret_cast<const T*>(pb + i * sb))));
    }
  });
}

// out = Row::forward(a, b) for the row of `op`; comparison and logical rows write bool.
template <typename T>
void binary_typed(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  using C = compute_t<T>;
  switch (op) {
#define HEED_BINARY_CASE(Row)                                                                                  \
  case BinaryOp::Row:                                                                                          \
    if constexpr (row_accepts<binary::Row, T>()) {                                                             \
      using Out = std::conditional_t<std::is_same_v<decltype(binary::Row::forward(C{}, C{})), bool>, bool, T>; \
      return map_binary<T, Out>(a, b, out, [](C x, C y) { return binary::Row::forward<C>(x, y); });            \
    }                                                                                                          \
    break;
    HEED_FOR_EACH_BINARY_OP(HEED_BINARY_CASE)
#undef HEED_BINARY_CASE
    case BinaryOp::Count:
      break;
  }
  fail("binary", "op {} is not defined for {}", binary_op_name(op), dtype_name(dtype_of<T>));
}

template <typename Dst, typename Src>
void copy_typed(const StridedView& dst, const StridedView& src) {
  const StridedView* views[2] = {&dst, &src};
  const StridedLoop<2> loop = make_loop(views);
  for_each_row(loop, [&](char* const* ptrs, const int64_t* inner, int64_t count) {
    if constexpr (std::is_same_v<Dst, Src>) {
      if (inner[0] == static_cast<int64_t>(sizeof(Dst)) && inner[1] == static_cast<int64_t>(sizeof(Src))) {
        std::memcpy(ptrs[0], ptrs[1], static_cast<size_t>(count) * sizeof(Dst));
        return;
      }
      for (int64_t i = 0; i < count; ++i)
        *reinterpret_cast<Dst*>(ptrs[0] + i * inner[0]) = *reinterpret_cast<const Src*>(ptrs[1] + i * inner[1]);
    } else {
      for (int64_t i = 0; i < count; ++i)
        store(reinterpret_cast<Dst*>(ptrs[0] + i * inner[0]),
              load(reinterpret_cast<const Src*>(ptrs[1] + i * inner[1])));
    }
  });
}

}  // namespace

void fill(const StridedView& dst, double value) {
  dispatch_all(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    const StridedView* views[1] = {&dst};
    const StridedLoop<1> loop = make_loop(views);
    for_each_row(loop, [&](char* const* ptrs, const int64_t* inner, int64_t count) {
      for (int64_t i = 0; i < count; ++i) *reinterpret_cast<T*>(ptrs[0] + i * inner[0]) = v;
    });
  });
}

void copy(const StridedView& dst, const StridedView& src) {
  dispatch_all(dst.dtype, [&](auto dst_tag) {
    dispatch_all(src.dtype, [&](auto src_tag) { copy_typed<decltype(dst_tag), decltype(src_tag)>(dst, src); });
  });
}

void unary(UnaryOp op, DType dtype, const void* in, void* out, int64_t n, double alpha) {
  if (dtype == kFloat32 && op == UnaryOp::GeluErf) {  // vectorised fast path
    const float* x = static_cast<const float*>(in);
    float* y = static_cast<float*>(out);
    parallel_for(n, kElementwiseGrain,
                 [&](int64_t begin, int64_t end) { gelu_erf_forward(x + begin, y + begin, end - begin); });
    return;
  }
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    unary_typed<T>(op, static_cast<const T*>(in), static_cast<T*>(out), n, alpha);
  });
}

void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* saved, void* grad_in, int64_t n,
                    double alpha) {
  if (dtype == kFloat32 && op == UnaryOp::GeluErf) {  // vectorised fast path
    const float* g = static_cast<const float*>(grad);
    const float* x = static_cast<const float*>(saved);
    float* out = static_cast<float*>(grad_in);
    parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      gelu_erf_backward(g + begin, x + begin, out + begin, end - begin);
    });
    return;
  }
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    unary_backward_typed<T>(op, static_cast<const T*>(grad), static_cast<const T*>(saved), static_cast<T*>(grad_in), n,
                            alpha);
  });
}

void binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  dispatch_all(a.dtype, [&](auto tag) { binary_typed<decltype(tag)>(op, a, b, out); });
}

void where(const StridedView& cond, const StridedView& a, const StridedView& b, const StridedView& out) {
  dispatch_all(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const StridedView* views[4] = {&out, &cond, &a, &b};
    const StridedLoop<4> loop = make_loop(views);
    for_each_row(loop, [&](char* const* ptrs, const int64_t* inner, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        const bool c = *reinterpret_cast<const bool*>(ptrs[1] + i * inner[1]);
        const char* src = c ? ptrs[2] + i * inner[2] : ptrs[3] + i * inner[3];
        *reinterpret_cast<T*>(ptrs[0] + i * inner[0]) = *reinterpret_cast<const T*>(src);
      }
    });
  });
}

void arange(DType dtype, void* out, int64_t n, double start, double step) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) store(p + i, start + static_cast<double>(i) * step);
  });
}

}  // namespace heed::kernels::cpu
