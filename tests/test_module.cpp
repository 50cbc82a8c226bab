// tests/test_module.cpp — nn::Module bookkeeping (heed/nn/module.h): dotted parameter names,
// parameters()/num_parameters, buffers (persistent or not), registration clashes, ModuleList,
// train()/eval() reaching every descendant, to(dtype) keeping tensor identity, zero_grad,
// state_dict()/load_state_dict() (values copied, identity kept, strict-mode key lists, shape
// and duplicate-key errors, dtype conversion) and the str() printout.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <string>
#include <vector>

#include "layers_reference.h"
#include "test_skip.h"

using namespace heed;
namespace ref = layers_reference;
using layers_testing::check_close;
using layers_testing::expect_error;
using ref::Values;

namespace {

// A module that exposes the protected registration calls to the tests.
class Block : public nn::Module {
 public:
  Block() : Module("Block") {
    scale = register_parameter("scale", ones({3}));
    linear = register_module("linear", std::make_shared<nn::Linear>(3, 2));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(2));
    running = register_buffer("running", zeros({2}));
    scratch = register_buffer("scratch", full({2}, 7.0), /*persistent=*/false);
    steps = register_buffer("steps", zeros({}, kInt64));
  }
  Tensor forward(const Tensor& x) const { return norm->forward(linear->forward(x * scale)); }
  Tensor add_parameter(const std::string& name, Tensor value, bool requires_grad = true) {
    return register_parameter(name, std::move(value), requires_grad);
  }
  Tensor add_buffer(const std::string& name, Tensor value) { return register_buffer(name, std::move(value)); }
  void add_module(const std::string& name, std::shared_ptr<nn::Module> m) { register_module(name, std::move(m)); }

  Tensor scale, running, scratch, steps;
  std::shared_ptr<nn::Linear> linear;
  std::shared_ptr<nn::LayerNorm> norm;
};

