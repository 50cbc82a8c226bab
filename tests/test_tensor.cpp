// tests/test_tensor.cpp — Tensor metadata, element access, factories, dtype conversion,
// clone/detach/contiguous, copy_ and the in-place ops, and misuse errors.
//
// Invariants checked: expected values are written out by hand or computed with plain loops
// in the test; every misuse raises heed::Error whose message starts with "heed::<op>:".
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

std::vector<int64_t> dims_vec(const Dims& d) { return d.vec(); }

constexpr DType kAllDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

}  // namespace

// ---- metadata ---------------------------------------------------------------------------------

TEST_CASE("metadata of a contiguous tensor") {
  Tensor x = zeros({2, 3, 4});
  CHECK(x.defined());
  CHECK(dims_vec(x.shape()) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims_vec(x.sizes()) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims_vec(x.strides()) == std::vector<int64_t>{12, 4, 1});
  CHECK(x.offset() == 0);
  CHECK(x.numel() == 24);
  CHECK(x.dim() == 3);
  CHECK(x.dtype() == kFloat32);
  CHECK(x.device() == kCPU);
  CHECK(x.device().str() == "cpu");
  CHECK(x.element_size() == 4);
  CHECK(x.is_contiguous());
  CHECK(x.size(0) == 2);
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(0) == 12);
  CHECK(x.stride(-2) == 4);
  CHECK_FALSE(x.requires_grad());
  CHECK(x.is_leaf());
  CHECK(x.storage()->nbytes() >= 24 * sizeof(float));
}

TEST_CASE("metadata of scalars, empty tensors and views") {
  Tensor s = scalar_tensor(2.5, kFloat64);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.shape().empty());
  CHECK(s.strides().empty());
  CHECK(s.is_contiguous());
  CHECK(s.item<double>() == 2.5);

  Tensor e = zeros({0, 3});
  CHECK(e.numel() == 0);
  CHECK(dims_vec(e.strides()) == std::vector<int64_t>{3, 1});
  CHECK(e.to_vector<float>().empty());
  // Every empty tensor is contiguous (PyTorch's rule), whichever dim is 0: (3, 0) and (0, 0)
  // get strides (1, 1) (found by fuzz_safetensors: an accepted [0, 0] tensor was called
  // non-contiguous).
  CHECK(e.is_contiguous());
  CHECK(zeros({3, 0}).is_contiguous());
  CHECK(zeros({0, 0}).is_contiguous());
  CHECK(zeros({2, 0, 4}).is_contiguous());
  CHECK(zeros({2, 0, 4}).transpose(0, 2).is_contiguous());

  Tensor x = arange(12, kFloat32).reshape({3, 4});
  Tensor t = x.t();
  CHECK(dims_vec(t.shape()) == std::vector<int64_t>{4, 3});
  CHECK(dims_vec(t.strides()) == std::vector<int64_t>{1, 4});
  CHECK_FALSE(t.is_contiguous());
  Tensor row = x.select(0, 2);
  CHECK(row.offset() == 8);
  CHECK(row.is_contiguous());
  CHECK(row.storage() == x.storage());
  // Size-1 dims do not break contiguity whatever their stride.
  Tensor col = x.slice(1, 1, 2);  // (3,1) with strides (4,1), offset 1
  CHECK(col.offset() == 1);
  CHECK_FALSE(col.is_contiguous());
  CHECK(x.slice(0, 1, 2).is_contiguous());
}

TEST_CASE("element sizes of every dtype") {
  CHECK(zeros({1}, kFloat32).element_size() == 4);
  CHECK(zeros({1}, kFloat64).element_size() == 8);
  CHECK(zeros({1}, kFloat16).element_size() == 2);
  CHECK(zeros({1}, kBFloat16).element_size() == 2);
  CHECK(zeros({1}, kInt32).element_size() == 4);
  CHECK(zeros({1}, kInt64).element_size() == 8);
  CHECK(zeros({1}, kBool).element_size() == 1);
}

// ---- element access ---------------------------------------------------------------------------

