// tests/test_misuse.cpp — every public op and layer given wrong input: shapes, dtypes, devices,
// dims, indices (out of range, negative), empty and undefined tensors, mismatched masks,
// non-divisible head counts, bad files. Each case must raise heed::Error whose message starts
// with "heed::" and names the op or layer (and, where the case is about a value, mentions
// it); none may crash. CUDA tensors are requested on machines without a GPU (or builds
// without CUDA): that too must be a heed::Error.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace heed;

namespace {

// A non-owning reference to the statement of one case (a lambda that outlives the call): with it
// expect_error is compiled once instead of once per case (400 instantiations, each with its
// try/catch and doctest captures, took this file 3.5 minutes to compile under the sanitizers).
class Statement {
 public:
  template <typename F>
  Statement(const F& statement)  // NOLINT: implicit, so each case passes its lambda directly
      : object_(&statement), run_([](const void* object) { (*static_cast<const F*>(object))(); }) {}
  void operator()() const { run_(object_); }

 private:
  const void* object_;
  void (*run_)(const void*);
};

// Runs `body`; it must throw heed::Error whose message starts with "heed::" and contains each
// of `needles`.
void expect_error(const char* expression, Statement body, std::initializer_list<const char*> needles) {
  std::string message;
  bool threw_heed_error = false;
  try {
    body();
  } catch (const Error& e) {
    threw_heed_error = true;
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("non-heed exception: ") + e.what();
  }
  INFO("case: ", std::string(expression));
  INFO("message: ", message);
  CHECK(threw_heed_error);
  CHECK(message.rfind("heed::", 0) == 0);
  for (const char* needle : needles) {
    INFO("expected in the message: ", std::string(needle));
    CHECK(message.find(needle) != std::string::npos);
  }
}

#define EXPECT_HEED_ERROR(statement, ...) expect_error(#statement, [&] { (void)(statement); }, {__VA_ARGS__})

// Either a heed::Error naming heed, or a result of the expected shape: what PyTorch does for
// an empty input varies; a crash or another exception type is the failure.
template <typename Body>
void expect_error_or_shape(const char* label, Body&& body, const Dims& shape) {
  INFO("case: ", std::string(label));
  try {
    const Tensor out = body();
    CHECK(out.shape() == shape);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).rfind("heed::", 0) == 0);
  }
}

bool has_gpu() { return cuda::is_available(); }

bool values_equal_zero(const Tensor& t) {
  for (double v : t.to(kFloat64).contiguous().to_vector<double>())
    if (v != 0.0) return false;
  return true;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("heed_misuse_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

nn::TransformerLMOptions tiny_lm_options() {
  nn::TransformerLMOptions o;
  o.vocab = 11;
  o.d_model = 8;
  o.heads = 2;
  o.layers = 1;
  o.context = 5;
  return o;
}

}  // namespace

TEST_CASE("factories: negative sizes, bad ranges, ragged literals, integer grads") {
  EXPECT_HEED_ERROR(zeros({2, -1}), "heed::zeros", "-1");
  EXPECT_HEED_ERROR(ones({-3}), "heed::ones");
  EXPECT_HEED_ERROR(full({-1}, 2.0), "heed::full");
  EXPECT_HEED_ERROR(empty({-1}), "heed::empty");
  EXPECT_HEED_ERROR(randn({-2}), "heed::randn");
  EXPECT_HEED_ERROR(rand({3, -2}), "heed::rand");
  EXPECT_HEED_ERROR(zeros({1LL << 40, 1LL << 40}), "heed::zeros", "too many elements");
  EXPECT_HEED_ERROR(zeros({2}, TensorOptions(kInt64).requires_grad(true)), "heed::zeros", "floating");
  EXPECT_HEED_ERROR(arange(0.0, 5.0, 0.0), "heed::arange", "step");
  EXPECT_HEED_ERROR(arange(0.0, INFINITY), "heed::arange", "finite");
  EXPECT_HEED_ERROR(arange(std::numeric_limits<double>::quiet_NaN()), "heed::arange");
  EXPECT_HEED_ERROR(randint(5, 5, {2}), "heed::randint");
  EXPECT_HEED_ERROR(randint(0, 3, {2}, kFloat32), "heed::randint");
  EXPECT_HEED_ERROR(uniform({2}, 1.0, 0.0), "heed::uniform");
  EXPECT_HEED_ERROR(eye(-1), "heed::eye");
  EXPECT_HEED_ERROR(tensor({{1.0, 2.0}, {3.0}}), "heed::tensor");
  EXPECT_HEED_ERROR(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), "heed::from_vector", "[2, 2]");
  EXPECT_HEED_ERROR(tril(ones({3})), "heed::tril");
  EXPECT_HEED_ERROR(triu(Tensor()), "heed::triu");
  EXPECT_HEED_ERROR(
      zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}),
      "heed::shape", "at most");
}

TEST_CASE("devices: CUDA without a GPU and bad device strings are errors, never crashes") {
  EXPECT_HEED_ERROR(parse_device("gpu"), "heed::parse_device", "gpu");
  EXPECT_HEED_ERROR(parse_device("cuda:-1"), "heed::parse_device");
  EXPECT_HEED_ERROR(parse_device("cuda:x"), "heed::parse_device");
  EXPECT_HEED_ERROR(parse_device("cuda:99999999999999999999"), "heed::parse_device");
  EXPECT_HEED_ERROR(parse_device(""), "heed::parse_device");
  EXPECT_HEED_ERROR(zeros({2}, Device(DeviceType::CUDA, -1)), "heed::zeros", "CUDA device -1");
  EXPECT_HEED_ERROR(zeros({2}, Device(DeviceType::CUDA, 1000)), "heed::zeros", "CUDA device 1000");
  EXPECT_HEED_ERROR(ones({2}).to(Device(DeviceType::CUDA, 1000)), "heed::to", "CUDA device 1000");
  if (has_gpu()) {
    MESSAGE("a CUDA device is present: the no-GPU cases run only on machines without one");
    return;
  }
  EXPECT_HEED_ERROR(zeros({2}, kCUDA), "heed::zeros", "CUDA");
  EXPECT_HEED_ERROR(ones({2}, kCUDA), "heed::ones", "CUDA");
  EXPECT_HEED_ERROR(full({2}, 1.0, kCUDA), "heed::full", "CUDA");
  EXPECT_HEED_ERROR(empty({2}, kCUDA), "heed::empty", "CUDA");
  EXPECT_HEED_ERROR(randn({2}, kCUDA), "heed::randn", "CUDA");
  EXPECT_HEED_ERROR(rand({2}, kCUDA), "heed::rand", "CUDA");
  EXPECT_HEED_ERROR(randint(0, 4, {2}, TensorOptions(kInt64).device(kCUDA)), "heed::randint", "CUDA");
  EXPECT_HEED_ERROR(arange(4.0, TensorOptions(kInt64).device(kCUDA)), "heed::arange", "CUDA");
  EXPECT_HEED_ERROR(eye(3, kCUDA), "heed::eye", "CUDA");
  EXPECT_HEED_ERROR(tensor({1.0, 2.0}, kCUDA), "CUDA device 0 is not available");
  EXPECT_HEED_ERROR(ones({2}).to(kCUDA), "heed::to", "CUDA");
  EXPECT_HEED_ERROR(ones({2}).requires_grad_().to(kCUDA), "heed::to", "CUDA");
  nn::Linear linear(2, 3);
  EXPECT_HEED_ERROR(linear.to(kCUDA), "heed::", "CUDA");
  CHECK(linear.weight.device() == kCPU);  // nothing moved
  nn::TransformerLM lm(tiny_lm_options());
  EXPECT_HEED_ERROR(lm.to(kCUDA), "CUDA");
}

