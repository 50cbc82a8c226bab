// heed/lr_scheduler.h — learning-rate schedules that set an optimizer's group lrs per step.
//
// Invariants:
//  * A scheduler records each group's lr at construction as its base lr and immediately sets
//    the lrs of step 0; each step() advances the counter by one and sets the lrs of the new
//    step (call it after optimizer.step(), as in PyTorch).
//  * get_lr(step, group) is a pure function of the step, the base lrs and the schedule's
//    options. Absolute schedules (min_lr of WarmupCosineLR, NoamLR) are defined for group 0;
//    another group g gets them scaled by base_lr[g] / base_lr[0] (unscaled when base_lr[0] is 0),
//    so groups keep their ratios.
//  * A scheduler keeps a reference to its optimizer, which must outlive it.
//  * state_dict() is JSON ({"scheduler", "step", "base_lrs"}); load_state_dict checks it and
//    re-applies the lrs of the loaded step.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "heed/optim.h"

namespace heed::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances to the next step and sets every group's lr for it.
  void step();
  // The lr of `group` at `step` (step >= 0).
  virtual double get_lr(int64_t step, size_t group = 0) const = 0;
  int64_t current_step() const { return step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The lrs currently set on the optimizer's groups.
  std::vector<double> last_lr() const;
  virtual const char* name() const = 0;

  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Sets every group's lr to get_lr(current_step(), group); call at the end of constructors.
  void apply();
  // base_lr[group] / base_lr[0], or 1 when base_lr[0] is 0.
  double group_ratio(size_t group) const;
  void check_step(int64_t step) const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

// lr = base * factor for step < total_iters, then base (PyTorch's ConstantLR; the defaults
// here keep the lr constant).
class ConstantLR : public LRScheduler {
 public:
  explicit ConstantLR(Optimizer& optimizer, double factor = 1.0, int64_t total_iters = 0);
  double get_lr(int64_t step, size_t group = 0) const override;
  const char* name() const override { return "ConstantLR"; }

 private:
  double factor_;
  int64_t total_iters_;
};

// nanoGPT's get_lr: base * step / warmup_steps for step < warmup_steps (from 0 up to base),
// then min_lr + 0.5 * (1 + cos(pi * (step - warmup) / (total - warmup))) * (base - min_lr)
// until total_steps, and min_lr after.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr);
  double get_lr(int64_t step, size_t group = 0) const override;
  const char* name() const override { return "WarmupCosineLR"; }

 private:
  int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

// "Attention Is All You Need": lr = factor * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
// with s = max(step, 1).
class NoamLR : public LRScheduler {
 public:
  NoamLR(Optimizer& optimizer, int64_t d_model, int64_t warmup_steps, double factor = 1.0);
  double get_lr(int64_t step, size_t group = 0) const override;
  const char* name() const override { return "NoamLR"; }

 private:
  int64_t d_model_, warmup_steps_;
  double factor_;
};

}  // namespace heed::optim
