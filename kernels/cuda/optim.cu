// kernels/cuda/optim.cu — the fused Adam/AdamW update (one pass over each parameter of a step).
//
// Invariants: each element of param/exp_avg/exp_avg_sq (/max_exp_avg_sq) is read and written
// exactly once by one thread, in the parameter's own precision (float32 or float64), with the
// per-step scalars computed once on the host in double exactly as kernels/cpu/optim.cpp does;
// elements are independent, so results are deterministic (the device may fuse a multiply-add
// where the CPU rounds twice: last-bit differences).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"

namespace heed::kernels::cuda {

namespace {

template <typename T>
struct AdamScalars {
  T step_size, inv_bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay_factor, l2;
  bool has_decay, decoupled;
};

template <typename T>
__global__ void adam_kernel(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, int64_t n,
                            AdamScalars<T> s) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    T p = param[i];
    T g = grad[i];
    if (s.has_decay) {
      if (s.decoupled)
        p *= s.decay_factor;
      else
        g += s.l2 * p;
    }
    const T m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
    const T v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T v_used = v;
    if (max_exp_avg_sq) {
      const T previous = max_exp_avg_sq[i];
      v_used = (v > previous || v != v) ? v : previous;
      max_exp_avg_sq[i] = v_used;
    }
    const T denom = math_sqrt(v_used) * s.inv_bias_correction2_sqrt + s.eps;
    param[i] = p - s.step_size * m / denom;
  }
}

template <typename T>
void adam_typed(const AdamStepArgs& args) {
  const double t = static_cast<double>(args.step);
  const double bias_correction1 = 1.0 - std::pow(args.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(args.beta2, t);
  AdamScalars<T> s;
  s.step_size = static_cast<T>(args.lr / bias_correction1);
  s.inv_bias_correction2_sqrt = static_cast<T>(1.0 / std::sqrt(bias_correction2));
  s.beta1 = static_cast<T>(args.beta1);
  s.one_minus_beta1 = static_cast<T>(1.0 - args.beta1);
  s.beta2 = static_cast<T>(args.beta2);
  s.one_minus_beta2 = static_cast<T>(1.0 - args.beta2);
  s.eps = static_cast<T>(args.eps);
  s.decay_factor = static_cast<T>(1.0 - args.lr * args.weight_decay);
  s.l2 = static_cast<T>(args.weight_decay);
  s.has_decay = args.weight_decay != 0.0;
  s.decoupled = args.decoupled_weight_decay;
  HEED_LAUNCH(grid_for(args.n), kThreads, 0, adam_kernel<T>)
  (static_cast<T*>(args.param), static_cast<const T*>(args.grad), static_cast<T*>(args.exp_avg),
   static_cast<T*>(args.exp_avg_sq), static_cast<T*>(args.max_exp_avg_sq), args.n, s);
  check_launch("adam_step");
}

}  // namespace

// One launch per parameter, in order (a multi-tensor launch is left for when a GPU can measure it).
void adam_step(const AdamStepArgs* tensors, int count) {
  if (count < 0 || (count > 0 && !tensors)) throw_error("adam_step", "bad tensor list");
  for (int t = 0; t < count; ++t) {  // every tensor checked before any is updated
    const AdamStepArgs& args = tensors[t];
    if (args.n < 0) throw_error("adam_step", "negative element count");
    if (args.step < 1) throw_error("adam_step", "step counts from 1");
    if (args.n > 0 && (!args.param || !args.grad || !args.exp_avg || !args.exp_avg_sq))
      throw_error("adam_step", "null buffer pointer");
    if (args.dtype != DType::Float32 && args.dtype != DType::Float64) unsupported_dtype("adam_step", args.dtype);
  }
  for (int t = 0; t < count; ++t) {
    const AdamStepArgs& args = tensors[t];
    if (args.n == 0) continue;
    if (args.dtype == DType::Float32)
      adam_typed<float>(args);
    else
      adam_typed<double>(args);
  }
}

}  // namespace heed::kernels::cuda
