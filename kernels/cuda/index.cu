// kernels/cuda/index.cu — index_select / index_add and gather / scatter_add on the GPU.
//
// Invariants: indices were validated by the op and live in device memory. Every addition into
// one destination element happens in one thread, in increasing source order, with the value
// rounded to the element type after each addition — the CPU's exact sequence, so the results
// are bit-identical to kernels/cpu/index.cpp and never depend on timing (no atomics).
// index_add groups the sources by destination row on the host (one small device-to-host copy
// of the index and one upload of the grouping per call): the price of determinism with many
// duplicate indices (embedding gradients).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

template <typename F>
void dispatch_bits(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      f(uint8_t{});
      return;
    case 2:
      f(uint16_t{});
      return;
    case 4:
      f(uint32_t{});
      return;
    default:
      f(uint64_t{});
      return;
  }
}

template <typename F>
void dispatch_accumulable(DType dtype, const char* kernel, F&& f) {
  if (dtype == kBool) throw_error(kernel, "bool tensors cannot be accumulated");
  dispatch_all(dtype, [&](auto tag) {
    if constexpr (!std::is_same_v<decltype(tag), bool>) f(tag);
  });
}

// out(o, j, i) = in(o, index[j], i)
template <typename Bits>
__global__ void index_select_kernel(const Bits* in, int64_t in_extent, int64_t inner, const int64_t* index,
                                    int64_t index_count, Bits* out, int64_t n) {
  for (int64_t t = global_thread_index(); t < n; t += grid_stride()) {
    const int64_t i = t % inner, row = t / inner;
    const int64_t o = row / index_count, j = row % index_count;
    out[t] = in[(o * in_extent + index[j]) * inner + i];
  }
}

// For destination row u (of `groups`): out(o, dest[u], i) += src(o, j, i) for the j listed in
// sources[begin[u] .. begin[u + 1]), in increasing j.
template <typename T>
__global__ void index_add_kernel(T* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* dest,
                                 const int64_t* begin, const int64_t* sources, int64_t groups, int64_t index_count,
                                 const T* src) {
  const int64_t n = outer * groups * inner;
  for (int64_t t = global_thread_index(); t < n; t += grid_stride()) {
    const int64_t i = t % inner, rest = t / inner;
    const int64_t u = rest % groups, o = rest / groups;
    T* d = out + (o * out_extent + dest[u]) * inner + i;
    T value = *d;
    for (int64_t s = begin[u]; s < begin[u + 1]; ++s)
      value = convert<T>(load(&value) + load(src + (o * index_count + sources[s]) * inner + i));
    *d = value;
  }
}

// out(o, j, i) = in(o, index(o, j, i), i)
template <typename Bits>
__global__ void gather_kernel(const Bits* in, int64_t in_extent, int64_t inner, const int64_t* index,
                              int64_t index_extent, Bits* out, int64_t n) {
  for (int64_t at = global_thread_index(); at < n; at += grid_stride()) {
    const int64_t i = at % inner, o = at / (index_extent * inner);
    out[at] = in[(o * in_extent + index[at]) * inner + i];
  }
}

// One thread per (o, i) column walks j in order: out(o, index(o, j, i), i) += src(o, j, i).
template <typename T>
__global__ void scatter_add_kernel(T* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
                                   int64_t index_extent, const T* src) {
  const int64_t columns = outer * inner;
  for (int64_t t = global_thread_index(); t < columns; t += grid_stride()) {
    const int64_t o = t / inner, i = t % inner;
    for (int64_t j = 0; j < index_extent; ++j) {
      const int64_t at = (o * index_extent + j) * inner + i;
      T* d = out + (o * out_extent + index[at]) * inner + i;
      store(d, load(d) + load(src + at));
    }
  }
}

}  // namespace

void index_select(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
                  int64_t index_count, void* out) {
  const int64_t n = outer * index_count * inner;
  if (n <= 0) return;
  dispatch_bits(dtype, [&](auto tag) {
    using Bits = decltype(tag);
    HEED_LAUNCH(grid_for(n), kThreads, 0, index_select_kernel<Bits>)
    (static_cast<const Bits*>(in), in_extent, inner, index, index_count, static_cast<Bits*>(out), n);
  });
  check_launch("index_select");
}

void index_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
               int64_t index_count, const void* src) {
  dispatch_accumulable(dtype, "index_add", [&](auto tag) {
    using T = decltype(tag);
    if (outer <= 0 || inner <= 0 || index_count <= 0) return;
    // Group the sources by destination row, keeping their order (a stable sort of j by index).
    std::vector<int64_t> host_index(static_cast<size_t>(index_count));
    HEED_CUDA_CHECK(cudaMemcpy(host_index.data(), index, host_index.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
    std::vector<int64_t> order(host_index.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return host_index[static_cast<size_t>(x)] < host_index[static_cast<size_t>(y)];
    });
    std::vector<int64_t> dest, begin;
    for (size_t s = 0; s < order.size(); ++s) {
      const int64_t row = host_index[static_cast<size_t>(order[s])];
      if (dest.empty() || dest.back() != row) {
        dest.push_back(row);
        begin.push_back(static_cast<int64_t>(s));
      }
    }
    begin.push_back(static_cast<int64_t>(order.size()));
    const int64_t groups = static_cast<int64_t>(dest.size());
    // One upload: [dest (groups) | begin (groups + 1) | sources (index_count)]
    std::vector<int64_t> packed;
    packed.reserve(dest.size() + begin.size() + order.size());
    packed.insert(packed.end(), dest.begin(), dest.end());
    packed.insert(packed.end(), begin.begin(), begin.end());
    packed.insert(packed.end(), order.begin(), order.end());
    DeviceBuffer grouping(packed.size() * sizeof(int64_t));
    HEED_CUDA_CHECK(
        cudaMemcpy(grouping.as<void>(), packed.data(), packed.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    const int64_t* device_dest = grouping.as<const int64_t>();
    const int64_t n = outer * groups * inner;
    HEED_LAUNCH(grid_for(n), kThreads, 0, index_add_kernel<T>)
    (static_cast<T*>(out), outer, out_extent, inner, device_dest, device_dest + groups, device_dest + 2 * groups + 1,
     groups, index_count, static_cast<const T*>(src));
    check_launch("index_add");
  });
}

void gather(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
            int64_t index_extent, void* out) {
  const int64_t n = outer * index_extent * inner;
  if (n <= 0) return;
  dispatch_bits(dtype, [&](auto tag) {
    using Bits = decltype(tag);
    HEED_LAUNCH(grid_for(n), kThreads, 0, gather_kernel<Bits>)
    (static_cast<const Bits*>(in), in_extent, inner, index, index_extent, static_cast<Bits*>(out), n);
  });
  check_launch("gather");
}

void scatter_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
                 int64_t index_extent, const void* src) {
  dispatch_accumulable(dtype, "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    const int64_t columns = outer * inner;
    if (columns <= 0 || index_extent <= 0) return;
    HEED_LAUNCH(grid_for(columns), kThreads, 0, scatter_add_kernel<T>)
    (static_cast<T*>(out), outer, out_extent, inner, index, index_extent, static_cast<const T*>(src));
    check_launch("scatter_add");
  });
}

}  // namespace heed::kernels::cuda
