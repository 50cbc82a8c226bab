// kernels/cuda/reduce.cu — sum, max/min (+indices), argmax/argmin and variance over the middle
// dim of a contiguous (outer, extent, inner) block, and the global norm of clip_grad_norm_.
//
// Invariants:
//  * Deterministic: short reductions (extent <= kSerialExtent, or enough outputs to fill the
//    GPU) run one thread per output in index order, exactly the CPU's order for column sums;
//    long ones cut the extent into fixed chunks of kChunk elements, reduce each chunk with a
//    fixed shared-memory tree and add the chunk results in chunk order. Nothing depends on
//    timing (no atomics).
//  * Float sums accumulate in double (16-bit floats too), integer and bool sums in int64.
//  * Max/min return NaN and the first NaN's index when a NaN is present; ties go to the
//    first index — the combine rule is order-independent, so results equal the CPU's bits.
//  * global_norm makes one pass over every tensor of the list in two launches and copies
//    one double back to the host: one synchronisation per call.
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

constexpr int64_t kSerialExtent = 1024;
constexpr int64_t kManyOutputs = 8192;
constexpr int64_t kChunk = 4096;

// ---- reducers ---------------------------------------------------------------------------------

template <typename T>
using sum_acc_t = std::conditional_t<is_float_storage_v<T>, double, int64_t>;
template <typename T>
using sum_out_t = std::conditional_t<is_float_storage_v<T>, T, int64_t>;

template <typename T>
struct SumReducer {
  using Acc = sum_acc_t<T>;
  const T* in;
  sum_out_t<T>* out;
  int64_t extent, inner;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc element(int64_t o, int64_t e) const {
    const int64_t outer_index = o / inner, i = o % inner;
    return static_cast<Acc>(load(in + (outer_index * extent + e) * inner + i));
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void finish(int64_t o, Acc acc) const { store(out + o, acc); }
};

template <typename C>
struct Extremum {
  C value;
  int64_t index;  // -1: empty
};

template <typename T, bool kMax>
struct ExtremumReducer {
  using C = compute_t<T>;
  using Acc = Extremum<C>;
  const T* in;
  T* values;         // Max/Min values (null for arg-reductions)
  int64_t* indices;  // indices (or the arg-reduction output); may be null for Max/Min
  int64_t extent, inner;
  __device__ Acc identity() const { return Acc{C(0), -1}; }
  __device__ Acc element(int64_t o, int64_t e) const {
    const int64_t outer_index = o / inner, i = o % inner;
    return Acc{load(in + (outer_index * extent + e) * inner + i), e};
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index < b.index ? a : b;
      return a_nan ? a : b;
    }
    if (kMax ? a.value > b.value : a.value < b.value) return a;
    if (kMax ? b.value > a.value : b.value < a.value) return b;
    return a.index < b.index ? a : b;
  }
  __device__ void finish(int64_t o, Acc acc) const {
    if (values) store(values + o, acc.value);
    if (indices) indices[o] = acc.index;
  }
};

// One thread per output, the extent walked in order.
template <typename R>
__global__ void serial_reduce_kernel(R r, int64_t outputs, int64_t extent) {
  for (int64_t o = global_thread_index(); o < outputs; o += grid_stride()) {
    typename R::Acc acc = r.identity();
    for (int64_t e = 0; e < extent; ++e) acc = r.combine(acc, r.element(o, e));
    r.finish(o, acc);
  }
}

// One block per (output, chunk) item: a strided pass per thread, then a fixed tree. With one
// chunk per output the block writes the final result, otherwise the chunk's partial.
template <typename R>
__global__ void chunk_reduce_kernel(R r, int64_t outputs, int64_t extent, int64_t chunks, typename R::Acc* partial) {
  using Acc = typename R::Acc;
  Acc* scratch = dynamic_shared<Acc>();
  for (int64_t item = blockIdx.x; item < outputs * chunks; item += gridDim.x) {
    const int64_t o = item / chunks, c = item % chunks;
    const int64_t begin = c * kChunk, end = begin + kChunk < extent ? begin + kChunk : extent;
    Acc acc = r.identity();
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) acc = r.combine(acc, r.element(o, e));
    acc = block_reduce(acc, scratch, [&](Acc a, Acc b) { return r.combine(a, b); });
    if (threadIdx.x == 0) {
      if (chunks == 1)
        r.finish(o, acc);
      else
        partial[item] = acc;
    }
  }
}

template <typename R>
__global__ void combine_chunks_kernel(R r, int64_t outputs, int64_t chunks, const typename R::Acc* partial) {
  for (int64_t o = global_thread_index(); o < outputs; o += grid_stride()) {
    typename R::Acc acc = r.identity();
    for (int64_t c = 0; c < chunks; ++c) acc = r.combine(acc, partial[o * chunks + c]);
    r.finish(o, acc);
  }
}