TEST_CASE("element-wise ops: broadcasting, dtypes, undefined inputs") {
  const Tensor a = ones({2, 3}), b = ones({4}), i = ones({2, 3}, kInt64), f = ones({2, 3}, kFloat64);
  EXPECT_HEED_ERROR(add(a, b), "heed::add", "[2, 3]", "[4]");
  EXPECT_HEED_ERROR(a + b, "heed::add");
  EXPECT_HEED_ERROR(a - b, "heed::sub");
  EXPECT_HEED_ERROR(a * b, "heed::mul");
  EXPECT_HEED_ERROR(a / b, "heed::div");
  EXPECT_HEED_ERROR(pow(a, b), "heed::pow");
  EXPECT_HEED_ERROR(maximum(a, b), "heed::maximum");
  EXPECT_HEED_ERROR(minimum(a, b), "heed::minimum");
  EXPECT_HEED_ERROR(eq(a, b), "heed::eq");
  EXPECT_HEED_ERROR(lt(a, b), "heed::lt");
  EXPECT_HEED_ERROR(ge(a, b), "heed::ge");
  EXPECT_HEED_ERROR(logical_and(a > 0.0, b > 0.0), "heed::logical_and");
  EXPECT_HEED_ERROR(logical_and(a, a), "heed::logical_and", "bool");
  EXPECT_HEED_ERROR(logical_or(i, i), "heed::logical_or", "bool");
  EXPECT_HEED_ERROR(logical_not(a), "heed::logical_not", "bool");
  EXPECT_HEED_ERROR(where(a, a, a), "heed::where", "bool");
  EXPECT_HEED_ERROR(where(a > 0.0, a, b), "heed::where");
  EXPECT_HEED_ERROR(where(b > 0.0, a, a), "heed::where");
  EXPECT_HEED_ERROR(masked_fill(a, a, 0.0), "heed::masked_fill", "bool");
  EXPECT_HEED_ERROR(masked_fill(a, b > 0.0, 0.0), "heed::masked_fill");
  EXPECT_HEED_ERROR(masked_fill(a, ones({2, 2, 3}) > 0.0, 0.0), "heed::masked_fill");
  EXPECT_HEED_ERROR(clamp(a, 2.0, 1.0), "heed::clamp");
  EXPECT_HEED_ERROR(exp(Tensor()), "heed::exp");
  EXPECT_HEED_ERROR(add(a, Tensor()), "heed::add");
  EXPECT_HEED_ERROR(relu(Tensor()), "heed::relu");
  EXPECT_HEED_ERROR(allclose(a, b), "heed::allclose");
  EXPECT_HEED_ERROR(isfinite_all(Tensor()), "heed::isfinite_all");
  // Integer and bool tensors cannot require grad.
  EXPECT_HEED_ERROR(Tensor(i).requires_grad_(), "heed::requires_grad_", "int64");
  EXPECT_HEED_ERROR((a > 0.0).requires_grad_(), "heed::requires_grad_", "bool");
  // Mixed float dtypes promote (no error); mixed with int promotes too.
  CHECK((a + f).dtype() == kFloat64);
  CHECK((a + i).dtype() == kFloat32);
}

TEST_CASE("reductions: dims out of range, duplicate dims, empty tensors") {
  const Tensor x = ones({2, 3});
  EXPECT_HEED_ERROR(sum(x, {2}), "heed::sum", "dim 2");
  EXPECT_HEED_ERROR(sum(x, {-3}), "heed::sum", "dim -3");
  EXPECT_HEED_ERROR(sum(x, {0, 0}), "heed::sum", "twice");
  EXPECT_HEED_ERROR(sum(x, {1, -1}), "heed::sum");
  EXPECT_HEED_ERROR(mean(x, {5}), "heed::mean");
  EXPECT_HEED_ERROR(var(x, {7}), "heed::var");
  EXPECT_HEED_ERROR(max(x, 2), "heed::max");
  EXPECT_HEED_ERROR(min(x, -3), "heed::min");
  EXPECT_HEED_ERROR(argmax(x, 9), "heed::argmax");
  EXPECT_HEED_ERROR(argmin(x, -9), "heed::argmin");
  EXPECT_HEED_ERROR(max(zeros({0})), "heed::max", "empty");
  EXPECT_HEED_ERROR(min(zeros({2, 0})), "heed::min", "empty");
  EXPECT_HEED_ERROR(argmax(zeros({0})), "heed::argmax", "empty");
  EXPECT_HEED_ERROR(max(zeros({2, 0}), 1), "heed::max", "size 0");
  EXPECT_HEED_ERROR(argmin(zeros({0, 3}), 0), "heed::argmin");
  EXPECT_HEED_ERROR(sum_to(x, {4, 3}), "heed::sum_to");
  EXPECT_HEED_ERROR(sum_to(x, {1, 2, 3, 4}), "heed::sum_to");
  EXPECT_HEED_ERROR(sum(Tensor()), "heed::sum");
  // A mean of integers or booleans is float32 (as in NumPy), not an error.
  CHECK(mean(from_vector(std::vector<int64_t>{1, 2}, {2})).item<double>() == 1.5);
  CHECK(mean(from_vector(std::vector<int64_t>{1, 2}, {2})).dtype() == kFloat32);
  // Sums over empty tensors are 0 (no error); a mean over nothing is NaN (as in PyTorch).
  CHECK(sum(zeros({0})).item<double>() == 0.0);
}

TEST_CASE("matmul, linear and embedding: shapes, dtypes, indices") {
  EXPECT_HEED_ERROR(matmul(ones({2, 3}), ones({4, 5})), "heed::matmul", "[2, 3]", "[4, 5]");
  EXPECT_HEED_ERROR(matmul(ones({}), ones({3})), "heed::matmul");
  EXPECT_HEED_ERROR(matmul(ones({3}), ones({4})), "heed::matmul");
  EXPECT_HEED_ERROR(matmul(ones({2, 2, 3}), ones({3, 3, 4})), "heed::matmul");
  EXPECT_HEED_ERROR(matmul(ones({2, 3}, kInt64), ones({3, 2}, kInt64)), "heed::matmul");
  EXPECT_HEED_ERROR(matmul(Tensor(), ones({2, 2})), "heed::matmul");
  EXPECT_HEED_ERROR(F::linear(ones({2, 3}), ones({3})), "heed::linear", "2-D");
  EXPECT_HEED_ERROR(F::linear(ones({2, 3}), ones({4, 5})), "heed::linear");
  EXPECT_HEED_ERROR(F::linear(ones({2, 3}), ones({4, 3}), ones({3})), "heed::linear");
  EXPECT_HEED_ERROR(F::linear(ones({}), ones({4, 3})), "heed::linear");
  const Tensor table = randn({5, 2});
  EXPECT_HEED_ERROR(F::embedding(table, ones({3})), "heed::embedding", "float32");
  EXPECT_HEED_ERROR(F::embedding(table, tensor({0.0, 5.0}, kInt64)), "heed::embedding", "5");
  EXPECT_HEED_ERROR(F::embedding(table, tensor({-1.0}, kInt64)), "heed::embedding", "-1");
  EXPECT_HEED_ERROR(F::embedding(ones({5}), tensor({0.0}, kInt64)), "heed::embedding", "2-D");
  EXPECT_HEED_ERROR(F::embedding(table, Tensor()), "heed::embedding");
}

TEST_CASE("joining, splitting, indexing: shapes, dims, indices") {
  const Tensor x = randn({2, 3});
  EXPECT_HEED_ERROR(cat({}, 0), "heed::cat");
  EXPECT_HEED_ERROR(cat({x, ones({2, 4})}, 0), "heed::cat");
  EXPECT_HEED_ERROR(cat({x, ones({3})}, 0), "heed::cat");
  EXPECT_HEED_ERROR(cat({x, x}, 2), "heed::cat");
  EXPECT_HEED_ERROR(cat({x, Tensor()}, 0), "heed::cat");
  EXPECT_HEED_ERROR(stack({}, 0), "heed::stack");
  EXPECT_HEED_ERROR(stack({x, ones({3, 2})}, 0), "heed::stack");
  EXPECT_HEED_ERROR(stack({x, x}, 3), "heed::stack");
  EXPECT_HEED_ERROR(split(x, 0, 1), "heed::split");
  EXPECT_HEED_ERROR(split(x, -1, 1), "heed::split");
  EXPECT_HEED_ERROR(split(x, std::vector<int64_t>{1, 1}, 1), "heed::split");
  EXPECT_HEED_ERROR(split(x, std::vector<int64_t>{4, -1}, 1), "heed::split");
  EXPECT_HEED_ERROR(split(x, 1, 2), "heed::split");
  EXPECT_HEED_ERROR(chunk(x, 0, 0), "heed::chunk");
  EXPECT_HEED_ERROR(index_select(x, 1, tensor({0.0, 3.0}, kInt64)), "heed::index_select", "3");
  EXPECT_HEED_ERROR(index_select(x, 1, tensor({-1.0}, kInt64)), "heed::index_select", "-1");
  EXPECT_HEED_ERROR(index_select(x, 1, tensor({0.0})), "heed::index_select", "int64");
  EXPECT_HEED_ERROR(index_select(x, 1, zeros({1, 1}, kInt64)), "heed::index_select");
  EXPECT_HEED_ERROR(index_select(x, 2, zeros({1}, kInt64)), "heed::index_select");
  EXPECT_HEED_ERROR(gather(x, 1, full({2, 1}, 3.0, kInt64)), "heed::gather", "3");
  EXPECT_HEED_ERROR(gather(x, 1, full({2, 1}, -1.0, kInt64)), "heed::gather", "-1");
  EXPECT_HEED_ERROR(gather(x, 1, zeros({2}, kInt64)), "heed::gather");
  EXPECT_HEED_ERROR(gather(x, 1, zeros({3, 1}, kInt64)), "heed::gather");
  EXPECT_HEED_ERROR(gather(x, 1, zeros({2, 1})), "heed::gather");
  EXPECT_HEED_ERROR(gather(x, -3, zeros({2, 1}, kInt64)), "heed::gather");
}

