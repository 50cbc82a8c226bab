// tests/test_memory_stats.cpp — heed::memory_stats accounts for every byte a training step
// holds, by category: parameters (and module buffers), gradients, optimizer state,
// activations saved for backward, temporaries; the peak and its breakdown.
//
// The counters are process-wide, so every check is on a difference around the code it tests.
#include <doctest/doctest.h>
#include <heed/heed.h>

using namespace heed;

namespace {

int64_t delta(const MemoryStats& after, const MemoryStats& before, MemoryCategory c) {
  return static_cast<int64_t>(after.bytes(c)) - static_cast<int64_t>(before.bytes(c));
}

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

TEST_CASE("memory_stats: a training step's bytes land in the category that owns them") {
  manual_seed(11);
  const MemoryStats start = memory_stats();
  nn::TransformerLMOptions o{.vocab = 64, .d_model = 32, .heads = 4, .layers = 2, .context = 16};
  nn::TransformerLM model(o);
  size_t param_bytes = 0, buffer_bytes = 0;
  for (const Tensor& p : model.parameters()) param_bytes += bytes_of(p);
  for (const auto& [name, b] : model.named_buffers()) buffer_bytes += bytes_of(b);
  const MemoryStats built = memory_stats();
  CHECK(delta(built, start, MemoryCategory::Parameter) == static_cast<int64_t>(param_bytes + buffer_bytes));
  CHECK(delta(built, start, MemoryCategory::Temporary) == 0);  // initialisation left nothing behind

  optim::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  {
    const Tensor x = randint(0, o.vocab, {2, o.context}), y = randint(0, o.vocab, {2, o.context});
    Tensor loss = F::cross_entropy(model.forward(x), y);
    const MemoryStats forward = memory_stats();
    CHECK(delta(forward, built, MemoryCategory::Activation) > 0);  // saved for backward
    optimizer.zero_grad();
    loss.backward();
    const MemoryStats backward = memory_stats();
    CHECK(delta(backward, built, MemoryCategory::Gradient) == static_cast<int64_t>(param_bytes));
    optimizer.step();
  }
  const MemoryStats after = memory_stats();
  // Everything saved for backward and every temporary of the step is gone; the gradients and
  // Adam's two moments per parameter stay.
  CHECK(delta(after, built, MemoryCategory::Activation) == 0);
  CHECK(delta(after, built, MemoryCategory::Temporary) == 0);
  CHECK(delta(after, built, MemoryCategory::Gradient) == static_cast<int64_t>(param_bytes));
  CHECK(delta(after, built, MemoryCategory::OptimizerState) == static_cast<int64_t>(2 * param_bytes));
  size_t sum = 0;
  for (size_t bytes : after.live) sum += bytes;
  CHECK(sum == after.live_total);
  CHECK(after.peak_total >= after.live_total);
  size_t at_peak = 0;
  for (size_t bytes : after.at_peak) at_peak += bytes;
  CHECK(at_peak == after.peak_total);
  CHECK(after.table().find("optimizer") != std::string::npos);
}

TEST_CASE("memory_stats: tags stick to the storage; a parameter saved by an op stays a parameter") {
  Tensor w = randn({8, 8}).requires_grad_();
  CHECK(memory_category(w) == MemoryCategory::Temporary);
  set_memory_category(w, MemoryCategory::Parameter);
  CHECK(memory_category(w.t()) == MemoryCategory::Parameter);  // views share the tag
  Tensor x = randn({4, 8});
  Tensor out = matmul(x, w);  // saves x and w for backward
  CHECK(memory_category(x) == MemoryCategory::Activation);
  CHECK(memory_category(w) == MemoryCategory::Parameter);
  CHECK_THROWS_AS(set_memory_category(Tensor(), MemoryCategory::Gradient), Error);
}

TEST_CASE("memory_stats: the peak and what it was made of") {
  reset_peak_memory_stats();
  const MemoryStats before = memory_stats();
  CHECK(before.peak_total == before.live_total);
  const size_t big = 1 << 22;  // 4 MiB of float32
  {
    Tensor t = zeros({static_cast<int64_t>(big / 4)});
    const MemoryStats during = memory_stats();
    CHECK(during.live_total == before.live_total + big);
  }
  const MemoryStats after = memory_stats();
  CHECK(after.live_total == before.live_total);
  CHECK(after.peak_total >= before.live_total + big);
  CHECK(after.at_peak[static_cast<int>(MemoryCategory::Temporary)] >=
        before.live[static_cast<int>(MemoryCategory::Temporary)] + big);
}
