// kernels/cpu/optim.cpp — fused optimizer updates (one pass over all the parameters of a step).
//
// Invariants: adam_step updates a list of parameters in one parallel loop over all their
// elements; it reads and writes each element of param/exp_avg/exp_avg_sq (/max_exp_avg_sq)
// exactly once, in the parameter's own precision (float32 or float64), with per-parameter
// per-step scalars computed once in double; elements are independent, so the result depends
// neither on the thread count nor on which other parameters share the call.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

namespace {

enum class Decay { None, Decoupled, L2 };

// The per-element update over [begin, end). The weight-decay mode and AMSGrad are template
// parameters, so the common loops have no branches and vectorise (sqrt and division included:
// -fno-math-errno); each element's arithmetic is the same in every variant it shares.
// Contraction into FMAs is off here: GCC contracts the vectorised body and the scalar tail
// differently, and the tail's elements depend on where the thread chunks end, so with it an
// element's value would depend on the thread count (test_optim checks 1, 2 and 3 threads).
#if defined(__clang__)
#define HEED_NO_FP_CONTRACT  // clang: the pragma at the top of the body
#else
#define HEED_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
template <typename T, Decay kDecay, bool kAmsgrad>
HEED_NO_FP_CONTRACT void adam_range(T* __restrict param, const T* __restrict grad, T* __restrict exp_avg,
                                    T* __restrict exp_avg_sq, T* __restrict max_exp_avg_sq, int64_t begin, int64_t end,
                                    T step_size, T inv_bias_correction2_sqrt, T beta1, T one_minus_beta1, T beta2,
                                    T one_minus_beta2, T eps, T decay_factor, T l2) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  for (int64_t i = begin; i < end; ++i) {
    T p = param[i];
    T g = grad[i];
    if constexpr (kDecay == Decay::Decoupled) p *= decay_factor;
    if constexpr (kDecay == Decay::L2) g += l2 * p;
    const T m = beta1 * exp_avg[i] + one_minus_beta1 * g;
    const T v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T v_used = v;
    if constexpr (kAmsgrad) {
      const T previous = max_exp_avg_sq[i];
      v_used = (v > previous || std::isnan(v)) ? v : previous;  // NaN propagates like torch.maximum
      max_exp_avg_sq[i] = v_used;
    }
    const T denom = std::sqrt(v_used) * inv_bias_correction2_sqrt + eps;
    param[i] = p - step_size * m / denom;
  }
}

// The per-step scalars of one parameter, computed once in double; each piece of the parameter
// converts them to its precision exactly as a single call did.
struct AdamScalars {
  double step_size, inv_bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay_factor, l2;
};

AdamScalars adam_scalars(const AdamStepArgs& args) {
  const double t = static_cast<double>(args.step);
  const double bias_correction1 = 1.0 - std::pow(args.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(args.beta2, t);
  return {args.lr / bias_correction1,
          1.0 / std::sqrt(bias_correction2),
          args.beta1,
          1.0 - args.beta1,
          args.beta2,
          1.0 - args.beta2,
          args.eps,
          1.0 - args.lr * args.weight_decay,  // AdamW
          args.weight_decay};                 // Adam
}

// Updates elements [begin, end) of one parameter.
using AdamPiece = void (*)(const AdamStepArgs& args, const AdamScalars& s, int64_t begin, int64_t end);

template <typename T, Decay kDecay, bool kAmsgrad>
void adam_piece(const AdamStepArgs& args, const AdamScalars& s, int64_t begin, int64_t end) {
  adam_range<T, kDecay, kAmsgrad>(
      static_cast<T*>(args.param), static_cast<const T*>(args.grad), static_cast<T*>(args.exp_avg),
      static_cast<T*>(args.exp_avg_sq), static_cast<T*>(args.max_exp_avg_sq), begin, end, static_cast<T>(s.step_size),
      static_cast<T>(s.inv_bias_correction2_sqrt), static_cast<T>(s.beta1), static_cast<T>(s.one_minus_beta1),
      static_cast<T>(s.beta2), static_cast<T>(s.one_minus_beta2), static_cast<T>(s.eps), static_cast<T>(s.decay_factor),
      static_cast<T>(s.l2));
}

template <typename T>
AdamPiece adam_piece_typed(const AdamStepArgs& args) {
  const bool amsgrad = args.max_exp_avg_sq != nullptr;
  if (args.weight_decay == 0.0) return amsgrad ? adam_piece<T, Decay::None, true> : adam_piece<T, Decay::None, false>;
  if (args.decoupled_weight_decay)
    return amsgrad ? adam_piece<T, Decay::Decoupled, true> : adam_piece<T, Decay::Decoupled, false>;
  return amsgrad ? adam_piece<T, Decay::L2, true> : adam_piece<T, Decay::L2, false>;
}

AdamPiece adam_piece_for(const AdamStepArgs& args, int index, int count) {
  switch (args.dtype) {
    case DType::Float32:
      return adam_piece_typed<float>(args);
    case DType::Float64:
      return adam_piece_typed<double>(args);
    default:
      fail("adam_step", "the CPU kernel supports float32 and float64 parameters, got {} (tensor {} of {})",
           dtype_name(args.dtype), index, count);
  }
}

}  // namespace

// All the parameters' elements in one parallel loop, split by element count alone: a chunk may
// end inside one parameter and go on into the next, so one step of a model with many small
// parameters (LayerNorm weights and biases) costs one fork and join, not one per parameter.
void adam_step(const AdamStepArgs* tensors, int count) {
  HEED_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "adam_step", "{} tensors at {}", count,
             static_cast<const void*>(tensors));
  std::vector<int64_t> offsets(static_cast<size_t>(count) + 1, 0);  // tensor t: [offsets[t], offsets[t + 1])
  std::vector<AdamScalars> scalars(static_cast<size_t>(count));
  std::vector<AdamPiece> pieces(static_cast<size_t>(count));
  for (int t = 0; t < count; ++t) {
    const AdamStepArgs& args = tensors[t];
    HEED_CHECK(args.n >= 0, "adam_step", "negative element count {} (tensor {} of {})", args.n, t, count);
    HEED_CHECK(args.step >= 1, "adam_step", "step counts from 1, got {} (tensor {} of {})", args.step, t, count);
    HEED_CHECK(args.n == 0 || (args.param && args.grad && args.exp_avg && args.exp_avg_sq), "adam_step",
               "null buffer pointer for {} elements (tensor {} of {})", args.n, t, count);
    pieces[static_cast<size_t>(t)] = adam_piece_for(args, t, count);
    scalars[static_cast<size_t>(t)] = adam_scalars(args);
    offsets[static_cast<size_t>(t) + 1] = offsets[static_cast<size_t>(t)] + args.n;
  }
  parallel_for(offsets.back(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    // the first tensor with elements at or after `begin`
    size_t t = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin()) - 1;
    for (; t < static_cast<size_t>(count) && offsets[t] < end; ++t) {
      const int64_t lo = std::max(begin, offsets[t]) - offsets[t], hi = std::min(end, offsets[t + 1]) - offsets[t];
      if (lo < hi) pieces[t](tensors[t], scalars[t], lo, hi);
    }
  });
}

}  // namespace heed::kernels::cpu