TEST_CASE("views: impossible shapes, dims and indices") {
  const Tensor x = randn({2, 3, 4});
  EXPECT_HEED_ERROR(x.view({5, 5}), "heed::view", "[5, 5]");
  EXPECT_HEED_ERROR(x.view({-1, -1}), "heed::view");
  EXPECT_HEED_ERROR(x.view({-2, 12}), "heed::view");
  EXPECT_HEED_ERROR(x.transpose(0, 2).view({24}), "heed::view");
  EXPECT_HEED_ERROR(x.reshape({7, -1}), "heed::");
  EXPECT_HEED_ERROR(x.permute({0, 1}), "heed::permute");
  EXPECT_HEED_ERROR(x.permute({0, 0, 1}), "heed::permute");
  EXPECT_HEED_ERROR(x.permute({0, 1, 3}), "heed::permute");
  EXPECT_HEED_ERROR(x.transpose(0, 3), "heed::");
  EXPECT_HEED_ERROR(x.t(), "heed::t");
  EXPECT_HEED_ERROR(x.slice(0, 0, 2, 0), "heed::slice", "step");
  EXPECT_HEED_ERROR(x.slice(0, 0, 2, -1), "heed::slice", "step");
  EXPECT_HEED_ERROR(x.slice(3, 0, 1), "heed::slice");
  EXPECT_HEED_ERROR(x.narrow(1, 2, 2), "heed::narrow");
  EXPECT_HEED_ERROR(x.narrow(1, -5, 1), "heed::narrow");
  EXPECT_HEED_ERROR(x.narrow(1, 0, -1), "heed::narrow");
  EXPECT_HEED_ERROR(x.select(0, 2), "heed::select", "2");
  EXPECT_HEED_ERROR(x.select(0, -3), "heed::select", "-3");
  EXPECT_HEED_ERROR(x.select(5, 0), "heed::select");
  EXPECT_HEED_ERROR(x.expand({3, 3, 4}), "heed::expand");
  EXPECT_HEED_ERROR(x.expand({3, 4}), "heed::expand");
  EXPECT_HEED_ERROR(x.expand({-2, 3, 4}), "heed::expand");
  EXPECT_HEED_ERROR(x.squeeze(3), "heed::");
  EXPECT_HEED_ERROR(x.unsqueeze(4), "heed::unsqueeze");
  EXPECT_HEED_ERROR(x.unsqueeze(-5), "heed::unsqueeze");
  EXPECT_HEED_ERROR(x.flatten(2, 1), "heed::flatten");
  EXPECT_HEED_ERROR(x.flatten(0, 3), "heed::flatten");
  EXPECT_HEED_ERROR(x.unflatten(2, {3, 2}), "heed::unflatten");
  EXPECT_HEED_ERROR(x.unflatten(5, {1}), "heed::unflatten");
  EXPECT_HEED_ERROR(x.split(0, 0), "heed::split");
  EXPECT_HEED_ERROR(x.chunk(-1, 0), "heed::chunk");
  EXPECT_HEED_ERROR(Tensor().view({1}), "heed::");
  EXPECT_HEED_ERROR(Tensor().shape(), "heed::tensor", "undefined");
}

TEST_CASE("tensor access, conversion and in-place misuse") {
  const Tensor x = randn({2, 3});
  EXPECT_HEED_ERROR(x.item<double>(), "heed::item", "[2, 3]");
  EXPECT_HEED_ERROR(x.at({0}), "heed::at");
  EXPECT_HEED_ERROR(x.at({0, 3}), "heed::at", "3");
  EXPECT_HEED_ERROR(x.at({-3, 0}), "heed::at");
  EXPECT_HEED_ERROR(x.data_ptr<double>(), "heed::data_ptr", "float32");
  EXPECT_HEED_ERROR(x.size(2), "heed::size");
  EXPECT_HEED_ERROR(x.stride(-3), "heed::stride");
  Tensor target = zeros({2, 3});
  EXPECT_HEED_ERROR(target.copy_(ones({3, 2})), "heed::copy_");
  EXPECT_HEED_ERROR(target.add_(ones({4})), "heed::add_");
  EXPECT_HEED_ERROR(target.add_(ones({2, 2, 3})), "heed::add_");
  EXPECT_HEED_ERROR(target.mul_(ones({5})), "heed::mul_");
  EXPECT_HEED_ERROR(target.masked_fill_(ones({2, 3}), 1.0), "heed::masked_fill_", "bool");
  EXPECT_HEED_ERROR(target.masked_fill_(ones({4}) > 0.0, 1.0), "heed::masked_fill_");
  Tensor ints = zeros({2}, kInt64);
  EXPECT_HEED_ERROR(ints.add_(ones({2}), 0.5), "heed::add_");
  // Writing into an expanded (overlapping) view is refused.
  Tensor base = zeros({3});
  Tensor expanded = base.expand({2, 3});
  EXPECT_HEED_ERROR(expanded.add_(ones({2, 3})), "heed::add_");
}

TEST_CASE("autograd misuse") {
  Tensor w = ones({3}).requires_grad_();
  EXPECT_HEED_ERROR(w.fill_(1.0), "heed::fill_", "leaf");
  EXPECT_HEED_ERROR(w.mul_(2.0), "heed::mul_");
  EXPECT_HEED_ERROR((w * 2.0).backward(), "heed::backward", "one element");
  EXPECT_HEED_ERROR(ones({1}).backward(), "heed::backward", "does not require grad");
  EXPECT_HEED_ERROR((w * 2.0).backward(ones({4})), "heed::backward", "[4]");
  EXPECT_HEED_ERROR(w.set_grad(ones({2})), "heed::set_grad", "[2]");
  EXPECT_HEED_ERROR(w.set_grad(ones({3}, kInt64)), "heed::set_grad");
  EXPECT_HEED_ERROR(ones({3}).register_hook([](const Tensor&) { return Tensor(); }), "heed::register_hook");
  EXPECT_HEED_ERROR(ones({3}).retain_grad(), "heed::retain_grad");
  // A second backward through a freed graph.
  Tensor y = (w * w).sum();
  y.backward();
  EXPECT_HEED_ERROR(y.backward(), "backward through the graph a second time");
  // A saved tensor modified in place before backward.
  Tensor a = ones({3}).requires_grad_();
  Tensor b = a * 2.0;
  Tensor c = b * b;
  {
    NoGradGuard no_grad;
    b.add_(1.0);
  }
  EXPECT_HEED_ERROR(c.sum().backward(), "heed::mul", "modified by an in-place operation");
  // A hook returning the wrong shape.
  Tensor h = ones({2}).requires_grad_();
  h.register_hook([](const Tensor&) { return ones({3}); });
  EXPECT_HEED_ERROR((h * 1.0).sum().backward(), "heed::register_hook", "[3]");
  // heed::grad misuse.
  EXPECT_HEED_ERROR(grad({(w * 2.0).sum()}, {ones({3})}), "heed::grad", "does not require grad");
  EXPECT_HEED_ERROR(grad({(w * 2.0).sum()}, {w}, {ones({1}), ones({1})}), "heed::grad");
  EXPECT_HEED_ERROR(grad({Tensor()}, {w}), "heed::grad");
  // gradcheck needs float64 inputs.
  EXPECT_HEED_ERROR(gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {ones({2}).requires_grad_()}),
                    "heed::gradcheck", "float64");
}