class Net : public nn::Module {
 public:
  Net() : Module("Net") {
    first = register_module("first", std::make_shared<Block>());
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks->push_back(std::make_shared<Block>());
    blocks->push_back(std::make_shared<nn::Dropout>(0.25));
  }
  std::shared_ptr<Block> first;
  std::shared_ptr<nn::ModuleList> blocks;
};

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [name, t] : list) out.push_back(name);
  return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("Module: dotted names, recursion, parameters() and num_parameters()") {
  Net net;
  CHECK(names(net.named_parameters()) == Names{"first.scale", "first.linear.weight", "first.linear.bias",
                                               "first.norm.weight", "first.norm.bias", "blocks.0.scale",
                                               "blocks.0.linear.weight", "blocks.0.linear.bias", "blocks.0.norm.weight",
                                               "blocks.0.norm.bias"});
  CHECK(net.named_parameters(false).empty());
  CHECK(names(net.first->named_parameters(false)) == Names{"scale"});
  CHECK(net.parameters().size() == 10);
  CHECK(net.num_parameters() == 2 * (3 + 6 + 2 + 2 + 2));
  // parameters() are the very tensors the layers hold.
  CHECK(net.parameters()[1].is_same(net.first->linear->weight));
  for (const Tensor& p : net.parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(names(net.named_buffers()) == Names{"first.running", "first.scratch", "first.steps", "blocks.0.running",
                                            "blocks.0.scratch", "blocks.0.steps"});
  // state_dict: parameters, then persistent buffers only.
  Names state = names(net.named_parameters());
  for (const char* n : {"first.running", "first.steps", "blocks.0.running", "blocks.0.steps"}) state.push_back(n);
  CHECK(names(net.state_dict()) == state);

  std::vector<std::string> modules;
  for (auto& [path, m] : net.named_modules()) modules.push_back(path + ":" + m->type_name());
  CHECK(modules == Names{":Net", "first:Block", "blocks:ModuleList", "first.linear:Linear", "first.norm:LayerNorm",
                         "blocks.0:Block", "blocks.1:Dropout", "blocks.0.linear:Linear", "blocks.0.norm:LayerNorm"});
  CHECK(net.named_children().size() == 2);
  CHECK(net.blocks->size() == 2);
  CHECK(net.blocks->at<Block>(0) != nullptr);
  CHECK(net.blocks->at<Block>(1) == nullptr);  // a Dropout, not a Block
  CHECK(net.blocks->at<nn::Dropout>(1)->p() == 0.25);
}

TEST_CASE("Module: deep dotted names of a Transformer are its checkpoint keys") {
  nn::TransformerOptions o;
  o.src_vocab = 5;
  o.tgt_vocab = 5;
  o.encoder_layers = 2;
  o.decoder_layers = 1;
  o.layer.d_model = 4;
  o.layer.heads = 2;
  o.layer.d_ff = 4;
  nn::Transformer model(o);
  const Names params = names(model.named_parameters());
  for (const char* n :
       {"encoder.layers.0.self_attn.q_proj.weight", "encoder.layers.1.ff.fc2.bias",
        "decoder.layers.0.cross_attn.v_proj.weight", "decoder.norm.weight", "src_embed.weight", "tgt_embed.weight"})
    CHECK_MESSAGE(std::find(params.begin(), params.end(), n) != params.end(), n);
  // The sinusoidal table is a non-persistent buffer: not a checkpoint key.
  CHECK(names(model.state_dict()) == params);
  CHECK(names(model.named_buffers()) == Names{"positions.table"});
}

TEST_CASE("Module: registration rules") {
  Block block;
  expect_error([&] { block.add_parameter("scale", ones({1})); }, {"heed::register", "'scale'", "Block"});
  expect_error([&] { block.add_parameter("running", ones({1})); }, {"heed::register", "'running'"});
  expect_error([&] { block.add_buffer("linear", ones({1})); }, {"heed::register", "'linear'"});
  expect_error([&] { block.add_module("norm", std::make_shared<nn::ReLU>()); }, {"heed::register", "'norm'"});
  expect_error([&] { block.add_parameter("a.b", ones({1})); }, {"heed::register", "dots"});
  expect_error([&] { block.add_parameter("", ones({1})); }, {"heed::register"});
  expect_error([&] { block.add_parameter("undefined", Tensor()); }, {"heed::register_parameter", "undefined"});
  expect_error([&] { block.add_buffer("undefined", Tensor()); }, {"heed::register_buffer"});
  expect_error([&] { block.add_module("null", nullptr); }, {"heed::register_module", "null"});
  CHECK(block.parameters().size() == 5);  // nothing was added by the failed calls

  // A non-leaf value is detached; requires_grad follows the flag.
  Tensor base = ones({2}).requires_grad_(true);
  Tensor p = block.add_parameter("derived", base * 2.0);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  Tensor frozen = block.add_parameter("frozen", ones({2}), false);
  CHECK_FALSE(frozen.requires_grad());
  // A child registered into a module in eval mode starts in eval mode.
  block.eval();
  auto child = std::make_shared<nn::Dropout>(0.5);
  CHECK(child->is_training());
  block.add_module("late", child);
  CHECK_FALSE(child->is_training());
}

TEST_CASE("Module: train() and eval() reach every descendant") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  for (auto& [path, m] : net.named_modules()) {
    CAPTURE(path);
    CHECK_FALSE(m->is_training());
  }
  net.blocks->train();  // a subtree only
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.first->linear->is_training());
  CHECK(net.blocks->at<nn::Dropout>(1)->is_training());
  net.train(true);
  for (auto& [path, m] : net.named_modules()) CHECK(m->is_training());
  net.train(false);
  CHECK_FALSE(net.blocks->at<Block>(0)->norm->is_training());
}

