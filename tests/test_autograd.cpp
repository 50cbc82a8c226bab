// tests/test_autograd.cpp — the tape: requires_grad, backward, accumulation, grad mode,
// long chains, freed graphs, version counters, hooks, retain_grad, heed::grad, diamonds,
// broadcasting.
//
// Invariants checked: every expected gradient is derived by hand in the test (closed forms
// for the small functions used); misuse raises heed::Error naming the op.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

Tensor leaf(std::initializer_list<double> values) { return tensor(values, TensorOptions(kF64).requires_grad(true)); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

// ---- basics -----------------------------------------------------------------------------------

TEST_CASE("requires_grad propagates to results; leaves and non-leaves") {
  Tensor x = leaf({1, 2});
  Tensor c = tensor({3, 4}, kF64);
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  CHECK_FALSE(x.grad().defined());
  Tensor y = x * c;
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->edges().size() == 2);
  CHECK(y.grad_fn()->edges()[0].defined());
  CHECK_FALSE(y.grad_fn()->edges()[1].defined());  // c needs no gradient
  Tensor z = c * 2.0;
  CHECK_FALSE(z.requires_grad());
  CHECK(z.grad_fn() == nullptr);
  // requires_grad_ on a leaf, off again.
  Tensor w = zeros({2}, kF64);
  w.requires_grad_();
  CHECK(w.requires_grad());
  w.requires_grad_(false);
  CHECK_FALSE(w.requires_grad());
  CHECK_HEED_ERROR(y.requires_grad_(false), "requires_grad_");
}

TEST_CASE("integer tensors cannot require grad") {
  CHECK_HEED_ERROR(arange(3).requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(zeros({2}, kInt32).requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(zeros({2}, kBool).requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(zeros({2}, TensorOptions(kInt64).requires_grad(true)), "zeros");
  // Comparisons of tensors that require grad give bool tensors without history.
  Tensor x = leaf({1, 2});
  Tensor mask = x > 1.5;
  CHECK(mask.dtype() == kBool);
  CHECK_FALSE(mask.requires_grad());
}

TEST_CASE("backward with an implicit and an explicit gradient") {
  // y = sum(x^2 * 3): dy/dx = 6x.
  Tensor x = leaf({1, -2, 0.5});
  (x * x * 3.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{6, -12, 3});
  CHECK(x.grad().dtype() == kFloat64);
  CHECK(x.grad().is_leaf());
  CHECK_FALSE(x.grad().requires_grad());

  // A non-scalar output with a given gradient v: x.grad = v * dy/dx elementwise.
  Tensor a = leaf({1, 2, 3});
  Tensor y = a * a;  // dy_i/da_i = 2 a_i
  y.backward(tensor({1, 0.5, -1}, kF64));
  CHECK(values(a.grad()) == std::vector<double>{2, 2, -6});

  // A 1-element non-scalar output needs no gradient either.
  Tensor b = leaf({4});
  (b * b).backward();
  CHECK(values(b.grad()) == std::vector<double>{8});

  // The seed gradient is converted to the output's dtype.
  Tensor c = tensor({1, 2}, TensorOptions(kF32).requires_grad(true));
  (c * 3.0).backward(tensor({1, 1}, kF64));
  CHECK(c.grad().dtype() == kFloat32);
  CHECK(c.grad().to_vector<float>() == std::vector<float>{3, 3});
}

TEST_CASE("backward misuse") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  const std::string m = error_message([&] { y.backward(); });
  CHECK(m.rfind("heed::backward:", 0) == 0);
  CHECK(m.find("[3]") != std::string::npos);
  CHECK_HEED_ERROR(y.backward(ones({2}, kF64)), "backward");
  CHECK_HEED_ERROR(tensor({1, 2}).sum().backward(), "backward");  // no grad required anywhere
  CHECK_HEED_ERROR(Tensor().backward(), "backward");
  CHECK_FALSE(x.grad().defined());
  // After a failed backward the graph is intact.
  y.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 2, 2});
}

