// tests/test_gradcheck.cpp — every gradient-check case of tools/op_cases.h passes, the registry
// covers every differentiable op, and heed::gradcheck really catches a wrong backward.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <set>
#include <string>

#include "op_cases.h"

using namespace heed;
using op_cases::InputSpec;
using op_cases::OpCase;

TEST_CASE("gradcheck: every registered op case passes (two seeds)") {
  const std::vector<OpCase>& cases = op_cases::all_cases();
  REQUIRE(cases.size() >= 100);
  for (uint64_t seed : {0ull, 1ull}) {
    for (const OpCase& c : cases) {
      if (seed == 1 && c.custom_inputs) continue;  // layer cases (slow under sanitizers): one seed
      const GradcheckResult r = op_cases::run_case(c, seed);
      CHECK_MESSAGE(r.passed, "case '" << c.name << "' (seed " << seed << "): " << r.message);
      CHECK_MESSAGE(std::isfinite(r.max_abs_error), "case '" << c.name << "'");
    }
  }
}

TEST_CASE("gradcheck: the registry has a case for every differentiable op") {
  // One entry per op of heed/ops.h and heed/functional.h (and the differentiable Tensor
  // views); each must select at least one case.
  const char* ops[] = {"add",
                       "add_broadcast",
                       "add_scalar",
                       "sub",
                       "sub_broadcast",
                       "rsub_scalar",
                       "mul",
                       "mul_broadcast",
                       "mul_scalar",
                       "div",
                       "div_broadcast",
                       "div_scalar",
                       "rdiv_scalar",
                       "neg",
                       "exp",
                       "log",
                       "sqrt",
                       "rsqrt",
                       "pow_scalar",
                       "pow_tensor",
                       "abs",
                       "relu",
                       "gelu",
                       "gelu_tanh",
                       "tanh",
                       "sigmoid",
                       "clamp",
                       "square",
                       "maximum",
                       "minimum",
                       "where",
                       "masked_fill",
                       "sum_all",
                       "sum_dim",
                       "sum_dims_keepdim",
                       "sum_to",
                       "mean_all",
                       "mean_dim",
                       "mean_keepdim",
                       "var_dim",
                       "var_all",
                       "max_all",
                       "min_all",
                       "max_dim",
                       "min_dim",
                       "matmul_1d",
                       "matmul_2d",
                       "matmul_batched",
                       "matmul_batched_broadcast",
                       "matmul_transposed",
                       "softmax",
                       "softmax_dim0",
                       "log_softmax",
                       "log_softmax_dim0",
                       "cross_entropy",
                       "cross_entropy_ignore_index",
                       "cross_entropy_smoothing",
                       "cross_entropy_3d",
                       "linear",
                       "embedding",
                       "dropout",
                       "index_select",
                       "gather",
                       "cat",
                       "stack",
                       "split",
                       "chunk",
                       "view",
                       "reshape",
                       "permute",
                       "transpose",
                       "slice_step",
                       "narrow",
                       "select",
                       "expand",
                       "squeeze",
                       "unsqueeze",
                       "flatten",
                       "contiguous",
                       "to_dtype_roundtrip",
                       "tril",
                       "triu"};
  for (const char* op : ops) CHECK_MESSAGE(!op_cases::select_cases(op).empty(), op);
}

namespace {
// The names of every node in the graph that produced `output` (an iterative walk over the edges).
void collect_node_names(const Tensor& output, std::set<std::string>& names) {
  std::vector<std::shared_ptr<Node>> stack;
  std::set<const Node*> seen;
  if (output.grad_fn()) stack.push_back(output.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<Node> node = stack.back();
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    names.insert(node->name());
    for (const Edge& e : node->edges())
      if (e.node) stack.push_back(e.node);
  }
}
}  // namespace