TEST_CASE("functional: softmax, cross_entropy, dropout, layer_norm") {
  const Tensor x = randn({2, 3});
  EXPECT_HEED_ERROR(F::softmax(x, 2), "heed::softmax", "dim 2");
  EXPECT_HEED_ERROR(F::softmax(x, -3), "heed::softmax", "dim -3");
  EXPECT_HEED_ERROR(F::log_softmax(x, 5), "heed::log_softmax");
  EXPECT_HEED_ERROR(F::softmax(ones({2}, kInt64), 0), "heed::softmax", "int64");
  EXPECT_HEED_ERROR(F::softmax(Tensor(), 0), "heed::softmax");
  const Tensor targets = tensor({0.0, 2.0}, kInt64);
  EXPECT_HEED_ERROR(F::cross_entropy(x, tensor({0.0, 1.0, 2.0}, kInt64)), "heed::cross_entropy", "[3]", "[2, 3]");
  EXPECT_HEED_ERROR(F::cross_entropy(x, tensor({0.0, 2.0})), "heed::cross_entropy", "float32");
  EXPECT_HEED_ERROR(F::cross_entropy(x, tensor({0.0, 3.0}, kInt64)), "heed::cross_entropy", "target 3");
  EXPECT_HEED_ERROR(F::cross_entropy(x, tensor({-1.0, 0.0}, kInt64)), "heed::cross_entropy", "target -1");
  EXPECT_HEED_ERROR(F::cross_entropy(x, targets, {.label_smoothing = 1.5}), "heed::cross_entropy", "label_smoothing");
  EXPECT_HEED_ERROR(F::cross_entropy(x, targets, {.label_smoothing = -0.1}), "heed::cross_entropy");
  EXPECT_HEED_ERROR(F::cross_entropy(ones({2, 3}, kInt64), targets), "heed::cross_entropy", "int64");
  EXPECT_HEED_ERROR(F::cross_entropy(ones({}), tensor({0.0}, kInt64)), "heed::cross_entropy");
  EXPECT_HEED_ERROR(F::cross_entropy(ones({2, 0}), targets), "heed::cross_entropy", "no classes");
  EXPECT_HEED_ERROR(F::dropout(x, -0.1), "heed::dropout", "-0.1");
  EXPECT_HEED_ERROR(F::dropout(x, 1.5), "heed::dropout", "1.5");
  EXPECT_HEED_ERROR(F::dropout(x, std::numeric_limits<double>::quiet_NaN()), "heed::dropout");
  EXPECT_HEED_ERROR(F::dropout(ones({2}, kInt64), 0.5), "heed::dropout", "int64");
  EXPECT_HEED_ERROR(F::layer_norm(x, ones({2})), "heed::layer_norm", "[2]");
  EXPECT_HEED_ERROR(F::layer_norm(x, ones({3}), ones({4})), "heed::layer_norm", "[4]");
  EXPECT_HEED_ERROR(F::layer_norm(x, Tensor(), Tensor(), -1.0), "heed::layer_norm", "eps");
  EXPECT_HEED_ERROR(F::layer_norm(ones({2, 3}, kInt64)), "heed::layer_norm", "int64");
  EXPECT_HEED_ERROR(F::layer_norm(ones({})), "heed::layer_norm");
}

TEST_CASE("attention: mismatched shapes, masks, dropout and scale") {
  const Tensor q = randn({2, 2, 3, 4}), k = randn({2, 2, 5, 4}), v = randn({2, 2, 5, 4});
  const char* sdpa = "heed::scaled_dot_product_attention";
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, randn({2, 2, 5, 3}), v), sdpa, "[2, 2, 5, 3]");
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, randn({2, 2, 6, 4})), sdpa, "keys");
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, v, {}, 1.0), sdpa, "dropout_p");
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, v, {}, -0.5), sdpa, "dropout_p");
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, v, {}, 0.0, INFINITY), sdpa, "scale");
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, v, {}, 0.0, std::numeric_limits<double>::quiet_NaN()), sdpa);
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(ones({4}), k, v), sdpa);
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, k, v.to(kInt64)), sdpa);
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(Tensor(), k, v), sdpa);
  EXPECT_HEED_ERROR(F::scaled_dot_product_attention(q, randn({3, 2, 5, 4}), randn({3, 2, 5, 4})), sdpa);
  auto with_mask = [&](F::AttentionMask mask) { return F::scaled_dot_product_attention(q, k, v, mask); };
  auto with_mask_composed = [&](F::AttentionMask mask) {
    return F::scaled_dot_product_attention_with_weights(q, k, v, mask).output;
  };
  for (int composed = 0; composed < 2; ++composed) {
    CAPTURE(composed);
    auto run = [&](F::AttentionMask mask) { return composed ? with_mask_composed(mask) : with_mask(mask); };
    EXPECT_HEED_ERROR(run({.keep = ones({3, 4}) > 0.0}), sdpa, "[3, 4]");
    EXPECT_HEED_ERROR(run({.keep = ones({3, 5})}), sdpa, "bool");
    EXPECT_HEED_ERROR(run({.keep = ones({3, 3, 5}) > 0.0}), sdpa);
    EXPECT_HEED_ERROR(run({.additive = ones({3, 4})}), sdpa, "[3, 4]");
    EXPECT_HEED_ERROR(run({.additive = ones({3, 5}, kInt64)}), sdpa, "int64");
    EXPECT_HEED_ERROR(run({.key_lengths = tensor({5.0, 5.0})}), sdpa, "float32");
    EXPECT_HEED_ERROR(run({.key_lengths = tensor({5.0}, kInt64)}), sdpa);
    EXPECT_HEED_ERROR(run({.key_lengths = tensor({5.0, 6.0}, kInt64)}), sdpa, "6");
    EXPECT_HEED_ERROR(run({.key_lengths = tensor({5.0, -1.0}, kInt64)}), sdpa, "-1");
    EXPECT_HEED_ERROR(run({.key_padding = ones({2, 4}) > 0.0}), sdpa, "[2, 4]");
    EXPECT_HEED_ERROR(run({.key_padding = ones({2, 5})}), sdpa, "bool");
    EXPECT_HEED_ERROR(run({.window = -2}), sdpa, "window");
  }
  EXPECT_HEED_ERROR(F::flash_attention(q, randn({2, 3, 5, 4}), randn({2, 3, 5, 4})), "heed::flash_attention");
  EXPECT_HEED_ERROR(F::flash_attention(q, k, v, {}, 1.0), "heed::flash_attention", "dropout");
  EXPECT_HEED_ERROR(F::flash_attention(ones({3, 4}), ones({3, 4}), ones({3, 4})), "heed::flash_attention");
  EXPECT_HEED_ERROR(F::flash_attention_packed(randn({2, 3, 12}), 3), "heed::flash_attention_packed");
  EXPECT_HEED_ERROR(F::flash_attention_packed(randn({2, 3, 13}), 1), "heed::flash_attention_packed", "13");
  EXPECT_HEED_ERROR(F::flash_attention_packed(randn({2, 3, 12}), 0), "heed::flash_attention_packed");
  EXPECT_HEED_ERROR(F::flash_attention_packed(randn({3, 12}), 2), "heed::flash_attention_packed");
  EXPECT_HEED_ERROR(F::attention_keep_mask({.keep = ones({2, 2}) > 0.0}, {1, 3, 4}, kCPU), sdpa);
  EXPECT_HEED_ERROR(F::check_additive_mask(ones({3}, kBool), {3, 3}), sdpa);
}