template <typename R>
void run_reduction(const R& r, int64_t outputs, int64_t extent, const char* name) {
  using Acc = typename R::Acc;
  if (extent <= kSerialExtent || outputs >= kManyOutputs) {
    HEED_LAUNCH(grid_for(outputs), kThreads, 0, serial_reduce_kernel<R>)(r, outputs, extent);
    check_launch(name);
    return;
  }
  const int64_t chunks = (extent + kChunk - 1) / kChunk;
  DeviceBuffer partial(chunks > 1 ? static_cast<size_t>(outputs * chunks) * sizeof(Acc) : 0);
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(outputs * chunks, grid_for(outputs * chunks * kThreads)));
  HEED_LAUNCH(blocks, kThreads, kThreads * sizeof(Acc), chunk_reduce_kernel<R>)
  (r, outputs, extent, chunks, partial.as<Acc>());
  check_launch(name);
  if (chunks > 1) {
    HEED_LAUNCH(grid_for(outputs), kThreads, 0, combine_chunks_kernel<R>)(r, outputs, chunks, partial.as<Acc>());
    check_launch(name);
  }
}

// ---- variance ---------------------------------------------------------------------------------

// Two passes in double (mean, then the centred sum of squares), as the CPU computes them.
template <typename T>
__global__ void variance_serial_kernel(const T* in, int64_t outputs, int64_t extent, int64_t inner, double denom,
                                       T* out) {
  for (int64_t t = global_thread_index(); t < outputs; t += grid_stride()) {
    const T* p = in + (t / inner) * extent * inner + t % inner;
    double mean = 0;
    for (int64_t e = 0; e < extent; ++e) mean += static_cast<double>(load(p + e * inner));
    mean /= static_cast<double>(extent);
    double ss = 0;
    for (int64_t e = 0; e < extent; ++e) {
      const double d = static_cast<double>(load(p + e * inner)) - mean;
      ss += d * d;
    }
    store(out + t, denom > 0 ? ss / denom : quiet_nan<double>());
  }
}

// One block per output (long extents, few outputs): both passes as fixed trees.
template <typename T>
__global__ void variance_block_kernel(const T* in, int64_t outputs, int64_t extent, int64_t inner, double denom,
                                      T* out) {
  double* scratch = dynamic_shared<double>();
  for (int64_t t = blockIdx.x; t < outputs; t += gridDim.x) {
    const T* p = in + (t / inner) * extent * inner + t % inner;
    double sum = 0;
    for (int64_t e = threadIdx.x; e < extent; e += blockDim.x) sum += static_cast<double>(load(p + e * inner));
    const double mean = block_sum(sum, scratch) / static_cast<double>(extent);
    double ss = 0;
    for (int64_t e = threadIdx.x; e < extent; e += blockDim.x) {
      const double d = static_cast<double>(load(p + e * inner)) - mean;
      ss += d * d;
    }
    ss = block_sum(ss, scratch);
    if (threadIdx.x == 0) store(out + t, denom > 0 ? ss / denom : quiet_nan<double>());
  }
}

// ---- global norm ------------------------------------------------------------------------------

enum class NormKind : int { One, Two, Power, Infinity };

struct NormSlice {
  const void* data;
  int64_t n;
  int64_t first_chunk;  // index of this tensor's first chunk among all chunks
  DType dtype;
};

__device__ double norm_element(const NormSlice& s, int64_t i) {
  switch (s.dtype) {
    case DType::Float64:
      return static_cast<const double*>(s.data)[i];
    case DType::Float16:
      return load(static_cast<const HalfBits*>(s.data) + i);
    case DType::BFloat16:
      return load(static_cast<const BFloat16Bits*>(s.data) + i);
    default:
      return static_cast<const float*>(s.data)[i];
  }
}

struct NormCombine {
  NormKind kind;
  __device__ double operator()(double total, double part) const {
    if (kind != NormKind::Infinity) return total + part;
    return (part != part || part > total) ? part : total;
  }
};

__global__ void norm_chunk_kernel(const NormSlice* slices, int count, int64_t total_chunks, NormKind kind,
                                  double norm_type, double* partial) {
  double* scratch = dynamic_shared<double>();
  const NormCombine combine{kind};
  for (int64_t item = blockIdx.x; item < total_chunks; item += gridDim.x) {
    int lo = 0, hi = count - 1;  // the last slice whose first_chunk <= item
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (slices[mid].first_chunk <= item)
        lo = mid;
      else
        hi = mid - 1;
    }
    const NormSlice s = slices[lo];
    const int64_t begin = (item - s.first_chunk) * kChunk;
    const int64_t end = begin + kChunk < s.n ? begin + kChunk : s.n;
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double a = fabs(norm_element(s, i));
      double v = a;
      if (kind == NormKind::Two)
        v = a * a;
      else if (kind == NormKind::Power)
        v = pow(a, norm_type);
      acc = combine(acc, v);
    }
    acc = block_reduce(acc, scratch, combine);
    if (threadIdx.x == 0) partial[item] = acc;
  }
}