TEST_CASE("Module: to(kFloat64) / to(kFloat32) convert in place and keep tensor identity") {
  manual_seed(60);
  Block block;
  const std::vector<Tensor> before = block.parameters();
  const Values weight32 = ref::values(block.linear->weight);
  Tensor x = randn({4, 3});
  const Values out32 = ref::values(block.forward(x));
  sum(block.forward(x)).backward();
  CHECK(block.scale.grad().defined());

  block.to(kFloat64);
  const std::vector<Tensor> after = block.parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].is_same(before[i]));
    CHECK(before[i].dtype() == kFloat64);
    CHECK(before[i].requires_grad());
    CHECK_FALSE(before[i].grad().defined());  // gradients are dropped
  }
  CHECK(block.running.dtype() == kFloat64);
  CHECK(block.scratch.dtype() == kFloat64);              // non-persistent buffers move too
  CHECK(block.steps.dtype() == kInt64);                  // integer buffers stay
  CHECK(ref::values(block.linear->weight) == weight32);  // float32 values are exact in float64
  Tensor out64 = block.forward(x.to(kFloat64));
  CHECK(out64.dtype() == kFloat64);
  check_close(out64, out32, 1e-5, 1e-5, "float64 forward");

  block.to(kFloat32);
  CHECK(block.linear->weight.dtype() == kFloat32);
  CHECK(block.linear->weight.is_same(before[1]));
  CHECK(ref::values(block.linear->weight) == weight32);
  expect_error([&] { block.to(kInt64); }, {"heed::Module::to", "floating"});
}

TEST_CASE("Module: zero_grad drops every gradient") {
  Net net;
  sum(net.first->forward(randn({2, 3}))).backward();
  CHECK(net.first->linear->weight.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Module: state_dict / load_state_dict round trip copies values and keeps identity") {
  manual_seed(61);
  Net source;
  manual_seed(62);
  Net target;
  {
    NoGradGuard no_grad;
    source.first->running.fill_(3.5);
    source.first->steps.fill_(12);
    source.first->scratch.fill_(9.0);
  }
  const Values source_weight = ref::values(source.first->linear->weight);
  CHECK(ref::values(target.first->linear->weight) != source_weight);
  const std::vector<Tensor> handles = target.parameters();
  Tensor held = target.first->linear->weight;  // as an optimizer would hold it
  sum(target.first->forward(randn({2, 3}))).backward();

  target.load_state_dict(source.state_dict());
  const nn::NamedTensors a = source.state_dict(), b = target.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(ref::values(a[i].second) == ref::values(b[i].second));
    CHECK(a[i].second.storage() != b[i].second.storage());  // copied, not shared
  }
  const std::vector<Tensor> after = target.parameters();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].is_same(handles[i]));
  CHECK(ref::values(held) == source_weight);
  CHECK_FALSE(held.grad().defined());
  CHECK(held.requires_grad());
  CHECK(target.first->steps.item<int64_t>() == 12);
  CHECK(ref::values(target.first->scratch) == Values{7.0, 7.0});  // non-persistent: not loaded
  // Later changes to the source do not reach the target.
  {
    NoGradGuard no_grad;
    source.first->linear->weight.fill_(0.0);
  }
  CHECK(ref::values(held) == source_weight);
  // The loaded module computes what the source computes.
  manual_seed(63);
  Net fresh;
  fresh.load_state_dict(target.state_dict());
  Tensor x = randn({2, 3});
  CHECK(ref::values(fresh.first->forward(x)) == ref::values(target.first->forward(x)));
}

