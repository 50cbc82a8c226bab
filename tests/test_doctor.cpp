// tests/test_doctor.cpp — the attention doctor on heed's own models (lm_subject,
// seq2seq_subject): it passes a healthy trained TransformerLM and flags each fault planted
// into a copy of it: no scale, scale by d_model, dropout active in eval, a broken causal mask,
// identical Q/K projections, a huge initialisation, vanishing embeddings, a NaN, an
// off-by-one KV cache; the report's summary and collapsed table. Also the probe's statistics
// (seed 000 sec. 10). Faults planted in a user's own model: test_doctor_faults.cpp.
#include <doctest/doctest.h>
#include <heed/doctor.h>
#include <heed/heed.h>

#include <cmath>

using namespace heed;

namespace {

constexpr int64_t kVocab = 12, kContext = 12;

nn::TransformerLMOptions options() {
  nn::TransformerLMOptions o;
  o.vocab = kVocab;
  o.d_model = 32;
  o.heads = 2;
  o.layers = 2;
  o.context = kContext;
  return o;
}

// The "copy the token three steps back" task: attention must learn a sharp, causal pattern.
std::pair<Tensor, Tensor> batch(int64_t size) {
  const Tensor seq = randint(0, kVocab, {size, kContext + 3});
  return {seq.narrow(1, 3, kContext).contiguous(), seq.narrow(1, 0, kContext).contiguous()};
}

const nn::NamedTensors& trained_state() {
  static const nn::NamedTensors state = [] {
    manual_seed(0);
    nn::TransformerLM model(options());
    optim::AdamW opt(model.parameters(), {.lr = 3e-3});
    for (int step = 0; step < 300; ++step) {
      auto [x, y] = batch(32);
      // predict y[t] = x[t-3]: targets are the input shifted by three (first three are noise)
      Tensor loss =
          F::cross_entropy(model.forward(x).narrow(1, 3, kContext - 3), x.narrow(1, 0, kContext - 3).contiguous());
      opt.zero_grad();
      loss.backward();
      opt.step();
      (void)y;
    }
    nn::NamedTensors copy;
    for (auto& [name, t] : model.state_dict()) copy.emplace_back(name, t.clone());
    return copy;
  }();
  return state;
}

std::unique_ptr<nn::TransformerLM> trained_model(nn::TransformerLMOptions o = options()) {
  auto model = std::make_unique<nn::TransformerLM>(o);
  model->load_state_dict(trained_state());
  return model;
}

doctor::Report diagnose(nn::TransformerLM& model, doctor::Subject* custom = nullptr) {
  manual_seed(123);
  auto [x, y] = batch(8);
  doctor::Subject s = doctor::lm_subject(model, x, y);
  if (custom) {
    if (custom->logits) s.logits = custom->logits;
    if (custom->incremental_logits) s.incremental_logits = custom->incremental_logits;
  }
  return doctor::run_checks(s);
}

// The verdict of the worst finding of a cause; the cause must have been checked.
doctor::Verdict worst(const doctor::Report& r, const std::string& cause) {
  bool found = false;
  for (const auto& f : r.findings) found = found || f.cause == cause;
  REQUIRE_MESSAGE(found, "no finding for cause '" << cause << "'");
  return r.verdict_of(cause);
}

}  // namespace

