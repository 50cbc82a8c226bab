// kernels/cpu/clip_norm.cpp — the global-norm reduction of clip_grad_norm_ on the CPU.
//
// Invariants: every element is widened to float64 before |x|^p; each tensor is cut into
// fixed blocks of kBlock elements whose partial results are combined in block order (and, for
// the 1- and 2-norms, each block sums in kLanes interleaved accumulators added in a fixed
// order), so the result is bit-identical for every thread count; the infinity norm propagates
// NaN.
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kBlock = 16384;

enum class NormKind { One, Two, Power, Infinity };

// sum of |x| (One) or x^2 (Two) over n elements in kLanes interleaved float64 accumulators
// (independent chains the compiler vectorises; one chain is bound by the add latency), added
// pairwise in a fixed order at the end.
constexpr int kLanes = 8;

template <NormKind kind, typename T>
double lane_sum(const T* p, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double a = static_cast<double>(load(p + i + j));
      lanes[j] += kind == NormKind::Two ? a * a : std::fabs(a);
    }
  for (int j = 0; i < n; ++i, ++j) {
    const double a = static_cast<double>(load(p + i));
    lanes[j] += kind == NormKind::Two ? a * a : std::fabs(a);
  }
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  return lanes[0];
}

template <typename T>
double block_result(const T* p, int64_t n, NormKind kind, double norm_type) {
  if (kind == NormKind::Two) return lane_sum<NormKind::Two>(p, n);
  if (kind == NormKind::One) return lane_sum<NormKind::One>(p, n);
  double acc = 0.0;
  if (kind == NormKind::Power) {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(load(p + i))), norm_type);
    return acc;
  }
  for (int64_t i = 0; i < n; ++i) {  // Infinity: NaN wins
    const double a = std::fabs(static_cast<double>(load(p + i)));
    if (std::isnan(a)) return a;
    acc = a > acc ? a : acc;
  }
  return acc;
}

double combine(NormKind kind, double total, double part) {
  if (kind != NormKind::Infinity) return total + part;
  return (std::isnan(part) || part > total) ? part : total;
}

}  // namespace

double global_norm(const NormInput* inputs, int count, double norm_type) {
  HEED_CHECK(norm_type > 0.0, "global_norm", "norm_type must be > 0, got {}", norm_type);
  const NormKind kind = std::isinf(norm_type) ? NormKind::Infinity
                        : norm_type == 1.0    ? NormKind::One
                        : norm_type == 2.0    ? NormKind::Two
                                              : NormKind::Power;
  double total = 0.0;
  for (int t = 0; t < count; ++t) {
    const NormInput& in = inputs[t];
    if (in.n <= 0) continue;
    HEED_CHECK(in.data != nullptr, "global_norm", "tensor {} of {} elements has no data", t, in.n);
    dispatch_floating(in.dtype, "global_norm", [&](auto tag) {
      using T = decltype(tag);
      const T* p = static_cast<const T*>(in.data);
      const int64_t blocks = (in.n + kBlock - 1) / kBlock;
      std::vector<double> partial(static_cast<size_t>(blocks));
      parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b)
          partial[static_cast<size_t>(b)] =
              block_result(p + b * kBlock, std::min(kBlock, in.n - b * kBlock), kind, norm_type);
      });
      for (double part : partial) total = combine(kind, total, part);
    });
  }
  return total;
}

}  // namespace heed::kernels::cpu