TEST_CASE("gradients accumulate across backward calls; zero_grad and set_grad") {
  Tensor x = leaf({1, 2});
  (x * x).sum().backward();    // 2x
  (x * 5.0).sum().backward();  // + 5
  CHECK(values(x.grad()) == std::vector<double>{7, 9});
  const Tensor first_grad = x.grad();
  (x * 1.0).sum().backward();  // accumulates in place into the same buffer
  CHECK(values(x.grad()) == std::vector<double>{8, 10});
  CHECK(x.grad().storage() == first_grad.storage());
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  (x * 2.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 2});

  x.set_grad(tensor({10, 20}, kF64));
  (x * 1.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{11, 21});
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  CHECK_HEED_ERROR(x.set_grad(ones({3}, kF64)), "set_grad");
  CHECK_HEED_ERROR(x.set_grad(ones({2}, kF32)), "set_grad");
}

TEST_CASE("the first gradient is a fresh buffer, not an alias of another gradient") {
  // Both leaves receive the very same gradient tensor from add's backward.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  (a + b).sum().backward();
  CHECK(a.grad().storage() != b.grad().storage());
  {
    NoGradGuard no_grad;
    a.grad().add_(tensor({100, 100}, kF64));
  }
  CHECK(values(b.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("detach and NoGradGuard stop the tape") {
  // y = x * detach(x): dy/dx = detach(x) only.
  Tensor x = leaf({2, 3});
  (x * x.detach()).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 3});

  Tensor w = leaf({1, 2});
  CHECK(grad_mode_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(grad_mode_enabled());
    Tensor y = w * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    {
      NoGradGuard nested;
      CHECK_FALSE(grad_mode_enabled());
      EnableGradGuard enabled;
      CHECK(grad_mode_enabled());
      CHECK((w * 2.0).requires_grad());
    }
    CHECK_FALSE(grad_mode_enabled());
  }
  CHECK(grad_mode_enabled());
  // Values computed under the guard are constants for a later graph.
  Tensor constant;
  {
    NoGradGuard no_grad;
    constant = w * 10.0;
  }
  (w * constant).sum().backward();
  CHECK(values(w.grad()) == std::vector<double>{10, 20});
}

TEST_CASE("a 10,000-op chain runs backward and is released without recursion") {
  // y = x * 1.0001^10000 (through 10,000 multiplications): dy/dx = 1.0001^10000.
  Tensor x = leaf({1.5});
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y * 1.0001;
  y.backward();
  CHECK(x.grad().item<double>() == doctest::Approx(std::pow(1.0001, 10000)).epsilon(1e-12));
  y = Tensor();
  // A far longer graph (mixing two ops) is also dropped iteratively, without overflowing the
  // stack, whether or not backward ran.
  Tensor z = x;
  for (int i = 0; i < 200000; ++i) z = (i % 2) ? z + 1.0 : z * 1.0;
  CHECK(z.item<double>() == doctest::Approx(1.5 + 100000));
  z = Tensor();
  Tensor w = x;
  for (int i = 0; i < 200000; ++i) w = w * 1.0;
  x.zero_grad();
  w.backward();
  CHECK(x.grad().item<double>() == 1.0);
}

TEST_CASE("a second backward through a freed graph fails clearly; retain_graph allows it") {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  y.backward();
  const std::string m = error_message([&] { y.backward(); });
  CHECK(m.rfind("heed::", 0) == 0);
  CHECK(m.find("second time") != std::string::npos);
  CHECK(m.find("retain_graph") != std::string::npos);
  CHECK(values(x.grad()) == std::vector<double>{2, 4});  // the failed call added nothing

  Tensor a = leaf({1, 2});
  Tensor b = (a * a * a).sum();  // 3a^2
  b.backward(Tensor(), /*retain_graph=*/true);
  b.backward(Tensor(), /*retain_graph=*/true);
  CHECK(values(a.grad()) == std::vector<double>{6, 24});
  b.backward();  // frees it
  CHECK(values(a.grad()) == std::vector<double>{9, 36});
  CHECK_THROWS_AS(b.backward(), heed::Error);
  // A graph that reuses the freed part cannot run either; a fresh one can.
  Tensor cube = a * a * a;
  Tensor first = cube.sum();
  first.backward();
  CHECK_THROWS_AS((cube * 2.0).sum().backward(), heed::Error);
  a.zero_grad();
  (a * a * a).sum().backward();
  CHECK(values(a.grad()) == std::vector<double>{3, 12});
}

TEST_CASE("in-place change of a tensor saved for backward is caught at backward") {
  Tensor x = leaf({1, 2, 3});
  Tensor scale = tensor({2, 2, 2}, kF64);
  Tensor y = (x * scale).sum();  // saves scale for dy/dx
  scale.add_(1.0);               // allowed (scale needs no grad), but bumps its version
  const std::string m = error_message([&] { y.backward(); });
  CHECK(m.rfind("heed::mul:", 0) == 0);
  CHECK(m.find("in-place") != std::string::npos);
  CHECK_FALSE(x.grad().defined());

  // Through a view: the whole storage shares one counter.
  Tensor w = leaf({1, 2, 3, 4});
  Tensor base = arange(4, kF64);
  Tensor z = (w * base.view({4})).sum();
  base.select(0, 3).fill_(0.0);
  CHECK_THROWS_AS(z.backward(), heed::Error);

  // Under NoGradGuard, changing a saved non-leaf is caught as well (mul saves both inputs).
  Tensor v = leaf({0.5});
  Tensor e = v.exp();
  Tensor loss = (e * e).sum();
  {
    NoGradGuard no_grad;
    e.mul_(2.0);
  }
  CHECK_THROWS_AS(loss.backward(), heed::Error);

  // Unchanged saved tensors work, and a clone can be changed freely.
  Tensor u = leaf({1, 2});
  Tensor s = tensor({5, 6}, kF64);
  Tensor t = (u * s.clone()).sum();
  s.mul_(0.0);
  t.backward();
  CHECK(values(u.grad()) == std::vector<double>{5, 6});
}

// ---- hooks ------------------------------------------------------------------------------------

TEST_CASE("hooks on leaves observe and replace gradients") {
  Tensor x = leaf({1, 2});
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = values(g);
    return Tensor();  // keep it
  });
  (x * 3.0).sum().backward();
  CHECK(seen == std::vector<double>{3, 3});
  CHECK(values(x.grad()) == std::vector<double>{3, 3});

  Tensor y = leaf({1, 2});
  y.register_hook([](const Tensor& g) { return g * 10.0; });
  y.register_hook([](const Tensor& g) { return g + 1.0; });  // hooks run in order
  (y * y).sum().backward();                                  // 2y -> 20y -> 20y + 1
  CHECK(values(y.grad()) == std::vector<double>{21, 41});

  Tensor z = leaf({1});
  z.register_hook([](const Tensor&) { return ones({2}, kF64); });
  CHECK_HEED_ERROR((z * 1.0).sum().backward(), "register_hook");
  CHECK_HEED_ERROR(tensor({1, 2}).register_hook([](const Tensor& g) { return g; }), "register_hook");
}

