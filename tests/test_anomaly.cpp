// tests/test_anomaly.cpp — anomaly detection: the op that first produced a NaN or an infinity
// is named, in forward and in backward, with shapes and statistics; off by default and free
// of side effects when off; intended -inf masks are not reported.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "test_util.h"

using namespace heed;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs `body`, expects a heed::Error and returns its message.
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected a heed::Error");
  return "";
}

}  // namespace

TEST_CASE("anomaly detection is off by default, per thread, and the guards nest") {
  CHECK_FALSE(anomaly_detection_enabled());
  {
    DetectAnomalyGuard on;
    CHECK(anomaly_detection_enabled());
    bool other_thread_sees_it = true;
    std::thread([&] { other_thread_sees_it = anomaly_detection_enabled(); }).join();
    CHECK_FALSE(other_thread_sees_it);
    {
      DetectAnomalyGuard off(false);
      CHECK_FALSE(anomaly_detection_enabled());
    }
    CHECK(anomaly_detection_enabled());
  }
  CHECK_FALSE(anomaly_detection_enabled());
  set_detect_anomaly(true);
  CHECK(anomaly_detection_enabled());
  set_detect_anomaly(false);
  CHECK_FALSE(anomaly_detection_enabled());
}

TEST_CASE("tensor_stats counts NaN and infinities and summarises the finite values") {
  const Tensor t = tensor({1.0, -2.0, kNaN, kInf, -kInf, 4.0, kNaN}, kFloat32).view({7});
  const TensorStats s = tensor_stats(t);
  CHECK(s.numel == 7);
  CHECK(s.nan_count == 2);
  CHECK(s.posinf_count == 1);
  CHECK(s.neginf_count == 1);
  CHECK(s.min == -2.0);
  CHECK(s.max == 4.0);
  CHECK(s.mean == doctest::Approx((1.0 - 2.0 + 4.0) / 3.0));
  CHECK_FALSE(s.all_finite());
  CHECK(contains(s.str(), "[7] float32"));
  CHECK(contains(s.str(), "2 NaN, 1 +Inf, 1 -Inf"));
  const TensorStats clean = tensor_stats(arange(5.0, kFloat64).view({5}));
  CHECK(clean.all_finite());
  CHECK(clean.mean == 2.0);
  // Views (non-contiguous) and half types are read correctly.
  const Tensor m = tensor({{1, 2, 3}, {4, 5, 6}}, kBFloat16).t();
  const TensorStats mv = tensor_stats(m);
  CHECK(mv.min == 1.0);
  CHECK(mv.max == 6.0);
  CHECK(mv.mean == 3.5);
}

TEST_CASE("when off, no forward record is made and a NaN passes silently") {
  Tensor x = tensor({-1.0, 4.0}).requires_grad_();
  Tensor y = sqrt(x);  // NaN at -1
  CHECK(y.grad_fn()->context.empty());
  CHECK_FALSE(isfinite_all(y));
}

TEST_CASE("forward: the op that produced a NaN is named with shapes, statistics and the tag") {
  DetectAnomalyGuard anomaly;
  Tensor x = tensor({{0.5, -1.0, 2.0}, {1.0, 3.0, 4.0}}).requires_grad_();
  x.set_name("activations");
  const std::string message = error_of([&] {
    AnomalyTagGuard outer("encoder.0");
    AnomalyTagGuard inner("ffn");
    Tensor y = sqrt(x);
  });
  CHECK(contains(message, "heed::anomaly: forward of 'sqrt'"));
  CHECK(contains(message, "tag 'encoder.0/ffn'"));
  CHECK(contains(message, "1 NaN, 0 +Inf, 0 -Inf"));
  CHECK(contains(message, "every input was finite"));
  CHECK(contains(message, "'activations' [2, 3] float32: min -1 max 4 mean 1.58333"));
  CHECK(contains(message, "output: [2, 3] float32"));
  CHECK(current_anomaly_tag().empty());
}

TEST_CASE("forward: log(0) and x/0 are reported as infinities made from finite inputs") {
  DetectAnomalyGuard anomaly;
  Tensor x = tensor({0.0, 1.0, 2.0}).requires_grad_();
  const std::string log_message = error_of([&] { log(x); });
  CHECK(contains(log_message, "forward of 'log'"));
  CHECK(contains(log_message, "0 NaN, 0 +Inf, 1 -Inf"));
  const std::string div_message = error_of([&] { ones({3}) / x; });
  CHECK(contains(div_message, "forward of 'div'"));
  CHECK(contains(div_message, "1 +Inf"));
  // float32 overflow: finite inputs, infinite output.
  const std::string overflow = error_of([&] { exp(x * 100.0); });
  CHECK(contains(overflow, "forward of 'exp'"));
}

