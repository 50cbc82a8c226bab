// kernels/cuda/elementwise.cu — unary, binary (with broadcasting), where and arange on the GPU.
//
// Invariants: every element is computed independently by a grid-stride loop, with the same
// formula as kernels/cpu/elementwise.cpp in the same compute type (16-bit floats in float32),
// so results match the CPU up to the last-bit differences of the device math library;
// NaN propagates through maximum/minimum/clamp/relu as on the CPU. One kernel per dtype with
// the op as a run-time switch keeps the number of instantiations small.
#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
constexpr double kGeluCubic = 0.044715;

template <typename C>
__device__ C gelu_tanh(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  return C(0.5) * x * (C(1) + math_tanh(u));
}
template <typename C>
__device__ C gelu_tanh_grad(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
  const C t = math_tanh(u);
  const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}
template <typename C>
__device__ C gelu_erf(C x) {
  return C(0.5) * x * (C(1) + math_erf(x * C(kInvSqrt2)));
}
template <typename C>
__device__ C gelu_erf_grad(C x) {
  const C cdf = C(0.5) * (C(1) + math_erf(x * C(kInvSqrt2)));
  const C pdf = C(kInvSqrt2Pi) * math_exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}
template <typename C>
__device__ C sigmoid(C x) {
  if (x >= C(0)) return C(1) / (C(1) + math_exp(-x));
  const C e = math_exp(x);
  return e / (C(1) + e);
}

// ---- unary ------------------------------------------------------------------------------------

bool unary_defined(UnaryOp op, DType dtype) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Sign:
    case UnaryOp::AddScalar:
    case UnaryOp::MulScalar:
    case UnaryOp::RSubScalar:
    case UnaryOp::ClampMin:
    case UnaryOp::ClampMax:
      return true;
    case UnaryOp::LogicalNot:
      return dtype == kBool;
    case UnaryOp::Count:
      return false;
    default:
      return is_floating(dtype);
  }
}

template <typename T>
__device__ compute_t<T> apply_unary(UnaryOp op, compute_t<T> x, compute_t<T> a, bool square) {
  using C = compute_t<T>;
  switch (op) {
    case UnaryOp::Neg:
      return static_cast<C>(-x);
    case UnaryOp::Abs:
      return x < C(0) ? static_cast<C>(-x) : x;
    case UnaryOp::Sign:
      return static_cast<C>((x > C(0)) - (x < C(0)));
    case UnaryOp::AddScalar:
      return static_cast<C>(x + a);
    case UnaryOp::MulScalar:
      return static_cast<C>(x * a);
    case UnaryOp::RSubScalar:
      return static_cast<C>(a - x);
    case UnaryOp::ClampMin:
      return x < a ? a : x;
    case UnaryOp::ClampMax:
      return x > a ? a : x;
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::Exp:
        return math_exp(x);
      case UnaryOp::Log:
        return math_log(x);
      case UnaryOp::Sqrt:
        return math_sqrt(x);
      case UnaryOp::Rsqrt:
        return C(1) / math_sqrt(x);
      case UnaryOp::Relu:
        return x > C(0) ? x : (x == x ? C(0) : x);
      case UnaryOp::GeluTanh:
        return gelu_tanh(x);
      case UnaryOp::GeluErf:
        return gelu_erf(x);
      case UnaryOp::Tanh:
        return math_tanh(x);
      case UnaryOp::Sigmoid:
        return sigmoid(x);
      case UnaryOp::PowScalar:
        return square ? x * x : math_pow(x, a);
      case UnaryOp::RDivScalar:
        return a / x;
      default:
        break;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (op == UnaryOp::LogicalNot) return !x;
  }
  return x;  // unreachable: the host checks unary_defined first
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* in, T* out, int64_t n, compute_t<T> a, bool square) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride())
    store(out + i, apply_unary<T>(op, load(in + i), a, square));
}

// ---- binary -----------------------------------------------------------------------------------

bool binary_defined(BinaryOp op, DType dtype) {
  if (is_comparison(op)) return true;
  switch (op) {
    case BinaryOp::LogicalAnd:
    case BinaryOp::LogicalOr:
      return dtype == kBool;
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Maximum:
    case BinaryOp::Minimum:
      return dtype != kBool;
    case BinaryOp::Count:
      return false;
    default:
      return is_floating(dtype);
  }
}

template <typename T, typename Out>
__device__ Out apply_binary(BinaryOp op, compute_t<T> x, compute_t<T> y) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<Out, bool>) {
    switch (op) {
      case BinaryOp::Eq:
        return x == y;
      case BinaryOp::Ne:
        return x != y;
      case BinaryOp::Lt:
        return x < y;
      case BinaryOp::Le:
        return x <= y;
      case BinaryOp::Gt:
        return x > y;
      case BinaryOp::Ge:
        return x >= y;
      case BinaryOp::LogicalAnd:
        return static_cast<bool>(x) && static_cast<bool>(y);
      case BinaryOp::LogicalOr:
        return static_cast<bool>(x) || static_cast<bool>(y);
      default:
        return false;
    }
  } else {
    switch (op) {
      case BinaryOp::Add:
        return convert<Out>(static_cast<C>(x + y));
      case BinaryOp::Sub:
        return convert<Out>(static_cast<C>(x - y));
      case BinaryOp::Mul:
        return convert<Out>(static_cast<C>(x * y));
      case BinaryOp::Maximum:
        return convert<Out>((x != x || x > y) ? x : y);
      case BinaryOp::Minimum:
        return convert<Out>((x != x || x < y) ? x : y);
      default:
        break;
    }
    if constexpr (std::is_floating_point_v<C>) {
      switch (op) {
        case BinaryOp::Div:
          return convert<Out>(x / y);
        case BinaryOp::Pow:
          return convert<Out>(math_pow(x, y));
        case BinaryOp::ReluBackward:
          return convert<Out>(y > C(0) ? x : C(0));
        case BinaryOp::GeluTanhBackward:
          return convert<Out>(x * gelu_tanh_grad(y));
        case BinaryOp::GeluErfBackward:
          return convert<Out>(x * gelu_erf_grad(y));
        case BinaryOp::TanhBackward:
          return convert<Out>(x * (C(1) - y * y));
        case BinaryOp::SigmoidBackward:
          return convert<Out>(x * y * (C(1) - y));
        default:
          break;
      }
    }
    return convert<Out>(x);  // unreachable: the host checks binary_defined first
  }
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
    (op, static_cast<const T*>(in), static_cast<T*>(out), n, static_cast<C>(alpha), alpha == 2.0);
  });
  check_launch("unary");
}

void binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  if (!binary_defined(op, a.dtype)) not_defined("binary", binary_op_name(op), a.dtype);
  const int64_t n = numel_of(out);
  if (n == 0) return;
  const StridedView* views[3] = {&out, &a, &b};
  const Geometry<3> g = make_geometry(views);
  const bool to_bool = is_comparison(op) || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
  dispatch_all(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (to_bool) {
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
