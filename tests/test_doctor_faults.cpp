// tests/test_doctor_faults.cpp — heed-doctor on a user's own model (not one of heed's): a
// tiny causal LM written here, with its own padding, KV-cache and position code, trained for
// a few hundred steps on "copy the token three steps back" with left padding. Every fault of
// the documents is planted into a copy of the trained weights (or its code paths), and the
// doctor must fail naming the right cause; the healthy copy must not fail. The trained
// weights are computed once and shared by every test case.
#include <doctest/doctest.h>
#include <heed/doctor.h>
#include <heed/heed.h>

#include <cmath>
#include <stdexcept>

using namespace heed;

namespace {

constexpr int64_t kVocab = 10, kModel = 32, kHeads = 4, kLayers = 2, kLength = 12, kBack = 3;
constexpr int64_t kPad = 0;  // token 0 is padding; real tokens are 1 .. kVocab - 1

// Switches that plant faults in the model's own code.
struct Faults {
  bool causal = true;             // false: the causal mask is forgotten
  bool mask_padding = true;       // false: padded keys are not masked
  bool dropout_in_eval = false;   // true: dropout hard-coded to training mode
  bool cache_off_by_one = false;  // true: cached decoding reads positions one step late
};

// A user's model: embeddings, pre-LN blocks of nn::MultiHeadAttention + MLP, an output head.
class TinyLM : public nn::Module {
 public:
  TinyLM() : Module("TinyLM") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(kVocab, kModel));
    positions = register_parameter("positions", mul_scalar(randn({kLength + 2, kModel}), 0.1));  // (L,C)
    for (int64_t l = 0; l < kLayers; ++l) {
      nn::MultiHeadAttentionOptions o;
      o.d_model = kModel;
      o.heads = kHeads;
      attention.push_back(register_module(fmt::format("attn{}", l), std::make_shared<nn::MultiHeadAttention>(o)));
      norms.push_back(register_module(fmt::format("norm{}", l), std::make_shared<nn::LayerNorm>(kModel)));
      mlps.push_back(register_module(fmt::format("mlp{}", l), std::make_shared<nn::FeedForward>(kModel, 4 * kModel)));
      mlp_norms.push_back(register_module(fmt::format("mlp_norm{}", l), std::make_shared<nn::LayerNorm>(kModel)));
    }
    final_norm = register_module("final_norm", std::make_shared<nn::LayerNorm>(kModel));
    head = register_module("head", std::make_shared<nn::Linear>(kModel, kVocab));
  }

  // tokens (B, T) at positions offset .. offset+T-1; padding (B, offset+T), true = padding.
  // With caches (one per layer) tokens are only the new positions.
  Tensor forward(const Tensor& tokens, const Tensor& padding, std::vector<nn::KVCache>* caches = nullptr) const {
    const int64_t T = tokens.size(1);
    int64_t offset = caches ? (*caches)[0].length() : 0;
    if (caches && faults.cache_off_by_one && offset > 0) offset += 1;    // the planted off-by-one
    Tensor x = embed->forward(tokens) + positions.narrow(0, offset, T);  // (B,T,C)
    F::AttentionMask mask;
    mask.causal = faults.causal;
    if (faults.mask_padding) mask.key_padding = padding.narrow(1, 0, (caches ? (*caches)[0].length() : 0) + T);
    for (int64_t l = 0; l < kLayers; ++l) {
      nn::KVCache* cache = caches ? &(*caches)[static_cast<size_t>(l)] : nullptr;
      x = x + attention[static_cast<size_t>(l)]
                  ->forward(norms[static_cast<size_t>(l)]->forward(x), mask, false, cache)
                  .output;
      x = x + mlps[static_cast<size_t>(l)]->forward(mlp_norms[static_cast<size_t>(l)]->forward(x));
      if (faults.dropout_in_eval) x = F::dropout(x, 0.2, /*training=*/true);
    }
    return head->forward(final_norm->forward(x));  // (B,T,V)
  }

  Faults faults;
  std::shared_ptr<nn::Embedding> embed;
  Tensor positions;
  std::vector<std::shared_ptr<nn::MultiHeadAttention>> attention;
  std::vector<std::shared_ptr<nn::LayerNorm>> norms, mlp_norms;
  std::vector<std::shared_ptr<nn::FeedForward>> mlps;
  std::shared_ptr<nn::LayerNorm> final_norm;
  std::shared_ptr<nn::Linear> head;
};

struct Batch {
  Tensor tokens, padding, targets;  // (B,T) int64, (B,T) bool, (B,T) int64 (kPad = ignored)
};

