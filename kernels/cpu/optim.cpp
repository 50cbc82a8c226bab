// kernels/cpu/optim.cpp — fused optimizer updates (one pass over each parameter).
//
// Invariants: adam_step reads and writes each element of param/exp_avg/exp_avg_sq
// (/max_exp_avg_sq) exactly once, in the parameter's own precision (float32 or float64), with
// per-step scalars computed once in double; elements are independent, so the result does not
// depend on the thread count.
#include <cmath>

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

template <typename T, Decay kDecay, bool kAmsgrad>
void adam_step_variant(const AdamStepArgs& args) {
  T* param = static_cast<T*>(args.param);
  const T* grad = static_cast<const T*>(args.grad);
  T* exp_avg = static_cast<T*>(args.exp_avg);
  T* exp_avg_sq = static_cast<T*>(args.exp_avg_sq);
  T* max_exp_avg_sq = static_cast<T*>(args.max_exp_avg_sq);

  const double t = static_cast<double>(args.step);
  const double bias_correction1 = 1.0 - std::pow(args.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(args.beta2, t);
  const T step_size = static_cast<T>(args.lr / bias_correction1);
  const T inv_bias_correction2_sqrt = static_cast<T>(1.0 / std::sqrt(bias_correction2));
  const T beta1 = static_cast<T>(args.beta1), one_minus_beta1 = static_cast<T>(1.0 - args.beta1);
  const T beta2 = static_cast<T>(args.beta2), one_minus_beta2 = static_cast<T>(1.0 - args.beta2);
  const T eps = static_cast<T>(args.eps);
  const T decay_factor = static_cast<T>(1.0 - args.lr * args.weight_decay);  // AdamW
  const T l2 = static_cast<T>(args.weight_decay);                            // Adam

  parallel_for(args.n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    adam_range<T, kDecay, kAmsgrad>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, begin, end, step_size,
                                    inv_bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps,
                                    decay_factor, l2);
  });
}

template <typename T>
void adam_step_typed(const AdamStepArgs& args) {
  const bool amsgrad = args.max_exp_avg_sq != nullptr;
  const Decay decay = args.weight_decay == 0.0      ? Decay::None
                      : args.decoupled_weight_decay ? Decay::Decoupled
                                                    : Decay::L2;
  switch (decay) {
    case Decay::None:
      return amsgrad ? adam_step_variant<T, Decay::None, true>(args) : adam_step_variant<T, Decay::None, false>(args);
    case Decay::Decoupled:
      return amsgrad ? adam_step_variant<T, Decay::Decoupled, true>(args)
                     : adam_step_variant<T, Decay::Decoupled, false>(args);
    case Decay::L2:
      return amsgrad ? adam_step_variant<T, Decay::L2, true>(args) : adam_step_variant<T, Decay::L2, false>(args);
  }
}

}  // namespace

void adam_step(const AdamStepArgs& args) {
  HEED_CHECK(args.n >= 0, "adam_step", "negative element count {}", args.n);
  HEED_CHECK(args.step >= 1, "adam_step", "step counts from 1, got {}", args.step);
  if (args.n == 0) return;
  HEED_CHECK(args.param && args.grad && args.exp_avg && args.exp_avg_sq, "adam_step",
             "null buffer pointer for {} elements", args.n);
  switch (args.dtype) {
    case DType::Float32:
      adam_step_typed<float>(args);
      return;
    case DType::Float64:
      adam_step_typed<double>(args);
      return;
    default:
      fail("adam_step", "the CPU kernel supports float32 and float64 parameters, got {}", dtype_name(args.dtype));
  }
}

}  // namespace heed::kernels::cpu