TEST_CASE("layers: bad construction and bad forward inputs") {
  EXPECT_HEED_ERROR(nn::Linear(0, 3), "heed::Linear");
  EXPECT_HEED_ERROR(nn::Linear(3, -1), "heed::Linear");
  nn::Linear linear(3, 2);
  EXPECT_HEED_ERROR(linear(ones({4, 5})), "heed::linear", "[4, 5]");
  EXPECT_HEED_ERROR(linear(ones({4, 3}, kInt64)), "heed::");
  EXPECT_HEED_ERROR(nn::Embedding(0, 2), "heed::Embedding");
  EXPECT_HEED_ERROR(nn::Embedding(4, 2, 4), "heed::Embedding", "padding_idx");
  EXPECT_HEED_ERROR(nn::Embedding(4, 2, -1), "heed::Embedding", "padding_idx");
  nn::Embedding embedding(4, 2);
  EXPECT_HEED_ERROR(embedding(tensor({4.0}, kInt64)), "heed::embedding", "4");
  EXPECT_HEED_ERROR(embedding(tensor({-2.0}, kInt64)), "heed::embedding", "-2");
  EXPECT_HEED_ERROR(embedding(tensor({1.0})), "heed::embedding");
  EXPECT_HEED_ERROR(nn::LayerNorm(0), "heed::LayerNorm");
  nn::LayerNorm norm(4);
  EXPECT_HEED_ERROR(norm(ones({2, 3})), "heed::LayerNorm", "[2, 3]");
  EXPECT_HEED_ERROR(nn::Dropout(1.5), "heed::Dropout");
  EXPECT_HEED_ERROR(nn::Dropout(-1.0), "heed::Dropout");
  EXPECT_HEED_ERROR(nn::FeedForward(0, 4), "heed::");
  EXPECT_HEED_ERROR(nn::FeedForward(4, 0), "heed::");
  EXPECT_HEED_ERROR(nn::SinusoidalPositionalEncoding(0, 4), "heed::SinusoidalPositionalEncoding");
  nn::SinusoidalPositionalEncoding sinusoidal(6, 4);
  EXPECT_HEED_ERROR(sinusoidal.forward(7), "heed::SinusoidalPositionalEncoding", "7");
  EXPECT_HEED_ERROR(sinusoidal.forward(2, -1), "heed::SinusoidalPositionalEncoding");
  EXPECT_HEED_ERROR(sinusoidal.forward(4, 3), "heed::SinusoidalPositionalEncoding");
  nn::LearnedPositionalEmbedding learned(6, 4);
  EXPECT_HEED_ERROR(learned.forward(-1), "heed::LearnedPositionalEmbedding");
  EXPECT_HEED_ERROR(learned.forward(6, 1), "heed::LearnedPositionalEmbedding");
  EXPECT_HEED_ERROR(nn::activate(Tensor(), nn::Activation::GELU), "heed::");
}

TEST_CASE("attention layers: non-divisible heads, bad scales, mismatched inputs and caches") {
  EXPECT_HEED_ERROR(nn::MultiHeadAttention({.d_model = 10, .heads = 3}), "heed::MultiHeadAttention", "10", "3");
  EXPECT_HEED_ERROR(nn::MultiHeadAttention({.d_model = 8, .heads = 0}), "heed::MultiHeadAttention");
  EXPECT_HEED_ERROR(nn::MultiHeadAttention({.d_model = 0, .heads = 1}), "heed::MultiHeadAttention");
  EXPECT_HEED_ERROR(nn::MultiHeadAttention({.d_model = 8, .heads = 2, .dropout = 1.0}), "heed::MultiHeadAttention");
  EXPECT_HEED_ERROR(nn::MultiHeadAttention({.d_model = 8, .heads = 2, .scale = nn::AttentionScale::Fixed}),
                    "heed::AttentionScaling");
  EXPECT_HEED_ERROR(nn::AttentionScaling(nn::AttentionScale::Learnable, 0, 2), "heed::AttentionScaling");
  EXPECT_HEED_ERROR(nn::parse_attention_scale("sqrt_dmodel"), "heed::parse_attention_scale", "sqrt_dmodel");
  EXPECT_HEED_ERROR(nn::ScaledDotProductAttention(4, nn::AttentionScale::SqrtDk, 1.0),
                    "heed::ScaledDotProductAttention");
  nn::ScaledDotProductAttention sdpa_layer(4);
  EXPECT_HEED_ERROR(sdpa_layer.forward(ones({2, 3, 5}), ones({2, 3, 5}), ones({2, 3, 5})), "heed::");
  for (nn::ProjectionLayout layout :
       {nn::ProjectionLayout::Separate, nn::ProjectionLayout::FusedQKV, nn::ProjectionLayout::PerHead}) {
    CAPTURE(nn::projection_layout_name(layout));
    nn::MultiHeadAttention mha({.d_model = 8, .heads = 2, .layout = layout});
    EXPECT_HEED_ERROR(mha.forward(ones({2, 3, 6})), "heed::MultiHeadAttention", "[2, 3, 6]");
    EXPECT_HEED_ERROR(mha.forward(ones({3, 8})), "heed::MultiHeadAttention");
    EXPECT_HEED_ERROR(mha.forward(ones({2, 3, 8}), ones({3, 4, 8}), ones({3, 4, 8})), "heed::MultiHeadAttention");
    EXPECT_HEED_ERROR(mha.forward(ones({2, 3, 8}), ones({2, 4, 8}), ones({2, 5, 8})), "heed::MultiHeadAttention");
    EXPECT_HEED_ERROR(mha.forward(ones({2, 3, 8}), F::AttentionMask{.keep = ones({3, 4}) > 0.0}), "heed::");
    EXPECT_HEED_ERROR(mha.forward(ones({2, 3, 8}), F::AttentionMask{.key_lengths = tensor({3.0, 4.0}, kInt64)}),
                      "heed::", "4");
    nn::KVCache cache;
    mha.forward(ones({2, 3, 8}), {}, false, &cache);
    EXPECT_HEED_ERROR(mha.forward(ones({3, 1, 8}), {}, false, &cache), "heed::MultiHeadAttention");
  }
  nn::AdditiveAttention additive(4, 6, 5);
  EXPECT_HEED_ERROR(additive.forward(ones({2, 3, 4}), ones({2, 5, 5}), ones({2, 5, 7})), "heed::");
  EXPECT_HEED_ERROR(additive.forward(ones({3, 4}), ones({2, 5, 6}), ones({2, 5, 7})), "heed::AdditiveAttention");
  EXPECT_HEED_ERROR(additive.forward(ones({2, 3, 4}), ones({2, 5, 6}), ones({2, 4, 7})), "heed::AdditiveAttention");
}

