// kernels/registry.cpp — maps a device type to its kernel table and reports missing kernels.
//
// While a profiling session is active (kernels/trace.h), kernel_table() returns a traced copy
// of the backend's table: each entry opens a kernel span carrying the call's shape, FLOPs and
// bytes moved (the cost model below), calls the backend's kernel and, on CUDA, waits for it, so
// that the span covers the kernel's execution and not only its launch. Null entries stay null.
#include <algorithm>
#include <string>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "heed/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"
#include "kernels/trace.h"

namespace heed::kernels {

namespace {

const KernelTable& backend_table(DeviceType type) {
  return type == DeviceType::CPU ? cpu::kernel_table() : cuda::kernel_table();
}

// ---- cost model: FLOPs (multiply-add = 2) and bytes read + written by one kernel call -------
struct Cost {
  double flops = 0, bytes = 0;
  std::string shapes;
  std::string dtype;
};

double numel(const StridedView& v) {
  double n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= static_cast<double>(v.shape[i]);
  return n;
}
std::string shape_text(const StridedView& v) { return fmt::format("[{}]", fmt::join(v.shape, v.shape + v.ndim, ",")); }
std::string name_of(DType t) { return std::string(dtype_name(t)); }
double size_of(DType t) { return static_cast<double>(dtype_size(t)); }
std::string count_text(const char* label, int64_t n) { return fmt::format("{}={}", label, n); }
std::string rows_cols(int64_t rows, int64_t cols) { return fmt::format("rows={} cols={}", rows, cols); }
// Query-key pairs a causal mask (bottom-right aligned) leaves per (batch, head).
double attention_pairs(const FlashAttentionArgs& a) {
  const double t = static_cast<double>(a.queries), s = static_cast<double>(a.keys);
  if (!a.causal) return t * s;
  double pairs = 0;
  for (int64_t i = 0; i < a.queries; ++i)
    pairs += static_cast<double>(std::clamp<int64_t>(i + a.keys - a.queries + 1, 0, a.keys));
  return pairs;
}
Cost attention_cost(const FlashAttentionArgs& a, double matmuls) {
  const double heads = static_cast<double>(a.batch * a.heads), d = static_cast<double>(a.head_dim);
  const double dv = static_cast<double>(a.value_dim), t = static_cast<double>(a.queries);
  const double s = static_cast<double>(a.keys);
  // Forward: QK^T and PV (2 matmuls); backward: QK^T again, dO V^T, P^T dO, dS K, dS^T Q (5).
  const double flops = 2.0 * matmuls * heads * attention_pairs(a) * (d + dv) / 2.0;
  const double passes = matmuls > 2 ? 2.0 : 1.0;  // backward reads and writes each operand twice
  const double bytes = passes * heads * (t * d + s * d + s * dv + t * dv) * size_of(a.dtype);
  return {flops, bytes,
          fmt::format("B={} H={} T={} S={} D={}{}", a.batch, a.heads, a.queries, a.keys, a.head_dim,
                      a.causal ? " causal" : ""),
          name_of(a.dtype)};
}

Cost cost_allocate(size_t nbytes) { return {0, 0, count_text("bytes", static_cast<int64_t>(nbytes)), {}}; }
Cost cost_deallocate(void*, size_t nbytes) { return {0, 0, count_text("bytes", static_cast<int64_t>(nbytes)), {}}; }
Cost cost_copy_host(void*, const void*, size_t nbytes, bool to_host) {
  return {
      0, 2.0 * static_cast<double>(nbytes), fmt::format("bytes={} {}", nbytes, to_host ? "to host" : "to device"), {}};
}
Cost cost_fill(const StridedView& dst, double) {
  return {0, numel(dst) * size_of(dst.dtype), shape_text(dst), name_of(dst.dtype)};
}
Cost cost_copy(const StridedView& dst, const StridedView& src) {
  return {0, numel(dst) * (size_of(dst.dtype) + size_of(src.dtype)), shape_text(dst),
          fmt::format("{}->{}", dtype_name(src.dtype), dtype_name(dst.dtype))};
}
Cost cost_unary(UnaryOp op, DType dtype, const void*, void*, int64_t n, double) {
  return {static_cast<double>(n), 2.0 * static_cast<double>(n) * size_of(dtype),
          fmt::format("{} n={}", unary_op_name(op), n), name_of(dtype)};
}
Cost cost_unary_backward(UnaryOp op, DType dtype, const void*, const void* saved, void*, int64_t n, double) {
  const double arrays = saved ? 3.0 : 2.0;
  return {static_cast<double>(n), arrays * static_cast<double>(n) * size_of(dtype),
          fmt::format("{} n={}", unary_op_name(op), n), name_of(dtype)};
}
Cost cost_binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out) {
  const double n = numel(out);
  return {n, n * (size_of(a.dtype) + size_of(b.dtype) + size_of(out.dtype)),
          fmt::format("{} {}", kBinaryOpNames[static_cast<int>(op)], shape_text(out)), name_of(out.dtype)};
}
Cost cost_where(const StridedView&, const StridedView& a, const StridedView&, const StridedView& out) {
  const double n = numel(out);
  return {0, n * (1.0 + 3.0 * size_of(a.dtype)), shape_text(out), name_of(out.dtype)};
}
Cost cost_reduce(ReduceOp, DType dtype, const void*, int64_t outer, int64_t extent, int64_t inner, void*, int64_t*) {
  const double n = static_cast<double>(outer) * static_cast<double>(extent) * static_cast<double>(inner);
  return {n, n * size_of(dtype), fmt::format("outer={} extent={} inner={}", outer, extent, inner), name_of(dtype)};
}
Cost cost_variance(DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, double, void* out) {
  Cost c = cost_reduce(ReduceOp::Sum, dtype, in, outer, extent, inner, out, nullptr);
  c.flops *= 3.0;
  return c;
}
Cost cost_gemm(const GemmArgs& g) {
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  const double batch = static_cast<double>(g.batch);
  const double c_passes = g.beta != 0.0 ? 2.0 : 1.0;
  const bool activation = g.activation != GemmActivation::None;
  const std::string shapes = fmt::format("m={} n={} k={}{} {}{}{}{}{}", g.m, g.n, g.k,
                                         g.batch != 1 ? fmt::format(" batch={}", g.batch) : std::string(),
                                         g.trans_a ? "T" : "N", g.trans_b ? "T" : "N", g.bias ? " +bias" : "",
                                         !activation                                ? ""
                                         : g.activation == GemmActivation::GeluTanh ? " +gelu_tanh"
                                                                                    : " +gelu",
                                         g.a_row_sums ? " +row_sums(A)" : "");
  // The activation writes z besides C; its arithmetic is not counted as FLOPs.
  const double epilogue_elements = (g.bias ? n : 0.0) + (g.a_row_sums ? m : 0.0) + (activation ? m * n : 0.0);
  return {2.0 * m * n * k * batch, (batch * (m * k + k * n + c_passes * m * n) + epilogue_elements) * size_of(g.dtype),
          shapes, name_of(g.dtype)};
}
Cost cost_softmax_forward(DType dtype, const void*, void*, int64_t rows, int64_t cols, bool log) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return {4.0 * n, 2.0 * n * size_of(dtype), rows_cols(rows, cols) + (log ? " log" : ""), name_of(dtype)};
}
Cost cost_softmax_backward(DType dtype, const void*, const void*, void*, int64_t rows, int64_t cols, bool log) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return {4.0 * n, 3.0 * n * size_of(dtype), rows_cols(rows, cols) + (log ? " log" : ""), name_of(dtype)};
}
Cost cost_cross_entropy_forward(DType dtype, const void*, const int64_t*, int64_t rows, int64_t classes, int64_t,
                                double, void*, void*) {
  const double n = static_cast<double>(rows) * static_cast<double>(classes);
  return {4.0 * n, n * size_of(dtype), rows_cols(rows, classes), name_of(dtype)};
}
Cost cost_cross_entropy_backward(DType dtype, const void*, const int64_t*, const void*, int64_t rows, int64_t classes,
                                 int64_t, double, double, void*) {
  const double n = static_cast<double>(rows) * static_cast<double>(classes);
  return {4.0 * n, 2.0 * n * size_of(dtype), rows_cols(rows, classes), name_of(dtype)};
}
Cost index_cost(DType dtype, int64_t outer, int64_t count, int64_t inner, double passes) {
  const double n = static_cast<double>(outer) * static_cast<double>(count) * static_cast<double>(inner);
  return {0, passes * n * size_of(dtype), fmt::format("outer={} count={} inner={}", outer, count, inner),
          name_of(dtype)};
}
Cost cost_index_select(DType dtype, const void*, int64_t outer, int64_t, int64_t inner, const int64_t*, int64_t count,
                       void*) {
  return index_cost(dtype, outer, count, inner, 2.0);
}
Cost cost_index_add(DType dtype, void*, int64_t outer, int64_t, int64_t inner, const int64_t*, int64_t count,
                    const void*) {
  return index_cost(dtype, outer, count, inner, 3.0);
}
Cost cost_gather(DType dtype, const void*, int64_t outer, int64_t, int64_t inner, const int64_t*, int64_t extent,
                 void*) {
  return index_cost(dtype, outer, extent, inner, 2.0);
}
Cost cost_scatter_add(DType dtype, void*, int64_t outer, int64_t, int64_t inner, const int64_t*, int64_t extent,
                      const void*) {
  return index_cost(dtype, outer, extent, inner, 3.0);
}
Cost cost_random(RandomKind, DType dtype, void*, int64_t n, double, double, PhiloxState) {
  return {0, static_cast<double>(n) * size_of(dtype), count_text("n", n), name_of(dtype)};
}
Cost cost_dropout_mask(uint8_t*, int64_t n, double, PhiloxState) {
  return {0, static_cast<double>(n), count_text("n", n), std::string("bool")};
}
Cost cost_arange(DType dtype, void*, int64_t n, double, double) {
  return {0, static_cast<double>(n) * size_of(dtype), count_text("n", n), name_of(dtype)};
}
Cost cost_adam_step(const AdamStepArgs* tensors, int count) {
  // Reads param, grad and both moments, writes param and both moments (+1 pass with amsgrad).
  int64_t n = 0;
  double bytes = 0;
  for (int t = 0; t < count; ++t) {
    n += tensors[t].n;
    bytes += (tensors[t].max_exp_avg_sq ? 9.0 : 7.0) * static_cast<double>(tensors[t].n) * size_of(tensors[t].dtype);
  }
  return {12.0 * static_cast<double>(n), bytes, fmt::format("tensors={} n={}", count, n),
          count > 0 ? name_of(tensors[0].dtype) : std::string()};
}
Cost cost_layer_norm_forward(DType dtype, const void*, const void*, const void*, int64_t rows, int64_t cols, double,
                             void*, void*, void*) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return {8.0 * n, 2.0 * n * size_of(dtype), rows_cols(rows, cols), name_of(dtype)};
}
Cost cost_layer_norm_backward(DType dtype, const void*, const void*, const void*, const void*, const void*,
                              int64_t rows, int64_t cols, void*, void*, void*) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return {10.0 * n, 3.0 * n * size_of(dtype), rows_cols(rows, cols), name_of(dtype)};
}
Cost cost_flash_attention_forward(const FlashAttentionArgs& a) { return attention_cost(a, 2.0); }
Cost cost_flash_attention_backward(const FlashAttentionArgs& a) { return attention_cost(a, 5.0); }
Cost cost_global_norm(const NormInput* inputs, int count, double) {
  double bytes = 0, n = 0;
  for (int i = 0; i < count; ++i) {
    n += static_cast<double>(inputs[i].n);
    bytes += static_cast<double>(inputs[i].n) * size_of(inputs[i].dtype);
  }
  return {2.0 * n, bytes, count_text("tensors", count), {}};
}

