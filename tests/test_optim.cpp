// tests/test_optim.cpp — SGD, Adam and AdamW against float64 reference implementations of
// PyTorch's update rules; param groups, zero_grad, skipped parameters, state dicts, options.
#include <doctest/doctest.h>
#include <heed/heed.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;
using namespace heed::optim;

namespace {

// ---- float64 references (PyTorch's single-tensor update rules, written out) ------------------

struct Reference {
  std::vector<double> p{}, m{}, v{}, vmax{}, buf{};
  bool has_buf = false;
  int64_t step = 0;
};

void reference_sgd(Reference& r, const std::vector<double>& g, double lr, double momentum, double dampening,
                   double weight_decay, bool nesterov) {
  std::vector<double> d(g);
  for (size_t i = 0; i < d.size(); ++i)
    if (weight_decay != 0.0) d[i] += weight_decay * r.p[i];
  if (momentum != 0.0) {
    if (!r.has_buf) {
      r.buf = d;
      r.has_buf = true;
    } else {
      for (size_t i = 0; i < d.size(); ++i) r.buf[i] = momentum * r.buf[i] + (1.0 - dampening) * d[i];
    }
    for (size_t i = 0; i < d.size(); ++i) d[i] = nesterov ? d[i] + momentum * r.buf[i] : r.buf[i];
  }
  for (size_t i = 0; i < d.size(); ++i) r.p[i] -= lr * d[i];
  ++r.step;
}

void reference_adam(Reference& r, const std::vector<double>& g, double lr, double beta1, double beta2, double eps,
                    double weight_decay, bool amsgrad, bool decoupled) {
  const size_t n = g.size();
  if (r.m.empty()) r.m = r.v = r.vmax = std::vector<double>(n, 0.0);
  ++r.step;
  const double t = static_cast<double>(r.step);
  const double bias1 = 1.0 - std::pow(beta1, t), bias2 = 1.0 - std::pow(beta2, t);
  for (size_t i = 0; i < n; ++i) {
    double grad = g[i];
    if (weight_decay != 0.0) {
      if (decoupled)
        r.p[i] *= 1.0 - lr * weight_decay;
      else
        grad += weight_decay * r.p[i];
    }
    r.m[i] = beta1 * r.m[i] + (1.0 - beta1) * grad;
    r.v[i] = beta2 * r.v[i] + (1.0 - beta2) * grad * grad;
    double second = r.v[i];
    if (amsgrad) {
      r.vmax[i] = std::max(r.vmax[i], r.v[i]);
      second = r.vmax[i];
    }
    const double denom = std::sqrt(second) / std::sqrt(bias2) + eps;
    r.p[i] -= lr / bias1 * r.m[i] / denom;
  }
}

// ---- helpers --------------------------------------------------------------------------------

std::vector<double> random_values(size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

Tensor make_param(const std::vector<double>& values, const Dims& shape, DType dtype = kFloat64) {
  Tensor p = from_vector(values, shape, TensorOptions(dtype));
  p.requires_grad_();
  return p;
}

void give_grad(const Tensor& p, const std::vector<double>& g) {
  Tensor param = p;
  param.set_grad(from_vector(g, p.shape(), TensorOptions(p.dtype())));
}

// |a - b| <= atol + rtol * |b| elementwise.
void check_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol, double atol) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i << ": " << actual[i] << " vs " << expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

// Runs `steps` updates of an optimizer over two parameters (shapes {3,4} and {5}) against a
// reference update applied to Reference copies.
template <typename MakeOptimizer, typename ReferenceStep>
void run_against_reference(DType dtype, int steps, MakeOptimizer make, ReferenceStep reference_step, double rtol,
                           double atol) {
  std::mt19937_64 rng(42);
  const std::vector<Dims> shapes = {{3, 4}, {5}};
  std::vector<Tensor> params;
  std::vector<Reference> refs;
  for (const Dims& shape : shapes) {
    Reference r;
    r.p = random_values(static_cast<size_t>(shape_numel(shape)), rng);
    Tensor p = make_param(r.p, shape, dtype);
    r.p = p.to_vector<double>();  // the reference starts from the rounded values
    params.push_back(p);
    refs.push_back(r);
  }
  auto optimizer = make(params);
  for (int step = 0; step < steps; ++step) {
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> g = random_values(refs[k].p.size(), rng, 0.5 + step);
      give_grad(params[k], g);
      g = params[k].grad().to_vector<double>();  // rounded as the optimizer sees it
      reference_step(refs[k], g);
    }
    optimizer.step();
    for (size_t k = 0; k < params.size(); ++k) {
      INFO("step " << step << ", param " << k);
      check_close(params[k].to_vector<double>(), refs[k].p, rtol, atol);
      CHECK(params[k].is_leaf());
      CHECK(params[k].requires_grad());
    }
  }
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("heed_test_optim_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

// ---- SGD ------------------------------------------------------------------------------------

TEST_CASE("SGD matches the PyTorch update rule") {
  struct Case {
    const char* name;
    SGDOptions options;
  };
  const std::vector<Case> cases = {
      {"plain", {.lr = 0.1}},
      {"weight decay", {.lr = 0.05, .weight_decay = 0.01}},
      {"momentum", {.lr = 0.05, .momentum = 0.9}},
      {"momentum + dampening + decay", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.02}},
      {"nesterov", {.lr = 0.02, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kFloat64, kFloat32}) {
      INFO(c.name << " " << dtype_name(dtype));
      const SGDOptions o = c.options;
      run_against_reference(
          dtype, 5, [&](const std::vector<Tensor>& params) { return SGD(params, o); },
          [&](Reference& r, const std::vector<double>& g) {
            reference_sgd(r, g, o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov);
          },
          dtype == kFloat64 ? 1e-12 : 1e-5, dtype == kFloat64 ? 1e-14 : 1e-6);
    }
  }
}

TEST_CASE("SGD on a real backward pass: p <- p - lr * 2p for sum(p^2)") {
  Tensor p = make_param({1.0, -2.0, 0.5}, {3});
  SGD sgd({p}, {.lr = 0.1});
  sum(p * p).backward();
  sgd.step();
  check_close(p.to_vector<double>(), {0.8, -1.6, 0.4}, 1e-15, 0.0);
  CHECK(p.grad_fn() == nullptr);
}

// ---- Adam / AdamW ---------------------------------------------------------------------------

TEST_CASE("Adam and AdamW match the PyTorch update rules") {
  struct Case {
    const char* name;
    AdamOptions options;
    bool decoupled;
  };
  const std::vector<Case> cases = {
      {"Adam", {.lr = 1e-2}, false},
      {"Adam + L2", {.lr = 1e-2, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1}, false},
      {"Adam amsgrad", {.lr = 1e-2, .weight_decay = 0.05, .amsgrad = true}, false},
      {"AdamW", {.lr = 3e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1}, true},
      {"AdamW amsgrad", {.lr = 3e-3, .weight_decay = 0.2, .amsgrad = true}, true},
      {"AdamW no decay", {.lr = 1e-2, .weight_decay = 0.0}, true},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kFloat64, kFloat32}) {
      INFO(c.name << " " << dtype_name(dtype));
      const AdamOptions o = c.options;
      auto reference = [&](Reference& r, const std::vector<double>& g) {
        reference_adam(r, g, o.lr, o.betas.first, o.betas.second, o.eps, o.weight_decay, o.amsgrad, c.decoupled);
      };
      const double rtol = dtype == kFloat64 ? 1e-12 : 2e-5, atol = dtype == kFloat64 ? 1e-14 : 1e-6;
      if (c.decoupled) {
        const AdamWOptions w{
            .lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay, .amsgrad = o.amsgrad};
        run_against_reference(
            dtype, 6, [&](const std::vector<Tensor>& params) { return AdamW(params, w); }, reference, rtol, atol);
      } else {
        run_against_reference(
            dtype, 6, [&](const std::vector<Tensor>& params) { return Adam(params, o); }, reference, rtol, atol);
      }
    }
  }
}

