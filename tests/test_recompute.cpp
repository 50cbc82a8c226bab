// tests/test_recompute.cpp — activation recomputation (heed/nn/recompute.h):
//  * TransformerLM with dropout, float32 and float64: the loss, the logits and every gradient
//    with recompute on are bit-identical to the plain run, and the generator ends in the same
//    state; the activation memory at the peak drops;
//  * the seq2seq Transformer (encoder and decoder layers checkpointed, memory as a second input);
//  * nn::checkpoint on a function: float64 gradients identical to the plain function, under
//    heed::grad and gradcheck too; autocast (bf16) replayed; a function whose inputs need no
//    gradient still trains its parameters; hooks and queued callbacks join the running pass;
//  * misuse: an input modified in place, a function that changes its output, no function.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

struct StepResult {
  Tensor logits;
  Tensor loss;
  std::vector<Tensor> grads;
  Generator::Draw rng_after;
  size_t activation_at_peak = 0;
};

// One training forward + backward of a TransformerLM built from seed 5, with dropout on.
StepResult lm_step(bool recompute, DType dtype) {
  manual_seed(5);
  nn::TransformerLMOptions o{.vocab = 37, .d_model = 32, .heads = 4, .layers = 3, .context = 24, .dropout = 0.1};
  o.recompute = recompute;
  nn::TransformerLM model(o);
  model.to(dtype);
  model.train();
  const Tensor x = randint(0, o.vocab, {3, o.context}), y = randint(0, o.vocab, {3, o.context});
  reset_peak_memory_stats();
  StepResult r;
  r.logits = model.forward(x);
  r.loss = F::cross_entropy(r.logits, y);
  r.loss.backward();
  r.activation_at_peak = memory_stats().at_peak[static_cast<int>(MemoryCategory::Activation)];
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad());
  r.rng_after = default_generator().state();
  return r;
}

}  // namespace

TEST_CASE("recompute: TransformerLM with dropout gives bit-identical logits, loss and gradients") {
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    const StepResult plain = lm_step(false, dtype), recomputed = lm_step(true, dtype);
    CHECK(bitwise_equal(plain.logits, recomputed.logits));
    CHECK(bitwise_equal(plain.loss, recomputed.loss));
    REQUIRE(plain.grads.size() == recomputed.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(plain.grads[i].defined());
      REQUIRE(recomputed.grads[i].defined());
      CHECK(bitwise_equal(plain.grads[i], recomputed.grads[i]));
    }
    // The recomputation replays the forward's draws and hands the generator back as it was.
    CHECK(plain.rng_after.seed == recomputed.rng_after.seed);
    CHECK(plain.rng_after.first == recomputed.rng_after.first);
    // Only the blocks' inputs are kept: the activations at the peak shrink (3 blocks of 3).
    CHECK(recomputed.activation_at_peak < plain.activation_at_peak * 6 / 10);
  }
}