TEST_CASE("item, at and to_vector") {
  std::vector<double> values{0.5, -1.25, 2.0, 3.5, -4.0, 8.25};
  Tensor x = from_vector(values, {2, 3});
  CHECK(x.dtype() == kFloat64);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) CHECK(x.at<double>({i, j}) == values[static_cast<size_t>(i * 3 + j)]);
  CHECK(x.at<double>({-1, -1}) == 8.25);
  CHECK(x.at<double>({-2, 0}) == 0.5);
  CHECK(x.at<float>({1, 2}) == 8.25f);
  CHECK(x.at<int64_t>({1, 2}) == 8);   // truncation toward zero
  CHECK(x.at<int32_t>({0, 1}) == -1);  // -1.25 -> -1
  CHECK(x.at<bool>({0, 0}) == true);
  CHECK(x.to_vector<double>() == values);

  // to_vector reads a non-contiguous view in its own row-major order.
  std::vector<double> transposed;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) transposed.push_back(values[static_cast<size_t>(i * 3 + j)]);
  CHECK(x.t().to_vector<double>() == transposed);
  CHECK(x.t().at<double>({2, 1}) == values[5]);

  // int64 values beyond 2^53 survive item/to_vector exactly.
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor b = from_vector(std::vector<int64_t>{big, -big}, {2});
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{big, -big});
  CHECK(b.select(0, 1).item<int64_t>() == -big);

  CHECK(scalar_tensor(7.0, kInt32).item<int32_t>() == 7);
  CHECK(from_vector(std::vector<bool>{true, false, true}, {3}).to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  CHECK(zeros({1, 1, 1}).item<float>() == 0.0f);
}

TEST_CASE("element access converts NaN, Inf and out-of-range values without UB") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = from_vector(std::vector<float>{nan, inf, -inf, 3e9f, -3e9f, 1e20f, -2.9f}, {7});
  const std::vector<int32_t> as_i32 = x.to_vector<int32_t>();
  CHECK(as_i32 == std::vector<int32_t>{0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, -2});
  const std::vector<int64_t> as_i64 = x.to_vector<int64_t>();
  CHECK(as_i64 == std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 3000000000LL, -3000000000LL, INT64_MAX, -2});
  CHECK(x.select(0, 0).item<int64_t>() == 0);
  CHECK(x.to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true, true});
  CHECK(std::isnan(x.select(0, 0).item<double>()));
  // int64 -> int32 wraps modulo 2^32, like a dtype conversion.
  Tensor big = from_vector(std::vector<int64_t>{(int64_t{1} << 32) + 5}, {1});
  CHECK(big.item<int32_t>() == 5);
}

TEST_CASE("element access errors") {
  Tensor x = zeros({2, 3});
  CHECK_HEED_ERROR(x.item<float>(), "item");
  CHECK_HEED_ERROR(x.at<float>({0}), "at");
  CHECK_HEED_ERROR(x.at<float>({2, 0}), "at");
  CHECK_HEED_ERROR(x.at<float>({0, -4}), "at");
  CHECK_HEED_ERROR(x.data_ptr<double>(), "data_ptr");
  CHECK(x.data_ptr<float>() == x.raw_data());
  CHECK_HEED_ERROR(x.size(2), "size");
  CHECK_HEED_ERROR(x.stride(-3), "stride");
}

// ---- factories --------------------------------------------------------------------------------

TEST_CASE("tensor literals and from_vector") {
  Tensor a = tensor({1.5, -2, 3});
  CHECK(a.dtype() == kFloat32);
  CHECK(dims_vec(a.shape()) == std::vector<int64_t>{3});
  CHECK(a.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.0f});

  Tensor b = tensor({{1, 2, 3}, {4, 5, 6}}, kF64);
  CHECK(b.dtype() == kFloat64);
  CHECK(dims_vec(b.shape()) == std::vector<int64_t>{2, 3});
  CHECK(b.at<double>({1, 0}) == 4.0);

  Tensor c = tensor({7, -8}, kInt32);
  CHECK(c.dtype() == kInt32);
  CHECK(c.to_vector<int32_t>() == std::vector<int32_t>{7, -8});

  Tensor f = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}, kF64);
  CHECK(f.dtype() == kFloat64);
  CHECK(f.at<double>({2, 1}) == 6.0);
  Tensor g = from_vector(std::vector<int32_t>{1, 0, 2}, {3}, kBool);
  CHECK(g.to_vector<bool>() == std::vector<bool>{true, false, true});

  Tensor r = tensor({1.0, 2.0}, TensorOptions(kF64).requires_grad(true));
  CHECK(r.requires_grad());
  CHECK(r.is_leaf());

  CHECK_HEED_ERROR(tensor({{1, 2}, {3}}), "tensor");
  CHECK_HEED_ERROR(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), "from_vector");
  CHECK_HEED_ERROR(from_vector(std::vector<float>{1, 2}, {-1, -2}), "from_vector");
  CHECK_HEED_ERROR(tensor({1, 2}, TensorOptions(kInt64).requires_grad(true)), "from_vector");
}

