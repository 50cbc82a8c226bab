// kernels/cpu/reduce.cpp — sum, max/min (+indices), argmax/argmin and variance over the
// middle dim of a contiguous (outer, extent, inner) block.
//
// Invariants: each output element is reduced in index order by one thread; a single long
// reduction is split into fixed blocks of kBlock elements whose partial sums are added in
// block order, so the result is bit-identical for every thread count (column sums of few
// columns split their rows the same way). Float sums accumulate
// in double. Max/min return NaN (and the first NaN's index) when a NaN is present; ties go
// to the first index.
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kBlock = 16384;

template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

// Sum of n contiguous elements in a fixed order (four interleaved accumulators).
template <typename T>
acc_t<T> sum_contiguous(const T* p, int64_t n) {
  using A = acc_t<T>;
  A s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<A>(load(p + i));
    s1 += static_cast<A>(load(p + i + 1));
    s2 += static_cast<A>(load(p + i + 2));
    s3 += static_cast<A>(load(p + i + 3));
  }
  for (; i < n; ++i) s0 += static_cast<A>(load(p + i));
  return (s0 + s1) + (s2 + s3);
}

// Sum of a long contiguous run, split into fixed blocks reduced in parallel.
template <typename T>
acc_t<T> sum_long(const T* p, int64_t n) {
  if (n <= kBlock) return sum_contiguous(p, n);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<acc_t<T>> partial(static_cast<size_t>(blocks));
  parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) partial[b] = sum_contiguous(p + b * kBlock, std::min(kBlock, n - b * kBlock));
  });
  acc_t<T> total = 0;
  for (const auto& v : partial) total += v;
  return total;
}

template <typename T, typename Out>
void sum_typed(const T* in, int64_t outer, int64_t extent, int64_t inner, Out* out) {
  using A = acc_t<T>;
  if (inner == 1) {
    if (outer == 1) {
      out[0] = convert<Out>(sum_long(in, extent));
      return;
    }
    parallel_for(outer, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(extent, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) out[o] = convert<Out>(sum_contiguous(in + o * extent, extent));
                 });
    return;
  }
  // Column sums: for each (o, inner chunk), walk the extent in order.
  constexpr int64_t kChunk = 256;
  const int64_t chunks_per_outer = (inner + kChunk - 1) / kChunk;
  // Few columns and many rows (a bias gradient: (B*T, C) -> (C)): the rows are also split into
  // fixed blocks, summed in parallel and added in block order. The split depends
  // on the shape only, so the result is the same for every thread count.
  // At most kMaxRowBlocks blocks of at least 256 rows, so the partial sums stay small.
  constexpr int64_t kFewTasks = 8, kMaxRowBlocks = 64;
  const int64_t row_block = std::max<int64_t>(256, (extent + kMaxRowBlocks - 1) / kMaxRowBlocks);
  const int64_t row_blocks = (extent + row_block - 1) / row_block;
  if (outer * chunks_per_outer < kFewTasks && row_blocks >= 2) {
    const int64_t columns = outer * inner;
    std::vector<A> partial(static_cast<size_t>(row_blocks * columns));  // (row block, outer, inner)
    parallel_for(row_blocks * outer * chunks_per_outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t block = task / (outer * chunks_per_outer), rest = task % (outer * chunks_per_outer);
        const int64_t o = rest / chunks_per_outer, i0 = (rest % chunks_per_outer) * kChunk;
        const int64_t width = std::min(kChunk, inner - i0);
        const int64_t e0 = block * row_block, e1 = std::min(extent, e0 + row_block);
        A* acc = partial.data() + block * columns + o * inner + i0;
        for (int64_t i = 0; i < width; ++i) acc[i] = 0;
        const T* base = in + o * extent * inner + i0;
        for (int64_t e = e0; e < e1; ++e) {
          const T* row = base + e * inner;
          for (int64_t i = 0; i < width; ++i) acc[i] += static_cast<A>(load(row + i));
        }
      }
    });
    for (int64_t c = 0; c < columns; ++c) {
      A total = 0;
      for (int64_t block = 0; block < row_blocks; ++block) total += partial[static_cast<size_t>(block * columns + c)];
      out[c] = convert<Out>(total);
    }
    return;
  }
  parallel_for(outer * chunks_per_outer, 1, [&](int64_t begin, int64_t end) {
    A acc[kChunk];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / chunks_per_outer, i0 = (task % chunks_per_outer) * kChunk;
      const int64_t width = std::min(kChunk, inner - i0);
      for (int64_t i = 0; i < width; ++i) acc[i] = 0;
      const T* base = in + o * extent * inner + i0;
      for (int64_t e = 0; e < extent; ++e) {
        const T* row = base + e * inner;
        for (int64_t i = 0; i < width; ++i) acc[i] += static_cast<A>(load(row + i));
      }
      for (int64_t i = 0; i < width; ++i) out[o * inner + i0 + i] = convert<Out>(acc[i]);
    }
  });
}

