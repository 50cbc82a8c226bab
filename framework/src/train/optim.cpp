// framework/src/train/optim.cpp — SGD, Adam and AdamW, and the optimizer state dict.
//
// Invariants: updates run under NoGradGuard and write parameters in place (version bumped);
// Adam/AdamW call the fused adam_step kernel once per device per step with all its parameters;
// load_state_dict builds the whole new state before it touches the optimizer.
#include "heed/optim.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "heed/autograd.h"
#include "heed/json_read.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed::optim {

using nlohmann::json;

namespace {

std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

std::string buffer_key(size_t group, size_t index, const std::string& buffer) {
  return fmt::format("state.{}.{}.{}", group, index, buffer);
}

// Reads a JSON field of the expected kind or throws a heed::Error naming it.
const json& field(const json& object, const char* key, const char* where) {
  HEED_CHECK(object.is_object() && object.contains(key), "load_state_dict", "malformed optimizer state: {} has no '{}'",
             where, key);
  return object[key];
}
double number_field(const json& object, const char* key, const char* where) {
  return io::json_number(field(object, key, where),
                         {"load_state_dict", "malformed optimizer state", fmt::format("{}.{}", where, key)});
}
bool bool_field(const json& object, const char* key, const char* where) {
  return io::json_boolean(field(object, key, where),
                          {"load_state_dict", "malformed optimizer state", fmt::format("{}.{}", where, key)});
}

}  // namespace

// ---- Optimizer ------------------------------------------------------------------------------

Optimizer::Optimizer(const char* name, std::vector<ParamGroup> groups, double default_lr, double default_weight_decay)
    : name_(name), default_lr_(default_lr), default_weight_decay_(default_weight_decay) {
  HEED_CHECK(!groups.empty(), name_, "got no parameter groups");
  for (ParamGroup& group : groups) add_param_group(std::move(group));
  size_t total = 0;
  for (const ParamGroup& group : groups_) total += group.params.size();
  HEED_CHECK(total > 0, name_, "got an empty parameter list");
}

void Optimizer::check_group(const ParamGroup& group, size_t group_index) const {
  HEED_CHECK(group.lr >= 0.0 && std::isfinite(group.lr), name(),
             "invalid learning rate {} in parameter group {} (expected a finite lr >= 0)", group.lr, group_index);
  HEED_CHECK(group.weight_decay >= 0.0 && std::isfinite(group.weight_decay), name(),
             "invalid weight_decay {} in parameter group {} (expected a finite value >= 0)", group.weight_decay,
             group_index);
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t group_index = groups_.size();
  const char* op = name_;
  if (std::isnan(group.lr)) group.lr = default_lr_;
  if (std::isnan(group.weight_decay)) group.weight_decay = default_weight_decay_;
  check_group(group, group_index);
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& existing : groups_)
    for (const Tensor& p : existing.params) seen.insert(p.impl_ptr().get());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    HEED_CHECK(p.defined(), op, "parameter {} of group {} is an undefined Tensor", i, group_index);
    HEED_CHECK(is_floating(p.dtype()), op,
               "parameter {} of group {} has dtype {}; only floating-point tensors can be optimized", i, group_index,
               dtype_name(p.dtype()));
    HEED_CHECK(p.is_leaf(), op, "parameter {} of group {} (shape {}) is not a leaf tensor; optimize the leaves", i,
               group_index, shape_str(p.shape()));
    HEED_CHECK(seen.insert(p.impl_ptr().get()).second, op, "parameter {} of group {} (shape {}) appears more than once",
               i, group_index, shape_str(p.shape()));
  }
  state_.emplace_back(group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::prepare_step() {
  // A NaN lr here is an error (e.g. from a broken schedule), not "use the default".
  for (size_t g = 0; g < groups_.size(); ++g) check_group(groups_[g], g);
  state_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) state_[g].resize(groups_[g].params.size());
}

void Optimizer::zero_grad() {
  for (ParamGroup& group : groups_)
    for (Tensor& p : group.params)
      if (p.defined()) p.zero_grad();
}

