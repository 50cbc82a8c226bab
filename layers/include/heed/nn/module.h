// heed/nn/module.h — nn::Module: parameters, buffers and submodules with dotted names,
// train/eval, device/dtype moves and state dicts.
//
// Invariants:
//  * Parameters and buffers are Tensor handles owned by the module that registered them;
//    layer members hold the same handles, so to()/load_state_dict() update the tensors in
//    place (the TensorImpl keeps its identity) and every holder sees the change.
//  * Names are unique within a module; a full name joins the path with dots
//    ("encoder.layers.0.self_attn.q_proj.weight") and is the checkpoint key.
//  * train()/eval() propagate to every descendant.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "heed/tensor.h"

namespace heed::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // Every module in the tree with its dotted path ("" for this one), parents first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and persistent/non-persistent buffers; to(dtype) converts floating ones.
  void to(Device device);
  // The device of every parameter and buffer (to(Device) keeps them together); heed::Error
  // when the module has none, or when two of them are on different devices (naming both).
  Device device() const;
  void to(DType dtype);
  void zero_grad();

  // Parameters then persistent buffers, with dotted names.
  NamedTensors state_dict() const;
  // Copies values into the existing tensors. strict: missing or unexpected keys are an error
  // listing them; shape mismatches are always an error.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // PyTorch-style tree printout.
  std::string str() const;

 protected:
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Extra text for str(), e.g. "in=4, out=8".
  virtual std::string extra_repr() const { return ""; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool buffers, bool persistent_only, NamedTensors* out) const;
  // The parameters (or buffers) of this module, then of its children depth first, in
  // named_parameters() order, without building their dotted names.
  void collect_unnamed(bool recurse, bool buffers, std::vector<Tensor>* out) const;
  void str_into(std::string* out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<bool> buffer_persistent_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// A list of submodules named "0", "1", ...
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    items_.push_back(module);
    return register_module(std::to_string(items_.size() - 1), std::move(module));
  }
  size_t size() const { return items_.size(); }
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    return std::dynamic_pointer_cast<M>(items_.at(i));
  }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// Replaces the data of `target` in place (storage, shape, strides, dtype), keeping its
// identity and requires_grad; drops its gradient. Used by to() and loaders.
void assign_data(const Tensor& target, const Tensor& data);

}  // namespace heed::nn
