// framework/src/train/lr_scheduler.cpp — ConstantLR, WarmupCosineLR and NoamLR.
//
// Invariant: the lr of a group is always get_lr(current_step(), group); constructors,
// step() and load_state_dict() all go through apply().
#include "heed/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "heed/json_read.h"

namespace heed::optim {

using nlohmann::json;

// ---- LRScheduler ----------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& group : optimizer.param_groups()) base_lrs_.push_back(group.lr);
}

void LRScheduler::check_step(int64_t step) const { HEED_CHECK(step >= 0, name(), "step must be >= 0, got {}", step); }

double LRScheduler::group_ratio(size_t group) const {
  HEED_CHECK(group < base_lrs_.size(), name(), "no parameter group {} (the optimizer had {})", group, base_lrs_.size());
  return base_lrs_[0] == 0.0 ? 1.0 : base_lrs_[group] / base_lrs_[0];
}

void LRScheduler::apply() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  HEED_CHECK(groups.size() == base_lrs_.size(), name(),
             "the optimizer has {} parameter groups, but the scheduler was made for {}", groups.size(),
             base_lrs_.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = get_lr(step_, g);
}

void LRScheduler::step() {
  ++step_;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> lrs;
  for (const ParamGroup& group : optimizer_.param_groups()) lrs.push_back(group.lr);
  return lrs;
}

json LRScheduler::state_dict() const { return {{"scheduler", name()}, {"step", step_}, {"base_lrs", base_lrs_}}; }

void LRScheduler::load_state_dict(const json& state) {
  constexpr const char* kOp = "LRScheduler::load_state_dict";
  HEED_CHECK(state.is_object() && state.contains("scheduler") && state.contains("step") && state.contains("base_lrs"),
             kOp, "malformed scheduler state {} (expected scheduler, step and base_lrs)", state.dump());
  HEED_CHECK(state["scheduler"] == name(), kOp, "the state belongs to {}, not {}", state["scheduler"].dump(), name());
  const io::JsonFields fields(state, kOp, "scheduler state");
  const int64_t step = fields.integer("step", 0);
  const json& bases = fields.array("base_lrs");
  HEED_CHECK(bases.size() == optimizer_.param_groups().size(), kOp,
             "the state has base lrs {} for an optimizer with {} parameter groups", bases.dump(),
             optimizer_.param_groups().size());
  base_lrs_ = fields.numbers("base_lrs", 0.0);
  step_ = step;
  apply();
}

// ---- ConstantLR -----------------------------------------------------------------------------

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  HEED_CHECK(factor >= 0.0 && std::isfinite(factor), name(), "factor must be finite and >= 0, got {}", factor);
  HEED_CHECK(total_iters >= 0, name(), "total_iters must be >= 0, got {}", total_iters);
  apply();
}

double ConstantLR::get_lr(int64_t step, size_t group) const {
  check_step(step);
  HEED_CHECK(group < base_lrs_.size(), name(), "no parameter group {}", group);
  return base_lrs_[group] * (step < total_iters_ ? factor_ : 1.0);
}

// ---- WarmupCosineLR -------------------------------------------------------------------------

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  HEED_CHECK(warmup_steps >= 0, name(), "warmup_steps must be >= 0, got {}", warmup_steps);
  HEED_CHECK(total_steps >= warmup_steps, name(), "total_steps ({}) must be >= warmup_steps ({})", total_steps,
             warmup_steps);
  HEED_CHECK(min_lr >= 0.0 && std::isfinite(min_lr), name(), "min_lr must be finite and >= 0, got {}", min_lr);
  apply();
}

double WarmupCosineLR::get_lr(int64_t step, size_t group) const {
  check_step(step);
  const double ratio = group_ratio(group);
  const double base = base_lrs_[group], min_lr = min_lr_ * ratio;
  if (step < warmup_steps_) return base * static_cast<double>(step) / static_cast<double>(warmup_steps_);
  if (step > total_steps_ || total_steps_ == warmup_steps_) return min_lr;
  const double decay_ratio =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  const double coefficient = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));
  return min_lr + coefficient * (base - min_lr);
}

// ---- NoamLR ---------------------------------------------------------------------------------

NoamLR::NoamLR(Optimizer& optimizer, int64_t d_model, int64_t warmup_steps, double factor)
    : LRScheduler(optimizer), d_model_(d_model), warmup_steps_(warmup_steps), factor_(factor) {
  HEED_CHECK(d_model > 0, name(), "d_model must be > 0, got {}", d_model);
  HEED_CHECK(warmup_steps > 0, name(), "warmup_steps must be > 0, got {}", warmup_steps);
  HEED_CHECK(factor > 0.0 && std::isfinite(factor), name(), "factor must be finite and > 0, got {}", factor);
  apply();
}

double NoamLR::get_lr(int64_t step, size_t group) const {
  check_step(step);
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  const double warmup = static_cast<double>(warmup_steps_);
  const double lr = factor_ / std::sqrt(static_cast<double>(d_model_)) *
                    std::min(1.0 / std::sqrt(s), s / (warmup * std::sqrt(warmup)));
  return lr * group_ratio(group);
}

}  // namespace heed::optim