TEST_CASE("zeros, ones, full, empty and the _like forms in every dtype") {
  for (DType dt : kAllDTypes) {
    CAPTURE(dtype_name(dt));
    Tensor z = zeros({2, 3}, dt), o = ones({2, 3}, dt), f = full({4}, 3.0, dt), e = empty({3, 2}, dt);
    CHECK(z.dtype() == dt);
    CHECK(o.dtype() == dt);
    CHECK(f.dtype() == dt);
    CHECK(e.dtype() == dt);
    CHECK(dims_vec(e.shape()) == std::vector<int64_t>{3, 2});
    CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
    CHECK(o.to_vector<double>() == std::vector<double>(6, 1.0));
    CHECK(f.to_vector<double>() == std::vector<double>(4, dt == kBool ? 1.0 : 3.0));
    CHECK(zeros_like(f).dtype() == dt);
    CHECK(ones_like(f).to_vector<double>() == std::vector<double>(4, 1.0));
    CHECK(full_like(z, 1.0).to_vector<double>() == std::vector<double>(6, 1.0));
    CHECK(dims_vec(empty_like(z).shape()) == std::vector<int64_t>{2, 3});
    CHECK(scalar_tensor(1.0, dt).dtype() == dt);
  }
  // Values the dtype cannot hold are rounded / saturated, never UB.
  CHECK(full({1}, 1e10, kInt32).item<int32_t>() == INT32_MAX);
  CHECK(full({1}, std::nan(""), kInt64).item<int64_t>() == 0);
  CHECK(std::isinf(full({1}, 1e6, kFloat16).item<float>()));
  CHECK(full({1}, 0.1, kFloat16).item<float>() == half_bits_to_float(float_to_half_bits(0.1f)));

  Tensor g = zeros({3}, TensorOptions(kF64).requires_grad(true));
  CHECK(g.requires_grad());
  CHECK(g.is_leaf());
  CHECK(ones({0}).numel() == 0);
}

TEST_CASE("arange and eye") {
  Tensor a = arange(5);
  CHECK(a.dtype() == kInt64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0, 1, 0.25, kF64).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5, 0, -1.5, kF64).to_vector<double>() == std::vector<double>{5, 3.5, 2, 0.5});
  CHECK(arange(-3, 3, 2).to_vector<int64_t>() == std::vector<int64_t>{-3, -1, 1});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(3, 1).numel() == 0);
  CHECK(arange(4, kFloat32).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK_HEED_ERROR(arange(0, 1, 0), "arange");
  CHECK_HEED_ERROR(arange(0, std::nan(""), 1), "arange");
  CHECK_HEED_ERROR(arange(0, 1e300, 1e-300), "arange");

  Tensor i = eye(3, kF64);
  CHECK(dims_vec(i.shape()) == std::vector<int64_t>{3, 3});
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(i.at<double>({r, c}) == (r == c ? 1.0 : 0.0));
  CHECK(dims_vec(eye(0).shape()) == std::vector<int64_t>{0, 0});
  CHECK(eye(2, TensorOptions(kF32).requires_grad(true)).requires_grad());
  CHECK_HEED_ERROR(eye(-1), "eye");
}

// ---- dtype conversion -------------------------------------------------------------------------