TEST_CASE("Adam's first step moves each weight by about lr against the gradient's sign") {
  // After one step m/sqrt(v) (bias corrected) is g/|g|, so p1 = p0 - lr * g / (|g| + eps).
  Tensor p = make_param({0.5, -1.0, 2.0, 0.0}, {4});
  Adam adam({p}, {.lr = 0.01, .eps = 1e-8});
  const std::vector<double> g = {3.0, -0.25, 1e-3, -40.0};
  give_grad(p, g);
  adam.step();
  const std::vector<double> expected = {0.5 - 0.01 * 3.0 / (3.0 + 1e-8), -1.0 + 0.01 * 0.25 / (0.25 + 1e-8),
                                        2.0 - 0.01 * 1e-3 / (1e-3 + 1e-8), 0.0 + 0.01 * 40.0 / (40.0 + 1e-8)};
  check_close(p.to_vector<double>(), expected, 1e-12, 1e-15);
  CHECK(adam.name() == std::string("Adam"));
  CHECK(AdamW({make_param({1.0}, {1})}).name() == std::string("AdamW"));
  CHECK(AdamW({make_param({1.0}, {1})}).options().weight_decay == 1e-2);  // PyTorch's default
}

TEST_CASE("Adam's fused update does not depend on the thread count") {
  const int previous = get_num_threads();
  std::mt19937_64 rng(3);
  const size_t n = 100003;  // several parallel chunks
  const std::vector<double> start = random_values(n, rng), grad = random_values(n, rng);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor p = make_param(start, {static_cast<int64_t>(n)}, kFloat32);
    AdamW opt({p}, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
    for (int s = 0; s < 3; ++s) {
      give_grad(p, grad);
      opt.step();
    }
    results.push_back(p.to_vector<float>());
  }
  set_num_threads(previous);
  CHECK(results[0] == results[1]);
  CHECK(results[0] == results[2]);
}