TEST_CASE("transformers: bad options, token ids, lengths, caches") {
  nn::TransformerLayerOptions layer;
  layer.d_model = 10;
  layer.heads = 4;
  EXPECT_HEED_ERROR(nn::TransformerEncoderLayer{layer}, "heed::MultiHeadAttention", "10");
  layer.d_model = 8;
  layer.heads = 2;
  layer.d_ff = 16;
  EXPECT_HEED_ERROR(nn::TransformerEncoder(layer, 0), "heed::TransformerEncoder");
  EXPECT_HEED_ERROR(nn::TransformerDecoder(layer, 0), "heed::TransformerDecoder");
  nn::TransformerEncoder encoder(layer, 1);
  EXPECT_HEED_ERROR(encoder.forward(ones({2, 3, 7})), "heed::");
  nn::TransformerDecoder decoder(layer, 1);
  EXPECT_HEED_ERROR(decoder.forward(ones({2, 3, 8}), ones({3, 4, 8})), "heed::");
  std::vector<nn::DecoderLayerCache> wrong_caches(3);
  EXPECT_HEED_ERROR(decoder.forward(ones({2, 1, 8}), ones({2, 4, 8}), {}, {}, &wrong_caches),
                    "heed::TransformerDecoder");

  nn::TransformerOptions t;
  t.src_vocab = 0;
  t.tgt_vocab = 5;
  EXPECT_HEED_ERROR(nn::Transformer(t), "heed::Transformer");
  t.src_vocab = 6;
  t.share_embeddings = true;
  EXPECT_HEED_ERROR(nn::Transformer(t), "heed::Transformer");
  t.share_embeddings = false;
  t.max_len = 4;
  t.encoder_layers = t.decoder_layers = 1;
  t.layer = layer;
  nn::Transformer transformer(t);
  const Tensor src = zeros({2, 3}, kInt64), tgt = zeros({2, 2}, kInt64);
  EXPECT_HEED_ERROR(transformer.forward(zeros({3}, kInt64), tgt), "heed::Transformer", "[3]");
  EXPECT_HEED_ERROR(transformer.forward(full({2, 3}, 6.0, kInt64), tgt), "heed::embedding", "6");
  EXPECT_HEED_ERROR(transformer.forward(src, full({2, 2}, -3.0, kInt64)), "heed::embedding", "-3");
  EXPECT_HEED_ERROR(transformer.forward(zeros({2, 5}, kInt64), tgt), "heed::");
  EXPECT_HEED_ERROR(transformer.forward(zeros({2, 3}), tgt), "heed::");
  EXPECT_HEED_ERROR(transformer.forward(src, zeros({3, 2}, kInt64)), "heed::");

  nn::TransformerLMOptions lm_options = tiny_lm_options();
  lm_options.heads = 3;
  EXPECT_HEED_ERROR(nn::TransformerLM(lm_options), "heed::MultiHeadAttention");
  lm_options = tiny_lm_options();
  lm_options.context = 0;
  EXPECT_HEED_ERROR(nn::TransformerLM(lm_options), "heed::TransformerLM");
  nn::TransformerLM lm(tiny_lm_options());
  EXPECT_HEED_ERROR(lm.forward(zeros({6}, kInt64)), "heed::TransformerLM", "[6]");
  EXPECT_HEED_ERROR(lm.forward(zeros({1, 6}, kInt64)), "heed::", "6");
  EXPECT_HEED_ERROR(lm.forward(full({1, 2}, 11.0, kInt64)), "heed::embedding", "11");
  EXPECT_HEED_ERROR(lm.forward(full({1, 2}, -1.0, kInt64)), "heed::embedding", "-1");
  EXPECT_HEED_ERROR(lm.forward(zeros({1, 2})), "heed::embedding", "float32");
  expect_error_or_shape("empty sequence", [&] { return lm.forward(zeros({1, 0}, kInt64)); }, {1, 0, 11});
  std::vector<nn::KVCache> caches(3);
  EXPECT_HEED_ERROR(lm.forward(zeros({1, 2}, kInt64), &caches), "heed::TransformerLM", "3");
  std::vector<nn::KVCache> good = lm.make_caches();
  lm.forward(zeros({1, 4}, kInt64), &good);
  EXPECT_HEED_ERROR(lm.forward(zeros({1, 2}, kInt64), &good), "heed::");  // 4 + 2 > context 5
}

TEST_CASE("modules: state dicts, dtypes, init") {
  nn::Linear linear(3, 2);
  nn::NamedTensors state = linear.state_dict();
  nn::NamedTensors missing = {state[0]};
  EXPECT_HEED_ERROR(linear.load_state_dict(missing), "heed::load_state_dict", "bias");
  nn::NamedTensors wrong_shape = {{"weight", ones({3, 2})}, {"bias", ones({2})}};
  EXPECT_HEED_ERROR(linear.load_state_dict(wrong_shape), "heed::load_state_dict", "weight");
  nn::NamedTensors extra = state;
  extra.emplace_back("extra", ones({1}));
  EXPECT_HEED_ERROR(linear.load_state_dict(extra), "heed::load_state_dict", "extra");
  nn::NamedTensors twice = {state[0], state[0], state[1]};
  EXPECT_HEED_ERROR(linear.load_state_dict(twice), "heed::load_state_dict", "twice");
  nn::NamedTensors undefined = {{"weight", Tensor()}, {"bias", ones({2})}};
  EXPECT_HEED_ERROR(linear.load_state_dict(undefined), "heed::load_state_dict");
  EXPECT_HEED_ERROR(linear.to(kInt64), "heed::Module::to", "int64");
  Tensor vector = ones({3});
  EXPECT_HEED_ERROR(nn::init::xavier_uniform_(vector), "heed::init", "[3]");
  EXPECT_HEED_ERROR(nn::init::kaiming_uniform_(vector), "heed::init");
  EXPECT_HEED_ERROR(nn::init::orthogonal_(vector), "heed::orthogonal_");
  Tensor matrix = ones({3, 3});
  EXPECT_HEED_ERROR(nn::init::normal_(matrix, 0.0, -1.0), "heed::normal_");
  EXPECT_HEED_ERROR(nn::init::uniform_(matrix, 1.0, 0.0), "heed::");
  Tensor ints = zeros({3, 3}, kInt64);
  EXPECT_HEED_ERROR(nn::init::normal_(ints), "heed::");
}

TEST_CASE("optimizers, schedulers and clipping: bad options, parameters and states") {
  Tensor p = ones({2}).requires_grad_();
  EXPECT_HEED_ERROR(optim::SGD({p}, {.lr = -1.0}), "heed::SGD", "learning rate");
  EXPECT_HEED_ERROR(optim::SGD({p}, {.momentum = -0.5}), "heed::SGD", "momentum");
  EXPECT_HEED_ERROR(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), "heed::SGD", "nesterov");
  EXPECT_HEED_ERROR(optim::Adam({p}, {.betas = {1.0, 0.999}}), "heed::Adam", "beta");
  EXPECT_HEED_ERROR(optim::Adam({p}, {.betas = {0.9, -0.1}}), "heed::Adam", "beta");
  EXPECT_HEED_ERROR(optim::Adam({p}, {.eps = -1e-8}), "heed::Adam", "eps");
  EXPECT_HEED_ERROR(optim::AdamW({p}, {.weight_decay = -0.1}), "heed::AdamW", "weight_decay");
  EXPECT_HEED_ERROR(optim::AdamW({p}, {.lr = std::numeric_limits<double>::quiet_NaN()}), "heed::AdamW",
                    "learning rate");
  EXPECT_HEED_ERROR(optim::SGD({p * 2.0}), "heed::SGD", "leaf");
  EXPECT_HEED_ERROR(optim::SGD({p, p}), "heed::SGD", "more than once");
  EXPECT_HEED_ERROR(optim::SGD({Tensor()}), "heed::SGD");
  EXPECT_HEED_ERROR(optim::Adam(std::vector<Tensor>{}), "heed::Adam");
  optim::AdamW adamw({p});
  EXPECT_HEED_ERROR(adamw.add_param_group({.params = {p}}), "heed::AdamW", "more than once");
  EXPECT_HEED_ERROR(adamw.state(3, 0), "heed::Optimizer::state");
  adamw.param_groups()[0].lr = -1.0;
  p.set_grad(ones({2}));
  EXPECT_HEED_ERROR(adamw.step(), "heed::AdamW", "learning rate");
  adamw.param_groups()[0].lr = 1e-3;
  // Adam on a non-contiguous or half parameter.
  Tensor half = ones({2}, kFloat16).requires_grad_();
  half.set_grad(ones({2}, kFloat16));
  optim::Adam adam_half({half});
  EXPECT_HEED_ERROR(adam_half.step(), "heed::Adam");
  // State dicts from another optimizer, with other shapes or counts.
  adamw.step();
  const optim::OptimizerState state = adamw.state_dict();
  Tensor q = ones({3}).requires_grad_();
  optim::AdamW other_shape({q});
  EXPECT_HEED_ERROR(other_shape.load_state_dict(state), "heed::", "[2]");
  optim::SGD sgd({p});
  EXPECT_HEED_ERROR(sgd.load_state_dict(state), "heed::", "AdamW");
  optim::AdamW two_params({p, q});
  EXPECT_HEED_ERROR(two_params.load_state_dict(state), "heed::");
  optim::OptimizerState broken = state;
  broken.scalars["state"] = "nonsense";
  EXPECT_HEED_ERROR(adamw.load_state_dict(broken), "heed::");
  optim::OptimizerState no_buffers{{}, state.scalars};
  EXPECT_HEED_ERROR(adamw.load_state_dict(no_buffers), "heed::", "exp_avg");
  optim::OptimizerState not_object{state.tensors, nlohmann::json::array()};
  EXPECT_HEED_ERROR(adamw.load_state_dict(not_object), "heed::");

  EXPECT_HEED_ERROR(optim::WarmupCosineLR(adamw, 10, 5, 0.0), "heed::WarmupCosineLR");
  EXPECT_HEED_ERROR(optim::WarmupCosineLR(adamw, -1, 5, 0.0), "heed::WarmupCosineLR");
  EXPECT_HEED_ERROR(optim::NoamLR(adamw, 0, 10), "heed::NoamLR");
  EXPECT_HEED_ERROR(optim::ConstantLR(adamw, -1.0, 3), "heed::ConstantLR");
  optim::WarmupCosineLR cosine(adamw, 2, 10, 1e-5);
  EXPECT_HEED_ERROR(cosine.get_lr(-1), "heed::", "-1");
  EXPECT_HEED_ERROR(cosine.get_lr(0, 5), "heed::");
  optim::NoamLR noam(adamw, 8, 4);
  EXPECT_HEED_ERROR(cosine.load_state_dict(noam.state_dict()), "heed::", "NoamLR");
  EXPECT_HEED_ERROR(cosine.load_state_dict(nlohmann::json::parse(R"({"scheduler": "WarmupCosineLR"})")), "heed::");
  EXPECT_HEED_ERROR(cosine.load_state_dict(nlohmann::json::parse(R"({"scheduler": "WarmupCosineLR", "step": -4,
                                                                     "base_lrs": [0.001]})")),
                    "heed::");
  EXPECT_HEED_ERROR(cosine.load_state_dict(nlohmann::json::parse(R"({"scheduler": "WarmupCosineLR", "step": 1,
                                                                     "base_lrs": [0.001, 0.1]})")),
                    "heed::");
  EXPECT_HEED_ERROR(cosine.load_state_dict(nlohmann::json("text")), "heed::");

  EXPECT_HEED_ERROR(nn::clip_grad_norm_({p}, -1.0), "heed::clip_grad_norm_", "max_norm");
  EXPECT_HEED_ERROR(nn::clip_grad_norm_({p}, 1.0, 0.0), "heed::clip_grad_norm_", "norm_type");
  EXPECT_HEED_ERROR(nn::clip_grad_norm_({p}, 1.0, -2.0), "heed::clip_grad_norm_");
  EXPECT_HEED_ERROR(nn::clip_grad_norm_({p}, std::numeric_limits<double>::quiet_NaN()), "heed::clip_grad_norm_");
  EXPECT_HEED_ERROR(nn::clip_grad_value_({p}, -1.0), "heed::clip_grad_value_");
  EXPECT_HEED_ERROR(nn::clip_grad_norm_({Tensor()}, 1.0), "heed::clip_grad_norm_");
}

