// framework/src/core/autograd.cpp — grad mode, saved tensors, nodes and the backward engine.
//
// The engine counts, for every node reachable from the roots, how many edges lead into it,
// then runs nodes whose count reached zero (a topological order, no recursion). Gradients
// for one node are summed in a buffer before it runs (its hooks see the total). Leaves are
// counted too: a leaf's gradients are summed until its last incoming edge was processed, then
// its hooks run once on the total and it accumulates into .grad at once, while the rest of
// the pass goes on (PyTorch's AccumulateGrad: what lets data-parallel training start
// reducing a bucket during backward). Callbacks queued during a pass run after it finished.
// Long graphs are also destroyed iteratively (~Node). With anomaly detection on (heed/anomaly.h)
// record_op checks each output and the engine each node's gradients, the seeds included.
#include "heed/autograd.h"

#include <atomic>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "heed/anomaly.h"
#include "heed/ops.h"
#define HEED_DEFINES_RECORD_OP  // this file defines record_op (internal.h poisons it elsewhere)
#include "internal.h"

namespace heed {

namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence_nr{0};
BackwardObserver g_backward_observer;

// The pass this thread is running (innermost, if a hook started another one) and the
// callbacks queued for its end.
struct EngineCapture;
struct PassFrame {
  EnginePass kind = EnginePass::None;
  uint64_t id = 0;
  std::vector<std::function<void()>> callbacks;
  EngineCapture* capture = nullptr;  // heed::grad()'s capture (Grad passes)
};
thread_local PassFrame* g_current_pass = nullptr;
std::atomic<uint64_t> g_next_pass_id{1};
}  // namespace

EnginePass current_engine_pass() { return g_current_pass ? g_current_pass->kind : EnginePass::None; }
uint64_t current_engine_pass_id() { return g_current_pass ? g_current_pass->id : 0; }

void queue_backward_callback(std::function<void()> callback) {
  HEED_CHECK(g_current_pass != nullptr, "queue_backward_callback",
             "called outside a backward pass (call it from a gradient hook, during backward())");
  g_current_pass->callbacks.push_back(std::move(callback));
}

bool grad_mode_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { g_grad_enabled = previous_; }

void set_backward_observer(BackwardObserver observer) { g_backward_observer = std::move(observer); }

// ---- SavedTensor ----------------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& tensor, const char* op) : op_(op) {
  if (!tensor.defined()) return;
  tensor_ = tensor.detach();
  version_ = tensor.storage()->version();
  tensor_.storage()->set_category(MemoryCategory::Activation);  // parameters stay parameters
}

Tensor SavedTensor::get() const {
  if (tensor_.defined() && tensor_.storage()->version() != version_) {
    fail(op_,
         "a tensor of shape {} saved for its backward was modified by an in-place operation "
         "(version {} when saved, {} now); use an out-of-place op or clone() before modifying",
         shape_str(tensor_.shape()), version_, tensor_.storage()->version());
  }
  return tensor_;
}

// ---- Node -----------------------------------------------------------------------------------

Node::Node(const char* name, std::vector<Edge> edges, BackwardFn backward, Dims output_shape, DType output_dtype)
    : name_(name),
      edges_(std::move(edges)),
      backward_(std::move(backward)),
      output_shape_(output_shape),
      output_dtype_(output_dtype),
      sequence_nr_(g_next_sequence_nr++) {}

Node::~Node() {
  // Take over the producers that would die with this node and release them in a loop; a
  // producer still owned elsewhere only loses a reference.
  std::vector<std::shared_ptr<Node>> dying;
  auto adopt = [&dying](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.node && e.node.use_count() == 1) dying.push_back(std::move(e.node));
  };
  adopt(edges_);
  while (!dying.empty()) {
    std::shared_ptr<Node> node = std::move(dying.back());
    dying.pop_back();
    adopt(node->edges_);
    node->backward_ = nullptr;  // its saved tensors and captures go now, not recursively
  }
}