// ---- the traced table ------------------------------------------------------------------------
template <typename Fn>
struct Traced;
template <typename R, typename... A>
struct Traced<R (*)(A...)> {
  template <DeviceType Type, typename Info>
  static R call(A... args) {
    Cost cost = Info::cost(args...);
    trace::Span span(trace::Kind::Kernel, Info::label, std::move(cost.shapes), std::move(cost.dtype));
    span.add_cost(cost.flops, cost.bytes);
    const auto fn = backend_table(Type).*(Info::member);
    if constexpr (std::is_void_v<R>) {
      fn(args...);
      if constexpr (Type == DeviceType::CUDA) cuda::synchronize();
    } else {
      R result = fn(args...);
      if constexpr (Type == DeviceType::CUDA) cuda::synchronize();
      return result;
    }
  }
};

#define HEED_TRACE_INFO(name, type)                                  \
  struct name##_info {                                               \
    static constexpr const char* label = #name;                      \
    static constexpr type KernelTable::*member = &KernelTable::name; \
    static constexpr auto cost = &cost_##name;                       \
  };
HEED_FOR_EACH_KERNEL(HEED_TRACE_INFO)
#undef HEED_TRACE_INFO

template <DeviceType Type>
KernelTable traced_table() {
  const KernelTable& base = backend_table(Type);
  KernelTable t;
#define HEED_TRACED_ENTRY(name, type) \
  if (base.name) t.name = &Traced<type>::template call<Type, name##_info>;
  HEED_FOR_EACH_KERNEL(HEED_TRACED_ENTRY)
#undef HEED_TRACED_ENTRY
  return t;
}

}  // namespace