TEST_CASE("gradcheck: every op name in the autograd registry is run by a gradient-check case") {
  // The registry (heed::recorded_op_names: the element-wise table's differentiable rows and the
  // hand-written ops) is the source of truth; a case covers a name when the graph it builds
  // contains a node of that name.
  std::set<std::string> recorded;
  for (const OpCase& c : op_cases::all_cases()) {
    INFO(c.name);
    const std::vector<Tensor> inputs = op_cases::make_inputs(c, 1);
    collect_node_names(c.fn(inputs), recorded);
  }
  // Names a CPU-only gradient check cannot run, each with the test that covers it instead.
  const std::map<std::string, std::string> covered_elsewhere = {
      {"to_device", "needs a second device: test_cuda 'transfers and to()' compares its gradient with the CPU"}};
  std::vector<std::string> missing;
  const std::vector<std::string> registry = recorded_op_names();
  for (const std::string& name : registry)
    if (!recorded.count(name) && !covered_elsewhere.count(name)) missing.push_back(name);
  MESSAGE(registry.size(), " op names in the registry, ", recorded.size(), " recorded by the cases");
  CHECK_MESSAGE(missing.empty(), "ops without a gradient-check case: " << fmt::format("{}", fmt::join(missing, ", ")));
  for (const auto& [name, reason] : covered_elsewhere) {
    INFO(name << ": " << reason);
    CHECK(std::find(registry.begin(), registry.end(), name) != registry.end());
  }
}

TEST_CASE("gradcheck: case names are unique and every case is described") {
  // Names are unique and every case has a description and inputs.
  std::set<std::string> names;
  for (const OpCase& c : op_cases::all_cases()) {
    CHECK_MESSAGE(names.insert(c.name).second, "duplicate case " << c.name);
    CHECK_MESSAGE(!c.description.empty(), c.name);
    CHECK_MESSAGE(!c.inputs.empty(), c.name);
  }
}

TEST_CASE("gradcheck: registry selection and registration rules") {
  op_cases::OpCaseRegistry registry;
  auto identity = [](const std::vector<Tensor>& x) { return x[0]; };
  registry.add({"alpha", "first", {InputSpec::uniform({2})}, identity});
  registry.add({"alpha_two", "second", {InputSpec::uniform({2})}, identity});
  registry.add({"beta", "third", {InputSpec::uniform({2})}, identity});
  // An exact name selects that case only; otherwise the name is a prefix.
  REQUIRE(registry.select("alpha").size() == 1);
  CHECK(registry.select("alpha")[0]->name == "alpha");
  REQUIRE(registry.select("al").size() == 2);
  CHECK(registry.select("al")[1]->name == "alpha_two");
  CHECK(registry.select("gamma").empty());
  CHECK(registry.find("beta") != nullptr);
  CHECK_THROWS_WITH_AS(registry.add({"beta", "again", {InputSpec::uniform({2})}, identity}),
                       doctest::Contains("already registered"), Error);
  CHECK_THROWS_AS(registry.add({"", "nameless", {InputSpec::uniform({2})}, identity}), Error);
  CHECK_THROWS_AS(registry.add({"no_inputs", "x", {}, identity}), Error);
  CHECK_THROWS_AS(registry.add({"no_fn", "x", {InputSpec::uniform({2})}, nullptr}), Error);
}