std::vector<Tensor> Node::apply(const Tensor& grad_output, bool retain_graph) {
  HEED_CHECK(backward_, name_,
             "trying to backward through the graph a second time (its saved tensors were freed "
             "after the first backward); pass retain_graph=true to the first backward");
  std::vector<Tensor> grads = backward_(grad_output);
  if (!retain_graph) backward_ = nullptr;  // frees the saved tensors
  HEED_INTERNAL_ASSERT(grads.size() == edges_.size());
  return grads;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<std::string> recorded_op_names() {
  std::vector<std::string> names;
  for (const detail::RegistryEntry& e : detail::kOpRegistry)
    if (e.recorded) names.emplace_back(e.name);
  return names;
}

void record_op(const char* op, const std::vector<const Tensor*>& inputs, Tensor& output, Node::BackwardFn backward) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    Edge e;
    if (t && t->defined() && t->requires_grad()) {
      if (t->grad_fn())
        e.node = t->grad_fn();
      else
        e.leaf = t->impl_ptr();
    }
    edges.push_back(std::move(e));
  }
  auto node = std::make_shared<Node>(op, std::move(edges), std::move(backward), output.shape(), output.dtype());
  // Anomaly detection (off: one thread-local read) checks the output before it joins the tape.
  if (anomaly_detection_enabled()) [[unlikely]]
    detail::anomaly_check_forward(*node, inputs, output);
  TensorImpl& impl = output.impl();
  impl.grad_fn = std::move(node);
  impl.requires_grad = true;
}

// ---- engine ---------------------------------------------------------------------------------

namespace {

Tensor apply_hooks(const std::vector<TensorHook>& hooks, Tensor grad) {
  for (const TensorHook& hook : hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) {
      HEED_CHECK(replaced.shape() == grad.shape(), "register_hook",
                 "a hook returned a gradient of shape {} for a tensor of shape {}", shape_str(replaced.shape()),
                 shape_str(grad.shape()));
      grad = replaced;
    }
  }
  return grad;
}

Tensor accumulate(const Tensor& existing, const Tensor& incoming) {
  if (!existing.defined()) return incoming;
  return existing + incoming;
}

// True when nothing but `grad` can reach its data: the only owner of its TensorImpl and of its
// storage, contiguous over the whole storage, with the leaf's dtype and shape. Such a gradient
// (a weight gradient a GEMM just wrote, typically) becomes the leaf's .grad without a copy.
bool owns_its_data(const Tensor& grad, const TensorImpl& leaf) {
  const std::shared_ptr<TensorImpl>& impl = grad.impl_ptr();
  return impl.use_count() == 1 && impl->storage && impl->storage.use_count() == 1 && impl->offset == 0 &&
         !impl->grad_fn && grad.dtype() == leaf.dtype && grad.shape() == leaf.shape && grad.is_contiguous() &&
         impl->storage->nbytes() == static_cast<size_t>(grad.numel()) * dtype_size(grad.dtype());
}

void accumulate_into_leaf(TensorImpl& leaf, Tensor incoming) {
  Tensor grad = leaf.hooks.empty() ? std::move(incoming) : apply_hooks(leaf.hooks, incoming);
  incoming = Tensor();  // `grad` is the only reference the engine keeps
  if (!leaf.grad && owns_its_data(grad, leaf)) {
    leaf.grad = grad.impl_ptr();
    grad.storage()->set_category(MemoryCategory::Gradient);
  } else if (!leaf.grad) {
    // A fresh contiguous buffer: the incoming gradient may alias other gradients.
    Tensor fresh = detail::make_empty(grad.shape(), leaf.dtype, grad.device());
    fresh.copy_(grad);
    fresh.storage()->set_category(MemoryCategory::Gradient);
    leaf.grad = fresh.impl_ptr();
  } else {
    Tensor(leaf.grad).add_(grad);
  }
}

struct EngineCapture {
  std::unordered_map<const TensorImpl*, Tensor> leaves;  // leaf input -> gradient
  std::unordered_map<const Node*, Tensor> nodes;         // non-leaf input's grad_fn -> gradient
};

