// tools/doctor_user_model.cpp — the README's example: heed-doctor's checks on a model a user
// wrote (not one of heed's), through the public API in <heed/doctor.h>. A one-block causal
// LM learns to copy the token two steps back, then the doctor examines it on a batch and
// prints its report. Built and run by ctest (doctor_user_model); exit status 1 on a fail.
#include <heed/doctor.h>
#include <heed/heed.h>

#include <cstdio>

using namespace heed;

// Any nn::Module that contains nn::MultiHeadAttention layers.
class CopyModel : public nn::Module {
 public:
  CopyModel(int64_t vocab, int64_t d_model, int64_t heads, int64_t length) : Module("CopyModel") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, d_model));
    positions = register_parameter("positions", mul_scalar(randn({length, d_model}), 0.1));  // (T,C)
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(d_model));
    attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(
                                       nn::MultiHeadAttentionOptions{.d_model = d_model, .heads = heads}));
    head = register_module("head", std::make_shared<nn::Linear>(d_model, vocab));
  }
  Tensor forward(const Tensor& tokens) const {                                   // (B,T) -> (B,T,V)
    Tensor x = embed->forward(tokens) + positions.narrow(0, 0, tokens.size(1));  // (B,T,C)
    F::AttentionMask causal;
    causal.causal = true;
    x = x + attn->forward(norm->forward(x), causal).output;
    return head->forward(x);
  }
  std::shared_ptr<nn::Embedding> embed;
  Tensor positions;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::Linear> head;
};

int main() {
  constexpr int64_t vocab = 8, length = 10;
  manual_seed(0);
  CopyModel model(vocab, 32, 4, length);
  auto batch = [&](int64_t size) { return randint(0, vocab, {size, length}); };
  // Target at t: the token at t - 2 (the first two positions are ignored).
  auto loss_on = [&](const Tensor& tokens) {
    const Tensor logits = model.forward(tokens).narrow(1, 2, length - 2);  // (B,T-2,V)
    return F::cross_entropy(logits, tokens.narrow(1, 0, length - 2).contiguous());
  };
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  for (int step = 0; step < 200; ++step) {
    Tensor loss = loss_on(batch(32));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }

  // The doctor: the model, its outputs on a probe batch and (optionally) the loss for the
  // gradient checks and a causal-leakage probe.
  const Tensor probe = batch(8);
  doctor::Subject subject;
  subject.model = &model;
  subject.logits = [&] { return model.forward(probe); };
  subject.loss = [&] { return loss_on(probe); };
  subject.causal_leakage = [&] {
    NoGradGuard no_grad;
    Tensor changed = probe.clone();
    changed.narrow(1, length / 2, length - length / 2).fill_(0.0);
    const Tensor before = model.forward(probe).narrow(1, 0, length / 2);
    const Tensor after = model.forward(changed).narrow(1, 0, length / 2);
    return max(abs(before - after)).item<double>();
  };
  const doctor::Report report = doctor::run_checks(subject);
  std::printf("%s", report.text().c_str());
  return report.failed() ? 1 : 0;
}