TEST_CASE("gradcheck: case inputs follow their specs and are reproducible") {
  SUBCASE("positive, away from kinks, distinct") {
    const std::vector<double> pos = op_cases::make_input(InputSpec::positive({50}), 3).to_vector<double>();
    for (double v : pos) CHECK((v >= 0.5 && v < 2.0));
    const std::vector<double> away =
        op_cases::make_input(InputSpec::away_from({200}, {0.0, 0.5}, 0.1), 4).to_vector<double>();
    for (double v : away) CHECK((std::fabs(v) >= 0.1 && std::fabs(v - 0.5) >= 0.1));
    // Two distinct grids with offsets 0 and 0.5 never share a value.
    const std::vector<double> a = op_cases::make_input(InputSpec::distinct({7, 3}), 5).to_vector<double>();
    const std::vector<double> b = op_cases::make_input(InputSpec::distinct({4}, 0.5), 6).to_vector<double>();
    std::set<double> seen(a.begin(), a.end());
    CHECK(seen.size() == a.size());
    for (double v : b)
      for (double u : a) CHECK(std::fabs(u - v) >= 0.05 - 1e-12);
  }
  SUBCASE("layouts are non-contiguous leaves with the same logical values") {
    const InputSpec spec = InputSpec::uniform({3, 4});
    const Tensor plain = op_cases::make_input(spec, 11);
    const Tensor transposed = op_cases::make_input(spec.transposed(), 11);
    const Tensor strided = op_cases::make_input(spec.strided(), 11);
    CHECK(plain.is_contiguous());
    CHECK_FALSE(transposed.is_contiguous());
    CHECK_FALSE(strided.is_contiguous());
    CHECK(strided.stride(-1) == 2);
    for (const Tensor& t : {plain, transposed, strided}) {
      CHECK(t.is_leaf());
      CHECK(t.requires_grad());
      CHECK(t.dtype() == kFloat64);
      CHECK(t.shape() == Dims{3, 4});
      CHECK(t.to_vector<double>() == plain.to_vector<double>());
    }
    CHECK_FALSE(op_cases::make_input(spec.no_grad(), 1).requires_grad());
  }
  SUBCASE("indices and masks") {
    const Tensor idx = op_cases::make_input(InputSpec::indices({40}, 2, 5), 1);
    CHECK(idx.dtype() == kInt64);
    for (int64_t v : idx.to_vector<int64_t>()) CHECK((v >= 2 && v < 5));
    const Tensor fixed = op_cases::make_input(InputSpec::fixed_indices({3}, {4, -100, 0}), 1);
    CHECK(fixed.to_vector<int64_t>() == std::vector<int64_t>{4, -100, 0});
    const Tensor mask = op_cases::make_input(InputSpec::mask({200}, 0.25), 2);
    CHECK(mask.dtype() == kBool);
    const int64_t on = sum(mask).item<int64_t>();
    CHECK((on > 20 && on < 80));
  }
  SUBCASE("same seed, same inputs; another seed, other inputs") {
    const OpCase& c = *op_cases::select_cases("matmul_2d").at(0);
    const std::vector<Tensor> first = op_cases::make_inputs(c, 9), again = op_cases::make_inputs(c, 9);
    const std::vector<Tensor> other = op_cases::make_inputs(c, 10);
    REQUIRE(first.size() == 2);
    CHECK(first[0].to_vector<double>() == again[0].to_vector<double>());
    CHECK(first[1].to_vector<double>() == again[1].to_vector<double>());
    CHECK(first[0].to_vector<double>() != other[0].to_vector<double>());
  }
}

namespace {

// y = x * x with a backward scaled by `factor` (1 = correct).
Tensor square_with_backward_factor(const Tensor& x, double factor) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, x);
  }
  if (any_requires_grad({&x})) {
    SavedTensor saved(x, "square_with_backward_factor");
    record_op("square_with_backward_factor", {&x}, out,
              [saved, factor](const Tensor& g) -> std::vector<Tensor> { return {g * saved.get() * (2.0 * factor)}; });
  }
  return out;
}

// out = a * b whose backward gives b the gradient of a (wrong unless a == b).
Tensor mul_with_swapped_backward(const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(a, b);
  }
  if (any_requires_grad({&a, &b})) {
    SavedTensor sa(a, "mul_swapped"), sb(b, "mul_swapped");
    record_op("mul_swapped", {&a, &b}, out, [sa, sb](const Tensor& g) -> std::vector<Tensor> {
      return {g * sb.get(), g * sb.get()};
    });
  }
  return out;
}

}  // namespace

TEST_CASE("gradcheck: detects a backward that is off by a factor and reports the worst entry") {
  Tensor x = tensor({0.5, -1.5, 1.0, 0.25}, kFloat64).requires_grad_();
  auto fn = [](double factor) {
    return [factor](const std::vector<Tensor>& in) { return square_with_backward_factor(in[0], factor); };
  };
  // Control: the correct backward passes.
  const GradcheckResult good = gradcheck(fn(1.0), {x});
  CHECK(good.passed);
  CHECK(good.max_abs_error < 1e-6);
  CHECK(good.message.empty());

  // Off by 25%: the Jacobian is diagonal with d(x_k^2)/dx_k = 2 x_k, so the worst entry is
  // the largest |x|, element 1 (x = -1.5): backward says 2.5 * -1.5, the truth is 2 * -1.5.
  const GradcheckResult bad = gradcheck(fn(1.25), {x});
  CHECK_FALSE(bad.passed);
  CHECK(bad.worst_input == 0);
  CHECK(bad.worst_input_element == 1);
  CHECK(bad.worst_output_element == 1);
  CHECK(bad.worst_analytic == doctest::Approx(-3.75).epsilon(1e-9));
  CHECK(bad.worst_numeric == doctest::Approx(-3.0).epsilon(1e-6));
  CHECK(bad.max_abs_error == doctest::Approx(0.75).epsilon(1e-6));
  CHECK(bad.max_rel_error == doctest::Approx(0.25).epsilon(1e-6));
  CHECK(bad.message.find("backward gives") != std::string::npos);
  CHECK(bad.message.find("input 0[1]") != std::string::npos);

  // Even a 1% error is far above the tolerances.
  CHECK_FALSE(gradcheck(fn(1.01), {x}).passed);

  // A 0.1% error: PyTorch's default tolerances (atol 1e-5, rtol 1e-3) accept it; the
  // tolerance every registered case is held to (op_cases::kCaseTolerance) does not, and the
  // correct backward still passes it.
  CHECK(gradcheck(fn(1.001), {x}, GradcheckOptions{.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3}).passed);
  CHECK_FALSE(gradcheck(fn(1.001), {x}, op_cases::kCaseTolerance).passed);
  CHECK_FALSE(gradcheck(fn(1.0001), {x}, op_cases::kCaseTolerance).passed);
  CHECK(gradcheck(fn(1.0), {x}, op_cases::kCaseTolerance).passed);
}