TEST_CASE("Module: load_state_dict errors list missing, unexpected, mismatched and duplicate keys") {
  Net net;
  const nn::NamedTensors full = net.state_dict();
  nn::NamedTensors partial;
  for (const auto& [name, t] : full)
    if (name != "first.norm.bias" && name != "blocks.0.steps") partial.emplace_back(name, t);
  partial.emplace_back("first.extra", ones({1}));
  partial.emplace_back("blocks.3.weight", ones({1}));
  expect_error([&] { net.load_state_dict(partial); },
               {"heed::load_state_dict", "missing keys [first.norm.bias, blocks.0.steps]",
                "unexpected keys [first.extra, blocks.3.weight]"});
  // Non-strict: loads what matches, ignores the rest.
  Tensor fill = full_like(net.first->norm->weight, 2.5);
  for (auto& [name, t] : partial)
    if (name == "first.norm.weight") t = fill;
  net.load_state_dict(partial, /*strict=*/false);
  CHECK(ref::values(net.first->norm->weight) == Values{2.5, 2.5});

  nn::NamedTensors wrong_shape = full;
  wrong_shape[1].second = zeros({3, 3});
  expect_error([&] { net.load_state_dict(wrong_shape); },
               {"heed::load_state_dict", "first.linear.weight", "[3, 3]", "[2, 3]"});
  expect_error([&] { net.load_state_dict(wrong_shape, false); }, {"heed::load_state_dict", "shape mismatch"});
  nn::NamedTensors duplicate = full;
  duplicate.push_back(full[0]);
  expect_error([&] { net.load_state_dict(duplicate); }, {"heed::load_state_dict", "first.scale", "twice"});
}

TEST_CASE("Module: load_state_dict converts dtypes to the module's") {
  manual_seed(64);
  Block source;
  source.to(kFloat64);
  {
    NoGradGuard no_grad;
    source.scale.copy_(tensor({0.1, 0.2, 0.3}, kFloat64));
  }
  Block target;
  target.load_state_dict(source.state_dict());
  CHECK(target.scale.dtype() == kFloat32);
  check_close(target.scale, Values{0.1, 0.2, 0.3}, 1e-7, 0, "converted");
  CHECK(target.steps.dtype() == kInt64);
}

TEST_CASE("Module: str() prints the tree PyTorch style") {
  nn::FeedForward ff(4, 8, 0.1, nn::Activation::ReLU);
  CHECK(ff.str() ==
        "FeedForward(\n"
        "  (fc1): Linear(in_features=4, out_features=8, bias=true)\n"
        "  (fc2): Linear(in_features=8, out_features=4, bias=true)\n"
        "  (dropout): Dropout(p=0.1)\n"
        ")");
  Net net;
  const std::string s = net.str();
  CHECK(s.find("Net(\n  (first): Block(\n    (linear): Linear(in_features=3, out_features=2, "
               "bias=true)\n") == 0);
  CHECK(s.find("  (blocks): ModuleList(\n    (0): Block(\n") != std::string::npos);
  CHECK(s.find("    (1): Dropout(p=0.25)\n  )\n)") != std::string::npos);
  CHECK(nn::Embedding(5, 3, 0).str() == "Embedding(5, 3, padding_idx=0)");
  CHECK(nn::LayerNorm(6).str().find("LayerNorm((6,), eps=1e-05") == 0);
}

TEST_CASE("assign_data replaces data in place and keeps requires_grad") {
  Tensor p = zeros({2}).requires_grad_(true);
  nn::assign_data(p, tensor({1.0, 2.0, 3.0}, kFloat64));
  CHECK(p.shape() == Dims{3});
  CHECK(p.dtype() == kFloat64);
  CHECK(p.requires_grad());
  CHECK(ref::values(p) == Values{1, 2, 3});
  nn::assign_data(p, zeros({2}, kInt64));
  CHECK_FALSE(p.requires_grad());  // integer tensors cannot require grad
}

TEST_CASE("Module: device() is where every parameter and buffer lives") {
  Block block;
  CHECK(block.device() == kCPU);
  nn::ModuleList empty;
  expect_error([&] { (void)empty.device(); }, {"Module::device", "ModuleList", "no parameters or buffers"});
}

TEST_CASE("Module: device() names two tensors on different devices") {
  if (!cuda::is_available()) return heed::test::skip("no CUDA device: " + cuda::unavailable_reason());
  Block block;
  block.linear->to(kCUDA);
  expect_error([&] { (void)block.device(); }, {"Module::device", "Block", "'scale' on cpu", "on cuda:0"});
  block.to(kCUDA);
  CHECK(block.device() == kCUDA);
}