TEST_CASE("forward: a NaN loss is reported even when every gradient would be finite") {
  // PyTorch's anomaly mode checks only backward outputs: loss = sum(w * data) with a NaN in
  // the data gives a NaN loss but the gradient of w is the (partly NaN) data... and
  // loss = sum(where(mask, w, data)) gives a NaN loss with a finite gradient. Ours names the op.
  DetectAnomalyGuard anomaly;
  Tensor w = ones({4}).requires_grad_();
  const Tensor data = tensor({1.0, kNaN, 3.0, 4.0});
  const Tensor mask = tensor({1.0, 0.0, 1.0, 1.0}) > 0.5;
  const std::string message = error_of([&] {
    Tensor loss = where(mask, w, data).sum();
    loss.backward();
  });
  CHECK(contains(message, "forward of 'where'"));
  CHECK(contains(message, "1 NaN"));
  CHECK(w.grad().defined() == false);  // stopped before backward
  // Without detection the same program runs and gives a NaN loss with finite gradients.
  DetectAnomalyGuard off(false);
  Tensor loss = where(mask, w, data).sum();
  loss.backward();
  CHECK(std::isnan(loss.item<double>()));
  CHECK(isfinite_all(w.grad()));
}

TEST_CASE("forward: an infinite loss (one element) is reported even if the input held -inf") {
  DetectAnomalyGuard anomaly;
  // A masked class (-inf logit) that is the target: the loss is +inf.
  Tensor logits = tensor({{0.0, 1.0, -kInf}}).requires_grad_();
  const Tensor target = tensor({2.0}, kInt64).view({1});
  const std::string message = error_of([&] { F::cross_entropy(logits, target); });
  CHECK(contains(message, "forward of 'cross_entropy'"));
  CHECK(contains(message, "1 +Inf"));
}

TEST_CASE("forward: intended -inf masks and fully masked attention rows are not anomalies") {
  DetectAnomalyGuard anomaly;
  manual_seed(3);
  Tensor q = randn({1, 2, 4, 8}).requires_grad_();
  Tensor k = randn({1, 2, 4, 8}).requires_grad_();
  Tensor v = randn({1, 2, 4, 8}).requires_grad_();
  F::AttentionMask mask;
  mask.keep = tensor({{1, 1, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 0, 0}}) > 0.5;  // row 1 fully masked
  // The composed path (masked_fill with -inf, softmax) and the fused kernel.
  F::AttentionResult composed = F::scaled_dot_product_attention_with_weights(q, k, v, mask);
  Tensor fused = F::scaled_dot_product_attention(q, k, v, mask);
  (composed.output.sum() + fused.sum()).backward();
  CHECK(isfinite_all(q.grad()));
  CHECK(isfinite_all(k.grad()));
  CHECK(isfinite_all(v.grad()));
  // softmax/log_softmax of rows holding -inf (intended masks) pass too.
  Tensor scores = tensor({{0.0, -kInf}, {-kInf, -kInf}}).requires_grad_();
  Tensor p = F::log_softmax(scores, -1);
  CHECK(std::isinf(p.at({1, 0})));
}

TEST_CASE("forward records each op's name, tag and shapes") {
  clear_anomaly_forward_log();
  Tensor x = randn({2, 3}).requires_grad_();
  {
    DetectAnomalyGuard anomaly;
    AnomalyTagGuard tag("head");
    Tensor y = (x * 2.0).exp().sum({1});
    CHECK_FALSE(y.grad_fn()->context.empty());
    CHECK(contains(y.grad_fn()->context, "forward of 'sum'"));
  }
  Tensor untracked = x * 3.0;  // detection off: not logged
  const std::vector<AnomalyRecord> log = anomaly_forward_log();
  REQUIRE(log.size() == 3);
  CHECK(log[0].op == "mul_scalar");
  CHECK(log[1].op == "exp");
  CHECK(log[2].op == "sum");
  for (const AnomalyRecord& r : log) CHECK(r.tag == "head");
  CHECK(log[0].input_shapes.size() == 1);
  CHECK(log[0].input_shapes[0] == Dims{2, 3});
  CHECK(log[2].output_shape == Dims{2});
  CHECK(log[0].sequence_nr < log[1].sequence_nr);
  CHECK(log[1].sequence_nr < log[2].sequence_nr);
  clear_anomaly_forward_log();
  CHECK(anomaly_forward_log().empty());
}