TEST_CASE("a leaf's hooks run as soon as its last gradient arrived, during the pass") {
  // loss = sum(tanh(w_deep * x) * w_top): backward reaches w_top first, then the non-leaf
  // a = w_deep * x, then w_deep. w_top's hook must run before a's (not at the end of the pass,
  // which data-parallel overlap relies on), once, with the total of its uses.
  Tensor x = leaf({0.5, -1.0});
  Tensor w_deep = leaf({2.0, 3.0});
  Tensor w_top = leaf({1.0, 4.0});
  std::vector<std::string> events;
  w_top.register_hook([&](const Tensor& g) {
    events.push_back("w_top " + std::to_string(values(g)[0]));
    return Tensor();
  });
  w_deep.register_hook([&](const Tensor&) {
    events.push_back("w_deep");
    return Tensor();
  });
  Tensor a = w_deep * x;
  a.register_hook([&](const Tensor&) {
    events.push_back("a");
    return Tensor();
  });
  // w_top used twice along the chain: its hook sees the sum of both gradients, after both
  // arrived (d/dw_top of tanh(a) * w_top^2 = 2 tanh(a) w_top), and before tanh's node runs.
  Tensor loss = (tanh(a) * w_top * w_top).sum();
  loss.backward();
  REQUIRE(events.size() == 3);
  CHECK(events[0].rfind("w_top", 0) == 0);
  CHECK(events[1] == "a");
  CHECK(events[2] == "w_deep");
  CHECK(values(w_top.grad())[0] == doctest::Approx(2.0 * std::tanh(1.0)).epsilon(1e-15));
}