const ParamState& Optimizer::state(size_t group, size_t index) const {
  HEED_CHECK(group < groups_.size() && index < groups_[group].params.size(), "Optimizer::state",
             "no parameter {} in group {} ({} groups)", index, group, groups_.size());
  static const ParamState kEmpty;
  if (group >= state_.size() || index >= state_[group].size()) return kEmpty;
  return state_[group][index];
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  json groups = json::array(), states = json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    json shapes = json::array();
    for (const Tensor& p : groups_[g].params) shapes.push_back(p.shape().vec());
    groups.push_back(
        {{"lr", groups_[g].lr}, {"weight_decay", groups_[g].weight_decay}, {"param_shapes", std::move(shapes)}});
    json group_states = json::array();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const ParamState* s = g < state_.size() && i < state_[g].size() ? &state_[g][i] : nullptr;
      if (!s || (s->step == 0 && s->buffers.empty())) {
        group_states.push_back(nullptr);
        continue;
      }
      group_states.push_back({{"step", s->step}});
      for (const auto& [buffer, tensor] : s->buffers)
        out.tensors.emplace_back(buffer_key(g, i, buffer), tensor.detach().clone());
    }
    states.push_back(std::move(group_states));
  }
  out.scalars = {{"optimizer", name()},
                 {"options", options_json()},
                 {"param_groups", std::move(groups)},
                 {"state", std::move(states)}};
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& saved) {
  constexpr const char* kOp = "load_state_dict";
  try {
    const json& scalars = saved.scalars;
    HEED_CHECK(scalars.is_object(), kOp, "malformed optimizer state: scalars must be an object");
    const json& type = field(scalars, "optimizer", "state");
    HEED_CHECK(type.is_string() && type.get<std::string>() == name(), kOp, "the state belongs to optimizer {}, not {}",
               type.dump(), name());
    const json& options = field(scalars, "options", "state");
    const json& groups = field(scalars, "param_groups", "state");
    const json& states = field(scalars, "state", "state");
    HEED_CHECK(groups.is_array() && states.is_array() && groups.size() == states.size(), kOp,
               "malformed optimizer state: param_groups and state must be arrays of equal length");
    HEED_CHECK(groups.size() == groups_.size(), kOp, "the state has {} parameter groups, the optimizer has {}",
               groups.size(), groups_.size());
    const std::vector<std::string> needed = buffer_names(options);

    std::map<std::string, const Tensor*> tensors;
    for (const auto& [key, tensor] : saved.tensors) {
      HEED_CHECK(tensor.defined(), kOp, "the state tensor '{}' is undefined", key);
      HEED_CHECK(tensors.emplace(key, &tensor).second, kOp, "the state tensor '{}' appears twice", key);
    }
    size_t used_tensors = 0;
    std::vector<double> lrs, weight_decays;
    std::vector<std::vector<ParamState>> new_state(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      const std::string where = fmt::format("param_groups[{}]", g);
      const json& group = groups[g];
      lrs.push_back(number_field(group, "lr", where.c_str()));
      weight_decays.push_back(number_field(group, "weight_decay", where.c_str()));
      HEED_CHECK(lrs.back() >= 0.0 && std::isfinite(lrs.back()) && weight_decays.back() >= 0.0 &&
                     std::isfinite(weight_decays.back()),
                 kOp, "group {} has lr {} and weight_decay {} (expected finite values >= 0)", g, lrs.back(),
                 weight_decays.back());
      const json& shapes = field(group, "param_shapes", where.c_str());
      const std::vector<Tensor>& params = groups_[g].params;
      HEED_CHECK(shapes.is_array() && shapes.size() == params.size(), kOp,
                 "group {} of the state has {} parameters, the optimizer's has {}", g,
                 shapes.is_array() ? shapes.size() : 0, params.size());
      HEED_CHECK(states[g].is_array() && states[g].size() == params.size(), kOp,
                 "malformed optimizer state: state[{}] must list {} entries", g, params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& p = params[i];
        HEED_CHECK(shapes[i] == json(p.shape().vec()), kOp,
                   "parameter {} of group {} has shape {} but the state was saved for shape {}", i, g,
                   shape_str(p.shape()), shapes[i].dump());
        ParamState& s = new_state[g].emplace_back();
        const json& entry = states[g][i];
        if (entry.is_null()) continue;
        const json& step = field(entry, "step", "a parameter state");
        s.step = io::json_integer(step, {kOp, "malformed optimizer state", fmt::format("state[{}][{}].step", g, i)}, 0);
        for (const std::string& buffer : needed) {
          const std::string key = buffer_key(g, i, buffer);
          auto it = tensors.find(key);
          HEED_CHECK(it != tensors.end(), kOp, "the state has no tensor '{}'", key);
          const Tensor& t = *it->second;
          HEED_CHECK(t.shape() == p.shape(), kOp,
                     "the state tensor '{}' has shape {} but parameter {} of group {} has shape {}", key,
                     shape_str(t.shape()), i, g, shape_str(p.shape()));
          HEED_CHECK(is_floating(t.dtype()), kOp, "the state tensor '{}' has dtype {}", key, dtype_name(t.dtype()));
          // A fresh contiguous copy in the parameter's dtype and on its device.
          Tensor copy = empty(p.shape(), p.options());
          NoGradGuard no_grad;
          copy.copy_(t.detach());
          copy.storage()->set_category(MemoryCategory::OptimizerState);
          s.buffers.emplace(buffer, std::move(copy));
          ++used_tensors;
        }
      }
    }
    if (used_tensors != tensors.size()) {
      for (const auto& [key, tensor] : tensors) {
        bool used = false;
        for (size_t g = 0; g < new_state.size() && !used; ++g)
          for (size_t i = 0; i < new_state[g].size() && !used; ++i)
            for (const auto& [buffer, t] : new_state[g][i].buffers)
              if (buffer_key(g, i, buffer) == key) used = true;
        HEED_CHECK(used, kOp, "unexpected tensor '{}' in the optimizer state", key);
      }
    }
    // Everything fits: commit (load_options_json validates before it changes anything).
    try {
      load_options_json(options);
    } catch (const Error& e) {
      fail(kOp, "invalid options in the state: {}", e.what());
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].lr = lrs[g];
      groups_[g].weight_decay = weight_decays[g];
    }
    state_ = std::move(new_state);
  } catch (const json::exception& e) {
    fail(kOp, "malformed optimizer state: {}", e.what());
  }
}