// `joined`: run as part of the pass this thread is running (backward_within_pass): the same pass
// id, its capture (if it is a heed::grad() pass) and its callbacks; the leaves of `joined`
// (the caller's inputs) have their gradients captured there and nowhere else.
void run_engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph,
                EngineCapture* capture, EngineCapture* joined = nullptr) {
  NoGradGuard no_grad;
  PassFrame* const outer_pass = g_current_pass;
  PassFrame own_frame{capture ? EnginePass::Grad : EnginePass::Backward, joined ? 0 : g_next_pass_id++, {}, capture};
  PassFrame& frame = joined ? *outer_pass : own_frame;
  g_current_pass = &frame;
  struct RestorePass {
    PassFrame* outer;
    ~RestorePass() { g_current_pass = outer; }
  } restore_pass{outer_pass};

  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, Tensor> buffers;
  std::vector<Node*> stack;

  // A leaf's gradients are summed until its last incoming edge was processed; then its hooks
  // run once on the total (as PyTorch's AccumulateGrad runs once all its inputs arrived) and
  // it is finalised: a leaf used twice in one graph does not see its hooks called per use.
  // Leaves that are roots themselves (no incoming edge) are finalised after the pass, in
  // first-arrival order.
  struct LeafGradient {
    std::shared_ptr<TensorImpl> leaf;
    Tensor total;
    bool finalised = false;
  };
  std::vector<LeafGradient> leaf_grads;
  std::unordered_map<const TensorImpl*, size_t> leaf_slot;
  std::unordered_map<const TensorImpl*, int> leaf_dependencies;
  const auto is_joined_input = [&](const TensorImpl* leaf) { return joined && joined->leaves.count(leaf) > 0; };
  auto deliver_to_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    if (capture && !capture->leaves.count(leaf.get()) && !is_joined_input(leaf.get())) return;
    const auto [it, inserted] = leaf_slot.try_emplace(leaf.get(), leaf_grads.size());
    if (inserted) {
      leaf_grads.push_back({leaf, std::move(g), false});
    } else {
      Tensor& total = leaf_grads[it->second].total;
      total = accumulate(total, g);
    }
  };
  auto finalise_leaf = [&](LeafGradient& entry) {
    if (entry.finalised) return;
    entry.finalised = true;
    Tensor total = std::move(entry.total);  // released here, not at the end of the pass
    if (is_joined_input(entry.leaf.get())) {
      joined->leaves[entry.leaf.get()] = std::move(total);
    } else if (capture) {
      // heed::grad: the leaf's hooks see (and may replace) its gradient; .grad stays as it is.
      // (Summed with what an earlier joined pass captured for the same leaf.)
      Tensor& captured = capture->leaves[entry.leaf.get()];
      Tensor hooked = apply_hooks(entry.leaf->hooks, total);
      captured = captured.defined() ? captured + hooked : hooked;
    } else {
      accumulate_into_leaf(*entry.leaf, std::move(total));
    }
  };

  // Count incoming edges of every reachable node and leaf.
  std::unordered_set<Node*> seen;
  for (const Tensor& root : roots) {
    Node* node = root.grad_fn().get();
    if (node && seen.insert(node).second) stack.push_back(node);
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->edges()) {
      if (e.leaf) ++leaf_dependencies[e.leaf.get()];
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    if (root.grad_fn()) {
      buffers[root.grad_fn().get()] = accumulate(buffers[root.grad_fn().get()], seeds[i]);
    } else {
      deliver_to_leaf(root.impl_ptr(), seeds[i]);
    }
  }
  std::vector<Node*> ready;
  for (Node* node : seen)
    if (dependencies[node] == 0) ready.push_back(node);

  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    Tensor grad_out = buffers[node];
    buffers.erase(node);
    std::vector<Tensor> grads(node->edges().size());
    if (grad_out.defined()) {
      grad_out = apply_hooks(node->output_hooks(), grad_out);
      if (capture) {
        auto it = capture->nodes.find(node);
        if (it != capture->nodes.end()) it->second = grad_out;
      } else if (std::shared_ptr<TensorImpl> retained = node->retained_output()) {
        if (!retained->grad) {
          retained->grad = grad_out.clone().impl_ptr();
        } else {
          Tensor(retained->grad).add_(grad_out);
        }
      }
      {
        // The profiler's backward span (heed/profile.h): the node's name and its output shape.
        std::optional<kernels::trace::Span> span;
        if (kernels::trace::active()) [[unlikely]]
          span.emplace(kernels::trace::Kind::Backward, node->name(), shape_str(node->output_shape()),
                       std::string(dtype_name(node->output_dtype())));
        grads = node->apply(grad_out, retain_graph);
        if (span) {
          span.reset();
          detail::sample_memory_counter();
        }
      }
      if (anomaly_detection_enabled()) [[unlikely]]
        detail::anomaly_check_backward(*node, grad_out, grads);
      if (g_backward_observer) g_backward_observer(*node, grad_out, grads);
    }
    grad_out = Tensor();  // a view's gradient may share its storage: let a leaf own it alone
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->edges()[i];
      if (!e.defined()) continue;
      const Tensor& g = grads[i];
      if (g.defined()) {
        const Dims& expected = e.node ? e.node->output_shape() : e.leaf->shape;
        HEED_CHECK(g.shape() == expected, node->name(),
                   "backward produced a gradient of shape {} for input {} of shape {} (bug in the "
                   "op's backward)",
                   shape_str(g.shape()), i, shape_str(expected));
      }
      if (e.leaf) {
        if (g.defined()) deliver_to_leaf(e.leaf, std::move(grads[i]));  // not read again
        if (--leaf_dependencies[e.leaf.get()] == 0) {
          auto slot = leaf_slot.find(e.leaf.get());
          if (slot != leaf_slot.end()) finalise_leaf(leaf_grads[slot->second]);
        }
        continue;
      }
      Node* next = e.node.get();
      if (g.defined()) buffers[next] = accumulate(buffers[next], g);
      if (--dependencies[next] == 0) ready.push_back(next);
    }
  }

  for (LeafGradient& entry : leaf_grads) finalise_leaf(entry);
  if (joined) return;  // the pass this one joined runs the callbacks when it ends

  // Callbacks queued during the pass (and by these callbacks), in order.
  for (size_t i = 0; i < frame.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(frame.callbacks[i]);
    callback();
  }
}