TEST_CASE("queue_backward_callback runs after the pass, once every .grad was written") {
  CHECK_HEED_ERROR(queue_backward_callback([] {}), "queue_backward_callback");
  CHECK(current_engine_pass() == EnginePass::None);
  CHECK(current_engine_pass_id() == 0);
  Tensor w1 = leaf({1, 2});
  Tensor w2 = leaf({3});
  std::vector<std::string> events;
  uint64_t pass_id = 0;
  w1.register_hook([&](const Tensor&) {
    CHECK(current_engine_pass() == EnginePass::Backward);
    pass_id = current_engine_pass_id();
    events.push_back("hook");
    queue_backward_callback([&] {
      // Both leaves have their .grad by now, whichever finished last.
      events.push_back(fmt::format("callback {} {}", w1.grad().defined(), w2.grad().defined()));
      queue_backward_callback([&] { events.push_back("nested"); });  // still inside the pass
    });
    return Tensor();
  });
  ((w1 * 2.0).sum() * w2).sum().backward();
  CHECK(pass_id != 0);
  CHECK((events == std::vector<std::string>{"hook", "callback true true", "nested"}));
  CHECK(current_engine_pass() == EnginePass::None);
  // heed::grad passes say so, and get their own id.
  uint64_t grad_pass_id = 0;
  Tensor v = leaf({1});
  v.register_hook([&](const Tensor&) {
    CHECK(current_engine_pass() == EnginePass::Grad);
    grad_pass_id = current_engine_pass_id();
    return Tensor();
  });
  heed::grad({(v * 3.0).sum()}, {v});
  CHECK(grad_pass_id != 0);
  CHECK(grad_pass_id != pass_id);
}

TEST_CASE("hooks on non-leaves change what flows further down") {
  // h = x * 2, y = sum(h * h): dy/dh = 2h; a hook doubling it doubles x.grad = 2 * 2h * 2.
  Tensor x = leaf({1, 3});
  Tensor h = x * 2.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 2.0;
  });
  (h * h).sum().backward();
  CHECK(seen == std::vector<double>{4, 12});
  CHECK(values(x.grad()) == std::vector<double>{16, 48});
  CHECK_FALSE(h.grad().defined());  // non-leaves keep no .grad unless retain_grad
}

TEST_CASE("retain_grad keeps a non-leaf gradient, once, after its hooks") {
  Tensor x = leaf({1, 2});
  Tensor h = x * x;  // dh/dx = 2x
  Tensor y = (h * 3.0).sum();
  h.retain_grad();
  h.retain_grad();                                           // idempotent
  h.register_hook([](const Tensor& g) { return g + 1.0; });  // registered after retain_grad
  y.backward(Tensor(), /*retain_graph=*/true);
  // dy/dh = 3, replaced by the hook with 4: .grad holds what flowed on.
  CHECK(values(h.grad()) == std::vector<double>{4, 4});
  CHECK(values(x.grad()) == std::vector<double>{8, 16});
  y.backward();
  CHECK(values(h.grad()) == std::vector<double>{8, 8});  // accumulates like a leaf's
  // On a leaf retain_grad changes nothing.
  x.retain_grad();
  CHECK(values(x.grad()) == std::vector<double>{16, 32});
  CHECK_HEED_ERROR(tensor({1.0}).retain_grad(), "retain_grad");
}