TEST_CASE("the forward log keeps the most recent records") {
  clear_anomaly_forward_log();
  Tensor x = ones({1}).requires_grad_();
  {
    DetectAnomalyGuard anomaly;
    Tensor y = x;
    for (size_t i = 0; i < kAnomalyLogCapacity + 5; ++i) y = i % 2 == 0 ? y + 1.0 : y * 1.0;
  }
  const std::vector<AnomalyRecord> log = anomaly_forward_log();
  REQUIRE(log.size() == kAnomalyLogCapacity);
  for (size_t i = 1; i < log.size(); ++i) CHECK(log[i - 1].sequence_nr + 1 == log[i].sequence_nr);
  // The last op was i = capacity + 4 (even): add_scalar.
  CHECK(log.back().op == "add_scalar");
  clear_anomaly_forward_log();
}

TEST_CASE("backward: the first op whose backward produced NaN/Inf is named with statistics") {
  // sqrt at 0 is finite in forward (0) but its gradient 0.5/sqrt(0) is +Inf.
  Tensor x = tensor({0.0, 1.0, 4.0}).requires_grad_();
  {
    DetectAnomalyGuard anomaly;
    Tensor loss;
    {
      AnomalyTagGuard tag("norm");
      loss = (sqrt(x) * 2.0).sum();
    }
    const std::string message = error_of([&] { loss.backward(); });
    CHECK(contains(message, "heed::anomaly: backward of 'sqrt'"));
    CHECK(contains(message, "in the gradient for input 0"));
    CHECK(contains(message, "1 +Inf"));
    CHECK(contains(message, "incoming gradient (of the output): [3] float32: min 2 max 2 mean 2"));
    CHECK(contains(message, "gradient for input 0: [3] float32: min 0.5 max 1 mean 0.75, 0 NaN, 1 +Inf"));
    // The forward record: tag, input and output statistics.
    CHECK(contains(message, "tag 'norm'"));
    CHECK(contains(message, "input 0: [3] float32: min 0 max 4 mean 1.66667"));
    CHECK(contains(message, "output: [3] float32: min 0 max 2 mean 1"));
    CHECK_FALSE(x.grad().defined());
  }
  // Without detection the infinite gradient arrives silently.
  Tensor loss = (sqrt(x) * 2.0).sum();
  loss.backward();
  CHECK(std::isinf(x.grad().at({0})));
}

TEST_CASE("backward: a graph recorded with detection off is still checked, without a forward record") {
  Tensor x = tensor({0.0, 1.0}).requires_grad_();
  Tensor loss = sqrt(x).sum();
  DetectAnomalyGuard anomaly;
  const std::string message = error_of([&] { loss.backward(); });
  CHECK(contains(message, "backward of 'sqrt'"));
  CHECK(contains(message, "no forward record"));
}

TEST_CASE("backward: heed::grad and non-finite seeds are checked too") {
  DetectAnomalyGuard anomaly;
  Tensor x = tensor({0.0, 9.0}).requires_grad_();
  Tensor y = sqrt(x);
  CHECK(contains(error_of([&] { grad({y.sum()}, {x}, {}, true); }), "backward of 'sqrt'"));
  Tensor z = x * 2.0;
  const std::string seed = error_of([&] { z.backward(tensor({1.0, kNaN})); });
  CHECK(contains(seed, "heed::anomaly: the gradient given to backward for tensor 0 is not finite"));
}

TEST_CASE("a model trains under anomaly detection without false reports; a NaN weight is caught") {
  manual_seed(11);
  nn::TransformerLMOptions o;
  o.vocab = 13;
  o.d_model = 16;
  o.heads = 2;
  o.layers = 1;
  o.context = 6;
  o.dropout = 0.1;
  nn::TransformerLM model(o);
  const Tensor idx = randint(0, 13, {2, 6});
  const Tensor targets = randint(0, 13, {2, 6});
  DetectAnomalyGuard anomaly;
  Tensor loss = F::cross_entropy(model.forward(idx), targets);
  loss.backward();
  for (const Tensor& p : model.parameters()) CHECK(isfinite_all(p.grad()));
  // Plant a NaN in the token embedding: the first op that reads it is named.
  {
    NoGradGuard no_grad;
    Tensor element = model.tok_embed->weight.select(0, 0).select(0, 0);  // token 0, feature 0
    element.fill_(kNaN);
  }
  const Tensor first_token = zeros({1, 3}, kInt64);
  const std::string message = error_of([&] { model.forward(first_token); });
  CHECK(contains(message, "heed::anomaly: forward of"));
  CHECK(contains(message, "an input already held NaN"));
}