TEST_CASE("Adam's one call over all parameters gives each the bits of its own update") {
  // Sizes that put the parallel chunks' ends inside parameters and a whole small parameter inside
  // one chunk; two groups (their own lr and weight decay), float32 and float64 parameters, AMSGrad
  // on and off. Each parameter must end with the bits of an optimizer that updates it alone, for
  // 1, 2 and 3 threads.
  const int previous = get_num_threads();
  const std::vector<int64_t> sizes = {40001, 7, 1, 33333, 65536, 3};
  for (const bool amsgrad : {false, true}) {
    for (const DType dtype : {kFloat32, kFloat64}) {
      std::mt19937_64 rng(11);
      std::vector<std::vector<double>> start, grads;
      for (const int64_t n : sizes) {
        start.push_back(random_values(static_cast<size_t>(n), rng));
        grads.push_back(random_values(static_cast<size_t>(n), rng));
      }
      const auto lr_of = [](size_t t) { return t % 2 == 0 ? 1e-2 : 3e-3; };
      const auto decay_of = [](size_t t) { return t % 2 == 0 ? 0.1 : 0.0; };
      std::vector<std::vector<double>> alone;  // each parameter with an optimizer of its own, 1 thread
      set_num_threads(1);
      for (size_t t = 0; t < sizes.size(); ++t) {
        Tensor p = make_param(start[t], {sizes[t]}, dtype);
        AdamW opt({{.params = {p}, .lr = lr_of(t), .weight_decay = decay_of(t)}}, {.amsgrad = amsgrad});
        for (int s = 0; s < 3; ++s) {
          give_grad(p, grads[t]);
          opt.step();
        }
        alone.push_back(p.to_vector<double>());
      }
      for (int threads : {1, 2, 3}) {
        CAPTURE(amsgrad);
        CAPTURE(threads);
        set_num_threads(threads);
        std::vector<Tensor> params;
        std::vector<ParamGroup> groups(2);
        for (size_t t = 0; t < sizes.size(); ++t) {
          params.push_back(make_param(start[t], {sizes[t]}, dtype));
          groups[t % 2].params.push_back(params.back());
        }
        groups[0].lr = lr_of(0);
        groups[0].weight_decay = decay_of(0);
        groups[1].lr = lr_of(1);
        groups[1].weight_decay = decay_of(1);
        AdamW opt(groups, {.amsgrad = amsgrad});
        for (int s = 0; s < 3; ++s) {
          for (size_t t = 0; t < sizes.size(); ++t) give_grad(params[t], grads[t]);
          opt.step();
        }
        for (size_t t = 0; t < sizes.size(); ++t) CHECK(params[t].to_vector<double>() == alone[t]);
      }
    }
  }
  set_num_threads(previous);
}