TEST_CASE("the doctor passes the healthy trained model") {
  auto model = trained_model();
  const doctor::Report r = diagnose(*model);
  INFO(r.text(true));
  CHECK_FALSE(r.failed());
  CHECK(r.verdict_of("no_scale") == doctor::Verdict::Ok);
  CHECK(r.verdict_of("kernel_scale") == doctor::Verdict::Ok);
  CHECK(worst(r, "causal_mask") == doctor::Verdict::Ok);
  CHECK(worst(r, "kv_cache") == doctor::Verdict::Ok);
  CHECK(worst(r, "dropout_eval") == doctor::Verdict::Ok);
  CHECK(worst(r, "saturated_softmax") != doctor::Verdict::Fail);
  CHECK(worst(r, "uniform_attention") != doctor::Verdict::Fail);
  // The doctor leaves the model as it found it.
  for (const auto& [name, p] : model->named_parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("the doctor flags a missing scale and a scale by d_model") {
  nn::TransformerLMOptions o = options();
  o.scale = nn::AttentionScale::None;
  auto unscaled = trained_model(o);
  const doctor::Report a = diagnose(*unscaled);
  INFO(a.table());
  CHECK(a.failed());
  CHECK(worst(a, "no_scale") == doctor::Verdict::Fail);

  // Rebuild the trained weights with the classic mistake: 1/sqrt(d_model).
  auto wrong = trained_model();
  for (size_t i = 0; i < wrong->blocks->size(); ++i) {
    auto& attn = wrong->block(i)->self_attn;
    attn->scaling =
        std::make_shared<nn::AttentionScaling>(nn::AttentionScale::Fixed, attn->d_head(), 2, 1.0 / std::sqrt(32.0));
  }
  const doctor::Report b = diagnose(*wrong);
  INFO(b.table());
  CHECK(worst(b, "scale_d_model") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags dropout left on in eval mode") {
  auto model = trained_model();
  doctor::Subject custom;
  manual_seed(123);
  auto [x, y] = batch(8);
  nn::TransformerLM* m = model.get();
  custom.logits = [m, x] { return F::dropout(m->forward(x), 0.3, /*training=*/true); };
  const doctor::Report r = diagnose(*model, &custom);
  CHECK(worst(r, "dropout_eval") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags a broken causal mask") {
  nn::TransformerLMOptions o = options();
  o.causal = false;
  auto model = trained_model(o);
  const doctor::Report r = diagnose(*model);
  CHECK(worst(r, "causal_mask") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags identical Q and K projections") {
  auto model = trained_model();
  {
    NoGradGuard no_grad;
    const Tensor w = model->block(0)->self_attn->qkv_proj->weight;
    w.narrow(0, 32, 32).copy_(w.narrow(0, 0, 32));
  }
  const doctor::Report r = diagnose(*model);
  CHECK(worst(r, "qk_symmetric") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags a huge initialisation") {
  auto model = trained_model();
  {
    NoGradGuard no_grad;
    for (const auto& [name, p] : model->named_parameters())
      if (name.find("qkv_proj.weight") != std::string::npos) Tensor(p).mul_(60.0);
  }
  const doctor::Report r = diagnose(*model);
  INFO(r.table());
  CHECK(r.failed());
  CHECK(worst(r, "fp16_overflow") != doctor::Verdict::Ok);
}

TEST_CASE("the doctor flags vanishing embeddings") {
  auto model = trained_model();
  {
    NoGradGuard no_grad;
    model->tok_embed->weight.mul_(1e-7);
    model->pos_embed->weight.mul_(1e-7);
  }
  const doctor::Report r = diagnose(*model);
  INFO(r.table());
  CHECK(r.failed());
  CHECK(worst(r, "uniform_attention") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags a NaN") {
  auto model = trained_model();
  {
    NoGradGuard no_grad;
    model->block(1)->ff->fc1->weight.narrow(0, 0, 1).narrow(1, 0, 1).fill_(NAN);
  }
  const doctor::Report r = diagnose(*model);
  CHECK(worst(r, "nan_parameters") == doctor::Verdict::Fail);
  CHECK(worst(r, "nan_activations") == doctor::Verdict::Fail);
}

TEST_CASE("the doctor flags an off-by-one KV cache") {
  auto model = trained_model();
  manual_seed(123);
  auto [x, y] = batch(8);
  nn::TransformerLM* m = model.get();
  doctor::Subject custom;
  custom.incremental_logits = [m, x] {
    NoGradGuard no_grad;
    // The bug: the cache is fed each token one position late (a dummy token first).
    std::vector<nn::KVCache> caches = m->make_caches();
    m->forward(zeros({x.size(0), 1}, kInt64), &caches);
    std::vector<Tensor> steps;
    for (int64_t t = 0; t + 1 < x.size(1); ++t) steps.push_back(m->forward(x.narrow(1, t, 1), &caches));
    steps.push_back(steps.back());
    return cat(steps, 1);
  };
  const doctor::Report r = diagnose(*model, &custom);
  CHECK(worst(r, "kv_cache") == doctor::Verdict::Fail);
}

TEST_CASE("the report: summary first, healthy rows collapsed, every row in JSON") {
  auto model = trained_model();
  {
    NoGradGuard no_grad;
    for (const auto& [name, p] : model->named_parameters())
      if (name.find("qkv_proj.weight") != std::string::npos) Tensor(p).narrow(0, 0, 64).mul_(30.0);  // Q and K
  }
  const doctor::Report r = diagnose(*model);
  const std::string text = r.text();
  INFO(text);
  CHECK(text.rfind("verdict: FAIL", 0) == 0);
  CHECK(text.find("1. [FAIL] softmax saturated") != std::string::npos);
  CHECK(text.find("seed 001 sec. 5.2") != std::string::npos);
  CHECK(text.find("places") != std::string::npos);  // collapsed healthy rows
  CHECK(r.text(true).find("places") == std::string::npos);
  const nlohmann::json j = r.json();
  CHECK(j["findings"].size() == r.findings.size());
  CHECK(j["verdict"] == "FAIL");
  CHECK(j["root_causes"][0]["cause"] == "saturated_softmax");
  // The symptom: max/mean and entropy agree (no "uniform" head beside one-hot ones).
  CHECK(r.verdict_of("uniform_attention") == doctor::Verdict::Ok);
}

TEST_CASE("the doctor checks the source padding of heed's Transformer") {
  manual_seed(5);
  nn::TransformerOptions o;
  o.src_vocab = 11;
  o.tgt_vocab = 11;
  o.layer.d_model = 32;
  o.layer.heads = 4;
  o.layer.d_ff = 64;
  o.layer.dropout = 0.0;
  o.encoder_layers = 1;
  o.decoder_layers = 1;
  nn::Transformer model(o);
  const Tensor src = tensor({{3, 4, 5, 6, 0, 0}, {7, 8, 9, 0, 0, 0}}).to(kInt64);  // 0 = padding
  const Tensor tgt_in = tensor({{1, 3, 4, 5}, {1, 7, 8, 9}}).to(kInt64);
  const Tensor tgt_out = tensor({{3, 4, 5, 2}, {7, 8, 9, 2}}).to(kInt64);
  const doctor::Report r = doctor::run_checks(doctor::seq2seq_subject(model, src, tgt_in, tgt_out));
  INFO(r.text(true));
  CHECK(worst(r, "padding_mask") == doctor::Verdict::Ok);
  CHECK(worst(r, "kv_cache") == doctor::Verdict::Ok);
  CHECK(worst(r, "causal_mask") == doctor::Verdict::Ok);
}

TEST_CASE("doctor probe: score statistics follow the d_k arithmetic") {
  const auto rows = doctor::probe({16, 64, 256}, 64, 128, 0);
  REQUIRE(rows.size() == 6);
  for (const auto& r : rows) {
    CAPTURE(r.dk);
    CAPTURE(r.scaled);
    const double expected_std = r.scaled ? 1.0 : std::sqrt(static_cast<double>(r.dk));
    CHECK(r.score_std == doctest::Approx(expected_std).epsilon(0.1));
    // E|s| = std * sqrt(2/pi) for a zero-mean normal (seed 000's "about 8" for d_k = 64 is the std).
    CHECK(r.score_mean_abs == doctest::Approx(expected_std * std::sqrt(2.0 / M_PI)).epsilon(0.1));
  }
  // Unscaled scores saturate the softmax: lower entropy and a larger max weight at every d_k.
  for (size_t i = 0; i < rows.size(); i += 2) {
    CHECK(rows[i].entropy < rows[i + 1].entropy);
    CHECK(rows[i].max_weight > rows[i + 1].max_weight);
  }
  // The gradient through the softmax is not monotonic in the sharpness (uniform rows have small
  // gradients too); once the softmax saturates (d_k = 256, max weight ~0.9) it is smaller.
  CHECK(rows[4].max_weight > 0.85);
  CHECK(rows[4].grad_norm < rows[5].grad_norm);
  CHECK(rows[2].entropy < 1.0);  // d_k = 64 unscaled: "entropy < 1" (seed 000 sec. 6)
}
