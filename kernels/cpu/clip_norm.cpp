// kernels/cpu/clip_norm.cpp — the global-norm reduction of clip_grad_norm_ on the CPU.
//
// Invariants: every element is widened to float64 before |x|^p; each tensor is cut into
// fixed blocks of kBlock elements whose partial results are combined in block order, so the
// result is bit-identical for every thread count; the infinity norm propagates NaN.
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kBlock = 16384;

enum class NormKind { One, Two, Power, Infinity };

template <typename T>
double block_result(const T* p, int64_t n, NormKind kind, double norm_type) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(load(p + i)));
    switch (kind) {
      case NormKind::One:
        acc += a;
        break;
      case NormKind::Two:
        acc += a * a;
        break;
      case NormKind::Power:
        acc += std::pow(a, norm_type);
        break;
      case NormKind::Infinity:
        if (std::isnan(a)) return a;
        acc = a > acc ? a : acc;
        break;
    }
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
