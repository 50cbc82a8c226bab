// tests/test_training_threads.cpp — two models trained at once in two std::threads, fed by a
// third thread through queues, give exactly the results of the same training run alone.
//
// The setting the README's thread-sharing rules describe: each training thread owns its model
// and optimizer and draws its random numbers (initialisation, dropout) from its own
// heed::Generator; a data thread makes every batch from a third Generator and hands it over
// through a mutex-protected queue (the tensor then belongs to the consumer). Thread A trains a
// small TransformerLM under amp::Autocast(bf16); thread B an MLP with dropout, with anomaly
// detection on and a no-grad evaluation every few steps. Both also draw from the shared default
// generator at every step. Checked:
//  * losses and final parameters are bit-identical to the same runs done one after the other on
//    the main thread (so autocast, grad mode and anomaly mode are per thread, and nothing else
//    leaks between the threads);
//  * the shared default generator lost no counter (its offset advanced by exactly the draws);
//  * both models learned (final loss below the first).
// This is also the test the `tsan` preset runs under ThreadSanitizer (a data race is reported
// there and fails it). Under TSan each thread runs heed's kernels on 1 OpenMP thread: the
// OpenMP runtimes are not instrumented, so the workers of a parallel loop would be reported as
// false races; elsewhere each training thread uses 2 OpenMP threads.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define HEED_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HEED_TEST_UNDER_TSAN 1
#endif
#endif

using namespace heed;

namespace {

#ifdef HEED_TEST_UNDER_TSAN
constexpr int kKernelThreads = 1;
#else
constexpr int kKernelThreads = 2;
#endif

constexpr int kSteps = 12;
constexpr int64_t kVocab = 12, kContext = 8, kBatch = 4, kFeatures = 10, kClasses = 4;
constexpr int64_t kNoiseDraw = 8;  // numbers each training step draws from the default generator

struct Batch {
  Tensor x, y;
};

// A bounded blocking queue: push waits while full, pop waits while empty; pop returns nothing
// once the queue is closed and drained.
class BatchQueue {
 public:
  void push(Batch batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < kCapacity; });
    items_.push_back(std::move(batch));
    not_empty_.notify_one();
  }
  std::optional<Batch> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    Batch batch = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return batch;
  }
  void close() {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }

 private:
  static constexpr size_t kCapacity = 3;
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Batch> items_;
  bool closed_ = false;
};

// The batches of both models, in the order the data thread makes them (A, B, A, B, ...).
// Language model: y = x (repeat the current token); classifier: the class is the argmax of the
// first kClasses features.
Batch make_lm_batch(Generator& gen) {
  Tensor x = randint(0, kVocab, {kBatch, kContext}, gen);  // (B,T)
  return {x, x.clone()};
}
Batch make_mlp_batch(Generator& gen) {
  Tensor x = randn({kBatch * 4, kFeatures}, gen);  // (N,F)
  return {x, argmax(x.narrow(1, 0, kClasses), 1)};
}

void produce(Generator& gen, const std::function<void(Batch)>& to_a, const std::function<void(Batch)>& to_b) {
  for (int step = 0; step < kSteps; ++step) {
    to_a(make_lm_batch(gen));
    to_b(make_mlp_batch(gen));
  }
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> parameters;
};

// Model A: a small TransformerLM, every weight matrix and bias re-initialised from `gen` (the
// constructor drew them from the shared default generator; LayerNorm weights start at 1),
// trained under bf16 autocast.
Outcome train_lm(uint64_t seed, const std::function<std::optional<Batch>()>& next) {
  set_num_threads(kKernelThreads);
  Generator gen(seed);
  nn::TransformerLM model({.vocab = kVocab, .d_model = 16, .heads = 2, .layers = 1, .context = kContext});
  for (auto& [name, p] : model.named_parameters()) {
    NoGradGuard no_grad;
    if (p.dim() >= 2)
      nn::init::xavier_uniform_(p, 1.0, &gen);
    else if (name.ends_with("bias"))
      nn::init::uniform_(p, -0.05, 0.05, &gen);
  }
  optim::AdamW optimizer(model.parameters(), {.lr = 3e-3});
  Outcome out;
  while (std::optional<Batch> batch = next()) {
    (void)randn({kNoiseDraw});  // the shared default generator, concurrently with the other thread
    Tensor loss;
    {
      amp::Autocast autocast(kBFloat16);
      loss = F::cross_entropy(model(batch->x), batch->y);  // logits (B,T,V)
    }
    optimizer.zero_grad();
    loss.backward();
    nn::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
    out.losses.push_back(loss.item<double>());
  }
  for (auto& [name, p] : model.named_parameters()) out.parameters.emplace_back(name, p.detach().clone());
  return out;
}

