// examples/demo_spiral.cpp — a small training program written against heed's public API:
// a two-layer MLP learns to separate three interleaved spirals (a classic non-linear toy
// problem), with hand-written SGD, printing the loss and accuracy as it goes.
//
// Usage: demo_spiral [--steps N] [--seed S] [--threads T] [--help]
#include <fmt/format.h>
#include <heed/heed.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

using namespace heed;

namespace {

struct Options {
  int steps = 1500;
  uint64_t seed = 0;
  int threads = 0;
};

[[noreturn]] void help() {
  std::printf(
      "usage: demo_spiral [--steps N] [--seed S] [--threads T]\n"
      "Trains a 2-layer MLP (2 -> 64 -> 3, ReLU) on three spirals with SGD and prints\n"
      "the loss and training accuracy.\n");
  std::exit(0);
}

// A usage error: one line naming the flag, then exit status 2.
[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "demo_spiral: %s (see --help)\n", message.c_str());
  std::exit(2);
}

long parse_int(const char* flag, const char* text, long low, long high) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!end || *end != '\0' || v < low || v > high) {
    usage_error(fmt::format("{} expects an integer in [{}, {}], got '{}'", flag, low, high, text));
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") help();
    if (i + 1 >= argc) usage_error(fmt::format("unknown or incomplete argument '{}'", arg));
    if (arg == "--steps")
      o.steps = static_cast<int>(parse_int("--steps", argv[++i], 1, 1000000));
    else if (arg == "--seed")
      o.seed = static_cast<uint64_t>(parse_int("--seed", argv[++i], 0, 1L << 40));
    else if (arg == "--threads")
      o.threads = static_cast<int>(parse_int("--threads", argv[++i], 1, 256));
    else
      usage_error(fmt::format("unknown argument '{}'", arg));
  }
  return o;
}

// Three spirals of `per_class` points each, with a little noise: x (N,2) float32, y (N) int64.
void make_spirals(int per_class, Tensor* x, Tensor* y) {
  const int classes = 3, n = per_class * classes;
  Tensor radius = arange(0.0, 1.0, 1.0 / per_class, kFloat32);  // (P)
  std::vector<float> xs;
  std::vector<int64_t> ys;
  Tensor noise = randn({n}, kFloat32) * 0.2;
  const std::vector<float> r = radius.to_vector<float>(), eps = noise.to_vector<float>();
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      const float t = static_cast<float>(c) * 4.0f + 4.0f * r[i] + eps[c * per_class + i];
      xs.push_back(r[i] * std::sin(t));
      xs.push_back(r[i] * std::cos(t));
      ys.push_back(c);
    }
  }
  *x = from_vector(xs, {n, 2});
  *y = from_vector(ys, {n});
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    if (opt.threads > 0) set_num_threads(opt.threads);
    manual_seed(opt.seed);
    Tensor x, y;
    make_spirals(200, &x, &y);  // x (600,2), y (600)

    // Parameters, initialised as PyTorch's nn.Linear does: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    const int hidden = 64;
    auto init = [](Dims shape, int64_t fan_in) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      return uniform(shape, -bound, bound).requires_grad_();
    };
    Tensor w1 = init({hidden, 2}, 2), b1 = init({hidden}, 2);
    Tensor w2 = init({3, hidden}, hidden), b2 = init({3}, hidden);
    std::vector<Tensor> params = {w1, b1, w2, b2};

    std::printf("heed %s demo: 2-layer MLP on three spirals (%lld points), %d SGD steps, %d threads\n",
                HEED_VERSION_STRING, static_cast<long long>(x.size(0)), opt.steps, get_num_threads());
    const auto start = std::chrono::steady_clock::now();
    double loss_value = 0;
    for (int step = 1; step <= opt.steps; ++step) {
      const double lr = step < opt.steps / 2 ? 1.0 : 0.3;
      Tensor hidden_act = relu(F::linear(x, w1, b1));  // (N,64)
      Tensor logits = F::linear(hidden_act, w2, b2);   // (N,3)
      Tensor loss = F::cross_entropy(logits, y);
      for (Tensor& p : params) p.zero_grad();
      loss.backward();
      {
        NoGradGuard no_grad;
        for (Tensor& p : params) p.add_(p.grad(), -lr);
      }
      loss_value = loss.item<double>();
      if (step == 1 || step % (opt.steps / 10 > 0 ? opt.steps / 10 : 1) == 0 || step == opt.steps) {
        const Tensor predicted = argmax(logits.detach(), 1);
        const double accuracy = mean(eq(predicted, y).to(kFloat32)).item<double>();
        std::printf("step %5d  loss %.4f  train accuracy %5.1f%%\n", step, loss_value, 100.0 * accuracy);
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Tensor logits = F::linear(relu(F::linear(x, w1, b1)), w2, b2);
    const double accuracy = mean(eq(argmax(logits.detach(), 1), y).to(kFloat32)).item<double>();
    std::printf("done in %.2f s: final loss %.4f, train accuracy %.1f%% (a linear model reaches about 50%%)\n", seconds,
                loss_value, 100.0 * accuracy);
    return accuracy > 0.9 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "demo_spiral: %s\n", e.what());
    return 1;
  }
}
