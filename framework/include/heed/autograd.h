// heed/autograd.h — the dynamic tape: graph nodes, saved tensors, grad mode and the engine.
//
// Invariants:
//  * Every differentiable op output that needs a gradient gets exactly one Node; a Node has
//    one output and one Edge per input (null where the input needs no gradient).
//  * A Node's backward closure runs with grad mode off (no double backward), and is
//    released after it ran unless retain_graph is set; calling it again raises an Error.
//  * SavedTensor stores a history-free alias plus the storage version at save time, so the
//    graph holds no reference cycle and in-place changes of saved data are caught.
//  * The engine walks the graph iteratively (no recursion), so chains of any length work.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heed/tensor.h"

namespace heed {

// ---- grad mode ------------------------------------------------------------------------------
bool grad_mode_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// A tensor kept for backward: data without history, plus the version it had when saved.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& tensor, const char* op);
  // The saved data; throws if the storage was modified in place since it was saved.
  Tensor get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  const char* op_ = "";
};

struct Edge {
  std::shared_ptr<Node> node;        // the producer of the input, if it is not a leaf
  std::shared_ptr<TensorImpl> leaf;  // the input itself, if it is a leaf requiring grad
  bool defined() const { return node || leaf; }
};

// One recorded op. `backward` maps the output gradient to one gradient per input
// (undefined Tensors where an input needs none).
class Node {
 public:
  using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

  Node(const char* name, std::vector<Edge> edges, BackwardFn backward, Dims output_shape, DType output_dtype);
  // Releases the nodes of a long chain one after another instead of recursively, so that
  // dropping a graph of any depth cannot overflow the stack.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  const char* name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const Dims& output_shape() const { return output_shape_; }
  DType output_dtype() const { return output_dtype_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return !backward_; }
  // Hooks on the output gradient of this node (registered through non-leaf tensors).
  void add_output_hook(TensorHook hook) { output_hooks_.push_back(std::move(hook)); }
  const std::vector<TensorHook>& output_hooks() const { return output_hooks_; }
  // The tensor whose .grad keeps this node's output gradient (Tensor::retain_grad); stored
  // by backward() after the hooks ran, never by heed::grad().
  void set_retained_output(const std::shared_ptr<TensorImpl>& output) { retained_output_ = output; }
  std::shared_ptr<TensorImpl> retained_output() const { return retained_output_.lock(); }
  // Runs backward; releases the closure (and what it saved) unless retain_graph.
  std::vector<Tensor> apply(const Tensor& grad_output, bool retain_graph);
  // Free-form context shown by anomaly reports (shapes of inputs, user tag).
  std::string context;

 private:
  const char* name_;
  std::vector<Edge> edges_;
  BackwardFn backward_;
  Dims output_shape_;
  DType output_dtype_;
  uint64_t sequence_nr_;
  std::vector<TensorHook> output_hooks_;
  std::weak_ptr<TensorImpl> retained_output_;
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Attaches a Node named `op` to `output` with edges to `inputs`. Call only when
// any_requires_grad(inputs) is true. The closure must capture SavedTensors, not Tensors.
void record_op(const char* op, const std::vector<const Tensor*>& inputs, Tensor& output, Node::BackwardFn backward);
inline void record_op(const char* op, std::initializer_list<const Tensor*> inputs, Tensor& output,
                      Node::BackwardFn backward) {
  record_op(op, std::vector<const Tensor*>(inputs), output, std::move(backward));
}

// The op registry: every name heed's own ops record on the tape (the differentiable rows of the
// element-wise table and the ops written by hand, framework/src/internal.h), in registry order.
// Ops a program records itself (record_op with its own name) are not in it.
std::vector<std::string> recorded_op_names();

// Runs the backward pass from `roots` with the given seed gradients.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

// From inside a pass (a Node's backward closure: nn::checkpoint's recomputation), backpropagates
// `grads` from `roots` as part of the pass running now, and returns the gradients of `inputs`
// (leaves of the roots' graph that require grad; undefined where none arrived) without writing
// their .grad. Every other leaf is treated as the running pass treats it: backward() accumulates
// into .grad and runs its hooks, heed::grad() captures it if it was asked for (summed with
// what the rest of the pass gives it). Callbacks queued go to the running pass (they run when it
// ends) and current_engine_pass_id() stays that pass's. Throws outside a pass.
std::vector<Tensor> backward_within_pass(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                                         const std::vector<Tensor>& inputs);

// Computes d(outputs)/d(inputs) without touching .grad of any tensor (torch.autograd.grad).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

// The engine pass the calling thread is running: Backward (backward(): leaves accumulate into
// .grad), Grad (heed::grad(): .grad untouched) or None. A leaf's hooks run during the pass,
// as soon as its last gradient arrived (not at the end), so they can start work early.
enum class EnginePass { None, Backward, Grad };
EnginePass current_engine_pass();
// A number identifying the pass the calling thread is running (unique within the process;
// 0 outside a pass).
uint64_t current_engine_pass_id();
// From inside a pass (a gradient hook, on the thread running the pass): runs `callback` on
// this thread once the pass finished, after every leaf's .grad was written; callbacks run in
// the order queued (PyTorch's Variable._execution_engine.queue_callback). If the pass throws,
// its callbacks are dropped. Throws outside a pass.
void queue_backward_callback(std::function<void()> callback);

// Optional per-node callback after each backward node ran (after the anomaly check, if on).
using BackwardObserver =
    std::function<void(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grad_inputs)>;
void set_backward_observer(BackwardObserver observer);

}  // namespace heed

#include "heed/anomaly.h"  // IWYU pragma: export (DetectAnomalyGuard works on this engine)
