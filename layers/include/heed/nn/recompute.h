// heed/nn/recompute.h — activation recomputation (PyTorch's torch.utils.checkpoint, llm.c's
// recompute flag): trade a second forward pass for the activations a block would keep.
//
//   Tensor y = nn::checkpoint(block, x);   // block->forward(x), keeping only x for backward
//
// Invariants:
//  * The forward runs with grad mode off, so the function's graph (and every activation it
//    would save) is dropped at once; the node recorded for the output keeps only the inputs.
//  * backward() runs the function again from the saved inputs with grad mode on, the default
//    generator set back to its state at the forward (dropout draws the same masks; the state
//    after the recomputation is what it was before it) and the forward's autocast dtype, then
//    backpropagates through the recomputed graph as part of the same pass
//    (backward_within_pass): parameters of the function accumulate into .grad and their hooks
//    (DDP buckets) run as without checkpointing; callbacks run when the whole pass ends.
//    The gradients are bit-identical to those of the plain run (tested).
//  * When no input requires grad, the function runs as is (its graph is recorded if its
//    parameters need gradients), so no gradient is ever lost; the memory is then not saved.
//  * The function must compute the same output from the same inputs and RNG state (shape and
//    dtype are checked); inputs modified in place after the forward raise an Error in backward.
//  * Works under backward() and heed::grad() (which captures the function's parameters if it
//    was asked for them and leaves .grad untouched). As with PyTorch's reentrant checkpoint, a
//    parameter used both inside and outside a checkpointed call (or by two calls) gets its
//    gradient in parts, and its hooks run once per part.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "heed/tensor.h"

namespace heed::nn {

using RecomputedFunction = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Runs `function(inputs)` keeping only the inputs for backward (see above).
Tensor checkpoint(RecomputedFunction function, const std::vector<Tensor>& inputs);

// checkpoint(module, a, b, ...): module->forward(a, b, ...) recomputed in backward.
template <typename M, typename... Inputs>
Tensor checkpoint(const std::shared_ptr<M>& module, const Inputs&... inputs) {
  static_assert((std::is_convertible_v<const Inputs&, const Tensor&> && ...),
                "nn::checkpoint(module, ...) takes Tensor inputs; capture other arguments in a lambda");
  return checkpoint(
      [module](const std::vector<Tensor>& in) {
        return [&]<size_t... I>(std::index_sequence<I...>) { return module->forward(in[I]...); }
        (std::index_sequence_for<Inputs...>{});
      },
      std::vector<Tensor>{Tensor(inputs)...});
}

}  // namespace heed::nn