// ---- SGD ------------------------------------------------------------------------------------

namespace {
void check_sgd_options(const SGDOptions& o) {
  HEED_CHECK(o.lr >= 0.0 && std::isfinite(o.lr), "SGD", "invalid learning rate {} (expected >= 0)", o.lr);
  HEED_CHECK(o.momentum >= 0.0 && std::isfinite(o.momentum), "SGD", "invalid momentum {} (expected >= 0)", o.momentum);
  HEED_CHECK(std::isfinite(o.dampening), "SGD", "invalid dampening {}", o.dampening);
  HEED_CHECK(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), "SGD", "invalid weight_decay {} (expected >= 0)",
             o.weight_decay);
  HEED_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), "SGD",
             "nesterov momentum requires momentum > 0 and dampening 0 (got momentum {}, "
             "dampening {})",
             o.momentum, o.dampening);
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", (check_sgd_options(options), std::move(groups)), options.lr, options.weight_decay),
      options_(options) {}

void SGD::step() {
  prepare_step();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor p = group.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      detail::check_same_device(p, grad, "SGD");
      Tensor d_p = grad.detach().to(p.dtype());
      if (group.weight_decay != 0.0) d_p = add(d_p, p.detach(), group.weight_decay);
      ParamState& s = state_[g][i];
      if (options_.momentum != 0.0) {
        auto it = s.buffers.find("momentum_buffer");
        if (it == s.buffers.end()) {
          it = s.buffers.emplace("momentum_buffer", d_p.clone()).first;
          it->second.storage()->set_category(MemoryCategory::OptimizerState);
        } else {
          it->second.mul_(options_.momentum).add_(d_p, 1.0 - options_.dampening);
        }
        d_p = options_.nesterov ? add(d_p, it->second, options_.momentum) : it->second;
      }
      p.add_(d_p, -group.lr);
      ++s.step;
    }
  }
}

json SGD::options_json() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov}};
}

void SGD::load_options_json(const json& options) {
  SGDOptions o;
  o.lr = number_field(options, "lr", "options");
  o.momentum = number_field(options, "momentum", "options");
  o.dampening = number_field(options, "dampening", "options");
  o.weight_decay = number_field(options, "weight_decay", "options");
  o.nesterov = bool_field(options, "nesterov", "options");
  check_sgd_options(o);
  options_ = o;
}

std::vector<std::string> SGD::buffer_names(const json& options) const {
  return number_field(options, "momentum", "options") != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                                             : std::vector<std::string>{};
}

// ---- Adam / AdamW ---------------------------------------------------------------------------