TEST_CASE("io: missing, empty, truncated and malformed files") {
  const std::string missing = temp_path("does_not_exist.safetensors");
  std::filesystem::remove(missing);
  EXPECT_HEED_ERROR(io::load_safetensors(missing), "heed::load_safetensors", missing.c_str());
  EXPECT_HEED_ERROR(io::read_file(missing), "heed::read_file", missing.c_str());
  EXPECT_HEED_ERROR(io::load_json(missing), "heed::load_json", missing.c_str());
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_HEED_ERROR(io::load_safetensors(dir), "heed::load_safetensors");
  EXPECT_HEED_ERROR(io::load_json(dir), "heed::load_json");
  const std::string empty_file = temp_path("empty.safetensors");
  write_bytes(empty_file, "");
  EXPECT_HEED_ERROR(io::load_safetensors(empty_file), "heed::load_safetensors", "empty.safetensors");
  // A valid file, truncated at several points, and with its header length corrupted.
  const std::string bytes = io::serialize_safetensors({{"w", randn({3, 4})}, {"b", ones({4}, kInt64)}});
  for (size_t cut : {size_t{4}, size_t{8}, size_t{20}, bytes.size() - 1}) {
    CAPTURE(cut);
    EXPECT_HEED_ERROR(io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), cut, "cut"),
                      "heed::load_safetensors", "cut");
  }
  std::string huge_header = bytes;
  huge_header[7] = '\x7f';
  EXPECT_HEED_ERROR(
      io::parse_safetensors(reinterpret_cast<const uint8_t*>(huge_header.data()), huge_header.size(), "h"),
      "heed::load_safetensors");
  EXPECT_HEED_ERROR(io::parse_safetensors(nullptr, 0, "null"), "heed::load_safetensors", "null");
  const std::string bad_json = temp_path("bad.json");
  write_bytes(bad_json, "{\"a\": [1, 2,");
  EXPECT_HEED_ERROR(io::load_json(bad_json), "heed::load_json", "bad.json", "byte");
  EXPECT_HEED_ERROR(io::parse_json(std::string(100000, '['), "deep"), "heed::load_json", "deep", "nest");
  EXPECT_HEED_ERROR(io::parse_json("", "empty"), "heed::load_json", "empty");
  EXPECT_HEED_ERROR(io::parse_json("{\"a\": 1} trailing", "trailing"), "heed::load_json");
  EXPECT_HEED_ERROR(io::parse_json("\xff\xfe", "binary"), "heed::load_json");
  // Writing: names, duplicate keys, unwritable places.
  EXPECT_HEED_ERROR(io::serialize_safetensors({{"a", ones({1})}, {"a", ones({1})}}), "heed::serialize_safetensors",
                    "a");
  EXPECT_HEED_ERROR(io::serialize_safetensors({{"__metadata__", ones({1})}}), "heed::serialize_safetensors");
  EXPECT_HEED_ERROR(io::serialize_safetensors({{"u", Tensor()}}), "heed::serialize_safetensors");
  EXPECT_HEED_ERROR(io::save_safetensors("/nonexistent_dir/x.safetensors", {{"a", ones({1})}}),
                    "heed::", "/nonexistent_dir/x.safetensors");
  EXPECT_HEED_ERROR(io::save_json("/nonexistent_dir/x.json", nlohmann::json::object()), "heed::", "/nonexistent_dir");
  EXPECT_HEED_ERROR(io::write_file_atomic("/nonexistent_dir/y", "bytes"), "heed::write_file_atomic");
  const io::SafetensorsFile file =
      io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "good");
  EXPECT_HEED_ERROR(file.get("missing"), "heed::SafetensorsFile::get", "missing", "w");
  for (const std::string& path : {empty_file, bad_json}) std::filesystem::remove(path);
}

