// heed/optim.h — optimizers (SGD, Adam, AdamW) with PyTorch's update rules and state.
//
// Invariants:
//  * step() updates every parameter that has a gradient, in place, under NoGradGuard: no
//    autograd history is recorded; parameters without a gradient are skipped (their state,
//    step count included, is left as it is). Each update bumps the parameter's version.
//  * Every group's lr and weight_decay are concrete after construction (kUseOptimizerDefault
//    resolved from the options); schedulers change `param_groups()[g].lr` between steps.
//  * State is per parameter, addressed by (group, index). state_dict() gives the buffers as
//    named tensors "state.<group>.<index>.<buffer>" (fresh copies) plus a JSON of scalars
//    (optimizer type, options, per-group lr/weight_decay/parameter shapes, step counts), so a
//    checkpoint can hold them in safetensors + JSON. load_state_dict checks the type, group
//    and parameter counts, shapes and buffers and changes nothing unless all of it fits.
//  * Adam/AdamW run the fused `adam_step` kernel (one call per device per step over all its
//    parameters: on the CPU one parallel loop) and need
//    contiguous float32/float64 parameters; SGD runs on tensor ops (any floating dtype).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "heed/tensor.h"

namespace heed::optim {

// A ParamGroup field left at this value takes the optimizer's option.
inline constexpr double kUseOptimizerDefault = std::numeric_limits<double>::quiet_NaN();

// Parameters sharing a learning rate and weight decay, e.g. no decay on biases and norms:
//   std::vector<ParamGroup> groups = {{.params = weights}, {.params = biases, .weight_decay = 0}};
struct ParamGroup {
  std::vector<Tensor> params{};
  double lr = kUseOptimizerDefault;
  double weight_decay = kUseOptimizerDefault;
};

// What a checkpoint stores of an optimizer.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors{};  // "state.<group>.<index>.<buffer>"
  nlohmann::json scalars{};                               // {"optimizer", "options", "param_groups", "state"}
};

// The state of one parameter: how many updates it has had and its buffers.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;  // e.g. "exp_avg", "momentum_buffer"
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Drops every parameter's gradient (set to undefined, like set_to_none=True).
  void zero_grad();
  // "SGD", "Adam" or "AdamW".
  const char* name() const { return name_; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group (defaults resolved from the options); its parameters must be new.
  void add_param_group(ParamGroup group);
  // The state of parameter `index` of group `group` (empty before its first update).
  const ParamState& state(size_t group, size_t index) const;

  // Virtual: a wrapper (dist::ZeroRedundancyOptimizer) gives its own (sharded) state.
  virtual OptimizerState state_dict() const;
  virtual void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer(const char* name, std::vector<ParamGroup> groups, double default_lr, double default_weight_decay);
  // Checks every group's lr/weight_decay and sizes the state to the groups (users may add
  // parameters to a group between steps); call at the start of step().
  void prepare_step();
  // Hooks of the concrete optimizers.
  virtual nlohmann::json options_json() const = 0;
  // Validates and applies options read from a state dict (throws before changing anything).
  virtual void load_options_json(const nlohmann::json& options) = 0;
  // Buffer names a parameter with state must have under `options` (from options_json()).
  virtual std::vector<std::string> buffer_names(const nlohmann::json& options) const = 0;

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // [group][index]

 private:
  void check_group(const ParamGroup& group, size_t group_index) const;
  const char* name_;
  double default_lr_;
  double default_weight_decay_;
};

// ---- SGD ------------------------------------------------------------------------------------

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: added to the gradient as weight_decay * p
  bool nesterov = false;
};

// PyTorch's SGD: g += wd*p; buf = g on the first step, else momentum*buf + (1-dampening)*g;
// g = nesterov ? g + momentum*buf : buf (when momentum != 0); p -= lr*g.
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  nlohmann::json options_json() const override;
  void load_options_json(const nlohmann::json& options) override;
  std::vector<std::string> buffer_names(const nlohmann::json& options) const override;

 private:
  SGDOptions options_;
};

// ---- Adam / AdamW ---------------------------------------------------------------------------

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // AdamW: decoupled, p -= lr * weight_decay * p
  bool amsgrad = false;
};

// PyTorch's Adam (decoupled = false) and AdamW (decoupled = true), per parameter at step t:
//   Adam: g += wd*p          AdamW: p *= 1 - lr*wd
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  vmax = max(vmax, v) if amsgrad
//   p -= lr/(1-b1^t) * m / (sqrt(amsgrad ? vmax : v)/sqrt(1-b2^t) + eps)
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  void step() override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled_weight_decay);
  nlohmann::json options_json() const override;
  void load_options_json(const nlohmann::json& options) override;
  std::vector<std::string> buffer_names(const nlohmann::json& options) const override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace heed::optim
