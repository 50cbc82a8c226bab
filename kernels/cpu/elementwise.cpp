// kernels/cpu/elementwise.cpp — fill, copy/convert, unary, binary, where and arange on the CPU.
//
// Invariants: every element is computed independently (thread count never matters); 16-bit
// floats compute in float32; NaN propagates through maximum/minimum/clamp.
#include <cmath>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2*pi)
constexpr double kGeluCubic = 0.044715;

template <typename C>
inline C gelu_tanh(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  return C(0.5) * x * (C(1) + std::tanh(u));
}
template <typename C>
inline C gelu_tanh_grad(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  const C t = std::tanh(u);
  const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}
template <typename C>
inline C gelu_erf(C x) {
  return C(0.5) * x * (C(1) + std::erf(x * C(kInvSqrt2)));
}
template <typename C>
inline C gelu_erf_grad(C x) {
  const C cdf = C(0.5) * (C(1) + std::erf(x * C(kInvSqrt2)));
  const C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}

template <typename C>
inline C sigmoid(C x) {
  // Two forms so exp never overflows.
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

template <typename T, typename F>
void map_contiguous(const T* in, T* out, int64_t n, F f) {
  parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) store(out + i, f(load(in + i)));
  });
}

template <typename T>
void unary_typed(UnaryOp op, const T* in, T* out, int64_t n, double alpha) {
  using C = compute_t<T>;
  const C a = static_cast<C>(alpha);
  switch (op) {
    case UnaryOp::Neg:
      return map_contiguous(in, out, n, [](C x) { return static_cast<C>(-x); });
    case UnaryOp::Abs:
      return map_contiguous(in, out, n, [](C x) { return x < C(0) ? static_cast<C>(-x) : x; });
    case UnaryOp::Sign:
      return map_contiguous(in, out, n, [](C x) { return static_cast<C>((x > C(0)) - (x < C(0))); });
    case UnaryOp::AddScalar:
      return map_contiguous(in, out, n, [a](C x) { return static_cast<C>(x + a); });
    case UnaryOp::MulScalar:
      return map_contiguous(in, out, n, [a](C x) { return static_cast<C>(x * a); });
    case UnaryOp::RSubScalar:
      return map_contiguous(in, out, n, [a](C x) { return static_cast<C>(a - x); });
    case UnaryOp::ClampMin:
      return map_contiguous(in, out, n, [a](C x) { return x < a ? a : x; });  // NaN < a is false
    case UnaryOp::ClampMax:
      return map_contiguous(in, out, n, [a](C x) { return x > a ? a : x; });
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::Exp:
        return map_contiguous(in, out, n, [](C x) { return std::exp(x); });
      case UnaryOp::Log:
        return map_contiguous(in, out, n, [](C x) { return std::log(x); });
      case UnaryOp::Sqrt:
        return map_contiguous(in, out, n, [](C x) { return std::sqrt(x); });
      case UnaryOp::Rsqrt:
        return map_contiguous(in, out, n, [](C x) { return C(1) / std::sqrt(x); });
      case UnaryOp::Relu:
        return map_contiguous(in, out, n, [](C x) { return x > C(0) ? x : (x == x ? C(0) : x); });
      case UnaryOp::GeluTanh:
        return map_contiguous(in, out, n, [](C x) { return gelu_tanh(x); });
      case UnaryOp::GeluErf:
        return map_contiguous(in, out, n, [](C x) { return gelu_erf(x); });
      case UnaryOp::Tanh:
        return map_contiguous(in, out, n, [](C x) { return std::tanh(x); });
      case UnaryOp::Sigmoid:
        return map_contiguous(in, out, n, [](C x) { return sigmoid(x); });
      case UnaryOp::PowScalar:
        if (alpha == 2.0) return map_contiguous(in, out, n, [](C x) { return x * x; });
        return map_contiguous(in, out, n, [a](C x) { return std::pow(x, a); });
      case UnaryOp::RDivScalar:
        return map_contiguous(in, out, n, [a](C x) { return a / x; });
      default:
        break;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (op == UnaryOp::LogicalNot) return map_contiguous(in, out, n, [](bool x) { return !x; });
  }
  fail("unary", "op {} is not defined for {}", unary_op_name(op), dtype_name(dtype_of<T>));
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

template <typename T>
void binary_typed(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  using C = compute_t<T>;
  switch (op) {
    case BinaryOp::Eq:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x == y; });
    case BinaryOp::Ne:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x != y; });
    case BinaryOp::Lt:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x < y; });
    case BinaryOp::Le:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x <= y; });
    case BinaryOp::Gt:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x > y; });
    case BinaryOp::Ge:
      return map_binary<T, bool>(a, b, out, [](C x, C y) { return x >= y; });
    default:
      break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (op == BinaryOp::LogicalAnd) return map_binary<T, bool>(a, b, out, [](bool x, bool y) { return x && y; });
    if (op == BinaryOp::LogicalOr) return map_binary<T, bool>(a, b, out, [](bool x, bool y) { return x || y; });
  } else {
    switch (op) {
      case BinaryOp::Add:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return static_cast<C>(x + y); });
      case BinaryOp::Sub:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return static_cast<C>(x - y); });
      case BinaryOp::Mul:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return static_cast<C>(x * y); });
      case BinaryOp::Maximum:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return (x != x || x > y) ? x : y; });
      case BinaryOp::Minimum:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return (x != x || x < y) ? x : y; });
      default:
        break;
    }
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::Div:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return x / y; });
      case BinaryOp::Pow:
        return map_binary<T, T>(a, b, out, [](C x, C y) { return std::pow(x, y); });
      case BinaryOp::ReluBackward:
        return map_binary<T, T>(a, b, out, [](C g, C x) { return x > C(0) ? g : C(0); });
      case BinaryOp::GeluTanhBackward:
        return map_binary<T, T>(a, b, out, [](C g, C x) { return g * gelu_tanh_grad(x); });
      case BinaryOp::GeluErfBackward:
        return map_binary<T, T>(a, b, out, [](C g, C x) { return g * gelu_erf_grad(x); });
      case BinaryOp::TanhBackward:
        return map_binary<T, T>(a, b, out, [](C g, C y) { return g * (C(1) - y * y); });
      case BinaryOp::SigmoidBackward:
        return map_binary<T, T>(a, b, out, [](C g, C y) { return g * y * (C(1) - y); });
      default:
        break;
    }
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

namespace {
bool contiguous_same_shape(const StridedView& v, const StridedView& out) {
  if (v.ndim != out.ndim) return false;
  int64_t expected = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] != out.shape[d]) return false;
    if (v.shape[d] != 1 && v.strides[d] != expected) return false;
    expected *= v.shape[d];
  }
  return true;
}
}  // namespace

void binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  if (op == BinaryOp::GeluErfBackward && a.dtype == kFloat32 && contiguous_same_shape(a, out) &&
      contiguous_same_shape(b, out)) {  // vectorised fast path
    int64_t n = 1;
    for (int d = 0; d < out.ndim; ++d) n *= out.shape[d];
    const float* g = static_cast<const float*>(a.data);
    const float* x = static_cast<const float*>(b.data);
    float* y = static_cast<float*>(out.data);
    parallel_for(n, kElementwiseGrain,
                 [&](int64_t begin, int64_t end) { gelu_erf_backward(g + begin, x + begin, y + begin, end - begin); });
    return;
  }
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
