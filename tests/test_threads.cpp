// tests/test_threads.cpp — results do not depend on the thread count.
//
// Invariant checked: for fixed-seed inputs, reductions, softmax, matmul, cross_entropy and a
// small forward+backward give bit-identical results with 1 and with 2 threads
// (heed::set_num_threads). Sizes are large enough that the kernels split the work (more than
// one block of the reductions, many rows for the row-wise kernels). The thread count is
// restored afterwards.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace heed;

namespace {

class ThreadCount {
 public:
  explicit ThreadCount(int n) : previous_(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(previous_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int previous_;
};

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

// Runs `compute` with 1 thread and with 2 threads and compares every result bit for bit.
void check_thread_independent(const std::function<Named()>& compute) {
  Named one, two;
  {
    ThreadCount threads(1);
    REQUIRE(get_num_threads() == 1);
    one = compute();
  }
  {
    ThreadCount threads(2);
    REQUIRE(get_num_threads() == 2);
    two = compute();
  }
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(one[i].first);
    REQUIRE(one[i].first == two[i].first);
    CHECK(bit_equal(one[i].second, two[i].second));
  }
}

}  // namespace

TEST_CASE("reductions are bit-identical with 1 and 2 threads") {
  check_thread_independent([] {
    manual_seed(100);
    Tensor long_row = randn({1 << 20});        // one long reduction: many blocks
    Tensor matrix = randn({300, 1000}) * 3.0;  // rows and columns
    Tensor cube = randn({16, 64, 70}, kF64);
    Tensor half = randn({200, 300}).to(kFloat16);
    Named out;
    out.push_back({"sum all", long_row.sum()});
    out.push_back({"mean all", long_row.mean()});
    out.push_back({"max all", long_row.max()});
    out.push_back({"min all", matrix.min()});
    out.push_back({"argmax all", long_row.argmax()});
    out.push_back({"sum rows", matrix.sum({1})});
    out.push_back({"sum cols", matrix.sum({0})});
    out.push_back({"mean middle", cube.mean({1})});
    out.push_back({"var rows", matrix.var({1})});
    out.push_back({"var cols", matrix.var({0}, true, 0.0)});
    out.push_back({"var all", long_row.var({0})});
    out.push_back({"max dim", max(matrix, 1).values});
    out.push_back({"argmax dim", matrix.argmax(0)});
    out.push_back({"sum half", half.sum({1})});
    out.push_back({"sum transposed", matrix.t().sum({1})});
    return out;
  });
}

TEST_CASE("softmax, matmul and cross_entropy are bit-identical with 1 and 2 threads") {
  check_thread_independent([] {
    manual_seed(200);
    Tensor logits = randn({2048, 97}) * 4.0;
    Tensor targets = randint(0, 97, {2048});
    Tensor a = randn({256, 300}), b = randn({300, 200});
    Tensor batched_a = randn({8, 64, 48}), batched_b = randn({48, 40});
    Tensor a64 = randn({128, 130}, kF64), b64 = randn({130, 90}, kF64);
    Named out;
    out.push_back({"softmax", F::softmax(logits, -1)});
    out.push_back({"softmax dim 0", F::softmax(logits, 0)});
    out.push_back({"log_softmax", F::log_softmax(logits, -1)});
    out.push_back({"matmul", matmul(a, b)});
    out.push_back({"matmul transposed", matmul(b.t(), a.t())});
    // One block of C only (M = 128): the whole product is a single BLAS call, as in the
    // weight gradient of a linear layer, (out,batch) @ (batch,in).
    out.push_back({"matmul single block", matmul(randn({512, 128}).t(), randn({512, 64}))});
    out.push_back({"matmul single block f64", matmul(randn({64, 90}, kF64), randn({90, 80}, kF64))});
    out.push_back({"matmul batched", matmul(batched_a, batched_b)});
    out.push_back({"matmul f64", matmul(a64, b64)});
    out.push_back({"cross_entropy", F::cross_entropy(logits, targets)});
    out.push_back(
        {"cross_entropy smoothed", F::cross_entropy(logits, targets, {.ignore_index = 3, .label_smoothing = 0.1})});
    return out;
  });
}

TEST_CASE("forward + backward without matrix products is bit-identical with 1 and 2 threads") {
  check_thread_independent([] {
    manual_seed(400);
    // x (4096,32) scaled and shifted per feature, normalized per row, classified.
    Tensor x = randn({4096, 32});
    Tensor y = randint(0, 32, {4096});
    Tensor scale = randn({32}).requires_grad_(), shift = zeros({32}).requires_grad_();
    Tensor h = F::dropout(F::gelu(x * scale + shift), 0.1);
    Tensor normed = (h - h.mean({1}, true)) / (h.var({1}, true) + 1e-5).sqrt();
    Tensor loss = F::cross_entropy(normed, y) + F::softmax(h, 0).sum({1}).mean() + (scale * scale).sum() * 1e-3;
    loss.backward();
    Named out;
    out.push_back({"loss", loss.detach()});
    out.push_back({"normed", normed.detach()});
    out.push_back({"grad scale", scale.grad()});
    out.push_back({"grad shift", shift.grad()});
    return out;
  });
}

TEST_CASE("a small MLP forward + backward is bit-identical with 1 and 2 threads") {
  check_thread_independent([] {
    manual_seed(300);
    // A two-layer MLP classifier on a batch of 512: x (512,64) -> (512,128) -> (512,10).
    Tensor x = randn({512, 64});
    Tensor y = randint(0, 10, {512});
    Tensor w1 = (randn({128, 64}) * 0.1).requires_grad_(), b1 = zeros({128}).requires_grad_();
    Tensor w2 = (randn({10, 128}) * 0.1).requires_grad_(), b2 = zeros({10}).requires_grad_();
    Tensor h = F::gelu(F::linear(x, w1, b1));
    h = F::dropout(h, 0.1);
    Tensor logits = F::linear(h, w2, b2);
    Tensor loss = F::cross_entropy(logits, y) + (w1 * w1).sum() * 1e-4;
    loss.backward();
    Named out;
    out.push_back({"loss", loss.detach()});
    out.push_back({"logits", logits.detach()});
    out.push_back({"grad w1", w1.grad()});
    out.push_back({"grad b1", b1.grad()});
    out.push_back({"grad w2", w2.grad()});
    out.push_back({"grad b2", b2.grad()});
    return out;
  });
}

TEST_CASE("the thread count is restored") {
  const int before = get_num_threads();
  {
    ThreadCount threads(1);
    CHECK(get_num_threads() == 1);
  }
  CHECK(get_num_threads() == before);
  CHECK_THROWS_AS(set_num_threads(0), heed::Error);
  CHECK(get_num_threads() == before);
}