// Left-padded sequences of random length; the target at t is the token kBack steps back.
Batch make_batch(int64_t size) {
  Batch b;
  const Tensor lengths = randint(kLength - 5, kLength + 1, {size});                                  // (B)
  const Tensor position = arange(static_cast<double>(kLength), TensorOptions(kInt64)).unsqueeze(0);  // (1,T)
  b.padding = lt(position, rsub_scalar(lengths.unsqueeze(1), static_cast<double>(kLength)));         // (B,T)
  b.tokens = masked_fill(randint(1, kVocab, {size, kLength}), b.padding, static_cast<double>(kPad));
  Tensor targets = full({size, kLength}, static_cast<double>(kPad), TensorOptions(kInt64));
  targets.narrow(1, kBack, kLength - kBack).copy_(b.tokens.narrow(1, 0, kLength - kBack));
  b.targets = targets;
  return b;
}

Tensor loss_of(const TinyLM& model, const Batch& b) {
  return F::cross_entropy(model.forward(b.tokens, b.padding), b.targets, {.ignore_index = kPad});
}

const nn::NamedTensors& trained_state() {
  static const nn::NamedTensors state = [] {
    manual_seed(7);
    TinyLM model;
    optim::AdamW opt(model.parameters(), {.lr = 3e-3});
    for (int step = 0; step < 300; ++step) {
      const Batch b = make_batch(32);
      Tensor loss = loss_of(model, b);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    nn::NamedTensors copy;
    for (auto& [name, t] : model.state_dict()) copy.emplace_back(name, t.clone());
    return copy;
  }();
  return state;
}

std::unique_ptr<TinyLM> trained_model() {
  auto model = std::make_unique<TinyLM>();
  model->load_state_dict(trained_state());
  return model;
}

// The probe batch, fixed.
const Batch& probe_batch() {
  static const Batch b = [] {
    manual_seed(123);
    return make_batch(8);
  }();
  return b;
}

// What a user writes to run the doctor on this model.
doctor::Subject subject_for(TinyLM& model) {
  const Batch b = probe_batch();
  doctor::Subject s;
  s.model = &model;
  s.logits = [&model, b] { return model.forward(b.tokens, b.padding); };
  s.loss = [&model, b] { return loss_of(model, b); };
  s.causal_leakage = [&model, b] {
    NoGradGuard no_grad;
    const int64_t cut = kLength / 2;
    Tensor changed = b.tokens.clone();
    changed.narrow(1, cut, kLength - cut).copy_(full({b.tokens.size(0), kLength - cut}, 1.0, TensorOptions(kInt64)));
    const Tensor before = model.forward(b.tokens, b.padding).narrow(1, 0, cut);
    const Tensor after = model.forward(changed, b.padding).narrow(1, 0, cut);
    return max(abs(before - after)).item<double>();
  };
  s.full_logits = [&model, b] {
    NoGradGuard no_grad;
    return model.forward(b.tokens, b.padding);
  };
  s.incremental_logits = [&model, b] {
    NoGradGuard no_grad;
    std::vector<nn::KVCache> caches(kLayers);
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < kLength; ++t) steps.push_back(model.forward(b.tokens.narrow(1, t, 1), b.padding, &caches));
    return cat(steps, 1);
  };
  s.key_padding = b.padding;
  return s;
}

doctor::Report diagnose(TinyLM& model) { return doctor::run_checks(subject_for(model)); }

void check_fails_with(const doctor::Report& r, const std::string& cause) {
  INFO(r.text(true));
  CHECK(r.failed());
  CHECK(r.verdict_of(cause) == doctor::Verdict::Fail);
  bool named = false;
  for (const auto& c : r.root_causes()) named = named || (c.cause == cause && c.verdict == doctor::Verdict::Fail);
  CHECK(named);
}

// Scales the rows of head `head` (dim 0) or its columns (dim 1) of a projection weight.
void scale_head(const Tensor& weight, int dim, int64_t head, double factor) {
  NoGradGuard no_grad;
  const int64_t dh = kModel / kHeads;
  Tensor block = weight.narrow(dim, head * dh, dh);
  block.mul_(factor);
}

}  // namespace

