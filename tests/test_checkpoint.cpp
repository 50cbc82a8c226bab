// tests/test_checkpoint.cpp — model files and training checkpoints: exact resume (bit-identical
// losses and parameters on the CPU), atomic replacement, wrong-kind and corrupt files.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace heed;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("heed_test_checkpoint_" + name)).string();
}

nn::TransformerLMOptions tiny_options() {
  nn::TransformerLMOptions o;
  o.vocab = 20;
  o.d_model = 16;
  o.heads = 2;
  o.layers = 2;
  o.context = 8;
  o.dropout = 0.1;  // exercises the RNG state in the checkpoint
  return o;
}

struct Run {
  std::unique_ptr<nn::TransformerLM> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::WarmupCosineLR> sched;
  Run() {
    model = std::make_unique<nn::TransformerLM>(tiny_options());
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 3e-3});
    sched = std::make_unique<optim::WarmupCosineLR>(*opt, 3, 12, 1e-4);
  }
  // One step on a batch drawn from the default generator (so batches follow the RNG state).
  double step() {
    const Tensor x = randint(0, 20, {4, 8}), y = randint(0, 20, {4, 8});
    Tensor loss = F::cross_entropy(model->forward(x), y);
    opt->zero_grad();
    loss.backward();
    nn::clip_grad_norm_(model->parameters(), 1.0);
    opt->step();
    sched->step();
    return loss.item<double>();
  }
};

}  // namespace

TEST_CASE("a resumed training run is bit-identical to an uninterrupted one") {
  const std::string path = temp_path("resume.ckpt");
  manual_seed(42);
  Run uninterrupted;
  std::vector<double> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(uninterrupted.step());

  manual_seed(42);
  Run first;
  std::vector<double> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(first.step());
  io::save_checkpoint(path, *first.model, first.opt.get(), first.sched.get(), 4, {{"note", "test"}});
  first.step();  // training goes on after the save; the checkpoint must not see this

  manual_seed(7);  // a different RNG state: the checkpoint restores it
  Run resumed;
  const io::RestoredCheckpoint restored =
      io::load_checkpoint(path, *resumed.model, resumed.opt.get(), resumed.sched.get());
  CHECK(restored.step == 4);
  CHECK(restored.config["note"] == "test");
  for (int i = 4; i < 10; ++i) losses.push_back(resumed.step());
  REQUIRE(losses.size() == expected.size());
  for (size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == expected[i]);  // bit-identical
  const auto a = uninterrupted.model->named_parameters(), b = resumed.model->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].second.to_vector<float>() == b[i].second.to_vector<float>());
  std::filesystem::remove(path);
}

TEST_CASE("model files round trip and carry their config") {
  const std::string path = temp_path("model.safetensors");
  manual_seed(1);
  nn::TransformerLM a(tiny_options());
  io::save_model(a, path, {{"vocab", 20}});
  CHECK(io::read_config(path)["vocab"] == 20);
  manual_seed(2);
  nn::TransformerLM b(tiny_options());
  io::load_model(b, path);
  for (const auto& [name, p] : a.named_parameters()) {
    Tensor q;
    for (const auto& [n2, p2] : b.named_parameters())
      if (n2 == name) q = p2;
    CHECK(p.to_vector<float>() == q.to_vector<float>());
  }
  // A model file is not a training checkpoint, and the other way round.
  CHECK_THROWS_AS(io::load_checkpoint(path, b), Error);
  const std::string ckpt = temp_path("kind.ckpt");
  io::save_checkpoint(ckpt, a, nullptr, nullptr, 0, nullptr);
  try {
    io::load_model(b, ckpt);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("load_checkpoint") != std::string::npos);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(ckpt);
}

TEST_CASE("loading a checkpoint into a different model lists the mismatching keys") {
  const std::string path = temp_path("mismatch.ckpt");
  manual_seed(1);
  nn::TransformerLM a(tiny_options());
  io::save_checkpoint(path, a, nullptr, nullptr, 0, nullptr);
  nn::TransformerLMOptions other = tiny_options();
  other.layers = 3;
  nn::TransformerLM b(other);
  try {
    io::load_checkpoint(path, b);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("blocks.2") != std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a corrupt checkpoint is rejected and a failed save keeps the previous file") {
  const std::string path = temp_path("corrupt.ckpt");
  manual_seed(1);
  nn::TransformerLM a(tiny_options());
  io::save_checkpoint(path, a, nullptr, nullptr, 3, nullptr);
  const auto good_size = std::filesystem::file_size(path);
  // Truncate a copy: rejected with a message, no crash.
  const std::string truncated = temp_path("truncated.ckpt");
  std::filesystem::copy_file(path, truncated, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(truncated, good_size / 2);
  CHECK_THROWS_AS(io::load_checkpoint(truncated, a), Error);
  // Saving a model whose tensor cannot be written (an undefined parameter name clash is not
  // possible, so use a directory as the target): the old checkpoint stays intact.
  CHECK_THROWS_AS(io::save_checkpoint(std::filesystem::temp_directory_path().string(), a, nullptr, nullptr, 0, nullptr),
                  Error);
  CHECK(std::filesystem::file_size(path) == good_size);
  CHECK(io::load_checkpoint(path, a).step == 3);
  CHECK_THROWS_AS(io::load_checkpoint(temp_path("does_not_exist.ckpt"), a), Error);
  std::filesystem::remove(path);
  std::filesystem::remove(truncated);
}