TEST_CASE("to(dtype) for every dtype pair on exactly representable values") {
  // Small integers are exact in every dtype; bool keeps only "is non-zero".
  const std::vector<double> values{0, 1, -2, 3, 100, -7, 0, 5};
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      std::vector<double> source = values;
      if (from == kBool)
        for (double& v : source) v = v != 0 ? 1.0 : 0.0;
      Tensor x = from_vector(source, {2, 4}, from);
      Tensor y = x.to(to);
      CHECK(y.dtype() == to);
      CHECK(dims_vec(y.shape()) == std::vector<int64_t>{2, 4});
      std::vector<double> expected = source;
      if (to == kBool)
        for (double& v : expected) v = v != 0 ? 1.0 : 0.0;
      CHECK(y.to_vector<double>() == expected);
      // The same through a transposed (non-contiguous) source.
      CHECK(x.t().to(to).to_vector<double>() == y.t().to_vector<double>());
      if (from == to) CHECK(y.is_same(x));  // no copy when nothing changes
    }
  }
}

TEST_CASE("to(dtype): rounding, NaN and Inf, saturation into integers") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType from : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(from));
    // 2.75 and -2.75 are exact in every float dtype; 60000 is exact in all but bfloat16
    // (which rounds it to 59904); 1e30 is Inf in float16.
    Tensor x = from_vector(std::vector<double>{nan, inf, -inf, 2.75, -2.75, 60000.0, -1e30}, {7}, from);
    const double big = from == kBFloat16 ? 59904.0 : 60000.0;
    CHECK(x.to(kInt32).to_vector<int32_t>() ==
          std::vector<int32_t>{0, INT32_MAX, INT32_MIN, 2, -2, static_cast<int32_t>(big), INT32_MIN});
    CHECK(x.to(kInt64).to_vector<int64_t>() ==
          std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 2, -2, static_cast<int64_t>(big), INT64_MIN});
    CHECK(x.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true, true});
    for (DType to : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      CAPTURE(dtype_name(to));
      const std::vector<double> y = x.to(to).to_vector<double>();
      CHECK(std::isnan(y[0]));
      CHECK(y[1] == inf);
      CHECK(y[2] == -inf);
      CHECK(y[3] == 2.75);
      CHECK(y[4] == -2.75);
    }
  }
  // Values just inside the int32 range convert exactly; beyond saturate.
  Tensor edges =
      from_vector(std::vector<double>{2147483647.0, -2147483648.0, 2147483648.0, -2147483649.0, 9.3e18, -9.3e18}, {6});
  CHECK(edges.to(kInt32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN});
  CHECK(edges.to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{2147483647LL, -2147483648LL, 2147483648LL, -2147483649LL, INT64_MAX, INT64_MIN});
  // Narrowing between floats rounds to nearest and overflows to Inf.
  Tensor wide = from_vector(std::vector<double>{1e300, -1e300, 0.1, 70000.0, 65519.0, 65520.0}, {6});
  const std::vector<double> f32 = wide.to(kFloat32).to_vector<double>();
  CHECK(f32[0] == inf);
  CHECK(f32[1] == -inf);
  CHECK(f32[2] == static_cast<double>(0.1f));
  const std::vector<double> f16 = wide.to(kFloat16).to_vector<double>();
  CHECK(f16[3] == inf);
  CHECK(f16[4] == 65504.0);  // the largest half
  CHECK(f16[5] == inf);      // 65520 is the tie between 65504 and 2^16: even -> Inf
  // int64 -> int32 wraps modulo 2^32 (two's complement), as in PyTorch.
  Tensor ints = from_vector(std::vector<int64_t>{(int64_t{1} << 32) + 7, -(int64_t{1} << 33) - 1}, {2});
  CHECK(ints.to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{7, -1});
  // int64 -> float32 rounds to nearest.
  Tensor i64 = from_vector(std::vector<int64_t>{(int64_t{1} << 24) + 1, (int64_t{1} << 40) + 3}, {2});
  CHECK(i64.to(kFloat32).to_vector<double>() ==
        std::vector<double>{16777216.0, static_cast<double>(static_cast<float>((int64_t{1} << 40) + 3))});
}

