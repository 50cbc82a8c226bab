// kernels/cpu/cpu_common.h — shared helpers of the CPU kernels: element load/store with the
// compute type, dtype dispatch, parallel loops and a strided N-operand row iterator.
//
// Invariants: parallel_for hands out disjoint ranges and never changes what an element
// computes, so results do not depend on the thread count; 16-bit floats compute in float.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "heed/dtype.h"
#include "heed/error.h"
#include "kernels/kernels.h"

namespace heed::kernels::cpu {

// ---- element types --------------------------------------------------------------------------

template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

template <typename T>
inline compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, Half>)
    return half_bits_to_float(p->bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bfloat16_bits_to_float(p->bits);
  else
    return *p;
}

// Float -> integer without undefined behaviour: NaN gives 0, out-of-range saturates.
template <typename I, typename F>
inline I saturating_cast(F v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// Converts any element value to T (rounding to nearest even for 16-bit floats).
template <typename T, typename V>
inline T convert(V v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != V(0);
  else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<V>)
    return saturating_cast<T>(v);
  else
    return static_cast<T>(v);
}

template <typename T, typename V>
inline void store(T* p, V v) {
  *p = convert<T>(v);
}

// Calls f(T{}) with T the C++ type of `dtype`.
template <typename F>
inline void dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    case DType::Float16:
      f(Half{});
      return;
    case DType::BFloat16:
      f(BFloat16{});
      return;
    case DType::Int32:
      f(int32_t{});
      return;
    case DType::Int64:
      f(int64_t{});
      return;
    case DType::Bool:
      f(bool{});
      return;
  }
}

template <typename F>
inline void dispatch_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(float{});
      return;
    case DType::Float64:
      f(double{});
      return;
    case DType::Float16:
      f(Half{});
      return;
    case DType::BFloat16:
      f(BFloat16{});
      return;
    default:
      fail(kernel, "the CPU kernel has no {} version", dtype_name(dtype));
  }
}

// ---- parallel loops -------------------------------------------------------------------------

inline int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Runs f(begin, end) over [0, n) in at most max_threads() contiguous ranges of >= grain items.
template <typename F>
inline void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int threads = max_threads();
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t per = (n + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(static_cast <int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * per, end = std::min(n, begin + per);
    if (begin < end) f(begin, end);
  }
}

// ---- fixed-order sums in double ---------------------------------------------------------------

inline constexpr int kSumLanes = 8;

// The fixed tree that adds the kSumLanes partial sums.
template <typename T>
inline T lane_tree(const T (&acc)[kSumLanes]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Sum over c in [0, n) of term(c), in double, with kSumLanes independent accumulators (lane k takes
// c = k mod kSumLanes, the tail goes to lane 0) combined in a fixed tree: the loop vectorises, and
// the order depends on n only.
template <typename Term>
inline double lane_sum(int64_t n, Term term) {
  double acc[kSumLanes] = {};
  int64_t c = 0;
  for (; c + kSumLanes <= n; c += kSumLanes)
    for (int k = 0; k < kSumLanes; ++k) acc[k] += term(c + k);
  for (; c < n; ++c) acc[0] += term(c);
  return lane_tree(acc);
}

// Sum over c in [0, n) of x(c) * y(c) in T, where factors(c) returns {x(c), y(c)}: lane_sum's lanes
// and tree, each lane accumulating acc = fma(x, y, acc) (one rounding per term).
template <typename T, typename Factors>
inline T lane_fma_sum(int64_t n, Factors factors) {
  T acc[kSumLanes] = {};
  int64_t c = 0;
  for (; c + kSumLanes <= n; c += kSumLanes)
    for (int k = 0; k < kSumLanes; ++k) {
      const auto [x, y] = factors(c + k);
      acc[k] = std::fma(x, y, acc[k]);
    }
  for (; c < n; ++c) {
    const auto [x, y] = factors(c);
    acc[0] = std::fma(x, y, acc[0]);
  }
  return lane_tree(acc);
}

// Elements per parallel task for cheap element-wise work.
inline constexpr int64_t kElementwiseGrain = 32768;

// ---- strided iteration ----------------------------------------------------------------------

// N operands of one shape, with dims merged where every operand is contiguous across them.
template <int N>
struct StridedLoop {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t byte_strides[N][kMaxDims] = {};
  char* base[N] = {};
};

template <int N>
inline StridedLoop<N> make_loop(const StridedView* const (&views)[N]) {
  StridedLoop<N> loop;
  const StridedView& first = *views[0];
  for (int k = 0; k < N; ++k) loop.base[k] = static_cast<char*>(views[k]->data);
  // Drop size-1 dims, then merge dim d into the previous kept dim where, for every operand,
  // the outer stride equals the inner stride times the inner size.
  for (int d = 0; d < first.ndim; ++d) {
    if (first.shape[d] == 1) continue;
    int64_t stride_d[N];
    for (int k = 0; k < N; ++k) stride_d[k] = views[k]->strides[d] * static_cast<int64_t>(dtype_size(views[k]->dtype));
    const int i = loop.ndim;
    bool mergeable = i > 0;
    for (int k = 0; k < N && mergeable; ++k) mergeable = loop.byte_strides[k][i - 1] == stride_d[k] * first.shape[d];
    if (mergeable) {
      loop.shape[i - 1] *= first.shape[d];
      for (int k = 0; k < N; ++k) loop.byte_strides[k][i - 1] = stride_d[k];
      continue;
    }
    loop.shape[i] = first.shape[d];
    for (int k = 0; k < N; ++k) loop.byte_strides[k][i] = stride_d[k];
    ++loop.ndim;
  }
  if (loop.ndim == 0) {  // a single element
    loop.ndim = 1;
    loop.shape[0] = 1;
    for (int k = 0; k < N; ++k) loop.byte_strides[k][0] = 0;
  }
  return loop;
}

// Calls row(ptrs, inner_byte_strides, count) over the innermost dim of every row, in
// parallel. Rows are independent; a single long row is split into ranges.
template <int N, typename Row>
inline void for_each_row(const StridedLoop<N>& loop, Row&& row) {
  const int last = loop.ndim - 1;
  const int64_t row_len = loop.shape[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= loop.shape[d];
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = loop.byte_strides[k][last];
  if (rows == 1) {
    parallel_for(row_len, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) ptrs[k] = loop.base[k] + begin * inner[k];
      row(ptrs, inner, end - begin);
    });
    return;
  }
  const int64_t grain_rows = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(row_len, 1));
  parallel_for(rows, grain_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) ptrs[k] = loop.base[k];
      int64_t rem = r;
      for (int d = last - 1; d >= 0; --d) {
        const int64_t coord = rem % loop.shape[d];
        rem /= loop.shape[d];
        for (int k = 0; k < N; ++k) ptrs[k] += coord * loop.byte_strides[k][d];
      }
      row(ptrs, inner, row_len);
    }
  });
}

}  // namespace heed::kernels::cpu