// ---- heed::grad -------------------------------------------------------------------------------

TEST_CASE("heed::grad returns gradients and leaves .grad untouched") {
  Tensor x = leaf({1, 2}), w = leaf({3, 4});
  Tensor h = x * w;          // non-leaf input
  Tensor y = (h * h).sum();  // dy/dh = 2h, dy/dx = 2 h w, dy/dw = 2 h x
  std::vector<Tensor> g = grad({y}, {x, w, h}, {}, /*retain_graph=*/true);
  REQUIRE(g.size() == 3);
  CHECK(values(g[0]) == std::vector<double>{2 * 3 * 3, 2 * 8 * 4});
  CHECK(values(g[1]) == std::vector<double>{2 * 3 * 1, 2 * 8 * 2});
  CHECK(values(g[2]) == std::vector<double>{6, 16});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(h.grad().defined());

  // Existing .grad values stay as they were, and retained non-leaf grads are not filled.
  x.set_grad(tensor({-1, -1}, kF64));
  h.retain_grad();
  g = grad({y}, {x}, {}, /*retain_graph=*/true);
  CHECK(values(g[0]) == std::vector<double>{18, 64});
  CHECK(values(x.grad()) == std::vector<double>{-1, -1});
  CHECK_FALSE(h.grad().defined());

  // An explicit output gradient; an input the output does not depend on gets zeros.
  Tensor unused = leaf({7, 7, 7});
  Tensor v = x * 3.0;
  g = grad({v}, {x, unused}, {tensor({1, 2}, kF64)});
  CHECK(values(g[0]) == std::vector<double>{3, 6});
  CHECK(values(g[1]) == std::vector<double>{0, 0, 0});
  CHECK_FALSE(unused.grad().defined());

  // Leaf hooks apply to the returned gradient.
  Tensor k = leaf({1});
  k.register_hook([](const Tensor& gk) { return gk * 100.0; });
  CHECK(values(grad({(k * 2.0).sum()}, {k})[0]) == std::vector<double>{200});
  CHECK_FALSE(k.grad().defined());

  CHECK_HEED_ERROR(grad({y}, {tensor({1.0})}), "grad");
  CHECK_HEED_ERROR(grad({x * 1.0}, {x}), "grad");  // a non-scalar output needs grad_outputs
}

// ---- graph shapes -----------------------------------------------------------------------------

TEST_CASE("shared subexpressions (diamonds) accumulate every path") {
  // y = x^2; z = y * 3 + exp(y) + y * y  =>  dz/dy = 3 + exp(y) + 2y,  dy/dx = 2x.
  Tensor x = leaf({0.5, -1.0});
  Tensor y = x * x;
  Tensor z = (y * 3.0 + y.exp() + y * y).sum();
  z.backward();
  const std::vector<double> xv{0.5, -1.0};
  const std::vector<double> gx = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double yv = xv[i] * xv[i];
    CHECK(gx[i] == doctest::Approx((3.0 + std::exp(yv) + 2.0 * yv) * 2.0 * xv[i]).epsilon(1e-14));
  }
  // The same leaf used many times: sum over k of x = n x, gradient n.
  Tensor a = leaf({2});
  Tensor total = a;
  for (int k = 0; k < 9; ++k) total = total + a;
  total.backward();
  CHECK(values(a.grad()) == std::vector<double>{10});
  // Two roots at once through run_backward: d(y1 + 2 y2)/dx.
  Tensor b = leaf({1, 2});
  Tensor y1 = (b * b).sum(), y2 = (b * 3.0).sum();
  run_backward({y1, y2}, {ones({}, kF64), full({}, 2.0, kF64)}, false);
  CHECK(values(b.grad()) == std::vector<double>{2 + 6, 4 + 6});
}