TEST_CASE("to(dtype) is differentiable between floats and ends the history into integers") {
  Tensor x = tensor({1.5, -2.0}, TensorOptions(kF32).requires_grad(true));
  Tensor y = x.to(kFloat64);
  CHECK(y.requires_grad());
  (y * y).sum().backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3.0f, -4.0f});
  Tensor i = x.to(kInt64);
  CHECK_FALSE(i.requires_grad());
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2});
}

// ---- clone, detach, contiguous ----------------------------------------------------------------

TEST_CASE("clone copies, detach shares, contiguous copies only when needed") {
  Tensor x = arange(6, kF32).reshape({2, 3});
  Tensor c = x.clone();
  CHECK(c.storage() != x.storage());
  CHECK(c.to_vector<float>() == x.to_vector<float>());
  c.fill_(-1.0);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});

  Tensor ct = x.t().clone();
  CHECK(ct.is_contiguous());
  CHECK(ct.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});

  Tensor d = x.detach();
  CHECK(d.storage() == x.storage());
  CHECK_FALSE(d.is_same(x));
  d.select(0, 1).fill_(9.0);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 9, 9, 9});

  CHECK(x.contiguous().is_same(x));
  Tensor xt = x.t().contiguous();
  CHECK(xt.is_contiguous());
  CHECK(xt.storage() != x.storage());
  CHECK(xt.to_vector<float>() == std::vector<float>{0, 9, 1, 9, 2, 9});
}

TEST_CASE("clone, contiguous and detach with autograd") {
  Tensor x = tensor({{1, 2}, {3, 4}}, TensorOptions(kF64).requires_grad(true));
  Tensor w = tensor({{10, 20}, {30, 40}}, kF64);
  Tensor c = x.clone();
  CHECK(c.grad_fn() != nullptr);
  Tensor t = x.t().contiguous();
  CHECK(t.grad_fn() != nullptr);
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  (c * w + t * w + d * w).sum().backward();
  // d/dx of sum(x*w) is w; of sum(x^T*w) is w^T; the detached branch contributes nothing.
  CHECK(x.grad().to_vector<double>() == std::vector<double>{10 + 10, 20 + 30, 30 + 20, 40 + 40});
}

// ---- copy_ ------------------------------------------------------------------------------------

TEST_CASE("copy_ broadcasts, converts and writes through views") {
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor({1, 2, 3}));
  CHECK(dst.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  dst.copy_(tensor({7, 8}).reshape({2, 1}));
  CHECK(dst.to_vector<float>() == std::vector<float>{7, 7, 7, 8, 8, 8});
  dst.copy_(scalar_tensor(5.0));
  CHECK(dst.to_vector<float>() == std::vector<float>(6, 5.0f));
  dst.copy_(from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(dst.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});

  Tensor ints = zeros({3}, kInt32);
  ints.copy_(tensor({1.9, -1.9, 2.5}, kF64));
  CHECK(ints.to_vector<int32_t>() == std::vector<int32_t>{1, -1, 2});

  // Into a transposed view: the base sees the transposed data.
  Tensor base = zeros({2, 3});
  base.t().copy_(tensor({{1, 4}, {2, 5}, {3, 6}}));
  CHECK(base.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  // From a non-contiguous source.
  Tensor target = zeros({3, 2});
  target.copy_(base.t());
  CHECK(target.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});

  const uint64_t version = dst.storage()->version();
  dst.copy_(ones({3}));
  CHECK(dst.storage()->version() == version + 1);

  CHECK_HEED_ERROR(dst.copy_(ones({4})), "copy_");
  CHECK_HEED_ERROR(dst.copy_(ones({2, 2, 3})), "copy_");
  CHECK_HEED_ERROR(dst.copy_(Tensor()), "copy_");
  CHECK(dst.storage()->version() == version + 1);  // failed copies do not count as writes
}

// ---- in-place ops -----------------------------------------------------------------------------

