// tests/test_determinism.cpp — on the CPU the same seed gives bit-identical training: the
// same losses, gradient norms and final parameters across runs and across 1 vs 2 threads, for
// the example models (the translate task's Transformer and a charlm-style TransformerLM),
// with dropout on. Bit-identical means equal bytes, not "close".
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <cstring>
#include <string>
#include <vector>

#include "dataset.h"
#include "task.h"

using namespace heed;

namespace {

struct RunRecord {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<uint8_t>> parameters;  // raw bytes, in named_parameters order
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.detach().contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.numel() * static_cast<int64_t>(c.element_size())};
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// Runs `body` with `threads` threads and restores the previous count.
template <typename Body>
RunRecord with_threads(int threads, Body&& body) {
  const int previous = get_num_threads();
  set_num_threads(threads);
  RunRecord record = body();
  set_num_threads(previous);
  return record;
}

RunRecord train_translate(int steps) {
  manual_seed(2024);
  translate::CorpusOptions corpus;
  corpus.seed = 3;
  corpus.train_size = 400;
  corpus.validation_size = 10;
  corpus.test_size = 10;
  const translate::Task task = translate::make_task(corpus);
  translate::ModelConfig config;
  config.d_model = 32;
  config.heads = 4;
  config.layers = 1;
  config.d_ff = 64;
  config.max_len = 40;
  config.dropout = 0.1;
  auto model = translate::build_model(config, task.source, task.target);
  model->train();
  translate::TrainOptions options;
  options.batch_size = 16;
  options.steps = steps;
  options.warmup = 2;
  translate::Trainer trainer(*model, task, options);
  RunRecord record;
  for (int i = 0; i < steps; ++i) {
    const translate::Trainer::StepResult r = trainer.step();
    record.losses.push_back(r.loss);
    record.grad_norms.push_back(r.grad_norm);
  }
  for (const auto& [name, p] : model->named_parameters()) record.parameters.push_back(bytes_of(p));
  return record;
}

RunRecord train_charlm(int steps) {
  const charlm::Dataset data = charlm::load_dataset(charlm::generated_corpus(5, 20000));
  manual_seed(77);
  nn::TransformerLMOptions o;
  o.vocab = static_cast<int64_t>(data.chars.size());
  o.d_model = 32;
  o.heads = 4;
  o.layers = 2;
  o.context = 16;
  o.dropout = 0.1;
  nn::TransformerLM model(o);
  model.train();
  optim::ParamGroup decay, no_decay;
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  no_decay.weight_decay = 0.0;
  optim::AdamW optimizer({decay, no_decay}, {.lr = 3e-3, .betas = {0.9, 0.99}, .weight_decay = 0.1});
  RunRecord record;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = charlm::get_batch(data.train, 8, o.context);
    Tensor loss = F::cross_entropy(model.forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    record.grad_norms.push_back(nn::clip_grad_norm_(model.parameters(), 1.0));
    optimizer.step();
    record.losses.push_back(loss.item<double>());
  }
  for (const auto& [name, p] : model.named_parameters()) record.parameters.push_back(bytes_of(p));
  return record;
}

void check_identical(const RunRecord& a, const RunRecord& b) {
  CHECK(same_bits(a.losses, b.losses));
  CHECK(same_bits(a.grad_norms, b.grad_norms));
  REQUIRE(a.parameters.size() == b.parameters.size());
  size_t differing = 0;
  for (size_t i = 0; i < a.parameters.size(); ++i) differing += a.parameters[i] != b.parameters[i];
  CHECK(differing == 0);
}

}  // namespace

TEST_CASE("translate model: bit-identical losses and parameters across runs and thread counts") {
  constexpr int kSteps = 4;
  const RunRecord one = with_threads(1, [] { return train_translate(kSteps); });
  const RunRecord again = with_threads(1, [] { return train_translate(kSteps); });
  const RunRecord two = with_threads(2, [] { return train_translate(kSteps); });
  REQUIRE(one.losses.size() == kSteps);
  // The run really trains (the losses move), so equal results are not trivially equal.
  CHECK(one.losses.front() != one.losses.back());
  check_identical(one, again);
  check_identical(one, two);
}

TEST_CASE("charlm-style TransformerLM: bit-identical losses and parameters across runs and thread counts") {
  constexpr int kSteps = 4;
  const RunRecord one = with_threads(1, [] { return train_charlm(kSteps); });
  const RunRecord again = with_threads(1, [] { return train_charlm(kSteps); });
  const RunRecord two = with_threads(2, [] { return train_charlm(kSteps); });
  REQUIRE(one.losses.size() == kSteps);
  CHECK(one.losses.front() != one.losses.back());
  check_identical(one, again);
  check_identical(one, two);
}

TEST_CASE("the seed matters: a different seed gives other dropout masks, the same seed the same") {
  const Tensor x = ones({256});
  manual_seed(1);
  const Tensor first = F::dropout(x, 0.5);
  manual_seed(2);
  const Tensor second = F::dropout(x, 0.5);
  CHECK_FALSE(allclose(first, second));
  manual_seed(1);
  CHECK(allclose(F::dropout(x, 0.5), first, 0.0, 0.0));
}