const KernelTable& kernel_table(DeviceType type) {
  if (trace::active()) [[unlikely]] {
    static const KernelTable traced_cpu = traced_table<DeviceType::CPU>();
    static const KernelTable traced_cuda = traced_table<DeviceType::CUDA>();
    return type == DeviceType::CPU ? traced_cpu : traced_cuda;
  }
  return backend_table(type);
}

void throw_missing_kernel(const char* kernel, Device device) {
  fail(kernel, "kernel '{}' is not implemented for device {}{}", kernel, device.str(),
       device.is_cuda() && !cuda::compiled() ? " (heed was built without CUDA)" : "");
}

namespace {
struct KernelEntry {
  const char* name;
  bool (*present)(const KernelTable&);
};
#define HEED_KERNEL_ENTRY(name, type) {#name, [](const KernelTable& t) { return t.name != nullptr; }},
const KernelEntry kEntries[] = {HEED_FOR_EACH_KERNEL(HEED_KERNEL_ENTRY)};
#undef HEED_KERNEL_ENTRY
}  // namespace

int kernel_count() { return static_cast<int>(sizeof(kEntries) / sizeof(kEntries[0])); }

KernelSupport kernel_support(DeviceType type, int i) {
  HEED_CHECK(i >= 0 && i < kernel_count(), "kernel_support", "kernel index {} out of range", i);
  return {kEntries[i].name, kEntries[i].present(kernel_table(type))};
}

}  // namespace heed::kernels
