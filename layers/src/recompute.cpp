// layers/src/recompute.cpp — nn::checkpoint: forward without a graph, recomputation in backward.
//
// Invariants: see heed/nn/recompute.h. The recorded node ("checkpoint") holds the function, the
// inputs as SavedTensors, the generator state and the autocast dtype of the forward; nothing
// of the function's own activations outlives the forward.
#include "heed/nn/recompute.h"

#include <optional>

#include "heed/autocast.h"
#include "heed/autograd.h"
#include "heed/error.h"
#include "heed/random.h"

namespace heed::nn {

namespace {

// Sets the default generator to `state` for the scope, then back to what it was.
class GeneratorStateScope {
 public:
  explicit GeneratorStateScope(Generator::Draw state) : previous_(default_generator().state()) {
    default_generator().set_state(state.seed, state.first);
  }
  ~GeneratorStateScope() { default_generator().set_state(previous_.seed, previous_.first); }
  GeneratorStateScope(const GeneratorStateScope&) = delete;
  GeneratorStateScope& operator=(const GeneratorStateScope&) = delete;

 private:
  Generator::Draw previous_;
};

}  // namespace

Tensor checkpoint(RecomputedFunction function, const std::vector<Tensor>& inputs) {
  HEED_CHECK(static_cast<bool>(function), "checkpoint", "needs a function to run");
  for (size_t i = 0; i < inputs.size(); ++i)
    HEED_CHECK(inputs[i].defined(), "checkpoint", "input {} of {} is an undefined tensor", i, inputs.size());
  // Nothing flows back through the inputs: an ordinary call (parameters still get gradients).
  if (!any_requires_grad(inputs)) return function(inputs);

  const Generator::Draw rng_at_forward = default_generator().state();
  const std::optional<DType> autocast_at_forward = amp::autocast_dtype();
  Tensor output;
  {
    NoGradGuard no_grad;  // the function's graph and its saved activations are dropped here
    output = function(inputs);
  }
  HEED_CHECK(output.defined(), "checkpoint", "the function returned an undefined tensor");
  HEED_CHECK(is_floating(output.dtype()), "checkpoint", "the function's output must be floating, got {} of shape {}",
             dtype_name(output.dtype()), shape_str(output.shape()));
  output = output.detach();  // a fresh handle even if the function returned an input as is

  std::vector<SavedTensor> saved;
  std::vector<bool> input_needs_grad;
  std::vector<const Tensor*> input_pointers;
  for (const Tensor& in : inputs) {
    saved.emplace_back(in, "checkpoint");
    input_needs_grad.push_back(in.requires_grad());
    input_pointers.push_back(&in);
  }
  const Dims output_shape = output.shape();
  const DType output_dtype = output.dtype();
  record_op("checkpoint", input_pointers, output,
            [function = std::move(function), saved = std::move(saved), input_needs_grad, rng_at_forward,
             autocast_at_forward, output_shape, output_dtype](const Tensor& grad_output) {
              std::vector<Tensor> replay_inputs;  // (leaves of the recomputed graph)
              for (size_t i = 0; i < saved.size(); ++i) {
                Tensor replay = saved[i].get().detach();
                if (input_needs_grad[i]) replay.requires_grad_(true);
                replay_inputs.push_back(std::move(replay));
              }
              Tensor recomputed;
              {
                GeneratorStateScope same_random_draws(rng_at_forward);
                amp::Autocast same_autocast(autocast_at_forward);
                EnableGradGuard grad_on;
                recomputed = function(replay_inputs);
              }
              HEED_CHECK(
                  recomputed.defined() && recomputed.shape() == output_shape && recomputed.dtype() == output_dtype,
                  "checkpoint",
                  "the recomputation returned {} {} where the forward returned {} {} (the function must compute "
                  "the same output from the same inputs)",
                  recomputed.defined() ? dtype_name(recomputed.dtype()) : "undefined",
                  recomputed.defined() ? shape_str(recomputed.shape()) : "", dtype_name(output_dtype),
                  shape_str(output_shape));
              std::vector<Tensor> input_grads(replay_inputs.size());
              if (!recomputed.requires_grad()) return input_grads;  // the output does not depend on anything trainable
              std::vector<Tensor> wrt;
              for (size_t i = 0; i < replay_inputs.size(); ++i)
                if (input_needs_grad[i]) wrt.push_back(replay_inputs[i]);
              const std::vector<Tensor> wrt_grads = backward_within_pass({recomputed}, {grad_output}, wrt);
              for (size_t i = 0, k = 0; i < replay_inputs.size(); ++i)
                if (input_needs_grad[i]) input_grads[i] = wrt_grads[k++];
              return input_grads;
            });
  return output;
}

}  // namespace heed::nn