TEST_CASE("in-place ops compute the right values and bump the version") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  uint64_t version = x.storage()->version();
  auto bumped = [&] {
    const bool ok = x.storage()->version() == version + 1;
    version = x.storage()->version();
    return ok;
  };
  x.add_(tensor({10, 20, 30}));
  CHECK(x.to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK(bumped());
  x.add_(ones({2, 1}), -2.0);
  CHECK(x.to_vector<float>() == std::vector<float>{9, 20, 31, 12, 23, 34});
  CHECK(bumped());
  x.add_(0.5);
  CHECK(x.to_vector<float>() == std::vector<float>{9.5f, 20.5f, 31.5f, 12.5f, 23.5f, 34.5f});
  CHECK(bumped());
  x.sub_(tensor({0.5, 0.5, 0.5}));
  CHECK(x.to_vector<float>() == std::vector<float>{9, 20, 31, 12, 23, 34});
  CHECK(bumped());
  x.mul_(tensor({2, -1}).reshape({2, 1}));
  CHECK(x.to_vector<float>() == std::vector<float>{18, 40, 62, -12, -23, -34});
  CHECK(bumped());
  x.mul_(0.5);
  CHECK(x.to_vector<float>() == std::vector<float>{9, 20, 31, -6, -11.5f, -17});
  CHECK(bumped());
  x.div_(4.0);
  CHECK(x.to_vector<float>() == std::vector<float>{2.25f, 5, 7.75f, -1.5f, -2.875f, -4.25f});
  CHECK(bumped());
  x.masked_fill_(tensor({1, 0, 1}) > 0.5, -100.0);
  CHECK(x.to_vector<float>() == std::vector<float>{-100, 5, -100, -100, -2.875f, -100});
  CHECK(bumped());
  x.fill_(3.0);
  CHECK(x.to_vector<float>() == std::vector<float>(6, 3.0f));
  CHECK(bumped());
  x.zero_();
  CHECK(x.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(bumped());

  // In-place through a strided view only touches the view.
  Tensor y = zeros({3, 4});
  y.slice(1, 0, 4, 2).fill_(1.0);
  y.select(0, 1).add_(tensor({10, 20, 30, 40}));
  CHECK(y.to_vector<float>() == std::vector<float>{1, 0, 1, 0, 11, 20, 31, 40, 1, 0, 1, 0});

  // Integer tensors keep their dtype: the result is converted back.
  Tensor i = tensor({1, 2, 3}, kInt32);
  i.mul_(2.0);
  i.add_(tensor({1, 1, 1}, kInt32));
  CHECK(i.dtype() == kInt32);
  CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{3, 5, 7});
  // A floating result cannot be written into it (PyTorch refuses this cast too).
  CHECK_HEED_ERROR(i.add_(tensor({0.5, 0.5, 0.5}, kF32)), "add_");
  // ... nor a fractional scalar (or a division): refused, not truncated.
  CHECK_HEED_ERROR(i.mul_(0.5), "mul_");
  CHECK_HEED_ERROR(i.add_(0.25), "add_");
  CHECK_HEED_ERROR(i.div_(2.0), "div_");
  CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{3, 5, 7});
}

TEST_CASE("div_ is a true division") {
  const std::vector<float> values{1, 2, 5, 7, 10, 1e-3f, 3e7f, -11};
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    Tensor x = from_vector(values, {8}, dt);
    x.div_(3.0);
    const std::vector<double> got = x.to_vector<double>();
    for (size_t k = 0; k < values.size(); ++k) {
      const double want = dt == kFloat32 ? static_cast<double>(values[k] / 3.0f) : static_cast<double>(values[k]) / 3.0;
      CHECK(got[k] == want);
    }
  }
  // float16: divided in float32, rounded once.
  Tensor h = from_vector(values, {8}, kFloat16);
  const std::vector<float> before = h.to_vector<float>();
  h.div_(3.0);
  const std::vector<float> after = h.to_vector<float>();
  for (size_t k = 0; k < values.size(); ++k)
    CHECK(after[k] == half_bits_to_float(float_to_half_bits(before[k] / 3.0f)));
}