TEST_CASE("summing a gradient never changes a tensor a hook or the caller still holds") {
  // However the engine sums a node's gradients, a gradient a hook kept, or a seed the caller
  // passed, must stay as it was (a sum written into the first gradient's own buffer would change
  // them). Here h's buffer gets w's gradient (add hands its gradient on as it is, and the hook on
  // w keeps it) and h * 5's, in whichever order the engine runs them.
  Tensor x = leaf({0.5, -1.0});
  Tensor h = x * 1.0;
  Tensor w = h + leaf({2.0, 3.0});
  Tensor seen;
  w.register_hook([&](const Tensor& g) {
    seen = g;
    return Tensor();
  });
  Tensor z = (w * 2.0).sum() + (h * 5.0).sum();
  z.backward();
  CHECK(values(seen) == std::vector<double>{2, 2});
  CHECK(values(x.grad()) == std::vector<double>{7, 7});
  // Two roots on one node, seeds the caller holds: the second seed is added to the first.
  Tensor b = leaf({1, 2});
  Tensor y = b * 2.0;
  Tensor s1 = full({2}, 1.0, kF64), s2 = full({2}, 3.0, kF64);
  run_backward({y, y}, {s1, s2}, false);
  CHECK(values(s1) == std::vector<double>{1, 1});
  CHECK(values(s2) == std::vector<double>{3, 3});
  CHECK(values(b.grad()) == std::vector<double>{8, 8});
  // A diamond whose paths each bring a fresh gradient: every path counted once.
  Tensor a = leaf({1.5});
  Tensor u = a * 3.0;
  Tensor v = (u * u + u.exp() + u * 2.0).sum();
  v.backward();
  CHECK(values(a.grad())[0] == doctest::Approx((2.0 * 4.5 + std::exp(4.5) + 2.0) * 3.0).epsilon(1e-14));
}

TEST_CASE("gradients of broadcast inputs are reduced to the input shape") {
  Tensor col = tensor({1, 2, 3}, kF64).reshape({3, 1}).detach().requires_grad_();  // (3,1)
  Tensor row = leaf({10, 20, 30, 40});                                             // (4)
  Tensor s = scalar_tensor(2.0, TensorOptions(kF64).requires_grad(true));          // ()
  Tensor out = col * row * s;                                                      // (3,4)
  out.sum().backward();
  CHECK(col.grad().shape() == Dims{3, 1});
  CHECK(row.grad().shape() == Dims{4});
  CHECK(s.grad().shape() == Dims{});
  // d/dcol_i = s * sum_j row_j = 200; d/drow_j = s * sum_i col_i = 12; d/ds = sum col*row = 600.
  CHECK(values(col.grad()) == std::vector<double>{200, 200, 200});
  CHECK(values(row.grad()) == std::vector<double>{12, 12, 12, 12});
  CHECK(s.grad().item<double>() == 600.0);

  // Leading broadcast dims, plus + and - paths.
  Tensor b = leaf({1, 2});                 // (2)
  Tensor big = ones({3, 4, 2}, kF64);      // (3,4,2)
  ((big + b) - b * 3.0).sum().backward();  // d/db = 12 * (1 - 3)
  CHECK(values(b.grad()) == std::vector<double>{-24, -24});
}

TEST_CASE("gradcheck on a small composite function") {
  manual_seed(4);
  Tensor a = randn({3, 4}, kF64).requires_grad_(), b = randn({4}, kF64).requires_grad_();
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor h = in[0] * in[1] + in[0].exp();
    return (h * h).sum({1}) + h.select(1, 0);
  };
  const GradcheckResult r = gradcheck(fn, {a, b});
  CHECK_MESSAGE(r.passed, r.message);
  // gradcheck catches a wrong backward: a hook that corrupts the gradient.
  Tensor c = randn({3}, kF64).requires_grad_();
  c.register_hook([](const Tensor& g) { return g * 1.5; });
  const GradcheckResult bad = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {c});
  CHECK_FALSE(bad.passed);
  CHECK_FALSE(bad.message.empty());
}