TEST_CASE("recompute: the seq2seq Transformer (encoder and decoder layers) gives identical gradients") {
  const auto run = [](bool recompute) {
    manual_seed(9);
    nn::TransformerOptions o;
    o.src_vocab = 13;
    o.tgt_vocab = 11;
    o.encoder_layers = 2;
    o.decoder_layers = 3;
    o.max_len = 16;
    o.layer.d_model = 16;
    o.layer.heads = 2;
    o.layer.d_ff = 24;
    o.layer.dropout = 0.2;
    o.layer.attention_dropout = 0.1;
    o.layer.recompute = recompute;
    nn::Transformer model(o);
    model.to(kFloat64);
    const Tensor src = randint(1, o.src_vocab, {2, 7}), tgt = randint(1, o.tgt_vocab, {2, 5});
    Tensor loss = F::cross_entropy(model.forward(src, tgt), randint(0, o.tgt_vocab, {2, 5}));
    loss.backward();
    std::vector<Tensor> grads{loss};
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<Tensor> plain = run(false), recomputed = run(true);
  REQUIRE(plain.size() == recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    REQUIRE(recomputed[i].defined());
    // The encoder memory feeds three decoder layers: its gradient is a sum whose order may differ
    // from the plain graph's, so the parameters before it agree to rounding, not bit for bit.
    CHECK(allclose(plain[i], recomputed[i], 1e-12, 1e-14));
  }
}

TEST_CASE("checkpoint: a function's float64 gradients equal the plain function's, under backward and grad") {
  manual_seed(3);
  nn::Linear linear(6, 5);
  linear.to(kFloat64);
  const auto function = [&](const std::vector<Tensor>& in) { return tanh(linear.forward(in[0]) * in[1]); };
  const Tensor x = randn({4, 6}, kFloat64).requires_grad_(), scale = randn({4, 5}, kFloat64).requires_grad_();
  const Tensor seed = randn({4, 5}, kFloat64);

  Tensor plain = function({x, scale});
  CHECK_FALSE(nn::checkpoint(function, {x, scale}).grad_fn() == nullptr);
  const std::vector<Tensor> wrt{x, scale, linear.weight, linear.bias};
  const std::vector<Tensor> expected = grad({plain}, wrt, {seed});
  const std::vector<Tensor> through_grad = grad({nn::checkpoint(function, {x, scale})}, wrt, {seed});
  for (size_t i = 0; i < wrt.size(); ++i) CHECK(bitwise_equal(expected[i], through_grad[i]));
  CHECK_FALSE(linear.weight.grad().defined());  // heed::grad left .grad alone

  nn::checkpoint(function, {x, scale}).backward(seed);
  for (size_t i = 0; i < wrt.size(); ++i) CHECK(bitwise_equal(expected[i], wrt[i].grad()));

  // Finite differences through the checkpointed function (gradcheck differentiates with grad()).
  const GradcheckResult check =
      gradcheck([&](const std::vector<Tensor>& in) { return nn::checkpoint(function, in); }, {x, scale});
  CHECK_MESSAGE(check.passed, check.message);
}

TEST_CASE("checkpoint: the module form, autocast replayed, and inputs that need no gradient") {
  manual_seed(4);
  auto linear = std::make_shared<nn::Linear>(8, 8);
  Tensor x = randn({4, 8}).requires_grad_();
  {
    amp::Autocast autocast(kBFloat16);
    Tensor a = linear->forward(x), b = nn::checkpoint(linear, x);
    CHECK(b.dtype() == kBFloat16);
    CHECK(bitwise_equal(a, b));
    a.sum().backward();
  }
  const Tensor plain_weight_grad = linear->weight.grad().clone(), plain_x_grad = x.grad().clone();
  linear->weight.set_grad(Tensor());
  x.set_grad(Tensor());
  {
    amp::Autocast autocast(kBFloat16);
    Tensor b = nn::checkpoint(linear, x);
    b.sum().backward();  // (inside the scope on purpose: the replay sets its own autocast state)
  }
  CHECK(bitwise_equal(plain_weight_grad, linear->weight.grad()));
  CHECK(bitwise_equal(plain_x_grad, x.grad()));

  // No input needs a gradient: the function runs as is and its parameters still get theirs.
  linear->weight.set_grad(Tensor());
  const Tensor constant = randn({4, 8});
  nn::checkpoint(linear, constant).sum().backward();
  REQUIRE(linear->weight.grad().defined());
  CHECK(bitwise_equal(linear->weight.grad(), matmul(ones({8, 4}), constant)));
}

TEST_CASE("checkpoint: parameter hooks run inside the pass and queued callbacks at its end") {
  manual_seed(6);
  auto inner = std::make_shared<nn::Linear>(5, 5);
  nn::Linear outer(5, 5);
  const Tensor x = randn({3, 5}).requires_grad_();
  uint64_t pass_in_hook = 0;
  int hook_calls = 0;
  bool outer_grad_written_at_callback = false;
  inner->weight.register_hook([&](const Tensor& g) {
    ++hook_calls;
    pass_in_hook = current_engine_pass_id();
    queue_backward_callback([&] { outer_grad_written_at_callback = outer.weight.grad().defined(); });
    return g;
  });
  uint64_t pass_outside = 0;
  outer.weight.register_hook([&](const Tensor& g) {
    pass_outside = current_engine_pass_id();
    return g;
  });
  // outer's weight gets its gradient after the checkpointed call's backward: the callback queued
  // from inside the recomputation must still see it written.
  Tensor y = nn::checkpoint(inner, outer.forward(x));
  y.sum().backward();
  CHECK(hook_calls == 1);
  CHECK(pass_in_hook != 0);
  CHECK(pass_in_hook == pass_outside);
  CHECK(outer_grad_written_at_callback);
}

TEST_CASE("checkpoint: misuse is refused with the op's name") {
  auto linear = std::make_shared<nn::Linear>(3, 3);
  CHECK_HEED_ERROR(nn::checkpoint(nn::RecomputedFunction(), {randn({2, 3})}), "checkpoint");
  CHECK_HEED_ERROR(nn::checkpoint([](const std::vector<Tensor>& in) { return in[0]; }, {Tensor()}), "checkpoint");
  {
    const Tensor x = randn({2, 3}).requires_grad_();
    Tensor source = x * 2.0;
    Tensor y = nn::checkpoint(linear, source);
    {
      NoGradGuard no_grad;
      source.add_(1.0);  // the saved input changed before backward
    }
    CHECK_HEED_ERROR(y.sum().backward(), "checkpoint");
  }
  {
    // A function that does not compute the same output twice.
    int calls = 0;
    const Tensor x = randn({2, 3}).requires_grad_();
    Tensor y =
        nn::checkpoint([&](const std::vector<Tensor>& in) { return ++calls == 1 ? in[0] * 2.0 : in[0].sum(); }, {x});
    const std::string message = error_message([&] { y.sum().backward(); });
    CHECK(message.find("heed::checkpoint:") == 0);
    CHECK(message.find("the recomputation returned") != std::string::npos);
  }
}