TEST_CASE("in-place ops are refused on tensors autograd tracks, allowed under NoGradGuard") {
  Tensor w = tensor({1, 2, 3}, TensorOptions(kF32).requires_grad(true));
  Tensor other = tensor({1, 1, 1});
  Tensor mask = tensor({1, 0, 1}) > 0.5;
  CHECK_HEED_ERROR(w.fill_(0.0), "fill_");
  CHECK_HEED_ERROR(w.zero_(), "zero_");
  CHECK_HEED_ERROR(w.add_(other), "add_");
  CHECK_HEED_ERROR(w.add_(1.0), "add_");
  CHECK_HEED_ERROR(w.sub_(other), "sub_");
  CHECK_HEED_ERROR(w.mul_(other), "mul_");
  CHECK_HEED_ERROR(w.mul_(2.0), "mul_");
  CHECK_HEED_ERROR(w.div_(2.0), "div_");
  CHECK_HEED_ERROR(w.masked_fill_(mask, 0.0), "masked_fill_");
  CHECK_HEED_ERROR(w.copy_(other), "copy_");
  CHECK(w.to_vector<float>() == std::vector<float>{1, 2, 3});
  // A non-leaf that requires grad, and a view of the leaf, are refused too.
  Tensor h = w * 2.0;
  CHECK_HEED_ERROR(h.add_(1.0), "add_");
  CHECK_HEED_ERROR(w.slice(0, 0, 2).fill_(0.0), "fill_");
  // An operand that requires grad would lose its gradient.
  Tensor plain = zeros({3});
  CHECK_HEED_ERROR(plain.add_(w), "add_");
  CHECK_HEED_ERROR(plain.copy_(w), "copy_");
  {
    NoGradGuard no_grad;
    w.mul_(2.0);
    w.add_(other);
    plain.copy_(w);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(plain.to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
}

TEST_CASE("in-place misuse errors") {
  Tensor x = zeros({2, 3});
  CHECK_HEED_ERROR(x.add_(ones({2, 2})), "add_");     // shapes do not broadcast
  CHECK_HEED_ERROR(x.add_(ones({4, 2, 3})), "add_");  // result larger than x
  CHECK_HEED_ERROR(x.mul_(ones({3, 2, 3})), "mul_");
  CHECK_HEED_ERROR(x.masked_fill_(ones({2, 3}), 1.0), "masked_fill_");  // mask not bool
  CHECK_HEED_ERROR(Tensor().fill_(1.0), "fill_");
  CHECK_HEED_ERROR(x.add_(Tensor()), "add_");
  // Writing into an expanded tensor would race on shared memory locations.
  Tensor e = zeros({1, 3}).expand({4, 3});
  CHECK_HEED_ERROR(e.fill_(1.0), "fill_");
  CHECK_HEED_ERROR(e.add_(arange(12, kF32).reshape({4, 3})), "add_");
  CHECK_HEED_ERROR(e.copy_(ones({4, 3})), "copy_");
}

// ---- misuse -----------------------------------------------------------------------------------

TEST_CASE("an undefined tensor raises an error naming the op") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK_THROWS_AS(u.shape(), heed::Error);
  CHECK_THROWS_AS(u.numel(), heed::Error);
  CHECK_HEED_ERROR(u.reshape({1}), "reshape");
  CHECK_HEED_ERROR(u.view({1}), "view");
  CHECK_HEED_ERROR(u.permute({0}), "permute");
  CHECK_HEED_ERROR(u.transpose(0, 1), "transpose");
  CHECK_HEED_ERROR(u.slice(0, 0, 1), "slice");
  CHECK_HEED_ERROR(u.select(0, 0), "select");
  CHECK_HEED_ERROR(u.expand({2}), "expand");
  CHECK_HEED_ERROR(u.unsqueeze(0), "unsqueeze");
  CHECK_HEED_ERROR(u.flatten(), "flatten");
  CHECK_HEED_ERROR(u.to(kF64), "to");
  CHECK_HEED_ERROR(u.contiguous(), "contiguous");
  CHECK_HEED_ERROR(u.clone(), "clone");
  CHECK_HEED_ERROR(u.detach(), "detach");
  CHECK_HEED_ERROR(u.item<float>(), "item");
  CHECK_HEED_ERROR(u.to_vector<float>(), "to_vector");
  CHECK_HEED_ERROR(u.backward(), "backward");
  CHECK_HEED_ERROR(u.requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(cat({u}), "cat");
  CHECK(u.str() == "tensor(undefined)");
}

TEST_CASE("bad dims, negative sizes, too many dims and shape mismatches") {
  Tensor x = zeros({2, 3});
  CHECK_HEED_ERROR(x.transpose(0, 2), "transpose");
  CHECK_HEED_ERROR(x.permute({0, 0}), "permute");
  CHECK_HEED_ERROR(x.permute({0}), "permute");
  CHECK_HEED_ERROR(x.select(2, 0), "select");
  CHECK_HEED_ERROR(x.unsqueeze(4), "unsqueeze");
  CHECK_HEED_ERROR(x.flatten(1, 0), "flatten");

  CHECK_HEED_ERROR(zeros({2, -1}), "zeros");
  CHECK_HEED_ERROR(ones({-3}), "ones");
  CHECK_HEED_ERROR(full({-1}, 1.0), "full");
  CHECK_HEED_ERROR(empty({4, -2}), "empty");
  CHECK_HEED_ERROR(randn({-1}), "randn");
  CHECK_HEED_ERROR(zeros({int64_t{1} << 40, int64_t{1} << 40}), "zeros");
  CHECK_HEED_ERROR(x.view({-2, -3}), "view");
  CHECK_HEED_ERROR(x.reshape({3, -5}), "reshape");

  // At most 8 dims: building a 9-entry Dims already fails.
  CHECK_THROWS_AS(zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}), heed::Error);
  Tensor eight = zeros({1, 2, 1, 2, 1, 2, 1, 2});
  CHECK(eight.dim() == 8);
  CHECK_HEED_ERROR(eight.unsqueeze(0), "unsqueeze");
  CHECK_HEED_ERROR(eight.unflatten(1, {2, 1}), "unflatten");
  CHECK_HEED_ERROR(stack({eight, eight}), "stack");
  try {
    (void)zeros({1, 1, 1, 1, 1, 1, 1, 1, 1});
  } catch (const heed::Error& e) {
    CHECK(std::string(e.what()).find("at most 8") != std::string::npos);
  }

  CHECK_HEED_ERROR(x.view({4}), "view");
  CHECK_HEED_ERROR(x.expand({3, 3}), "expand");
  CHECK_HEED_ERROR(cat({x, zeros({3, 2})}, 0), "cat");
  CHECK_HEED_ERROR(x + zeros({3, 2}), "add");
}