TEST_CASE("Adam checks every parameter before it updates any") {
  Tensor good = make_param({1.0, 2.0}, {2});
  Tensor strided = randn({4, 3}, kFloat64).t();  // not contiguous, after a good parameter
  strided.requires_grad_();
  Adam opt({good, strided});
  give_grad(good, {0.5, 0.5});
  give_grad(strided, std::vector<double>(12, 1.0));
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("not contiguous"), heed::Error);
  CHECK(good.to_vector<double>() == std::vector<double>{1.0, 2.0});  // untouched
  CHECK(opt.state_dict().tensors.empty());                           // no moments, no step counted
}

// ---- groups, zero_grad, skipping -------------------------------------------------------------

TEST_CASE("param groups use their own lr and weight decay") {
  std::mt19937_64 rng(5);
  Reference decay_ref, bias_ref;
  decay_ref.p = random_values(6, rng);
  bias_ref.p = random_values(3, rng);
  Tensor weight = make_param(decay_ref.p, {2, 3}), bias = make_param(bias_ref.p, {3});
  std::vector<ParamGroup> groups = {{.params = {weight}}, {.params = {bias}, .lr = 0.05, .weight_decay = 0.0}};
  AdamW opt(groups, {.lr = 0.01, .weight_decay = 0.1});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].lr == 0.01);
  CHECK(opt.param_groups()[0].weight_decay == 0.1);
  CHECK(opt.param_groups()[1].lr == 0.05);
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
  for (int step = 0; step < 4; ++step) {
    if (step == 2) opt.param_groups()[0].lr = 0.02;  // as a scheduler would
    const double lr0 = opt.param_groups()[0].lr;
    const std::vector<double> gw = random_values(6, rng), gb = random_values(3, rng);
    give_grad(weight, gw);
    give_grad(bias, gb);
    opt.step();
    reference_adam(decay_ref, gw, lr0, 0.9, 0.999, 1e-8, 0.1, false, true);
    reference_adam(bias_ref, gb, 0.05, 0.9, 0.999, 1e-8, 0.0, false, true);
    check_close(weight.to_vector<double>(), decay_ref.p, 1e-12, 1e-14);
    check_close(bias.to_vector<double>(), bias_ref.p, 1e-12, 1e-14);
  }

  // SGD groups too.
  Reference a_ref, b_ref;
  a_ref.p = {1.0, 2.0};
  b_ref.p = {-1.0, 0.5};
  Tensor a = make_param(a_ref.p, {2}), b = make_param(b_ref.p, {2});
  SGD sgd(std::vector<ParamGroup>{{.params = {a}, .lr = 0.1}, {.params = {b}, .weight_decay = 0.5}},
          {.lr = 0.01, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    give_grad(a, {0.3, -0.2});
    give_grad(b, {1.0, 2.0});
    sgd.step();
    reference_sgd(a_ref, {0.3, -0.2}, 0.1, 0.9, 0.0, 0.0, false);
    reference_sgd(b_ref, {1.0, 2.0}, 0.01, 0.9, 0.0, 0.5, false);
  }
  check_close(a.to_vector<double>(), a_ref.p, 1e-13, 1e-15);
  check_close(b.to_vector<double>(), b_ref.p, 1e-13, 1e-15);
}

TEST_CASE("zero_grad drops gradients; parameters without a gradient are skipped") {
  Tensor a = make_param({1.0, 2.0}, {2}), b = make_param({3.0, 4.0}, {2});
  Adam opt({a, b}, {.lr = 0.1});
  give_grad(a, {1.0, 1.0});
  give_grad(b, {1.0, 1.0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  opt.step();  // nothing has a gradient: nothing moves, no state
  CHECK(a.to_vector<double>() == std::vector<double>{1.0, 2.0});
  CHECK(opt.state(0, 0).step == 0);
  CHECK(opt.state(0, 0).buffers.empty());

  // Only `a` has a gradient for two steps; `b` joins at step 3 with its own step count 1.
  Reference a_ref{.p = {1.0, 2.0}}, b_ref{.p = {3.0, 4.0}};
  for (int step = 0; step < 3; ++step) {
    give_grad(a, {0.5, -0.5});
    reference_adam(a_ref, {0.5, -0.5}, 0.1, 0.9, 0.999, 1e-8, 0.0, false, false);
    if (step == 2) {
      give_grad(b, {2.0, -1.0});
      reference_adam(b_ref, {2.0, -1.0}, 0.1, 0.9, 0.999, 1e-8, 0.0, false, false);
    }
    opt.step();
    opt.zero_grad();
  }
  check_close(a.to_vector<double>(), a_ref.p, 1e-12, 1e-15);
  check_close(b.to_vector<double>(), b_ref.p, 1e-12, 1e-15);
  CHECK(opt.state(0, 0).step == 3);
  CHECK(opt.state(0, 1).step == 1);
}

TEST_CASE("updates record no autograd history and bump the version counter") {
  for (int which = 0; which < 2; ++which) {
    Tensor p = make_param({1.0, 2.0, 3.0}, {3});
    Tensor y = p * p;  // saves p for backward
    std::unique_ptr<Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions{.lr = 0.1});
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions{.lr = 0.1});
    give_grad(p, {1.0, 1.0, 1.0});
    opt->step();
    CHECK(p.is_leaf());
    CHECK(p.grad_fn() == nullptr);
    // The graph saved the old p: using it now must fail instead of giving wrong gradients.
    CHECK_THROWS_AS(sum(y).backward(), Error);
  }
}