TEST_CASE("checkpoints: wrong kind, wrong model, missing state, garbage") {
  manual_seed(1);
  nn::TransformerLM lm(tiny_lm_options());
  optim::AdamW optimizer(lm.parameters());
  optim::WarmupCosineLR scheduler(optimizer, 1, 10, 0.0);
  const std::string model_path = temp_path("model.safetensors");
  const std::string checkpoint_path = temp_path("run.ckpt");
  const std::string plain_path = temp_path("plain.safetensors");
  io::save_model(lm, model_path, {{"kind", "lm"}});
  io::save_checkpoint(checkpoint_path, lm, &optimizer, &scheduler, 3, {{"kind", "lm"}});
  io::save_safetensors(plain_path, {{"x", ones({2})}});
  // The wrong kind of file, named in the message with the way out.
  EXPECT_HEED_ERROR(io::load_model(lm, checkpoint_path), "heed::load_model", "load_checkpoint");
  EXPECT_HEED_ERROR(io::load_checkpoint(model_path, lm), "heed::load_checkpoint", "load_model");
  EXPECT_HEED_ERROR(io::load_checkpoint(plain_path, lm), "heed::load_checkpoint", "(none)");
  EXPECT_HEED_ERROR(io::read_config(plain_path), "heed::read_config");
  // Another architecture.
  nn::TransformerLMOptions bigger = tiny_lm_options();
  bigger.d_model = 12;
  nn::TransformerLM other(bigger);
  EXPECT_HEED_ERROR(io::load_model(other, model_path), "heed::load_state_dict", "shape mismatch");
  EXPECT_HEED_ERROR(io::load_checkpoint(checkpoint_path, other), "heed::load_state_dict");
  // A model-only checkpoint restored with an optimizer or a scheduler.
  const std::string bare_path = temp_path("bare.ckpt");
  io::save_checkpoint(bare_path, lm, nullptr, nullptr, 1, nullptr);
  EXPECT_HEED_ERROR(io::load_checkpoint(bare_path, lm, &optimizer), "heed::load_checkpoint", "optimizer");
  EXPECT_HEED_ERROR(io::load_checkpoint(bare_path, lm, nullptr, &scheduler), "heed::load_checkpoint", "scheduler");
  // An optimizer of another kind.
  optim::SGD sgd(lm.parameters());
  EXPECT_HEED_ERROR(io::load_checkpoint(checkpoint_path, lm, &sgd), "heed::");
  // Missing, unreadable, truncated or garbage files.
  EXPECT_HEED_ERROR(io::load_checkpoint(temp_path("nope.ckpt"), lm), "heed::load_safetensors", "nope.ckpt");
  EXPECT_HEED_ERROR(io::load_model(lm, std::filesystem::temp_directory_path().string()), "heed::load_safetensors");
  std::string bytes = io::read_file(checkpoint_path);
  EXPECT_HEED_ERROR(io::parse_checkpoint(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() / 2, "half", lm),
                    "heed::load_safetensors", "half");
  const std::string garbage = "not a checkpoint at all, just text";
  EXPECT_HEED_ERROR(io::parse_checkpoint(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(), "text", lm),
                    "heed::load_safetensors", "text");
  // Metadata that is not JSON or has no valid step/RNG.
  const std::vector<std::pair<std::string, Tensor>> model_tensors = [&] {
    std::vector<std::pair<std::string, Tensor>> out;
    for (auto& [name, t] : lm.state_dict()) out.emplace_back("model." + name, t);
    return out;
  }();
  auto checkpoint_with = [&](std::map<std::string, std::string> metadata) {
    metadata.emplace("format", "heed-checkpoint-v1");
    return io::serialize_safetensors(model_tensors, metadata);
  };
  for (const auto& [label, metadata] : std::vector<std::pair<const char*, std::map<std::string, std::string>>>{
           {"no step", {{"rng", R"({"seed": 1, "offset": 0})"}}},
           {"bad step", {{"step", "12x"}, {"rng", R"({"seed": 1, "offset": 0})"}}},
           {"negative step", {{"step", "-3"}, {"rng", R"({"seed": 1, "offset": 0})"}}},
           {"huge step", {{"step", "99999999999999999999999"}, {"rng", R"({"seed": 1, "offset": 0})"}}},
           {"no rng", {{"step", "1"}}},
           {"bad rng", {{"step", "1"}, {"rng", R"({"seed": -1, "offset": 0})"}}},
           {"rng not json", {{"step", "1"}, {"rng", "{{"}}},
           {"config too deep",
            {{"step", "1"}, {"rng", R"({"seed": 1, "offset": 0})"}, {"config", std::string(5000, '[')}}},
       }) {
    CAPTURE(label);
    const std::string ckpt = checkpoint_with(metadata);
    EXPECT_HEED_ERROR(io::parse_checkpoint(reinterpret_cast<const uint8_t*>(ckpt.data()), ckpt.size(), "meta.ckpt", lm),
                      "heed::load_checkpoint", "meta.ckpt");
  }
  const std::string stray =
      io::serialize_safetensors({{"stray", ones({1})}}, {{"format", "heed-checkpoint-v1"}, {"step", "1"}});
  EXPECT_HEED_ERROR(
      io::parse_checkpoint(reinterpret_cast<const uint8_t*>(stray.data()), stray.size(), "stray.ckpt", lm),
      "heed::load_checkpoint", "stray");
  for (const std::string& path : {model_path, checkpoint_path, plain_path, bare_path}) std::filesystem::remove(path);
}

TEST_CASE("cli::parse_positive_list: integers from 1 to a maximum, or a usage error naming the flag") {
  CHECK(cli::parse_positive_list("--dk", "16,64,256", 1024) == std::vector<int64_t>{16, 64, 256});
  CHECK(cli::parse_positive_list("--dk", "7", 7) == std::vector<int64_t>{7});
  for (const char* bad : {"", "4,", ",4", "4,,8", "x", "4x", "0", "-3", "8,2048", "99999999999999999999999"}) {
    INFO("'" << bad << "'");
    try {
      (void)cli::parse_positive_list("--dk", bad, 1024);
      FAIL_CHECK("no UsageError");
    } catch (const cli::UsageError& e) {
      CHECK(std::string(e.what()).find("--dk: '") != std::string::npos);
      CHECK(std::string(e.what()).find("is not an integer from 1 to 1024") != std::string::npos);
    }
  }
}

TEST_CASE("misc: threads, metrics, command-line parsing") {
  EXPECT_HEED_ERROR(set_num_threads(0), "heed::set_num_threads");
  EXPECT_HEED_ERROR(set_num_threads(-4), "heed::set_num_threads");
  EXPECT_HEED_ERROR(metrics::corpus_bleu({"a b"}, {"a b", "c"}), "heed::corpus_bleu");
  // ArgParser reports (never throws) bad flags; the tools map that to exit status 2.
  int64_t steps = 5;
  double lr = 0.1;
  std::string mode = "a";
  cli::ArgParser args("prog", "test");
  args.add_int("steps", &steps, "steps", 1, 10);
  args.add_double("lr", &lr, "lr", 0, 1);
  args.add_string("mode", &mode, "mode", {"a", "b"});
  for (const std::vector<const char*>& argv : std::vector<std::vector<const char*>>{
           {"prog", "--steps", "0"},
           {"prog", "--steps", "11"},
           {"prog", "--steps", "3x"},
           {"prog", "--steps", "99999999999999999999999"},
           {"prog", "--steps"},
           {"prog", "--lr", "nan"},
           {"prog", "--lr", "inf"},
           {"prog", "--lr", "-0.5"},
           {"prog", "--mode", "c"},
           {"prog", "--bogus"},
           {"prog", "positional"},
       }) {
    CAPTURE(argv.size() > 1 ? argv[1] : "");
    CHECK(args.parse(static_cast<int>(argv.size()), argv.data()) == cli::ArgParser::Outcome::Error);
    CHECK_FALSE(args.error().empty());
  }
  CHECK(steps == 5);
  CHECK(lr == 0.1);
  CHECK(mode == "a");
}

TEST_CASE("empty tensors flow through ops, layers and backward without crashing") {
  Tensor x = zeros({0, 3}).requires_grad_();
  Tensor w = randn({2, 3}).requires_grad_();
  const Tensor y = F::linear(x, w);  // (0, 2)
  CHECK(y.shape() == Dims{0, 2});
  CHECK(F::softmax(x, -1).shape() == Dims{0, 3});
  CHECK(F::layer_norm(x).shape() == Dims{0, 3});
  CHECK(sum(x, {0}).shape() == Dims{3});
  CHECK(std::isnan(mean(x).item<double>()));  // a mean over nothing is NaN, as in PyTorch
  CHECK(cat({x, ones({1, 3})}, 0).shape() == Dims{1, 3});
  CHECK(F::embedding(w, zeros({0}, kInt64)).shape() == Dims{0, 3});
  CHECK(index_select(w, 0, zeros({0}, kInt64)).shape() == Dims{0, 3});
  Tensor loss = F::cross_entropy(zeros({0, 4}).requires_grad_(), zeros({0}, kInt64));
  CHECK(loss.item<double>() == 0.0);  // no targets: 0, like an all-ignored batch
  (y.sum() + (x * 2.0).sum()).backward();
  CHECK(x.grad().shape() == Dims{0, 3});
  CHECK(w.grad().shape() == Dims{2, 3});
  CHECK(values_equal_zero(w.grad()));
  expect_error_or_shape(
      "attention with no queries",
      [] {
        return F::scaled_dot_product_attention(zeros({1, 1, 0, 4}), ones({1, 1, 3, 4}), ones({1, 1, 3, 4}));
      },
      {1, 1, 0, 4});
  expect_error_or_shape(
      "attention with no keys",
      [] {
        return F::scaled_dot_product_attention(ones({1, 1, 2, 4}), zeros({1, 1, 0, 4}), zeros({1, 1, 0, 4}));
      },
      {1, 1, 2, 4});
  expect_error_or_shape("composed attention with no keys",
                        [] {
                          return F::scaled_dot_product_attention_with_weights(ones({1, 1, 2, 4}), zeros({1, 1, 0, 4}),
                                                                              zeros({1, 1, 0, 4}))
                              .output;
                        },
                        {1, 1, 2, 4});
  expect_error_or_shape("matmul with an empty inner dim", [] { return matmul(zeros({2, 0}), zeros({0, 3})); }, {2, 3});
}