TEST_CASE("gradcheck: reports which input has the wrong gradient") {
  Tensor a = tensor({{0.3, -0.7}, {1.1, 0.4}}, kFloat64).requires_grad_();
  Tensor b = tensor({{2.0, 0.5}, {-1.0, 3.0}}, kFloat64).requires_grad_();
  const GradcheckResult r =
      gradcheck([](const std::vector<Tensor>& in) { return mul_with_swapped_backward(in[0], in[1]); }, {a, b});
  CHECK_FALSE(r.passed);
  // dout/db_k should be a_k; the backward gives b_k. Worst |a_k - b_k|: element 3 (3.0 vs 0.4).
  CHECK(r.worst_input == 1);
  CHECK(r.worst_input_element == 3);
  CHECK(r.worst_output_element == 3);
  CHECK(r.worst_analytic == doctest::Approx(3.0));
  CHECK(r.worst_numeric == doctest::Approx(0.4).epsilon(1e-6));

  // With b not requiring grad only a is checked, and a's gradient is right.
  Tensor b_fixed = b.detach();
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return mul_with_swapped_backward(in[0], in[1]); }, {a, b_fixed})
            .passed);
}

TEST_CASE("gradcheck: a case that throws is reported as a failure, not an abort") {
  OpCase broken{"broken",
                "matmul of mismatched shapes",
                {InputSpec::uniform({2, 3}), InputSpec::uniform({2, 3})},
                [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }};
  const GradcheckResult r = op_cases::run_case(broken, 0);
  CHECK_FALSE(r.passed);
  CHECK(r.message.find("heed::matmul") != std::string::npos);
}

TEST_CASE("gradcheck: the registry covers LayerNorm, every attention path and every layer") {
  const char* layers[] = {"layer_norm",
                          "sdpa_composed",
                          "sdpa_additive_mask_grad",
                          "flash_attention",
                          "flash_attention_multiblock",
                          "flash_attention_keep_mask",
                          "flash_attention_key_lengths",
                          "flash_attention_key_padding",
                          "flash_attention_window",
                          "flash_attention_additive",
                          "flash_attention_dropout",
                          "flash_attention_packed",
                          "layer_linear",
                          "layer_embedding",
                          "layer_layer_norm",
                          "layer_feed_forward_gelu",
                          "layer_learned_positions",
                          "layer_sdpa_sqrt_dk",
                          "layer_sdpa_none",
                          "layer_sdpa_learnable",
                          "layer_sdpa_affine",
                          "layer_sdpa_cosine",
                          "layer_mha_separate",
                          "layer_mha_fused_qkv",
                          "layer_mha_per_head",
                          "layer_mha_shared_kv",
                          "layer_mha_window",
                          "layer_mha_cross_padding",
                          "layer_additive_attention",
                          "layer_encoder_pre_ln",
                          "layer_encoder_post_ln",
                          "layer_decoder_pre_ln",
                          "layer_decoder_post_ln",
                          "layer_transformer_lm",
                          "layer_transformer_lm_tied",
                          "layer_transformer_seq2seq"};
  for (const char* name : layers) {
    CAPTURE(name);
    CHECK(op_cases::OpCaseRegistry::global().find(name) != nullptr);
  }
  // A layer case checks the module's parameters too: more inputs than data specs.
  const OpCase* linear = op_cases::OpCaseRegistry::global().find("layer_linear");
  REQUIRE(linear != nullptr);
  CHECK(op_cases::make_inputs(*linear, 0).size() == linear->inputs.size() + 2);  // + weight, bias
}
