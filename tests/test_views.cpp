// tests/test_views.cpp — view/reshape, permute/transpose, slice/narrow/select, expand,
// squeeze/unsqueeze/flatten/unflatten, split/chunk/cat/stack: values, storage sharing, errors
// and gradients.
//
// Invariants checked: views share storage (a write through one is seen by the other); reshape
// copies only when no strides can express the new shape; the gradient of every view op
// equals scattering the output gradient back to the input positions the op reads (computed
// here by applying the op to a tensor of positions), and passes heed::gradcheck in float64.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

std::vector<int64_t> dims_vec(const Dims& d) { return d.vec(); }

// 0, 1, 2, ... in float64 with the given shape.
Tensor positions(const Dims& shape) { return arange(static_cast<double>(shape_numel(shape)), kF64).reshape(shape); }

using ViewFn = std::function<Tensor(const Tensor&)>;

// Gradient of sum(op(x) * w) two ways: from autograd, and by adding w into the input
// positions the op reads (op applied to a tensor holding each element's flat index).
// Then heed::gradcheck on op itself.
void check_view_gradient(const Dims& shape, const ViewFn& op) {
  const int64_t n = shape_numel(shape);
  Tensor x = randn(shape, kF64).requires_grad_();
  Tensor picked = op(positions(shape));
  Tensor w = randn(picked.shape(), kF64);
  (op(x) * w).sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(dims_vec(x.grad().shape()) == dims_vec(shape));
  std::vector<double> expected(static_cast<size_t>(n), 0.0);
  const std::vector<double> pos = picked.to_vector<double>(), wv = w.to_vector<double>();
  for (size_t k = 0; k < pos.size(); ++k) expected[static_cast<size_t>(pos[k])] += wv[k];
  const std::vector<double> got = x.grad().to_vector<double>();
  for (size_t i = 0; i < expected.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-12));

  Tensor y = randn(shape, kF64).requires_grad_();
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return op(in[0]); }, {y});
  CHECK_MESSAGE(r.passed, r.message);
}

}  // namespace

// ---- view / reshape ---------------------------------------------------------------------------

TEST_CASE("view and reshape infer -1 and share storage") {
  Tensor x = arange(24, kF32);
  Tensor v = x.view({2, -1, 4});
  CHECK(dims_vec(v.shape()) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims_vec(v.strides()) == std::vector<int64_t>{12, 4, 1});
  CHECK(v.storage() == x.storage());
  CHECK(v.at<float>({1, 2, 3}) == 23.0f);
  CHECK(dims_vec(x.view({-1}).shape()) == std::vector<int64_t>{24});
  CHECK(dims_vec(x.view({4, 6}).view({-1, 8}).shape()) == std::vector<int64_t>{3, 8});
  CHECK(dims_vec(scalar_tensor(1.0).view({1, 1}).shape()) == std::vector<int64_t>{1, 1});
  CHECK(zeros({1, 1}).view({}).dim() == 0);
  CHECK(dims_vec(zeros({0, 4}).view({2, 0, 4}).shape()) == std::vector<int64_t>{2, 0, 4});
  CHECK_HEED_ERROR(zeros({0, 4}).view({2, 0, -1}), "view");  // -1 could be anything

  CHECK_HEED_ERROR(x.view({-1, -1}), "view");
  CHECK_HEED_ERROR(x.view({5, -1}), "view");
  CHECK_HEED_ERROR(x.view({5, 5}), "view");
  CHECK_HEED_ERROR(x.view({int64_t{1} << 40, int64_t{1} << 40, 0, -1}), "view");  // no overflow
  CHECK_HEED_ERROR(zeros({0, 3}).view({-1, 0}), "view");
  CHECK_HEED_ERROR(x.reshape({7, -1}), "reshape");
}