// Model B: a two-layer MLP with dropout from `gen`, anomaly detection on, and a no-grad
// evaluation of the batch before every third step.
Outcome train_mlp(uint64_t seed, const std::function<std::optional<Batch>()>& next) {
  set_num_threads(kKernelThreads);
  Generator gen(seed);
  nn::Linear first(kFeatures, 32), second(32, kClasses);
  for (nn::Linear* layer : {&first, &second}) {
    NoGradGuard no_grad;
    nn::init::kaiming_uniform_(layer->weight, 0.0, &gen);
    nn::init::uniform_(layer->bias, -0.1, 0.1, &gen);
  }
  std::vector<Tensor> params = first.parameters();
  for (const Tensor& p : second.parameters()) params.push_back(p);
  optim::AdamW optimizer(params, {.lr = 1e-2});
  DetectAnomalyGuard anomaly;
  Outcome out;
  int step = 0;
  while (std::optional<Batch> batch = next()) {
    (void)randn({kNoiseDraw});
    if (step++ % 3 == 0) {
      NoGradGuard no_grad;
      const Tensor eval_loss = F::cross_entropy(second(F::gelu(first(batch->x))), batch->y);
      REQUIRE_FALSE(eval_loss.requires_grad());
    }
    const Tensor hidden = F::dropout(F::gelu(first(batch->x)), 0.1, true, gen);  // (N,32)
    const Tensor loss = F::cross_entropy(second(hidden), batch->y);
    REQUIRE(loss.requires_grad());  // grad mode is this thread's, whatever the other does
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    out.losses.push_back(loss.item<double>());
  }
  for (auto& [name, p] : first.named_parameters()) out.parameters.emplace_back("first." + name, p.detach().clone());
  for (auto& [name, p] : second.named_parameters()) out.parameters.emplace_back("second." + name, p.detach().clone());
  return out;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

void check_same(const Outcome& threaded, const Outcome& alone) {
  REQUIRE(threaded.losses.size() == static_cast<size_t>(kSteps));
  REQUIRE(alone.losses.size() == static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(threaded.losses[static_cast<size_t>(i)] == alone.losses[static_cast<size_t>(i)]);
  }
  REQUIRE(threaded.parameters.size() == alone.parameters.size());
  for (size_t i = 0; i < alone.parameters.size(); ++i) {
    CAPTURE(alone.parameters[i].first);
    CHECK(threaded.parameters[i].first == alone.parameters[i].first);
    CHECK(bit_equal(threaded.parameters[i].second, alone.parameters[i].second));
  }
  CHECK(alone.losses.back() < alone.losses.front());
}

}  // namespace

TEST_CASE("two training threads fed by a data thread give the results of each run alone") {
  constexpr uint64_t kSeedA = 101, kSeedB = 202, kDataSeed = 303;
  const int threads_before = get_num_threads();

  // Alone, one after the other, on this thread.
  Outcome lm_alone, mlp_alone;
  {
    Generator data(kDataSeed);
    std::deque<Batch> a, b;
    produce(
        data, [&](Batch x) { a.push_back(std::move(x)); }, [&](Batch x) { b.push_back(std::move(x)); });
    auto take = [](std::deque<Batch>& q) {
      return [&q]() -> std::optional<Batch> {
        if (q.empty()) return std::nullopt;
        Batch batch = std::move(q.front());
        q.pop_front();
        return batch;
      };
    };
    lm_alone = train_lm(kSeedA, take(a));
    mlp_alone = train_mlp(kSeedB, take(b));
    set_num_threads(threads_before);
  }

  // At once: a data thread and two training threads.
  manual_seed(5);
  const uint64_t offset_before = default_generator().offset();
  Outcome lm_threaded, mlp_threaded;
  BatchQueue to_a, to_b;
  std::thread data_thread([&] {
    Generator data(kDataSeed);
    produce(
        data, [&](Batch x) { to_a.push(std::move(x)); }, [&](Batch x) { to_b.push(std::move(x)); });
    to_a.close();
    to_b.close();
  });
  std::thread a([&] { lm_threaded = train_lm(kSeedA, [&] { return to_a.pop(); }); });
  std::thread b([&] { mlp_threaded = train_mlp(kSeedB, [&] { return to_b.pop(); }); });
  data_thread.join();
  a.join();
  b.join();
  CHECK(get_num_threads() == threads_before);  // the training threads' settings stayed theirs

  // Every step of both threads drew kNoiseDraw numbers from the default generator, and the
  // module constructors drew their initial weights from it: the offset covers at least the
  // noise, and exactly the same draws as the runs alone would have made.
  const uint64_t drawn = default_generator().offset() - offset_before;
  manual_seed(5);
  {
    nn::TransformerLM lm({.vocab = kVocab, .d_model = 16, .heads = 2, .layers = 1, .context = kContext});
    nn::Linear first(kFeatures, 32), second(32, kClasses);
  }
  const uint64_t construction = default_generator().offset();
  CHECK(drawn == construction + 2 * kSteps * kNoiseDraw);

  check_same(lm_threaded, lm_alone);
  check_same(mlp_threaded, mlp_alone);
}
