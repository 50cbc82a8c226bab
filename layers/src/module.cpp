// layers/src/module.cpp — nn::Module bookkeeping.
#include "heed/nn/module.h"

#include <algorithm>
#include <map>
#include <set>

#include "heed/autograd.h"
#include "heed/memory.h"
#include "heed/ops.h"

namespace heed::nn {

void assign_data(const Tensor& target, const Tensor& data) {
  TensorImpl& t = target.impl();
  const TensorImpl& d = data.impl();
  t.storage = d.storage;
  t.shape = d.shape;
  t.strides = d.strides;
  t.offset = d.offset;
  t.dtype = d.dtype;
  t.grad = nullptr;
  if (t.requires_grad && !is_floating(t.dtype)) t.requires_grad = false;
  if (t.storage) t.storage->set_category(MemoryCategory::Parameter);
}

void Module::check_new_name(const std::string& name) const {
  HEED_CHECK(!name.empty() && name.find('.') == std::string::npos, "register", "invalid name '{}' in {} (no dots)",
             name, type_name_);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  HEED_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), "register",
             "name '{}' is already used in {}", name, type_name_);
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name);
  HEED_CHECK(value.defined(), "register_parameter", "parameter '{}' of {} is undefined", name, type_name_);
  Tensor p = value.is_leaf() ? value : value.detach();
  if (requires_grad) p.requires_grad_(true);
  set_memory_category(p, MemoryCategory::Parameter);
  parameters_.emplace_back(name, p);
  return p;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  check_new_name(name);
  HEED_CHECK(value.defined(), "register_buffer", "buffer '{}' of {} is undefined", name, type_name_);
  set_memory_category(value, MemoryCategory::Parameter);
  buffers_.emplace_back(name, value);
  buffer_persistent_.push_back(persistent);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  HEED_CHECK(module != nullptr, "register_module", "submodule '{}' of {} is null", name, type_name_);
  module->train(training_);
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers, bool persistent_only,
                     NamedTensors* out) const {
  if (buffers) {
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (!persistent_only || buffer_persistent_[i]) out->emplace_back(prefix + buffers_[i].first, buffers_[i].second);
  } else {
    for (const auto& [name, t] : parameters_) out->emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, buffers, persistent_only, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", recurse, false, false, &out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, false, &out);
  return out;
}

void Module::collect_unnamed(bool recurse, bool buffers, std::vector<Tensor>* out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out->push_back(t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_unnamed(true, buffers, out);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  collect_unnamed(recurse, false, &out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string prefix = out[i].first.empty() ? "" : out[i].first + ".";
    for (auto& [name, child] : out[i].second->children_) out.emplace_back(prefix + name, child.get());
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto* list : {&parameters_, &buffers_})
    for (auto& [name, t] : *list)
      if (t.device() != device) assign_data(t, t.detach().to(device));
  for (auto& [name, child] : children_) child->to(device);
}

Device Module::device() const {
  // The common case without names (charlm asks once per sampled token); the names only for the
  // error below.
  std::vector<Tensor> unnamed;
  collect_unnamed(true, false, &unnamed);
  collect_unnamed(true, true, &unnamed);
  if (!unnamed.empty() && std::all_of(unnamed.begin(), unnamed.end(),
                                      [&](const Tensor& t) { return t.device() == unnamed.front().device(); }))
    return unnamed.front().device();
  NamedTensors tensors = named_parameters();
  for (auto& named : named_buffers()) tensors.push_back(std::move(named));
  HEED_CHECK(!tensors.empty(), "Module::device", "{} has no parameters or buffers, so it is on no device", type_name_);
  const auto& [first_name, first] = tensors.front();
  for (const auto& [name, t] : tensors)
    HEED_CHECK(t.device() == first.device(), "Module::device",
               "{} has tensors on two devices: '{}' on {} and '{}' on {}; move the whole module with to(device)",
               type_name_, first_name, first.device().str(), name, t.device().str());
  return first.device();
}

void Module::to(DType dtype) {
  HEED_CHECK(is_floating(dtype), "Module::to", "modules convert to floating dtypes only, got {}", dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto* list : {&parameters_, &buffers_})
    for (auto& [name, t] : *list)
      if (is_floating(t.dtype()) && t.dtype() != dtype) assign_data(t, t.detach().to(dtype));
  for (auto& [name, child] : children_) child->to(dtype);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, false, false, &out);
  collect("", true, true, true, &out);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  const NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    HEED_CHECK(given.emplace(name, &t).second, "load_state_dict", "key '{}' appears twice", name);
    HEED_CHECK(t.defined(), "load_state_dict", "key '{}' holds an undefined tensor", name);
  }
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second->shape() != t.shape()) {
      mismatched.push_back(
          fmt::format("{}: checkpoint {} vs model {}", name, shape_str(it->second->shape()), shape_str(t.shape())));
    }
  }
  for (const auto& [name, t] : state)
    if (!own_names.count(name)) unexpected.push_back(name);
  HEED_CHECK(mismatched.empty(), "load_state_dict", "shape mismatch for {} key(s): {}", mismatched.size(),
             fmt::join(mismatched, "; "));
  if (strict) {
    HEED_CHECK(missing.empty() && unexpected.empty(), "load_state_dict",
               "state dict does not match {}: missing keys [{}]; unexpected keys [{}]", type_name_,
               fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  }
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    const Tensor& src = *it->second;
    Tensor converted = src.detach().to(t.dtype()).to(t.device());
    if (converted.is_same(src) || converted.storage() == src.storage()) converted = converted.clone();
    assign_data(t, converted.contiguous());
  }
}

std::string Module::str() const {
  std::string out;
  str_into(&out, 0);
  return out;
}

void Module::str_into(std::string* out, int indent) const {
  *out += type_name_ + "(" + extra_repr();
  if (children_.empty()) {
    *out += ")";
    return;
  }
  *out += "\n";
  for (const auto& [name, child] : children_) {
    *out += std::string(indent + 2, ' ') + "(" + name + "): ";
    child->str_into(out, indent + 2);
    *out += "\n";
  }
  *out += std::string(indent, ' ') + ")";
}

}  // namespace heed::nn
