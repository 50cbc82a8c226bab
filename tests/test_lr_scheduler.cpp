// tests/test_lr_scheduler.cpp — ConstantLR, WarmupCosineLR and NoamLR against closed-form
// values, the lrs they set on the optimizer, groups, and state save/load.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;
using namespace heed::optim;

namespace {

Tensor param() {
  Tensor p = zeros({2}, kFloat64);
  p.requires_grad_();
  return p;
}

// nanoGPT's get_lr (linear warmup from 0), written out for the test.
double nanogpt_lr(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay_iters) {
  if (it < warmup) return lr * static_cast<double>(it) / static_cast<double>(warmup);
  if (it > decay_iters) return min_lr;
  const double ratio = static_cast<double>(it - warmup) / static_cast<double>(decay_iters - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (lr - min_lr);
}

}  // namespace

TEST_CASE("ConstantLR keeps the lr, or scales it for the first total_iters steps") {
  Tensor p = param();
  SGD sgd({p}, {.lr = 0.3});
  ConstantLR constant(sgd);
  for (int s = 0; s < 5; ++s) {
    CHECK(sgd.param_groups()[0].lr == 0.3);
    constant.step();
  }
  SGD sgd2({param()}, {.lr = 0.4});
  ConstantLR scaled(sgd2, 0.5, 3);
  const std::vector<double> expected = {0.2, 0.2, 0.2, 0.4, 0.4, 0.4};
  for (size_t s = 0; s < expected.size(); ++s) {
    INFO("step " << s);
    CHECK(scaled.current_step() == static_cast<int64_t>(s));
    CHECK(sgd2.param_groups()[0].lr == doctest::Approx(expected[s]).epsilon(1e-15));
    scaled.step();
  }
}

TEST_CASE("WarmupCosineLR follows nanoGPT's schedule") {
  const double base = 6e-4, min_lr = 6e-5;
  const int64_t warmup = 10, total = 100;
  AdamW opt({param()}, {.lr = base});
  WarmupCosineLR schedule(opt, warmup, total, min_lr);
  // Landmarks: 0 at step 0, half way up at warmup/2, the peak at the end of warmup, the
  // midpoint of lr and min_lr half way through the decay, min_lr at and after total.
  CHECK(schedule.get_lr(0) == 0.0);
  CHECK(schedule.get_lr(5) == doctest::Approx(base / 2).epsilon(1e-12));
  CHECK(schedule.get_lr(warmup) == doctest::Approx(base).epsilon(1e-12));
  CHECK(schedule.get_lr((warmup + total) / 2) == doctest::Approx((base + min_lr) / 2).epsilon(1e-12));
  CHECK(schedule.get_lr(total) == doctest::Approx(min_lr).epsilon(1e-12));
  CHECK(schedule.get_lr(total + 1) == min_lr);
  CHECK(schedule.get_lr(10 * total) == min_lr);
  // Every step against the formula, and the lr the optimizer sees.
  for (int64_t s = 0; s <= total + 5; ++s) {
    INFO("step " << s);
    const double expected = nanogpt_lr(s, base, min_lr, warmup, total);
    CHECK(schedule.get_lr(s) == doctest::Approx(expected).epsilon(1e-12));
    CHECK(opt.param_groups()[0].lr == doctest::Approx(expected).epsilon(1e-12));
    CHECK(schedule.last_lr()[0] == opt.param_groups()[0].lr);
    schedule.step();
  }
  // Monotone: up during warmup, down after.
  for (int64_t s = 1; s < warmup; ++s) CHECK(schedule.get_lr(s) > schedule.get_lr(s - 1));
  for (int64_t s = warmup + 1; s <= total; ++s) CHECK(schedule.get_lr(s) < schedule.get_lr(s - 1));
  // No warmup starts at the peak.
  AdamW opt2({param()}, {.lr = 1.0});
  WarmupCosineLR no_warmup(opt2, 0, 4, 0.0);
  CHECK(opt2.param_groups()[0].lr == 1.0);
  CHECK(no_warmup.get_lr(2) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(no_warmup.get_lr(4) == doctest::Approx(0.0).epsilon(1e-12));
}

TEST_CASE("NoamLR: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)") {
  Adam opt({param()}, {.lr = 1.0, .betas = {0.9, 0.98}, .eps = 1e-9});
  NoamLR noam(opt, 512, 4000, 2.0);
  const double scale = 2.0 / std::sqrt(512.0);
  CHECK(noam.get_lr(1) == doctest::Approx(scale * 1.0 / std::pow(4000.0, 1.5)).epsilon(1e-12));
  CHECK(noam.get_lr(0) == noam.get_lr(1));  // step 0 counts as step 1
  CHECK(noam.get_lr(4000) == doctest::Approx(scale / std::sqrt(4000.0)).epsilon(1e-12));
  CHECK(noam.get_lr(16000) == doctest::Approx(scale / 126.49110640673517).epsilon(1e-12));
  for (int64_t s : {1, 10, 100, 3999, 4000, 4001, 10000, 100000}) {
    INFO("step " << s);
    const double sd = static_cast<double>(s);
    const double expected = scale * std::min(1.0 / std::sqrt(sd), sd * std::pow(4000.0, -1.5));
    CHECK(noam.get_lr(s) == doctest::Approx(expected).epsilon(1e-12));
  }
  // The peak is at the end of warmup.
  CHECK(noam.get_lr(4000) > noam.get_lr(3999));
  CHECK(noam.get_lr(4000) > noam.get_lr(4001));
  CHECK(opt.param_groups()[0].lr == noam.get_lr(0));
  for (int s = 0; s < 7; ++s) noam.step();
  CHECK(opt.param_groups()[0].lr == noam.get_lr(7));
}

TEST_CASE("schedules keep each group's ratio to group 0") {
  std::vector<ParamGroup> groups = {{.params = {param()}}, {.params = {param()}, .lr = 0.1}};
  AdamW opt(groups, {.lr = 1.0});
  WarmupCosineLR schedule(opt, 2, 10, 0.2);
  for (int s = 0; s < 12; ++s) {
    INFO("step " << s);
    const double lr0 = nanogpt_lr(s, 1.0, 0.2, 2, 10), lr1 = nanogpt_lr(s, 0.1, 0.02, 2, 10);
    CHECK(opt.param_groups()[0].lr == doctest::Approx(lr0).epsilon(1e-12));
    CHECK(opt.param_groups()[1].lr == doctest::Approx(lr1).epsilon(1e-12));
    CHECK(schedule.get_lr(s, 1) == doctest::Approx(lr1).epsilon(1e-12));
    schedule.step();
  }
  CHECK(schedule.base_lrs() == std::vector<double>{1.0, 0.1});
  CHECK(contains(error_message([&] { schedule.get_lr(0, 2); }), "group 2"));
}

TEST_CASE("scheduler state save/load resumes the schedule") {
  AdamW opt({param()}, {.lr = 1e-3});
  WarmupCosineLR schedule(opt, 5, 50, 1e-4);
  for (int s = 0; s < 17; ++s) schedule.step();
  const nlohmann::json state = schedule.state_dict();
  CHECK(state["step"] == 17);

  // A new run: the optimizer's lr was changed (as a loaded optimizer state might), the
  // scheduler restores base lrs and step, and sets the lr of step 17.
  AdamW opt2({param()}, {.lr = 0.5});
  WarmupCosineLR resumed(opt2, 5, 50, 1e-4);
  resumed.load_state_dict(nlohmann::json::parse(state.dump()));
  CHECK(resumed.current_step() == 17);
  CHECK(resumed.base_lrs() == std::vector<double>{1e-3});
  CHECK(opt2.param_groups()[0].lr == opt.param_groups()[0].lr);
  schedule.step();
  resumed.step();
  CHECK(opt2.param_groups()[0].lr == opt.param_groups()[0].lr);

  // Wrong scheduler, wrong group count, malformed step.
  NoamLR noam(opt2, 64, 10);
  CHECK(contains(error_message([&] { noam.load_state_dict(state); }), "belongs to"));
  std::vector<ParamGroup> two = {{.params = {param()}}, {.params = {param()}}};
  AdamW opt3(two);
  WarmupCosineLR three(opt3, 5, 50, 1e-4);
  CHECK(contains(error_message([&] { three.load_state_dict(state); }), "2 parameter groups"));
  nlohmann::json bad = state;
  bad["step"] = -3;
  CHECK(contains(error_message([&] { resumed.load_state_dict(bad); }), "\"step\" is -3, expected an integer in [0, "));
  CHECK(resumed.current_step() == 18);  // unchanged by the failed load
}

TEST_CASE("scheduler arguments are validated") {
  AdamW opt({param()});
  auto check = [](const std::function<void()>& f, const std::string& op, const std::string& part) {
    const std::string message = error_message(f);
    INFO(message);
    CHECK(contains(message, "heed::" + op + ": "));
    CHECK(contains(message, part));
  };
  check([&] { WarmupCosineLR(opt, -1, 10, 0.0); }, "WarmupCosineLR", "warmup_steps");
  check([&] { WarmupCosineLR(opt, 10, 5, 0.0); }, "WarmupCosineLR", "total_steps");
  check([&] { WarmupCosineLR(opt, 1, 5, -1e-5); }, "WarmupCosineLR", "min_lr");
  check([&] { NoamLR(opt, 0, 10); }, "NoamLR", "d_model");
  check([&] { NoamLR(opt, 64, 0); }, "NoamLR", "warmup_steps");
  check([&] { NoamLR(opt, 64, 10, -1.0); }, "NoamLR", "factor");
  check([&] { ConstantLR(opt, -0.5); }, "ConstantLR", "factor");
  check([&] { ConstantLR(opt, 0.5, -2); }, "ConstantLR", "total_iters");
  ConstantLR constant(opt);
  check([&] { constant.get_lr(-1); }, "ConstantLR", "step must be >= 0");
}