namespace {
AdamOptions check_adam_options(const AdamOptions& o, const char* op) {
  HEED_CHECK(o.lr >= 0.0 && std::isfinite(o.lr), op, "invalid learning rate {} (expected >= 0)", o.lr);
  HEED_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, op, "invalid beta1 {} (expected 0 <= beta1 < 1)",
             o.betas.first);
  HEED_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, op, "invalid beta2 {} (expected 0 <= beta2 < 1)",
             o.betas.second);
  HEED_CHECK(o.eps >= 0.0 && std::isfinite(o.eps), op, "invalid eps {} (expected >= 0)", o.eps);
  HEED_CHECK(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), op, "invalid weight_decay {} (expected >= 0)",
             o.weight_decay);
  return o;
}
AdamOptions to_adam_options(const AdamWOptions& o) {
  return {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay, .amsgrad = o.amsgrad};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(single_group(std::move(params)), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled_weight_decay)
    : Optimizer(decoupled_weight_decay ? "AdamW" : "Adam",
                (check_adam_options(options, decoupled_weight_decay ? "AdamW" : "Adam"), std::move(groups)), options.lr,
                options.weight_decay),
      options_(options),
      decoupled_weight_decay_(decoupled_weight_decay) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(single_group(std::move(params)), to_adam_options(options), true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(std::move(groups), to_adam_options(options), true) {}

void Adam::step() {
  const char* op = name();
  prepare_step();
  NoGradGuard no_grad;
  // Every parameter is checked before any is touched, so a bad one leaves the whole step undone.
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      HEED_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, op,
                 "parameter {} of group {} has dtype {}; the fused update needs float32 or "
                 "float64 parameters (keep float32 master weights for mixed precision)",
                 i, g, dtype_name(p.dtype()));
      HEED_CHECK(p.numel() == 0 || p.is_contiguous(), op,
                 "parameter {} of group {} (shape {}, strides {}) is not contiguous; the fused "
                 "update needs contiguous parameters",
                 i, g, shape_str(p.shape()), shape_str(p.strides()));
      detail::check_same_device(p, grad, op);
      HEED_CHECK(grad.shape() == p.shape(), op,
                 "the gradient of parameter {} of group {} has shape {}, the parameter {}", i, g,
                 shape_str(grad.shape()), shape_str(p.shape()));
    }
  }
  // One adam_step call per device with all its parameters (one parallel loop on the CPU).
  std::vector<std::pair<Device, std::vector<kernels::AdamStepArgs>>> calls;
  std::vector<Tensor> grads, updated;  // the (converted) gradients stay alive until the calls ran
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      grad = grad.detach();  // converted or copied only where needed (the ops cost microseconds each)
      if (grad.dtype() != p.dtype()) grad = grad.to(p.dtype());
      if (!grad.is_contiguous()) grad = grad.contiguous();
      ParamState& s = state_[g][i];
      auto buffer = [&](const char* buffer_name) -> Tensor& {
        auto it = s.buffers.find(buffer_name);
        if (it == s.buffers.end()) {
          it = s.buffers.emplace(buffer_name, zeros_like(p.detach())).first;
          it->second.storage()->set_category(MemoryCategory::OptimizerState);
        }
        HEED_INTERNAL_ASSERT((p.numel() == 0 || it->second.is_contiguous()) && it->second.dtype() == p.dtype());
        return it->second;
      };
      ++s.step;
      kernels::AdamStepArgs args;
      args.dtype = p.dtype();
      args.param = p.raw_data();
      args.grad = grad.raw_data();
      args.exp_avg = buffer("exp_avg").raw_data();
      args.exp_avg_sq = buffer("exp_avg_sq").raw_data();
      args.max_exp_avg_sq = options_.amsgrad ? buffer("max_exp_avg_sq").raw_data() : nullptr;
      args.n = p.numel();
      args.lr = group.lr;
      args.beta1 = options_.betas.first;
      args.beta2 = options_.betas.second;
      args.eps = options_.eps;
      args.weight_decay = group.weight_decay;
      args.decoupled_weight_decay = decoupled_weight_decay_;
      args.step = s.step;
      updated.push_back(p);
      if (args.n == 0) continue;
      grads.push_back(std::move(grad));
      auto call = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == p.device(); });
      if (call == calls.end()) call = calls.insert(calls.end(), {p.device(), {}});
      call->second.push_back(args);
    }
  }
  // Plain names, not a structured binding: HEED_KERNEL expands to a lambda, and clang
  // before 16 cannot capture a structured binding.
  for (const auto& call : calls) {
    const Device device = call.first;
    const std::vector<kernels::AdamStepArgs>& tensors = call.second;
    HEED_KERNEL(device, adam_step)(tensors.data(), static_cast<int>(tensors.size()));
  }
  for (const Tensor& p : updated) p.storage()->bump_version();
}

json Adam::options_json() const {
  return {{"lr", options_.lr},
          {"betas", {options_.betas.first, options_.betas.second}},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay},
          {"amsgrad", options_.amsgrad}};
}

void Adam::load_options_json(const json& options) {
  AdamOptions o;
  o.lr = number_field(options, "lr", "options");
  const json& betas = field(options, "betas", "options");
  const std::vector<double> beta_values =
      io::json_numbers(betas, {"load_state_dict", "malformed optimizer state", "options.betas"}, 0.0, 1.0, 2);
  o.betas = {beta_values[0], beta_values[1]};
  o.eps = number_field(options, "eps", "options");
  o.weight_decay = number_field(options, "weight_decay", "options");
  o.amsgrad = bool_field(options, "amsgrad", "options");
  options_ = check_adam_options(o, name());
}

std::vector<std::string> Adam::buffer_names(const json& options) const {
  std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
  if (bool_field(options, "amsgrad", "options")) names.push_back("max_exp_avg_sq");
  return names;
}

}  // namespace heed::optim