// Seed gradients for `roots`; `op` ("backward" or "grad") names the caller in errors.
std::vector<Tensor> seeds_for(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, const char* op) {
  HEED_CHECK(grads.empty() || grads.size() == roots.size(), op, "got {} gradients for {} tensors", grads.size(),
             roots.size());
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    detail::check_defined(root, op, "tensor");
    HEED_CHECK(root.requires_grad(), op, "tensor {} of shape {} does not require grad and has no grad_fn", i,
               shape_str(root.shape()));
    Tensor seed = grads.empty() ? Tensor() : grads[i];
    if (!seed.defined()) {
      HEED_CHECK(root.numel() == 1, op,
                 "grad can be implicitly created only for tensors with one element; got shape {} "
                 "(pass a gradient of the same shape)",
                 shape_str(root.shape()));
      seed = ones(root.shape(), root.options());
    }
    HEED_CHECK(seed.shape() == root.shape(), op, "gradient of shape {} given for a tensor of shape {}",
               shape_str(seed.shape()), shape_str(root.shape()));
    detail::check_same_device(seed, root, op);
    if (anomaly_detection_enabled()) [[unlikely]]
      detail::anomaly_check_seed(seed, i, op);
    seeds.push_back(seed.dtype() == root.dtype() ? seed : seed.to(root.dtype()));
  }
  return seeds;
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  run_engine(roots, seeds_for(roots, grads, "backward"), retain_graph, nullptr);
}

std::vector<Tensor> backward_within_pass(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                                         const std::vector<Tensor>& inputs) {
  HEED_CHECK(g_current_pass != nullptr, "backward_within_pass",
             "called outside a backward pass (call it from a backward closure)");
  EngineCapture joined;
  for (const Tensor& in : inputs) {
    detail::check_defined(in, "backward_within_pass", "input");
    HEED_CHECK(in.requires_grad() && !in.grad_fn(), "backward_within_pass",
               "input of shape {} must be a leaf that requires grad", shape_str(in.shape()));
    joined.leaves[in.impl_ptr().get()] = Tensor();
  }
  run_engine(roots, seeds_for(roots, grads, "backward"), /*retain_graph=*/false, g_current_pass->capture, &joined);
  std::vector<Tensor> result;
  for (const Tensor& in : inputs) result.push_back(joined.leaves[in.impl_ptr().get()]);
  return result;
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  EngineCapture capture;
  for (const Tensor& in : inputs) {
    detail::check_defined(in, "grad", "input");
    HEED_CHECK(in.requires_grad(), "grad", "an input of shape {} does not require grad", shape_str(in.shape()));
    if (in.grad_fn())
      capture.nodes[in.grad_fn().get()] = Tensor();
    else
      capture.leaves[in.impl_ptr().get()] = Tensor();
  }
  run_engine(outputs, seeds_for(outputs, grad_outputs, "grad"), retain_graph, &capture);
  std::vector<Tensor> result;
  for (const Tensor& in : inputs) {
    Tensor g = in.grad_fn() ? capture.nodes[in.grad_fn().get()] : capture.leaves[in.impl_ptr().get()];
    result.push_back(g.defined() ? g : zeros(in.shape(), in.options()));
  }
  return result;
}

}  // namespace heed