TEST_CASE("view refuses strides it cannot express; reshape copies only then") {
  Tensor x = arange(24, kF32).reshape({4, 6});
  Tensor t = x.t();  // (6,4) strides (1,6)
  try {
    (void)t.view({24});
    FAIL("view of a transposed tensor as 1-D must fail");
  } catch (const heed::Error& e) {
    const std::string m = e.what();
    CHECK(m.rfind("heed::view:", 0) == 0);
    CHECK(m.find("[6, 4]") != std::string::npos);
    CHECK(m.find("reshape") != std::string::npos);
  }
  Tensor flat = t.reshape({24});
  CHECK(flat.storage() != x.storage());
  std::vector<float> expected;
  for (int j = 0; j < 6; ++j)
    for (int i = 0; i < 4; ++i) expected.push_back(static_cast<float>(i * 6 + j));
  CHECK(flat.to_vector<float>() == expected);

  // Splitting the stride-6 dim into (2,2) is expressible: no copy.
  Tensor split = t.reshape({6, 2, 2});
  CHECK(split.storage() == x.storage());
  CHECK(dims_vec(split.strides()) == std::vector<int64_t>{1, 12, 6});
  CHECK(split.to_vector<float>() == expected);
  // Every other column of a 6-wide matrix is one run with stride 2: still a view.
  Tensor every_other = x.slice(1, 0, 6, 2);  // (4,3) strides (6,2)
  CHECK(every_other.reshape({3, 4}).storage() == x.storage());
  CHECK(dims_vec(every_other.reshape({3, 4}).strides()) == std::vector<int64_t>{8, 2});
  CHECK(every_other.reshape({3, 4}).to_vector<float>() == every_other.to_vector<float>());
  // Columns 0 and 2 only leave gaps between rows: merging the dims needs a copy.
  Tensor stepped = x.slice(1, 0, 4, 2);  // (4,2) strides (6,2)
  CHECK(stepped.reshape({2, 4}).storage() != x.storage());
  CHECK(stepped.reshape({2, 4}).to_vector<float>() == std::vector<float>{0, 2, 6, 8, 12, 14, 18, 20});
  CHECK_HEED_ERROR(stepped.view({8}), "view");
  CHECK(stepped.reshape({4, 2, 1}).storage() == x.storage());
  // Rows of a contiguous tensor stay viewable after slicing rows.
  CHECK(x.slice(0, 1, 3).view({12}).storage() == x.storage());
  CHECK(x.slice(0, 1, 3).view({12}).to_vector<float>()[0] == 6.0f);
  // Expanded dims can be viewed where they stay separate.
  Tensor e = tensor({1, 2, 3}).expand({4, 3});
  CHECK(e.view({2, 2, 3}).storage() == e.storage());
  CHECK(dims_vec(e.view({2, 2, 3}).strides()) == std::vector<int64_t>{0, 0, 1});
  CHECK_HEED_ERROR(e.view({12}), "view");
  CHECK(e.reshape({12}).to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
}

// ---- permute / transpose / t ------------------------------------------------------------------

TEST_CASE("permute, transpose and t") {
  Tensor x = positions({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK(dims_vec(p.shape()) == std::vector<int64_t>{4, 2, 3});
  CHECK(dims_vec(p.strides()) == std::vector<int64_t>{1, 12, 4});
  CHECK(p.storage() == x.storage());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(p.at<double>({i, j, k}) == x.at<double>({j, k, i}));
  CHECK(dims_vec(x.permute({-1, -2, -3}).shape()) == std::vector<int64_t>{4, 3, 2});
  Tensor tr = x.transpose(0, -1);
  CHECK(dims_vec(tr.shape()) == std::vector<int64_t>{4, 3, 2});
  CHECK(tr.at<double>({3, 1, 0}) == x.at<double>({0, 1, 3}));
  CHECK(x.transpose(1, 1).to_vector<double>() == x.to_vector<double>());
  Tensor m = positions({2, 5});
  CHECK(dims_vec(m.t().shape()) == std::vector<int64_t>{5, 2});
  CHECK(m.t().t().to_vector<double>() == m.to_vector<double>());
  CHECK(positions({3}).t().to_vector<double>() == std::vector<double>{0, 1, 2});
  CHECK(scalar_tensor(1.0).transpose(0, -1).dim() == 0);

  CHECK_HEED_ERROR(x.permute({0, 1}), "permute");
  CHECK_HEED_ERROR(x.permute({0, 1, 1}), "permute");
  CHECK_HEED_ERROR(x.permute({0, 1, 3}), "permute");
  CHECK_HEED_ERROR(x.transpose(0, 3), "transpose");
  CHECK_HEED_ERROR(x.t(), "t");
}

// ---- slice / narrow / select ------------------------------------------------------------------

TEST_CASE("slice with negative bounds, steps and clamping") {
  Tensor x = positions({10});
  CHECK(x.slice(0, 2, 5).to_vector<double>() == std::vector<double>{2, 3, 4});
  CHECK(x.slice(0, -3, 10).to_vector<double>() == std::vector<double>{7, 8, 9});
  CHECK(x.slice(0, 1, -1, 3).to_vector<double>() == std::vector<double>{1, 4, 7});
  CHECK(x.slice(0, 0, 10, 4).to_vector<double>() == std::vector<double>{0, 4, 8});
  CHECK(x.slice(0, -100, 100).numel() == 10);
  CHECK(x.slice(0, 8, 100, 5).to_vector<double>() == std::vector<double>{8});
  CHECK(x.slice(0, 7, 3).numel() == 0);
  CHECK(x.slice(0, 20, 30).numel() == 0);
  CHECK(x.slice(0, -30, -20).numel() == 0);

  Tensor m = positions({4, 6});
  Tensor s = m.slice(1, 1, 6, 2);  // columns 1, 3, 5
  CHECK(dims_vec(s.shape()) == std::vector<int64_t>{4, 3});
  CHECK(dims_vec(s.strides()) == std::vector<int64_t>{6, 2});
  CHECK(s.offset() == 1);
  CHECK(s.storage() == m.storage());
  CHECK(s.select(0, 2).to_vector<double>() == std::vector<double>{13, 15, 17});
  CHECK(m.slice(-2, 1, 3).offset() == 6);

  // Huge steps and bounds do not overflow.
  CHECK(x.slice(0, 1, INT64_MAX, INT64_MAX).to_vector<double>() == std::vector<double>{1});
  CHECK(x.slice(0, INT64_MIN, INT64_MAX, 3).to_vector<double>() == std::vector<double>{0, 3, 6, 9});
  CHECK(x.slice(0, 0, 10, 9).to_vector<double>() == std::vector<double>{0, 9});
  CHECK_HEED_ERROR(x.slice(0, 0, 5, 0), "slice");
  CHECK_HEED_ERROR(x.slice(0, 5, 0, -1), "slice");
  CHECK_HEED_ERROR(x.slice(1, 0, 1), "slice");
  CHECK_HEED_ERROR(scalar_tensor(1.0).slice(0, 0, 1), "slice");
}

TEST_CASE("narrow and select, with out-of-range errors") {
  Tensor m = positions({3, 4});
  CHECK(m.narrow(1, 1, 2).to_vector<double>() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(m.narrow(0, -1, 1).to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  CHECK(m.narrow(1, 4, 0).numel() == 0);
  CHECK(m.narrow(0, 0, 3).storage() == m.storage());
  CHECK_HEED_ERROR(m.narrow(1, 3, 2), "narrow");
  CHECK_HEED_ERROR(m.narrow(1, -5, 1), "narrow");
  CHECK_HEED_ERROR(m.narrow(0, 0, -1), "narrow");
  CHECK_HEED_ERROR(m.narrow(0, 1, INT64_MAX), "narrow");
  CHECK_HEED_ERROR(m.narrow(2, 0, 1), "narrow");
  CHECK_HEED_ERROR(scalar_tensor(1.0).narrow(0, 0, 1), "narrow");

  CHECK(m.select(1, 2).to_vector<double>() == std::vector<double>{2, 6, 10});
  CHECK(m.select(0, -1).to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  CHECK(m.select(0, 1).select(0, 3).item<double>() == 7.0);
  CHECK(m.select(0, 1).dim() == 1);
  CHECK_HEED_ERROR(m.select(0, 3), "select");
  CHECK_HEED_ERROR(m.select(1, -5), "select");
  CHECK_HEED_ERROR(m.select(2, 0), "select");
  CHECK_HEED_ERROR(scalar_tensor(1.0).select(0, 0), "select");
}

// ---- expand -----------------------------------------------------------------------------------

TEST_CASE("expand uses stride 0 and checks sizes") {
  Tensor x = tensor({1, 2, 3}).reshape({3, 1});
  Tensor e = x.expand({2, 3, 4});
  CHECK(dims_vec(e.shape()) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims_vec(e.strides()) == std::vector<int64_t>{0, 1, 0});
  CHECK(e.storage() == x.storage());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) CHECK(e.at<float>({b, i, j}) == static_cast<float>(i + 1));
  CHECK(dims_vec(x.expand({-1, 5}).shape()) == std::vector<int64_t>{3, 5});
  CHECK(dims_vec(x.expand({3, 1}).strides()) == dims_vec(x.strides()));
  CHECK(dims_vec(x.expand({3, 0}).shape()) == std::vector<int64_t>{3, 0});
  CHECK(dims_vec(x.expand_as(zeros({3, 2})).shape()) == std::vector<int64_t>{3, 2});
  CHECK(dims_vec(scalar_tensor(2.0).expand({2, 2}).strides()) == std::vector<int64_t>{0, 0});

  CHECK_HEED_ERROR(x.expand({4, 4}), "expand");
  CHECK_HEED_ERROR(x.expand({3}), "expand");
  CHECK_HEED_ERROR(x.expand({-1, 3, 4}), "expand");
  CHECK_HEED_ERROR(x.expand({3, -2}), "expand");
  CHECK_HEED_ERROR(x.expand({-2, 3, 4}), "expand");
  CHECK_HEED_ERROR(x.expand({int64_t{1} << 40, 3, int64_t{1} << 40}), "expand");  // numel overflows
}

// ---- squeeze / unsqueeze / flatten / unflatten ------------------------------------------------

TEST_CASE("squeeze, unsqueeze, flatten and unflatten") {
  Tensor x = positions({2, 1, 3, 1});
  CHECK(dims_vec(x.squeeze().shape()) == std::vector<int64_t>{2, 3});
  CHECK(dims_vec(x.squeeze(1).shape()) == std::vector<int64_t>{2, 3, 1});
  CHECK(dims_vec(x.squeeze(-1).shape()) == std::vector<int64_t>{2, 1, 3});
  CHECK(dims_vec(x.squeeze(0).shape()) == std::vector<int64_t>{2, 1, 3, 1});  // size 2: unchanged
  CHECK(x.squeeze().storage() == x.storage());
  CHECK(zeros({1, 1}).squeeze().dim() == 0);
  CHECK_HEED_ERROR(x.squeeze(4), "squeeze");

  Tensor v = positions({2, 3});
  CHECK(dims_vec(v.unsqueeze(0).shape()) == std::vector<int64_t>{1, 2, 3});
  CHECK(dims_vec(v.unsqueeze(1).shape()) == std::vector<int64_t>{2, 1, 3});
  CHECK(dims_vec(v.unsqueeze(-1).shape()) == std::vector<int64_t>{2, 3, 1});
  CHECK(dims_vec(v.unsqueeze(2).shape()) == std::vector<int64_t>{2, 3, 1});
  CHECK(dims_vec(v.t().unsqueeze(1).shape()) == std::vector<int64_t>{3, 1, 2});
  CHECK(v.t().unsqueeze(1).storage() == v.storage());
  CHECK(v.t().unsqueeze(1).to_vector<double>() == v.t().to_vector<double>());
  CHECK(dims_vec(scalar_tensor(1.0).unsqueeze(0).shape()) == std::vector<int64_t>{1});
  CHECK_HEED_ERROR(v.unsqueeze(3), "unsqueeze");
  CHECK_HEED_ERROR(v.unsqueeze(-4), "unsqueeze");

  Tensor f = positions({2, 3, 4, 5});
  CHECK(dims_vec(f.flatten().shape()) == std::vector<int64_t>{120});
  CHECK(dims_vec(f.flatten(1).shape()) == std::vector<int64_t>{2, 60});
  CHECK(dims_vec(f.flatten(1, 2).shape()) == std::vector<int64_t>{2, 12, 5});
  CHECK(dims_vec(f.flatten(-2, -1).shape()) == std::vector<int64_t>{2, 3, 20});
  CHECK(dims_vec(f.flatten(2, 2).shape()) == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(dims_vec(scalar_tensor(3.0).flatten().shape()) == std::vector<int64_t>{1});
  CHECK(f.flatten(0, 1).storage() == f.storage());
  Tensor ft = f.transpose(1, 2).flatten(1, 2);  // not expressible: copies, in the view's order
  CHECK(dims_vec(ft.shape()) == std::vector<int64_t>{2, 12, 5});
  CHECK(ft.at<double>({1, 5, 2}) == f.at<double>({1, 2, 1, 2}));  // (j=5 -> k=1, i=2)
  CHECK_HEED_ERROR(f.flatten(2, 1), "flatten");
  CHECK_HEED_ERROR(f.flatten(0, 4), "flatten");

  Tensor u = positions({2, 12});
  CHECK(dims_vec(u.unflatten(1, {3, 4}).shape()) == std::vector<int64_t>{2, 3, 4});
  CHECK(dims_vec(u.unflatten(-1, {2, -1, 2}).shape()) == std::vector<int64_t>{2, 2, 3, 2});
  CHECK(dims_vec(u.unflatten(0, {1, 2}).shape()) == std::vector<int64_t>{1, 2, 12});
  CHECK(u.unflatten(1, {3, 4}).at<double>({1, 2, 3}) == 23.0);
  CHECK(u.unflatten(1, {3, 4}).storage() == u.storage());
  CHECK_HEED_ERROR(u.unflatten(1, {5, -1}), "unflatten");
  CHECK_HEED_ERROR(u.unflatten(1, {3, 5}), "unflatten");
  CHECK_HEED_ERROR(u.unflatten(2, {1}), "unflatten");
  CHECK_HEED_ERROR(u.unflatten(1, {}), "unflatten");
}

// ---- split / chunk / cat / stack --------------------------------------------------------------

TEST_CASE("split and chunk return views") {
  Tensor x = positions({7, 2});
  std::vector<Tensor> parts = x.split(3);
  REQUIRE(parts.size() == 3);
  CHECK(dims_vec(parts[0].shape()) == std::vector<int64_t>{3, 2});
  CHECK(dims_vec(parts[2].shape()) == std::vector<int64_t>{1, 2});
  CHECK(parts[2].to_vector<double>() == std::vector<double>{12, 13});
  for (const Tensor& p : parts) CHECK(p.storage() == x.storage());

  std::vector<Tensor> sized = split(x, std::vector<int64_t>{2, 0, 5}, 0);
  REQUIRE(sized.size() == 3);
  CHECK(sized[1].numel() == 0);
  CHECK(sized[2].select(0, 0).to_vector<double>() == std::vector<double>{4, 5});
  std::vector<Tensor> cols = x.split(1, 1);
  REQUIRE(cols.size() == 2);
  CHECK(cols[1].squeeze(1).to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11, 13});

  std::vector<Tensor> chunks = x.chunk(3);
  REQUIRE(chunks.size() == 3);  // ceil(7/3) = 3 rows per chunk: 3, 3, 1
  CHECK(chunks[0].size(0) == 3);
  CHECK(chunks[2].size(0) == 1);
  CHECK(positions({6}).chunk(4).size() == 3);  // ceil(6/4) = 2 per chunk, as in PyTorch
  CHECK(positions({2}).chunk(5).size() == 2);
  CHECK(positions({5}).chunk(INT64_MAX).size() == 5);

  CHECK_HEED_ERROR(x.split(0), "split");
  CHECK_HEED_ERROR(split(x, std::vector<int64_t>{3, 3}, 0), "split");
  CHECK_HEED_ERROR(split(x, std::vector<int64_t>{8, -1}, 0), "split");
  CHECK_HEED_ERROR(x.split(1, 2), "split");
  CHECK_HEED_ERROR(x.chunk(0), "chunk");
}

TEST_CASE("cat and stack") {
  Tensor a = positions({2, 3}), b = positions({1, 3}) + 100.0, c = positions({2, 2}) + 200.0;
  Tensor rows = cat({a, b}, 0);
  CHECK(dims_vec(rows.shape()) == std::vector<int64_t>{3, 3});
  CHECK(rows.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5, 100, 101, 102});
  Tensor columns = cat({a, c}, -1);
  CHECK(dims_vec(columns.shape()) == std::vector<int64_t>{2, 5});
  CHECK(columns.to_vector<double>() == std::vector<double>{0, 1, 2, 200, 201, 3, 4, 5, 202, 203});
  CHECK(cat({a.t(), positions({3, 1})}, 1).to_vector<double>() == std::vector<double>{0, 3, 0, 1, 4, 1, 2, 5, 2});
  CHECK(cat({a, zeros({0, 3}, kF64)}, 0).to_vector<double>() == a.to_vector<double>());
  Tensor mixed = cat({tensor({1, 2}, kInt64), tensor({0.5}, kF32)});
  CHECK(mixed.dtype() == kFloat32);
  CHECK(mixed.to_vector<float>() == std::vector<float>{1, 2, 0.5f});

  Tensor s0 = stack({a, a + 10.0}, 0);
  CHECK(dims_vec(s0.shape()) == std::vector<int64_t>{2, 2, 3});
  CHECK(s0.at<double>({1, 1, 2}) == 15.0);
  Tensor s2 = stack({a, a + 10.0}, -1);
  CHECK(dims_vec(s2.shape()) == std::vector<int64_t>{2, 3, 2});
  CHECK(s2.at<double>({1, 2, 0}) == 5.0);
  CHECK(s2.at<double>({1, 2, 1}) == 15.0);
  CHECK(dims_vec(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).shape()) == std::vector<int64_t>{2});

  CHECK_HEED_ERROR(cat({}, 0), "cat");
  CHECK_HEED_ERROR(cat({a, b}, 1), "cat");
  CHECK_HEED_ERROR(cat({a, positions({3})}, 0), "cat");
  CHECK_HEED_ERROR(cat({a, b}, 2), "cat");
  CHECK_HEED_ERROR(cat({scalar_tensor(1.0), scalar_tensor(2.0)}), "cat");
  CHECK_HEED_ERROR(stack({}, 0), "stack");
  CHECK_HEED_ERROR(stack({a, b}), "stack");
  CHECK_HEED_ERROR(stack({a, a}, 3), "stack");
}

// ---- storage sharing --------------------------------------------------------------------------

TEST_CASE("views share storage: writes through a view are seen by the base and back") {
  Tensor x = zeros({3, 4}, kF64);
  Tensor row = x.select(0, 1), col = x.t().select(0, 2), block = x.slice(0, 1, 3).slice(1, 1, 3);
  row.fill_(1.0);
  col.add_(10.0);
  CHECK(x.to_vector<double>() == std::vector<double>{0, 0, 10, 0, 1, 1, 11, 1, 0, 0, 10, 0});
  CHECK(block.to_vector<double>() == std::vector<double>{1, 11, 0, 10});
  x.fill_(2.0);
  CHECK(row.to_vector<double>() == std::vector<double>{2, 2, 2, 2});
  CHECK(x.view({12}).storage() == x.storage());
  // Every view shares one version counter with its base.
  const uint64_t before = x.storage()->version();
  block.zero_();
  CHECK(row.storage()->version() == before + 1);
}

TEST_CASE("an in-place write under NoGradGuard is visible through views of a leaf") {
  Tensor w = zeros({2, 3}, TensorOptions(kF64).requires_grad(true));
  Tensor view = w.t();  // records a permute node
  CHECK(view.requires_grad());
  {
    NoGradGuard no_grad;
    w.select(0, 0).fill_(5.0);
    view.select(0, 2).fill_(-1.0);  // column 2 of w
  }
  CHECK(w.to_vector<double>() == std::vector<double>{5, 5, -1, 0, 0, -1});
  CHECK(view.to_vector<double>() == std::vector<double>{5, 0, 5, 0, -1, -1});
  {
    NoGradGuard no_grad;
    Tensor plain_view = w.view({6});
    CHECK_FALSE(plain_view.requires_grad());  // views made without grad carry no history
  }
}

// ---- gradients --------------------------------------------------------------------------------

TEST_CASE("gradients of every view op: scatter of the output gradient and gradcheck") {
  manual_seed(1234);
  SUBCASE("view") {
    check_view_gradient({2, 6}, [](const Tensor& x) { return x.view({3, -1}); });
  }
  SUBCASE("reshape (viewable)") {
    check_view_gradient({2, 6}, [](const Tensor& x) { return x.reshape({4, 3}); });
  }
  SUBCASE("reshape (copying)") {
    check_view_gradient({3, 4}, [](const Tensor& x) { return x.t().reshape({2, 6}); });
  }
  SUBCASE("permute") {
    check_view_gradient({2, 3, 4}, [](const Tensor& x) { return x.permute({1, 2, 0}); });
  }
  SUBCASE("transpose") {
    check_view_gradient({2, 3, 4}, [](const Tensor& x) { return x.transpose(0, 2); });
  }
  SUBCASE("t") {
    check_view_gradient({3, 5}, [](const Tensor& x) { return x.t(); });
  }
  SUBCASE("slice with step") {
    check_view_gradient({4, 7}, [](const Tensor& x) { return x.slice(1, -6, 7, 2); });
  }
  SUBCASE("slice of a slice") {
    check_view_gradient({6, 5}, [](const Tensor& x) { return x.slice(0, 1, 6, 2).slice(1, 0, 4, 3); });
  }
  SUBCASE("narrow") {
    check_view_gradient({5, 3}, [](const Tensor& x) { return x.narrow(0, 1, 3); });
  }
  SUBCASE("select") {
    check_view_gradient({3, 4, 2}, [](const Tensor& x) { return x.select(1, -2); });
  }
  SUBCASE("expand") {
    check_view_gradient({3, 1}, [](const Tensor& x) { return x.expand({2, 3, 4}); });
  }
  SUBCASE("expand of a scalar") {
    check_view_gradient({}, [](const Tensor& x) { return x.expand({3, 2}); });
  }
  SUBCASE("squeeze") {
    check_view_gradient({2, 1, 3, 1}, [](const Tensor& x) { return x.squeeze(); });
  }
  SUBCASE("squeeze(dim)") {
    check_view_gradient({2, 1, 3}, [](const Tensor& x) { return x.squeeze(1); });
  }
  SUBCASE("unsqueeze") {
    check_view_gradient({2, 3}, [](const Tensor& x) { return x.t().unsqueeze(1); });
  }
  SUBCASE("flatten") {
    check_view_gradient({2, 3, 2}, [](const Tensor& x) { return x.flatten(1); });
  }
  SUBCASE("flatten (copying)") {
    check_view_gradient({2, 3, 2}, [](const Tensor& x) { return x.transpose(0, 1).flatten(1, 2); });
  }
  SUBCASE("unflatten") {
    check_view_gradient({2, 6}, [](const Tensor& x) { return x.unflatten(1, {3, 2}); });
  }
  SUBCASE("contiguous") {
    check_view_gradient({3, 4}, [](const Tensor& x) { return x.t().contiguous(); });
  }
  SUBCASE("clone") {
    check_view_gradient({3, 2}, [](const Tensor& x) { return x.clone(); });
  }
  SUBCASE("split piece") {
    check_view_gradient({7, 2}, [](const Tensor& x) { return x.split(3)[1]; });
  }
  SUBCASE("chunk piece") {
    check_view_gradient({2, 7}, [](const Tensor& x) { return x.chunk(3, 1)[2]; });
  }
  SUBCASE("the same element read twice") {
    check_view_gradient({4}, [](const Tensor& x) { return cat({x.slice(0, 0, 3), x.slice(0, 1, 4)}); });
  }
  SUBCASE("a chain of views") {
    check_view_gradient({2, 3, 4}, [](const Tensor& x) {
      return x.permute({2, 0, 1}).reshape({4, 6}).slice(1, 1, 6, 2).unsqueeze(0).expand({2, 4, 3}).select(2, 1);
    });
  }
}

TEST_CASE("gradients of cat and stack go back to each input") {
  manual_seed(99);
  Tensor a = randn({2, 3}, kF64).requires_grad_(), b = randn({4, 3}, kF64).requires_grad_();
  Tensor w = randn({6, 3}, kF64);
  (cat({a, b}, 0) * w).sum().backward();
  CHECK(a.grad().to_vector<double>() == w.narrow(0, 0, 2).to_vector<double>());
  CHECK(b.grad().to_vector<double>() == w.narrow(0, 2, 4).to_vector<double>());

  Tensor c = randn({2, 3}, kF64).requires_grad_(), d = randn({2, 3}, kF64).requires_grad_();
  Tensor v = randn({2, 2, 3}, kF64);
  (stack({c, d}, 1) * v).sum().backward();
  CHECK(c.grad().to_vector<double>() == v.select(1, 0).to_vector<double>());
  CHECK(d.grad().to_vector<double>() == v.select(1, 1).to_vector<double>());

  // Only the inputs that require grad get one; mixed float dtypes get their own dtype back.
  Tensor e = randn({3}, kF32).requires_grad_();
  Tensor plain = randn({2}, kF64);
  (cat({e, plain}) * 2.0).sum().backward();
  CHECK(e.grad().dtype() == kFloat32);
  CHECK(e.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK_FALSE(plain.grad().defined());

  for (int dim : {0, 1, -1}) {
    CAPTURE(dim);
    Tensor x = randn({2, 3}, kF64).requires_grad_(), y = randn({2, 3}, kF64).requires_grad_();
    auto cat_fn = [dim](const std::vector<Tensor>& in) { return cat({in[0], in[1] * in[1]}, dim); };
    auto stack_fn = [dim](const std::vector<Tensor>& in) { return stack({in[0], in[1]}, dim); };
    const GradcheckResult rc = gradcheck(cat_fn, {x, y});
    CHECK_MESSAGE(rc.passed, rc.message);
    const GradcheckResult rs = gradcheck(stack_fn, {x, y});
    CHECK_MESSAGE(rs.passed, rs.message);
  }
}

TEST_CASE("hand-derived gradients of expand, select and slice") {
  // d/dx sum(expand(x) * w) sums w over the broadcast dims.
  Tensor x = tensor({1, 2}, kF64).reshape({2, 1}).detach().requires_grad_();
  Tensor w = tensor({{1, 2, 3}, {4, 5, 6}}, kF64);
  (x.expand({2, 3}) * w).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 15});

  // select and slice write the gradient into their window and zeros elsewhere.
  Tensor m = zeros({3, 3}, TensorOptions(kF64).requires_grad(true));
  (m.select(1, 2) * tensor({1, 2, 3}, kF64)).sum().backward();
  CHECK(m.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0, 2, 0, 0, 3});
  m.zero_grad();
  (m.slice(0, 0, 3, 2) * 7.0).sum().backward();
  CHECK(m.grad().to_vector<double>() == std::vector<double>{7, 7, 7, 0, 0, 0, 7, 7, 7});
  // Overlapping reads accumulate.
  m.zero_grad();
  (m.select(0, 1).sum() + m.select(1, 1).sum() * 2.0).backward();
  CHECK(m.grad().to_vector<double>() == std::vector<double>{0, 2, 0, 1, 3, 1, 0, 2, 0});
}