TEST_CASE("integer and bool tensors cannot require grad") {
  CHECK_HEED_ERROR(arange(3).requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(zeros({2}, kBool).requires_grad_(), "requires_grad_");
  CHECK_HEED_ERROR(zeros({2}, TensorOptions(kInt32).requires_grad(true)), "zeros");
  CHECK_HEED_ERROR(full({2}, 1.0, TensorOptions(kInt64).requires_grad(true)), "full");
  Tensor h = zeros({2}, kFloat16).requires_grad_();
  CHECK(h.requires_grad());
}

TEST_CASE("the CPU caching allocator reuses freed blocks and aligns them") {
  cpu_empty_cache();
  const AllocatorStats start = cpu_allocator_stats();
  CHECK(start.bytes_cached == 0);
  {
    Tensor a = empty({1000}, kF64);  // 8000 bytes
    CHECK(reinterpret_cast<uintptr_t>(a.raw_data()) % 64 == 0);
    CHECK(cpu_allocator_stats().bytes_in_use >= start.bytes_in_use + 8000);
  }
  const AllocatorStats freed = cpu_allocator_stats();
  CHECK(freed.bytes_in_use == start.bytes_in_use);
  CHECK(freed.bytes_cached >= 8000);
  {
    Tensor b = empty({1000}, kF64);  // the same size class: served from the cache
    const AllocatorStats reused = cpu_allocator_stats();
    CHECK(reused.cache_hits == freed.cache_hits + 1);
    CHECK(reused.system_allocations == freed.system_allocations);
    CHECK(reinterpret_cast<uintptr_t>(b.raw_data()) % 64 == 0);
  }
  cpu_empty_cache();
  CHECK(cpu_allocator_stats().bytes_cached == 0);
  CHECK(cpu_allocator_stats().peak_bytes_in_use >= 8000);
}