__global__ void norm_total_kernel(const double* partial, int64_t total_chunks, NormKind kind, double* result) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const NormCombine combine{kind};
  double total = 0.0;
  for (int64_t c = 0; c < total_chunks; ++c) total = combine(total, partial[c]);
  result[0] = total;
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, void* out,
            int64_t* indices) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  if (extent <= 0) throw_error("reduce", "cannot reduce over an empty dimension");
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in);
    switch (op) {
      case ReduceOp::Sum:
        run_reduction(SumReducer<T>{src, static_cast<sum_out_t<T>*>(out), extent, inner}, outputs, extent, "reduce");
        return;
      case ReduceOp::Max:
        run_reduction(ExtremumReducer<T, true>{src, static_cast<T*>(out), indices, extent, inner}, outputs, extent,
                      "reduce");
        return;
      case ReduceOp::Min:
        run_reduction(ExtremumReducer<T, false>{src, static_cast<T*>(out), indices, extent, inner}, outputs, extent,
                      "reduce");
        return;
      case ReduceOp::ArgMax:
        run_reduction(ExtremumReducer<T, true>{src, nullptr, static_cast<int64_t*>(out), extent, inner}, outputs,
                      extent, "reduce");
        return;
      case ReduceOp::ArgMin:
        run_reduction(ExtremumReducer<T, false>{src, nullptr, static_cast<int64_t*>(out), extent, inner}, outputs,
                      extent, "reduce");
        return;
      case ReduceOp::Count:
        break;
    }
    throw_error("reduce", "unknown reduction");
  });
}

void variance(DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, double correction, void* out) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  const double denom = static_cast<double>(extent) - correction;
  dispatch_floating(dtype, "variance", [&](auto tag) {
    using T = decltype(tag);
    if (extent <= kSerialExtent || outputs >= kManyOutputs) {
      HEED_LAUNCH(grid_for(outputs), kThreads, 0, variance_serial_kernel<T>)
      (static_cast<const T*>(in), outputs, extent, inner, denom, static_cast<T*>(out));
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outputs, grid_for(outputs * kThreads)));
      HEED_LAUNCH(blocks, kThreads, kThreads * sizeof(double), variance_block_kernel<T>)
      (static_cast<const T*>(in), outputs, extent, inner, denom, static_cast<T*>(out));
    }
  });
  check_launch("variance");
}

double global_norm(const NormInput* inputs, int count, double norm_type) {
  if (!(norm_type > 0.0)) throw_error("global_norm", "norm_type must be > 0");
  const NormKind kind = std::isinf(norm_type) ? NormKind::Infinity
                        : norm_type == 1.0    ? NormKind::One
                        : norm_type == 2.0    ? NormKind::Two
                                              : NormKind::Power;
  std::vector<NormSlice> slices;
  int64_t total_chunks = 0;
  for (int t = 0; t < count; ++t) {
    if (inputs[t].n <= 0) continue;
    if (!is_floating(inputs[t].dtype)) unsupported_dtype("global_norm", inputs[t].dtype);
    slices.push_back({inputs[t].data, inputs[t].n, total_chunks, inputs[t].dtype});
    total_chunks += (inputs[t].n + kChunk - 1) / kChunk;
  }
  if (slices.empty()) return 0.0;
  DeviceBuffer device_slices(slices.size() * sizeof(NormSlice));
  DeviceBuffer partial(static_cast<size_t>(total_chunks) * sizeof(double));
  DeviceBuffer result(sizeof(double));
  HEED_CUDA_CHECK(
      cudaMemcpy(device_slices.as<void>(), slices.data(), slices.size() * sizeof(NormSlice), cudaMemcpyHostToDevice));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(total_chunks, grid_for(total_chunks * kThreads)));
  HEED_LAUNCH(blocks, kThreads, kThreads * sizeof(double), norm_chunk_kernel)
  (device_slices.as<const NormSlice>(), static_cast<int>(slices.size()), total_chunks, kind, norm_type,
   partial.as<double>());
  check_launch("global_norm");
  HEED_LAUNCH(1, 32, 0, norm_total_kernel)(partial.as<const double>(), total_chunks, kind, result.as<double>());
  check_launch("global_norm");
  double total = 0.0;
  HEED_CUDA_CHECK(cudaMemcpy(&total, result.as<void>(), sizeof(double), cudaMemcpyDeviceToHost));
  return total;
}

}  // namespace heed::kernels::cuda