TEST_CASE("doctor on a user model: the healthy trained model has no fail") {
  auto model = trained_model();
  model->train();
  const doctor::Report r = diagnose(*model);
  INFO(r.text(true));
  CHECK_FALSE(r.failed());
  CHECK(r.verdict_of("padding_mask") == doctor::Verdict::Ok);
  CHECK(r.verdict_of("kv_cache") == doctor::Verdict::Ok);
  CHECK(r.verdict_of("causal_mask") == doctor::Verdict::Ok);
  CHECK(r.verdict_of("no_scale") == doctor::Verdict::Ok);
  // The model is handed back as it came: training mode, no gradients.
  CHECK(model->is_training());
  for (const auto& [name, p] : model->named_parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("doctor on a user model: no scale, scale by d_model, a kernel-level scale bug") {
  SUBCASE("no scale") {
    auto model = trained_model();
    for (auto& a : model->attention)
      a->scaling = std::make_shared<nn::AttentionScaling>(nn::AttentionScale::None, a->d_head(), kHeads);
    check_fails_with(diagnose(*model), "no_scale");
  }
  SUBCASE("scale by 1/sqrt(d_model)") {
    auto model = trained_model();
    for (auto& a : model->attention)
      a->scaling = std::make_shared<nn::AttentionScaling>(nn::AttentionScale::Fixed, a->d_head(), kHeads,
                                                          1.0 / std::sqrt(static_cast<double>(kModel)));
    check_fails_with(diagnose(*model), "scale_d_model");
  }
  SUBCASE("the kernel applies another scale than the layer asks for") {
    auto model = trained_model();
    struct ResetHook {
      ~ResetHook() { F::testing::attention_kernel_scale_fault = 1.0; }
    } reset;
    F::testing::attention_kernel_scale_fault = 2.0;
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "kernel_scale");
    CHECK(r.verdict_of("no_scale") == doctor::Verdict::Ok);
  }
}

TEST_CASE("doctor on a user model: saturated and uniform attention") {
  SUBCASE("Q and K weights multiplied by 30: softmax saturated") {
    auto model = trained_model();
    {
      NoGradGuard no_grad;
      for (auto& a : model->attention) {
        a->q_proj->weight.mul_(30.0);
        a->k_proj->weight.mul_(30.0);
      }
    }
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "saturated_softmax");
    CHECK(r.verdict_of("uniform_attention") == doctor::Verdict::Ok);  // never both
    CHECK(r.root_causes()[0].cause == "saturated_softmax");
  }
  SUBCASE("K zeroed: uniform attention") {
    auto model = trained_model();
    {
      NoGradGuard no_grad;
      for (auto& a : model->attention) {
        a->k_proj->weight.zero_();
        a->k_proj->bias.zero_();
      }
    }
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "uniform_attention");
    CHECK(r.verdict_of("saturated_softmax") == doctor::Verdict::Ok);
  }
}

TEST_CASE("doctor on a user model: one head's gradient explodes, NaN in an attention weight") {
  SUBCASE("one head's output weights blown up") {
    auto model = trained_model();
    scale_head(model->attention[0]->out_proj->weight, 1, 2, 1000.0);
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "head_gradient");
    bool named_head = false;
    for (const auto& f : r.findings)
      named_head =
          named_head || (f.cause == "head_gradient" && f.verdict == doctor::Verdict::Fail && f.where == "attn0 head 2");
    CHECK(named_head);
  }
  SUBCASE("a NaN in the queries of one head") {
    auto model = trained_model();
    {
      NoGradGuard no_grad;
      model->attention[1]->q_proj->weight.narrow(0, 8, 1).narrow(1, 0, 1).fill_(NAN);  // head 1, row 0
    }
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "nan_attention");
    bool named_head = false;
    for (const auto& f : r.findings)
      named_head = named_head || (f.cause == "nan_attention" && f.where == "attn1 head 1");
    CHECK(named_head);
  }
}

TEST_CASE("doctor on a user model: mask, dropout and cache faults in the model's own code") {
  auto model = trained_model();
  SUBCASE("a broken causal mask") {
    model->faults.causal = false;
    check_fails_with(diagnose(*model), "causal_mask");
  }
  SUBCASE("a padding mask that leaks") {
    model->faults.mask_padding = false;
    check_fails_with(diagnose(*model), "padding_mask");
  }
  SUBCASE("dropout on in eval mode") {
    model->faults.dropout_in_eval = true;
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "dropout_eval");
    // The noise would fail every comparison of two passes: those are skipped, not blamed.
    CHECK(r.root_causes().size() == 1);
  }
  SUBCASE("an off-by-one KV cache") {
    model->faults.cache_off_by_one = true;
    const doctor::Report r = diagnose(*model);
    check_fails_with(r, "kv_cache");
    CHECK(r.verdict_of("causal_mask") == doctor::Verdict::Ok);
  }
}

TEST_CASE("doctor restores mode, recording and RNG even when a check throws") {
  auto model = trained_model();
  model->train();
  doctor::Subject s = subject_for(*model);
  s.causal_leakage = []() -> double { throw std::runtime_error("a check failed midway"); };
  manual_seed(99);
  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  CHECK_THROWS_AS(doctor::run_checks(s), std::runtime_error);
  CHECK(model->is_training());
  CHECK(default_generator().seed() == seed);
  CHECK(default_generator().offset() == offset);
  for (const auto& [name, p] : model->named_parameters()) CHECK_FALSE(p.grad().defined());
  // Recording is off again: a fresh forward pass leaves the recorded weights untouched.
  for (auto& a : model->attention) {
    const Tensor before = a->last_weights();
    model->forward(probe_batch().tokens, probe_batch().padding);
    CHECK(a->last_weights().is_same(before));
  }
}
