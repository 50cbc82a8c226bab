// tests/test_print.cpp — Tensor::str(), fmt and operator<< in PyTorch's format.
//
// Invariants checked: the expected strings are what PyTorch prints for the same tensors
// (with heed's dtype names, lower-case bools and a shape= suffix on summarized tensors).
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

using namespace heed;

TEST_CASE("float formats: fixed, integer-valued, scientific") {
  CHECK(tensor({1.5, 2.25, -3}).str() == "tensor([ 1.5000,  2.2500, -3.0000])");
  CHECK(tensor({1, 2, 3}).str() == "tensor([1., 2., 3.])");
  CHECK(tensor({-1, -2}).str() == "tensor([-1., -2.])");
  CHECK(tensor({0, 10}).str() == "tensor([ 0., 10.])");
  CHECK(tensor({0.1, 10, 100}).str() == "tensor([  0.1000,  10.0000, 100.0000])");  // max/min = 1000
  CHECK(tensor({0.1, 1000}).str() == "tensor([1.0000e-01, 1.0000e+03])");           // max/min > 1000
  CHECK(tensor({1e-5, 1}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(tensor({0.00005, 0.00007}).str() == "tensor([5.0000e-05, 7.0000e-05])");  // min < 1e-4
  CHECK(tensor({1e9, 1}).str() == "tensor([1.0000e+09, 1.0000e+00])");            // integers, max > 1e8
  CHECK(tensor({1, 2000}).str() == "tensor([1.0000e+00, 2.0000e+03])");           // integers, ratio > 1000
  CHECK(zeros({3}).str() == "tensor([0., 0., 0.])");
  CHECK(tensor({0.5, 0}).str() == "tensor([0.5000, 0.0000])");
}

TEST_CASE("scalars, integers, bools and dtype suffixes") {
  CHECK(scalar_tensor(3.5).str() == "tensor(3.5000)");
  CHECK(scalar_tensor(2.0).str() == "tensor(2.)");
  CHECK(scalar_tensor(7.0, kInt64).str() == "tensor(7)");
  CHECK(scalar_tensor(-1.0, kF64).str() == "tensor(-1., dtype=float64)");
  CHECK(arange(5).str() == "tensor([0, 1, 2, 3, 4])");
  CHECK(tensor({-10, 5}, kInt32).str() == "tensor([-10,   5], dtype=int32)");
  CHECK((tensor({1, 0}) > 0.5).str() == "tensor([ true, false])");
  CHECK(tensor({1, 2}, kF64).str() == "tensor([1., 2.], dtype=float64)");
  CHECK(tensor({0.1, 1.5}, kFloat16).str() == "tensor([0.1000, 1.5000], dtype=float16)");
  CHECK(tensor({0.1, 1.5}, kBFloat16).str() == "tensor([0.1001, 1.5000], dtype=bfloat16)");  // 0.10009765625
}

TEST_CASE("2-D and 3-D layout, non-contiguous views") {
  CHECK(tensor({{1, 2}, {3, 4}}, kF64).str() == "tensor([[1., 2.],\n        [3., 4.]], dtype=float64)");
  CHECK(tensor({{1, 2}, {3, 4}}).t().str() == "tensor([[1., 3.],\n        [2., 4.]])");
  CHECK(arange(8).reshape({2, 2, 2}).str() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]])");
  CHECK(tensor({{1.5, -20}, {3, 4}}).str() == "tensor([[  1.5000, -20.0000],\n        [  3.0000,   4.0000]])");
}

TEST_CASE("nan and inf") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(tensor({nan, inf, -inf, 1.5}).str() == "tensor([   nan,    inf,   -inf, 1.5000])");
  CHECK(tensor({nan, 1}).str() == "tensor([nan, 1.])");
  CHECK(tensor({nan, nan}).str() == "tensor([nan, nan])");
  CHECK(tensor({-inf, 0}).str() == "tensor([-inf, 0.])");
  CHECK(scalar_tensor(nan).str() == "tensor(nan)");
  CHECK(tensor({inf}, kFloat16).str() == "tensor([inf], dtype=float16)");
}

TEST_CASE("empty tensors") {
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({0}, kInt32).str() == "tensor([], dtype=int32)");
  CHECK(zeros({2, 0}).str() == "tensor([], shape=[2, 0])");
}

TEST_CASE("long rows wrap at 80 columns") {
  CHECK(arange(20, kF32).str() ==
        "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
        "        14., 15., 16., 17., 18., 19.])");
}

TEST_CASE("large tensors are summarized with ...") {
  CHECK(arange(1000).str().find("...") == std::string::npos);  // 1000 elements: printed in full
  CHECK(arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], shape=[2000])");
  CHECK(arange(10000).reshape({100, 100}).str() ==
        "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
        "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
        "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
        "        ...,\n"
        "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
        "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
        "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]], shape=[100, 100])");
  // A short dim is printed in full even when summarizing; the format only looks at shown values
  // (the hidden 0.5 would otherwise switch to fixed format).
  Tensor x = ones({2, 1000});
  {
    NoGradGuard no_grad;
    x.select(0, 1).fill_(2.0);
    x.select(1, 500).fill_(0.5);
  }
  CHECK(x.str() ==
        "tensor([[1., 1., 1.,  ..., 1., 1., 1.],\n"
        "        [2., 2., 2.,  ..., 2., 2., 2.]], shape=[2, 1000])");
}

TEST_CASE("autograd suffixes") {
  Tensor x = tensor({1, 2}, TensorOptions(kF32).requires_grad(true));
  CHECK(x.str() == "tensor([1., 2.], requires_grad=true)");
  Tensor y = x * 2.0;
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.str() == std::string("tensor([2., 4.], grad_fn=<") + y.grad_fn()->name() + ">)");
  CHECK(tensor({1, 2}, TensorOptions(kF64).requires_grad(true)).str() ==
        "tensor([1., 2.], dtype=float64, requires_grad=true)");
  CHECK(x.detach().str() == "tensor([1., 2.])");
  // A non-contiguous tensor that requires grad prints without being recorded.
  Tensor m = tensor({{1, 2}, {3, 4}}, TensorOptions(kF32).requires_grad(true)).t();
  const std::shared_ptr<Node> before = m.grad_fn();
  CHECK(m.str() == std::string("tensor([[1., 3.],\n        [2., 4.]], grad_fn=<") + m.grad_fn()->name() + ">)");
  CHECK(m.grad_fn() == before);
}

TEST_CASE("fmt and operator<< print the same as str()") {
  Tensor t = tensor({{1.25, 2}, {3, 4}});
  std::ostringstream os;
  os << t;
  CHECK(os.str() == t.str());
  CHECK(fmt::format("{}", t) == t.str());
  CHECK(fmt::format("x = {}", arange(3)) == "x = tensor([0, 1, 2])");
  CHECK(Tensor().str() == "tensor(undefined)");
}