// Index of the max (or min) along the extent, with NaN winning and ties going first.
template <typename T, bool kMax>
void extremum_typed(const T* in, int64_t outer, int64_t extent, int64_t inner, T* values, int64_t* indices,
                    bool values_are_indices) {
  using C = compute_t<T>;
  parallel_for(outer * inner, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(extent, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t) {
                   const int64_t o = t / inner, i = t % inner;
                   const T* p = in + o * extent * inner + i;
                   C best = load(p);
                   int64_t best_index = 0;
                   bool is_nan = best != best;
                   for (int64_t e = 1; e < extent && !is_nan; ++e) {
                     const C v = load(p + e * inner);
                     if (v != v) {
                       best = v;
                       best_index = e;
                       is_nan = true;
                     } else if (kMax ? v > best : v < best) {
                       best = v;
                       best_index = e;
                     }
                   }
                   if (values_are_indices) {
                     reinterpret_cast<int64_t*>(values)[t] = best_index;
                   } else {
                     store(values + t, best);
                     if (indices) indices[t] = best_index;
                   }
                 }
               });
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, void* out,
            int64_t* indices) {
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in);
    switch (op) {
      case ReduceOp::Sum:
        if constexpr (std::is_floating_point_v<compute_t<T>>)
          sum_typed(src, outer, extent, inner, static_cast<T*>(out));
        else
          sum_typed(src, outer, extent, inner, static_cast<int64_t*>(out));
        return;
      case ReduceOp::Max:
        return extremum_typed<T, true>(src, outer, extent, inner, static_cast<T*>(out), indices, false);
      case ReduceOp::Min:
        return extremum_typed<T, false>(src, outer, extent, inner, static_cast<T*>(out), indices, false);
      case ReduceOp::ArgMax:
        return extremum_typed<T, true>(src, outer, extent, inner, static_cast<T*>(out), nullptr, true);
      case ReduceOp::ArgMin:
        return extremum_typed<T, false>(src, outer, extent, inner, static_cast<T*>(out), nullptr, true);
      case ReduceOp::Count:
        break;
    }
    fail("reduce", "unknown reduction");
  });
}

void variance(DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, double correction, void* out) {
  dispatch_floating(dtype, "variance", [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const double denom = static_cast<double>(extent) - correction;
    parallel_for(outer * inner, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(extent, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t t = begin; t < end; ++t) {
                     const int64_t o = t / inner, i = t % inner;
                     const T* p = src + o * extent * inner + i;
                     double mean = 0;
                     for (int64_t e = 0; e < extent; ++e) mean += static_cast<double>(load(p + e * inner));
                     mean /= static_cast<double>(extent);
                     double ss = 0;
                     for (int64_t e = 0; e < extent; ++e) {
                       const double d = static_cast<double>(load(p + e * inner)) - mean;
                       ss += d * d;
                     }
                     store(dst + t, denom > 0 ? ss / denom : std::numeric_limits<double>::quiet_NaN());
                   }
                 });
  });
}

}  // namespace heed::kernels::cpu