// ---- state dict -----------------------------------------------------------------------------

TEST_CASE("state_dict round trip (memory and safetensors + JSON files) continues identically") {
  std::mt19937_64 rng(11);
  TempDir dir;
  for (int kind = 0; kind < 3; ++kind) {
    INFO("optimizer kind " << kind);
    auto make = [&](const std::vector<ParamGroup>& groups) -> std::unique_ptr<Optimizer> {
      if (kind == 0) return std::make_unique<SGD>(groups, SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      if (kind == 1)
        return std::make_unique<Adam>(groups, AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
      return std::make_unique<AdamW>(groups, AdamWOptions{.lr = 0.01, .betas = {0.8, 0.9}});
    };
    const std::vector<double> w0 = random_values(6, rng), b0 = random_values(2, rng);
    Tensor w = make_param(w0, {2, 3}), b = make_param(b0, {2}), unused = make_param({1.0}, {1});
    auto a = make({{.params = {w, unused}}, {.params = {b}, .lr = 0.02, .weight_decay = 0.0}});
    std::vector<std::vector<double>> grads;
    for (int s = 0; s < 6; ++s) grads.push_back(random_values(8, rng));
    auto apply_grads = [&](Tensor& pw, Tensor& pb, int s) {
      give_grad(pw, std::vector<double>(grads[s].begin(), grads[s].begin() + 6));
      give_grad(pb, std::vector<double>(grads[s].begin() + 6, grads[s].end()));
    };
    for (int s = 0; s < 3; ++s) {
      apply_grads(w, b, s);
      a->step();
    }
    const OptimizerState saved = a->state_dict();
    CHECK(saved.scalars["optimizer"] == a->name());
    // The unused parameter has no state, so no tensors.
    for (const auto& [name, t] : saved.tensors) CHECK_FALSE(contains(name, "state.0.1."));

    const std::string tensors_path = (dir.path / "opt.safetensors").string();
    const std::string scalars_path = (dir.path / "opt.json").string();
    io::save_safetensors(tensors_path, saved.tensors);
    io::save_json(scalars_path, saved.scalars);

    // Two fresh optimizers on copies of the current parameters, with other hyperparameters.
    std::vector<Tensor> copies;
    for (int which = 0; which < 2; ++which) {
      Tensor w2 = make_param(w.to_vector<double>(), {2, 3});
      Tensor b2 = make_param(b.to_vector<double>(), {2});
      Tensor u2 = make_param({1.0}, {1});
      auto other = make({{.params = {w2, u2}, .lr = 0.5}, {.params = {b2}, .lr = 0.5}});
      if (which == 0) {
        other->load_state_dict(saved);
      } else {
        other->load_state_dict({io::load_safetensors(tensors_path).tensors, io::load_json(scalars_path)});
      }
      CHECK(other->param_groups()[0].lr == a->param_groups()[0].lr);
      CHECK(other->param_groups()[1].lr == 0.02);
      CHECK(other->param_groups()[1].weight_decay == 0.0);
      CHECK(other->state(0, 0).step == 3);
      for (int s = 3; s < 6; ++s) {
        apply_grads(w2, b2, s);
        other->step();
      }
      copies.push_back(w2);
      copies.push_back(b2);
    }
    for (int s = 3; s < 6; ++s) {
      apply_grads(w, b, s);
      a->step();
    }
    // Bit-identical continuation.
    CHECK(copies[0].to_vector<double>() == w.to_vector<double>());
    CHECK(copies[1].to_vector<double>() == b.to_vector<double>());
    CHECK(copies[2].to_vector<double>() == w.to_vector<double>());
    CHECK(copies[3].to_vector<double>() == b.to_vector<double>());
  }
}

TEST_CASE("state_dict holds copies, and float32 state loads into float64 parameters") {
  Tensor p = make_param({1.0, 2.0}, {2});
  Adam opt({p}, {.lr = 0.1});
  give_grad(p, {1.0, -1.0});
  opt.step();
  const OptimizerState saved = opt.state_dict();
  const std::vector<double> exp_avg = opt.state(0, 0).buffers.at("exp_avg").to_vector<double>();
  give_grad(p, {5.0, 5.0});
  opt.step();  // must not change the saved tensors
  for (const auto& [name, t] : saved.tensors)
    if (name == "state.0.0.exp_avg") CHECK(t.to_vector<double>() == exp_avg);

  OptimizerState as_float = saved;
  for (auto& [name, t] : as_float.tensors) t = t.to(kFloat32);
  Adam other({make_param({1.0, 2.0}, {2})}, {.lr = 0.1});
  other.load_state_dict(as_float);
  CHECK(other.state(0, 0).buffers.at("exp_avg").dtype() == kFloat64);
  check_close(other.state(0, 0).buffers.at("exp_avg").to_vector<double>(), exp_avg, 1e-7, 0);
}

TEST_CASE("load_state_dict rejects states that do not fit, and changes nothing then") {
  Tensor w = make_param({1.0, 2.0, 3.0}, {3}), b = make_param({0.5}, {1});
  Adam opt(std::vector<ParamGroup>{{.params = {w}}, {.params = {b}}}, {.lr = 0.1});
  give_grad(w, {1.0, 1.0, 1.0});
  give_grad(b, {1.0});
  opt.step();
  const OptimizerState good = opt.state_dict();

  auto expect_error = [&](const OptimizerState& bad, const std::string& part) {
    Tensor w2 = make_param({1.0, 2.0, 3.0}, {3}), b2 = make_param({0.5}, {1});
    Adam target(std::vector<ParamGroup>{{.params = {w2}}, {.params = {b2}}}, {.lr = 0.3});
    const std::string message = error_message([&] { target.load_state_dict(bad); });
    INFO(message);
    CHECK(contains(message, "heed::load_state_dict"));
    CHECK(contains(message, part));
    CHECK(target.param_groups()[0].lr == 0.3);  // unchanged
    CHECK(target.state(0, 0).step == 0);
  };
  {
    OptimizerState bad = good;
    bad.scalars["optimizer"] = "AdamW";
    expect_error(bad, "belongs to optimizer");
  }
  {
    OptimizerState bad = good;
    bad.scalars["param_groups"].erase(1);
    bad.scalars["state"].erase(1);
    expect_error(bad, "has 1 parameter groups");
  }
  {
    OptimizerState bad = good;
    bad.scalars["param_groups"][0]["param_shapes"][0] = {4};
    expect_error(bad, "has shape [3] but the state was saved for shape [4]");
  }
  {
    OptimizerState bad = good;
    std::erase_if(bad.tensors, [](const auto& e) { return e.first == "state.1.0.exp_avg_sq"; });
    expect_error(bad, "no tensor 'state.1.0.exp_avg_sq'");
  }
  {
    OptimizerState bad = good;
    bad.tensors.emplace_back("state.0.0.bogus", zeros({3}, kFloat64));
    expect_error(bad, "unexpected tensor 'state.0.0.bogus'");
  }
  {
    OptimizerState bad = good;
    for (auto& [name, t] : bad.tensors)
      if (name == "state.0.0.exp_avg") t = zeros({2}, kFloat64);
    expect_error(bad, "has shape [2] but parameter 0 of group 0 has shape [3]");
  }
  {
    OptimizerState bad = good;
    bad.scalars["state"][0][0]["step"] = "three";
    expect_error(bad, "\"state[0][0].step\" is \"three\", expected an integer in [0, ");
  }
  {
    OptimizerState bad = good;
    bad.scalars["options"]["betas"] = {0.9, 1.5};
    expect_error(bad, "\"options.betas[1]\" is 1.5, expected a finite number in [0, 1]");
  }
  {
    OptimizerState bad = good;
    bad.scalars = nlohmann::json::array();
    expect_error(bad, "malformed optimizer state");
  }
}

// ---- validation -----------------------------------------------------------------------------

TEST_CASE("optimizer options and parameters are validated") {
  Tensor p = make_param({1.0}, {1});
  auto check = [](const std::function<void()>& f, const std::string& op, const std::string& part) {
    const std::string message = error_message(f);
    INFO(message);
    CHECK(contains(message, "heed::" + op + ": "));
    CHECK(contains(message, part));
  };
  check([&] { SGD({p}, {.lr = -0.1}); }, "SGD", "learning rate");
  check([&] { SGD({p}, {.momentum = -0.5}); }, "SGD", "momentum");
  check([&] { SGD({p}, {.weight_decay = -1.0}); }, "SGD", "weight_decay");
  check([&] { SGD({p}, {.nesterov = true}); }, "SGD", "nesterov");
  check([&] { SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, "SGD", "nesterov");
  check([&] { Adam({p}, {.lr = -1.0}); }, "Adam", "learning rate");
  check([&] { Adam({p}, {.lr = std::nan("")}); }, "Adam", "learning rate");
  check([&] { Adam({p}, {.betas = {1.0, 0.999}}); }, "Adam", "beta1");
  check([&] { Adam({p}, {.betas = {0.9, -0.1}}); }, "Adam", "beta2");
  check([&] { Adam({p}, {.eps = -1e-8}); }, "Adam", "eps");
  check([&] { AdamW({p}, {.weight_decay = -0.1}); }, "AdamW", "weight_decay");
  check([&] { AdamW(std::vector<ParamGroup>{{.params = {p}, .lr = -2.0}}); }, "AdamW", "group 0");
  check([&] { Adam(std::vector<Tensor>{}); }, "Adam", "empty parameter list");
  check([&] { Adam({p, p}); }, "Adam", "appears more than once");
  check([&] { Adam(std::vector<ParamGroup>{{.params = {p}}, {.params = {p}}}); }, "Adam", "appears more than once");
  check([&] { Adam({p * 2.0}); }, "Adam", "not a leaf");
  check([&] { Adam({arange(3.0)}); }, "Adam", "floating-point");
  check([&] { Adam({Tensor()}); }, "Adam", "undefined");

  // Adam needs contiguous float32/float64 parameters.
  Tensor base = randn({4, 3}, kFloat64);
  Tensor strided = base.t();
  strided.requires_grad_();
  Adam on_strided({strided});
  give_grad(strided, std::vector<double>(12, 1.0));
  check([&] { on_strided.step(); }, "Adam", "not contiguous");
  Tensor half = make_param({1.0, 2.0}, {2}, kFloat16);
  AdamW on_half({half});
  give_grad(half, {1.0, 1.0});
  check([&] { on_half.step(); }, "AdamW", "float16");
  // A negative lr set between steps is caught at step().
  Adam ok({p});
  ok.param_groups()[0].lr = -1.0;
  give_grad(p, {1.0});
  check([&] { ok.step(); }, "Adam", "learning rate");
  ok.param_groups()[0].lr = std::nan("");  // NaN set later is an error, not "the default"
  check([&] { ok.step(); }, "Adam", "learning rate");
}

TEST_CASE("empty parameters take part without touching memory") {
  Tensor empty_param = zeros({2, 0, 4}, kFloat64);
  empty_param.requires_grad_();
  Tensor p = make_param({1.0}, {1});
  AdamW opt({empty_param, p}, {.lr = 0.1});
  empty_param.set_grad(zeros({2, 0, 4}, kFloat64));
  give_grad(p, {1.0});
  opt.step();
  CHECK(opt.state(0, 0).step == 1);
  CHECK(empty_param.shape() == Dims{2, 0, 4});
  const OptimizerState saved = opt.state_dict();
  Tensor empty2 = zeros({2, 0, 4}, kFloat64);
  empty2.requires_grad_();
  AdamW other({empty2, make_param({1.0}, {1})});
  other.load_state_dict(saved);
  CHECK(other.state(0, 0).step == 1);
}
