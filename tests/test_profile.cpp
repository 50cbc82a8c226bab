// tests/test_profile.cpp — heed::profile::Profiler: what a session records and what it adds up to.
//
// No timing thresholds (speed is measured in heed-bench, never here): the checks are on what
// was recorded (every kernel call of a training step inside an op or backward span, except the
// optimizer's and the allocator's), on the cost model (a Linear layer's GEMM FLOPs), on
// consistency (self times add up to the covered time, which never exceeds the wall time),
// on the share of a step the spans cover (a generous floor, see below) and on the trace file.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

using namespace heed;

namespace {

struct TinyLM {
  nn::TransformerLMOptions options{.vocab = 64, .d_model = 64, .heads = 4, .layers = 2, .context = 32};
  nn::TransformerLM model{options};
  optim::AdamW optimizer{model.parameters(), {.lr = 1e-3}};

  void step() {
    const Tensor x = randint(0, options.vocab, {4, options.context});
    const Tensor y = randint(0, options.vocab, {4, options.context});
    Tensor loss = F::cross_entropy(model.forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    nn::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
  }
};

}  // namespace

TEST_CASE("profiler: off records nothing, and one session at a time") {
  CHECK_FALSE(profile::is_recording());
  profile::Profiler profiler;
  CHECK(profile::is_recording());
  CHECK_THROWS_AS(profile::Profiler(), Error);
  (void)add(ones({2}), ones({2}));
  profiler.stop();
  CHECK_FALSE(profile::is_recording());
  CHECK_THROWS_AS(profiler.stop(), Error);
  // Work after stop() is not recorded.
  const size_t recorded = profiler.events().size();
  (void)add(ones({2}), ones({2}));
  CHECK(profiler.events().size() == recorded);
  bool saw_add = false;
  for (const profile::Event& e : profiler.events())
    if (e.kind == profile::Kind::Op && e.name == "add") {
      saw_add = true;
      CHECK(e.shapes == "[2] [2]");
      CHECK(e.dtype == "float32");
    }
  CHECK(saw_add);
}

TEST_CASE("profiler: a Linear layer's GEMMs carry 2*m*n*k FLOPs each, forward and backward") {
  manual_seed(3);
  const int64_t batch = 8, in = 16, out = 24;
  Tensor x = randn({batch, in}).requires_grad_();
  Tensor w = randn({out, in}).requires_grad_();
  Tensor b = randn({out}).requires_grad_();
  profile::Profiler profiler;
  sum(F::linear(x, w, b)).backward();
  profiler.stop();
  double gemm_flops = 0;
  int gemm_calls = 0;
  for (const profile::Event& e : profiler.events())
    if (e.kind == profile::Kind::Kernel && e.name == "gemm") {
      gemm_flops += e.flops;
      ++gemm_calls;
    }
  // y = x W^T, dx = dy W, dW = dy^T x: three GEMMs of 2 * batch * in * out FLOPs each.
  CHECK(gemm_calls == 3);
  CHECK(gemm_flops == doctest::Approx(3.0 * 2.0 * batch * in * out));
  // With a bias, linear runs its GEMM itself (the bias is the GEMM's epilogue): its span has the
  // forward GEMM's FLOPs and no matmul op nests in it. Without a bias it runs matmul, a nested
  // op: matmul's span gets the GEMM's FLOPs (self cost), linear's keeps none, and matmul's self
  // time is not linear's.
  int linear_spans = 0, matmul_spans = 0;
  for (const profile::Event& e : profiler.events()) {
    if (e.kind == profile::Kind::Op && e.name == "linear") {
      ++linear_spans;
      CHECK(e.flops == doctest::Approx(2.0 * batch * in * out));
    }
    if (e.kind == profile::Kind::Op && e.name == "matmul") ++matmul_spans;
  }
  CHECK(linear_spans == 1);
  CHECK(matmul_spans == 0);

  profile::Profiler no_bias_profiler;
  sum(F::linear(x, w)).backward();
  no_bias_profiler.stop();
  linear_spans = matmul_spans = 0;
  for (const profile::Event& e : no_bias_profiler.events()) {
    if (e.kind == profile::Kind::Op && e.name == "linear") {
      ++linear_spans;
      CHECK(e.flops < 2.0 * batch * in * out);
      CHECK(e.self_us < e.duration_us);
    }
    if (e.kind == profile::Kind::Op && e.name == "matmul") {
      ++matmul_spans;
      CHECK(e.flops == doctest::Approx(2.0 * batch * in * out));
      CHECK_FALSE(e.top_level);
    }
  }
  CHECK(linear_spans == 1);
  CHECK(matmul_spans == 1);
}

TEST_CASE("profiler: every kernel of a training step runs inside an op or a backward node") {
  manual_seed(5);
  TinyLM lm;
  lm.step();  // warm-up: the allocator's cache and the optimizer state exist afterwards
  profile::Profiler profiler;
  for (int i = 0; i < 3; ++i) lm.step();
  profiler.stop();

  // Kernels a program legitimately calls outside any op: the optimizer update, the gradient
  // norm of clip_grad_norm_, and the allocator (a tensor is freed wherever its last owner dies).
  const std::set<std::string> allowed_outside = {"adam_step", "global_norm", "allocate", "deallocate"};
  std::set<std::string> outside, ops, backward, kernels;
  for (const profile::Event& e : profiler.events()) {
    if (e.kind == profile::Kind::Kernel && e.top_level && !allowed_outside.count(e.name)) outside.insert(e.name);
    if (e.kind == profile::Kind::Op) ops.insert(e.name);
    if (e.kind == profile::Kind::Backward) backward.insert(e.name);
    if (e.kind == profile::Kind::Kernel) kernels.insert(e.name);
    CHECK(e.duration_us >= 0);
    CHECK(e.self_us <= e.duration_us + 1e-9);
    CHECK(e.start_us >= 0);
  }
  std::string outside_list;
  for (const std::string& name : outside) outside_list += name + " ";
  INFO("kernels called outside any op span: ", outside_list);
  CHECK(outside.empty());
  for (const char* name : {"embedding", "layer_norm", "linear", "cross_entropy"}) {
    INFO(name);
    CHECK(ops.count(name) == 1);
  }
  CHECK(backward.count("cross_entropy") == 1);
  for (const char* name : {"gemm", "adam_step", "layer_norm_forward", "layer_norm_backward"}) {
    INFO(name);
    CHECK(kernels.count(name) == 1);
  }

  // Consistency: the summary's op, backward and outside-kernel self times add up to the
  // covered time, which cannot exceed the wall time.
  double self_sum_ms = 0;
  for (const profile::Row& r : profiler.summary())
    if (r.kind == profile::Kind::Op || r.kind == profile::Kind::Backward) self_sum_ms += r.self_ms;
  double outside_kernel_ms = 0;
  for (const profile::Event& e : profiler.events())
    if (e.kind == profile::Kind::Kernel && e.top_level) outside_kernel_ms += e.duration_us / 1000.0;
  CHECK(self_sum_ms + outside_kernel_ms == doctest::Approx(profiler.covered_ms()).epsilon(1e-6));
  CHECK(profiler.covered_ms() <= profiler.wall_ms());
  // The spans cover most of a step. heed-bench --profile reports the figure on real shapes
  // (97-99%); this tiny model spends relatively more time in module code between ops, and
  // sanitizer builds slow that code most, so the floor here is generous. Coverage is a ratio of
  // times: a thread preempted between two ops (ctest -j2 beside a compile once read below the
  // floor) counts as uncovered, so the best of up to three profiled runs is checked; spans
  // missing from the profile would fail every run.
  double best_coverage = profiler.coverage();
  for (int attempt = 1; attempt < 3 && best_coverage <= 0.6; ++attempt) {
    profile::Profiler again;
    for (int i = 0; i < 3; ++i) lm.step();
    again.stop();
    best_coverage = std::max(best_coverage, again.coverage());
  }
  MESSAGE("coverage of a tiny LM step (best of up to three runs): ", best_coverage);
  CHECK(best_coverage > 0.6);
  const std::string table = profiler.table(100);  // every row: which rows lead depends on timing
  CHECK(table.find("gemm") != std::string::npos);
  CHECK(table.find("GFLOP/s") != std::string::npos);
}

TEST_CASE("profiler: user scopes nest ops but never count as covered time") {
  profile::Profiler profiler;
  {
    profile::Scope scope("idle");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (void)mul(ones({4}), ones({4}));
  }
  profiler.stop();
  bool saw_scope = false;
  for (const profile::Event& e : profiler.events()) {
    if (e.kind == profile::Kind::User && e.name == "idle") {
      saw_scope = true;
      CHECK(e.duration_us >= 20000);
      CHECK(e.self_us < e.duration_us);  // the mul inside is not its self time
    }
    if (e.kind == profile::Kind::Op && e.name == "mul") CHECK(e.top_level);
  }
  CHECK(saw_scope);
  CHECK(profiler.wall_ms() >= 20.0);
  CHECK(profiler.coverage() < 0.5);  // the sleep is not op time
}

TEST_CASE("profiler: the Chrome trace is valid JSON with one complete event per span") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "heed_test_profile";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  profile::Profiler profiler;
  Tensor a = randn({8, 8}).requires_grad_();
  sum(matmul(a, a)).backward();
  profiler.stop();
  profiler.write_chrome_trace(path);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  REQUIRE(trace.contains("traceEvents"));
  CHECK(trace["traceEvents"].size() == profiler.events().size());
  std::set<std::string> categories;
  int memory_samples = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string category = e["cat"].get<std::string>();
    categories.insert(category);
    CHECK(e.contains("ts"));
    if (category == "counter") {
      // memory_stats by category, sampled as each op and backward node ends.
      CHECK(e["ph"] == "C");
      CHECK(e["name"] == "memory MB (cpu)");
      CHECK(e["args"].contains("activation"));
      CHECK(e["args"]["parameter"].get<double>() >= 0);
      ++memory_samples;
      continue;
    }
    CHECK(e["ph"] == "X");
    CHECK(e["dur"].get<double>() >= 0);
  }
  CHECK(categories == std::set<std::string>{"op", "backward", "kernel", "counter"});
  int spans = 0;
  for (const profile::Event& e : profiler.events())
    if (e.kind == profile::Kind::Op || e.kind == profile::Kind::Backward) ++spans;
  CHECK(memory_samples == spans);
  CHECK_THROWS_WITH_AS(profiler.write_chrome_trace((dir / "missing" / "trace.json").string()),
                       doctest::Contains("cannot open"), Error);
  std::filesystem::remove_all(dir);
}
