// tests/test_layers.cpp — the basic layers (heed/nn/layers.h) and F::layer_norm against
// float64 loop references: Linear, Embedding (padding_idx gets no gradient), LayerNorm (the
// fused kernels vs a naive double loop, forward and all three gradients, several dtypes and
// row counts that cross the kernel's row blocks), Dropout (seeded, identity in eval),
// ReLU/GELU, FeedForward, the sinusoidal table and learned positions; gradcheck in float64
// for each; misuse raises heed::Error naming the layer or op.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <string>
#include <vector>

#include "layers_reference.h"

using namespace heed;
namespace ref = layers_reference;
using layers_testing::check_close;
using layers_testing::expect_error;
using layers_testing::expect_gradcheck;
using layers_testing::to_tensor;
using ref::Values;

namespace {

Tensor leaf(const Values& v, const Dims& shape, DType dtype = kFloat64) {
  return to_tensor(v, shape, dtype).requires_grad_(true);
}

// sum(out * probe) for a fixed probe: one scalar whose gradient is probe-weighted.
Tensor probe_sum(const Tensor& out, uint64_t seed) {
  const Tensor probe = to_tensor(ref::random_values(static_cast<size_t>(out.numel()), seed), out.shape(), out.dtype());
  return sum(out * probe);
}

}  // namespace

// ---- Linear ----------------------------------------------------------------------------------

TEST_CASE("Linear: forward against a float64 loop, every input rank, with and without bias") {
  manual_seed(1);
  for (bool with_bias : {true, false}) {
    nn::Linear layer(4, 3, with_bias);
    CHECK(layer.bias.defined() == with_bias);
    CHECK(layer.weight.shape() == Dims{3, 4});
    const Values w = ref::values(layer.weight);
    const Values b = with_bias ? ref::values(layer.bias) : Values();
    for (const Dims& shape : {Dims{4}, Dims{5, 4}, Dims{2, 3, 4}}) {
      CAPTURE(shape_str(shape));
      const Values x = ref::random_values(static_cast<size_t>(shape_numel(shape)), 11);
      const Values want = ref::linear(x, 4, w, b, 3);
      Tensor y = layer(to_tensor(x, shape, kFloat32));
      Dims out_shape = shape;
      out_shape[out_shape.size() - 1] = 3;
      CHECK(y.shape() == out_shape);
      CHECK(y.dtype() == kFloat32);
      check_close(y, want, 1e-5, 1e-6, "linear float32");
    }
  }
}

TEST_CASE("Linear: non-contiguous input and float64 module") {
  manual_seed(2);
  nn::Linear layer(3, 2);
  layer.to(kFloat64);
  CHECK(layer.weight.dtype() == kFloat64);
  const Values xt = ref::random_values(12, 5);  // stored (3, 4), used transposed as (4, 3)
  Tensor x = to_tensor(xt, {3, 4}).t();
  REQUIRE_FALSE(x.is_contiguous());
  Values x_rows(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) x_rows[i * 3 + j] = xt[j * 4 + i];
  check_close(layer(x), ref::linear(x_rows, 3, ref::values(layer.weight), ref::values(layer.bias), 2), 1e-12, 1e-12,
              "linear float64");
}

TEST_CASE("Linear: gradcheck of input, weight and bias in float64") {
  manual_seed(3);
  nn::Linear layer(3, 2);
  layer.to(kFloat64);
  Tensor x = leaf(ref::random_values(6, 7), {2, 3});
  expect_gradcheck([&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x, layer.weight, layer.bias});
}

TEST_CASE("Linear: misuse") {
  expect_error([] { nn::Linear(0, 3); }, {"heed::Linear", "positive"});
  nn::Linear layer(4, 3);
  expect_error([&] { layer(zeros({2, 5})); }, {"heed::linear", "[2, 5]"});
  expect_error([&] { layer(zeros({})); }, {"heed::linear"});
}

// ---- Embedding -------------------------------------------------------------------------------

TEST_CASE("Embedding: rows of the table, gradient scatter-adds repeated indices") {
  manual_seed(4);
  nn::Embedding table(6, 3);
  table.to(kFloat64);
  const Values w = ref::values(table.weight);
  const std::vector<int64_t> idx = {1, 4, 1, 0, 5, 1};
  Tensor indices = from_vector(idx, {2, 3});
  Tensor out = table(indices);
  CHECK(out.shape() == Dims{2, 3, 3});
  Values want;
  for (int64_t i : idx) want.insert(want.end(), w.begin() + i * 3, w.begin() + i * 3 + 3);
  check_close(out, want, 0, 0, "embedding rows");

  const Values probe = ref::random_values(18, 9);
  sum(out * to_tensor(probe, {2, 3, 3})).backward();
  Values want_grad(18, 0.0);
  for (size_t n = 0; n < idx.size(); ++n)
    for (int d = 0; d < 3; ++d) want_grad[idx[n] * 3 + d] += probe[n * 3 + d];
  check_close(table.weight.grad(), want_grad, 1e-12, 1e-12, "embedding grad");
}

TEST_CASE("Embedding: padding_idx row starts at zero and never gets a gradient") {
  manual_seed(5);
  nn::Embedding table(5, 4, 2);
  CHECK(table.padding_idx() == std::optional<int64_t>(2));
  CHECK(ref::values(table.weight.select(0, 2)) == Values(4, 0.0));
  // A user may write into the padding row; the lookup still returns it, without gradient.
  {
    NoGradGuard no_grad;
    table.weight.select(0, 2).fill_(0.5);
  }
  Tensor indices = from_vector(std::vector<int64_t>{2, 0, 2, 3}, {4});
  Tensor out = table(indices);
  check_close(out.select(0, 0), Values(4, 0.5), 0, 0, "padding row value");
  const Values probe = ref::random_values(16, 3);
  sum(out * to_tensor(probe, {4, 4}, kFloat32)).backward();
  const Values g = ref::values(table.weight.grad());
  for (int d = 0; d < 4; ++d) {
    CHECK(g[2 * 4 + d] == 0.0);                                              // padding: none
    CHECK(g[0 * 4 + d] == doctest::Approx(probe[1 * 4 + d]).epsilon(1e-6));  // others: theirs
    CHECK(g[3 * 4 + d] == doctest::Approx(probe[3 * 4 + d]).epsilon(1e-6));
    CHECK(g[1 * 4 + d] == 0.0);  // unused row
  }
  // Without grad mode the lookup is the plain one.
  NoGradGuard no_grad;
  check_close(table(indices), ref::values(out), 0, 0, "no-grad lookup");
}

TEST_CASE("Embedding: gradcheck of the table in float64 (no padding)") {
  manual_seed(6);
  nn::Embedding table(4, 2);
  table.to(kFloat64);
  Tensor indices = from_vector(std::vector<int64_t>{3, 0, 3, 1}, {2, 2});
  expect_gradcheck([&](const std::vector<Tensor>&) { return table(indices); }, {table.weight});
}

TEST_CASE("Embedding: misuse") {
  expect_error([] { nn::Embedding(0, 3); }, {"heed::Embedding"});
  expect_error([] { nn::Embedding(4, 3, 4); }, {"heed::Embedding", "padding_idx"});
  expect_error([] { nn::Embedding(4, 3, -1); }, {"heed::Embedding", "padding_idx"});
  nn::Embedding table(4, 3);
  expect_error([&] { table(tensor({1.0, 2.0})); }, {"heed::embedding", "int64"});
  expect_error([&] { table(from_vector(std::vector<int64_t>{0, 4}, {2})); }, {"heed::embedding"});
  expect_error([&] { table(from_vector(std::vector<int64_t>{-1}, {1})); }, {"heed::embedding"});
}

// ---- LayerNorm -------------------------------------------------------------------------------

namespace {

// Gradients of sum(g * layer_norm(x)) by the explicit Jacobian, a double loop over (c, k) per
// row: dy_c/dx_k = rstd * w_c * ([c == k] - 1/C - xhat_c xhat_k / C).
struct LayerNormGrads {
  Values dx, dw, db;
};
LayerNormGrads layer_norm_grads(const Values& x, int64_t C, const Values& w, const Values& g, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / C;
  LayerNormGrads r{Values(x.size(), 0.0), Values(C, 0.0), Values(C, 0.0)};
  for (int64_t row = 0; row < rows; ++row) {
    const double* xr = x.data() + row * C;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(var + eps);
    Values xhat(C);
    for (int64_t c = 0; c < C; ++c) xhat[c] = (xr[c] - mean) * rstd;
    for (int64_t k = 0; k < C; ++k) {
      double dxk = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double wc = w.empty() ? 1.0 : w[c];
        const double jac =
            rstd * wc *
            ((c == k ? 1.0 : 0.0) - 1.0 / static_cast<double>(C) - xhat[c] * xhat[k] / static_cast<double>(C));
        dxk += g[row * C + c] * jac;
      }
      r.dx[row * C + k] = dxk;
    }
    for (int64_t c = 0; c < C; ++c) {
      r.dw[c] += g[row * C + c] * xhat[c];
      r.db[c] += g[row * C + c];
    }
  }
  return r;
}

}  // namespace

TEST_CASE("F::layer_norm: fused forward and the three gradients against a naive double loop") {
  struct Case {
    Dims shape;
    double offset;  // added to x: large offsets must not cancel
    double eps;
  };
  // 130 and 200 rows cross the backward kernel's 64-row blocks (partial last block).
  for (const Case& c : {Case{{6, 5}, 0.0, 1e-5}, Case{{2, 3, 8}, 3.0, 1e-3}, Case{{130, 7}, 0.0, 1e-5},
                        Case{{200, 3}, 1e4, 1e-5}, Case{{4, 1}, 0.0, 1e-5}, Case{{3, 64}, -2.0, 0.1}}) {
    CAPTURE(shape_str(c.shape));
    CAPTURE(c.offset);
    const int64_t C = c.shape.back();
    const size_t n = static_cast<size_t>(shape_numel(c.shape));
    Values x = ref::random_values(n, 21);
    for (double& v : x) v += c.offset;
    const Values w = ref::random_values(static_cast<size_t>(C), 22, 2.0);
    const Values b = ref::random_values(static_cast<size_t>(C), 23);
    const Values g = ref::random_values(n, 24);
    const Values want = ref::layer_norm(x, C, w, b, c.eps);
    const LayerNormGrads want_grads = layer_norm_grads(x, C, w, g, c.eps);

    Tensor xt = leaf(x, c.shape), wt = leaf(w, {C}), bt = leaf(b, {C});
    Tensor y = F::layer_norm(xt, wt, bt, c.eps);
    CHECK(y.dtype() == kFloat64);
    check_close(y, want, 1e-10, 1e-10, "forward");
    y.backward(to_tensor(g, c.shape));
    check_close(xt.grad(), want_grads.dx, 1e-8, 1e-9, "dx");
    check_close(wt.grad(), want_grads.dw, 1e-9, 1e-9, "dweight");
    check_close(bt.grad(), want_grads.db, 1e-10, 1e-10, "dbias");
  }
}

TEST_CASE("F::layer_norm: without affine, weight only, float32 and mixed dtypes") {
  const Values x = ref::random_values(24, 31);
  const Values w = ref::random_values(6, 32);
  const Values g = ref::random_values(24, 33);
  SUBCASE("no weight, no bias") {
    Tensor xt = leaf(x, {4, 6});
    Tensor y = F::layer_norm(xt);
    check_close(y, ref::layer_norm(x, 6, {}, {}, 1e-5), 1e-10, 1e-10, "forward");
    y.backward(to_tensor(g, {4, 6}));
    check_close(xt.grad(), layer_norm_grads(x, 6, {}, g, 1e-5).dx, 1e-8, 1e-9, "dx");
  }
  SUBCASE("weight only") {
    Tensor xt = leaf(x, {4, 6}), wt = leaf(w, {6});
    Tensor y = F::layer_norm(xt, wt, Tensor(), 1e-5);
    check_close(y, ref::layer_norm(x, 6, w, {}, 1e-5), 1e-10, 1e-10, "forward");
    y.backward(to_tensor(g, {4, 6}));
    const LayerNormGrads r = layer_norm_grads(x, 6, w, g, 1e-5);
    check_close(xt.grad(), r.dx, 1e-8, 1e-9, "dx");
    check_close(wt.grad(), r.dw, 1e-9, 1e-9, "dweight");
  }
  SUBCASE("float32 input and parameters") {
    Tensor xt = leaf(x, {4, 6}, kFloat32), wt = leaf(w, {6}, kFloat32);
    Tensor bt = leaf(w, {6}, kFloat32);
    Tensor y = F::layer_norm(xt, wt, bt);
    CHECK(y.dtype() == kFloat32);
    check_close(y, ref::layer_norm(x, 6, w, w, 1e-5), 1e-5, 1e-5, "forward");
    y.backward(to_tensor(g, {4, 6}, kFloat32));
    const LayerNormGrads r = layer_norm_grads(x, 6, w, g, 1e-5);
    CHECK(xt.grad().dtype() == kFloat32);
    check_close(xt.grad(), r.dx, 1e-4, 1e-5, "dx");
    check_close(wt.grad(), r.dw, 1e-5, 1e-5, "dweight");
    check_close(bt.grad(), r.db, 1e-5, 1e-5, "dbias");
  }
  SUBCASE("float16 and bfloat16 inputs") {
    for (DType dtype : {kFloat16, kBFloat16}) {
      CAPTURE(dtype_name(dtype));
      Tensor xt = leaf(x, {4, 6}, dtype), wt = leaf(w, {6}, dtype);
      Tensor y = F::layer_norm(xt, wt, Tensor());
      CHECK(y.dtype() == dtype);
      // The reference on the rounded inputs; the output is rounded once more.
      const Values xr = ref::values(xt), wr = ref::values(wt);
      const double tol = dtype == kFloat16 ? 4e-3 : 3e-2;
      check_close(y, ref::layer_norm(xr, 6, wr, {}, 1e-5), tol, tol, "forward");
      y.backward(to_tensor(g, {4, 6}, dtype));
      CHECK(xt.grad().dtype() == dtype);
      check_close(xt.grad(), layer_norm_grads(xr, 6, wr, ref::values(to_tensor(g, {4, 6}, dtype)), 1e-5).dx, 5 * tol,
                  5 * tol, "dx");
    }
  }
  SUBCASE("float32 input with float64 parameters promotes to float64") {
    Tensor xt = to_tensor(x, {4, 6}, kFloat32);
    Tensor y = F::layer_norm(xt, to_tensor(w, {6}), Tensor());
    CHECK(y.dtype() == kFloat64);
    check_close(y, ref::layer_norm(ref::values(xt), 6, w, {}, 1e-5), 1e-10, 1e-10, "forward");
  }
  SUBCASE("non-contiguous input") {
    Tensor stored = to_tensor(x, {6, 4});  // used as its transpose (4, 6)
    Values rows(24);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) rows[i * 6 + j] = x[j * 4 + i];
    check_close(F::layer_norm(stored.t(), to_tensor(w, {6})), ref::layer_norm(rows, 6, w, {}, 1e-5), 1e-10, 1e-10,
                "forward");
  }
  SUBCASE("float32 rows normalised four at a time match each row alone, bit for bit") {
    // The kernel takes float rows' statistics four at a time (row_stats_rows) and the rest one at
    // a time; widths with and without a tail past a multiple of eight, rows 9 = 4 + 4 + 1. The
    // statistics are double and the outputs float, so this catches a row given another row's data,
    // statistics or tail (tried: one row's mean used for all four fails it), not a last-bit
    // difference in the double sums, which rounding to float hides.
    for (int cols : {6, 8, 19, 256}) {
      CAPTURE(cols);
      Values big = ref::random_values(static_cast<size_t>(9 * cols), 34);
      for (double& v : big) v = 3.0 * v + 7.0;  // an offset the centred second pass must handle
      const Tensor xt = to_tensor(big, {9, cols}, kFloat32),
                   wt = to_tensor(ref::random_values(cols, 35), {cols}, kFloat32);
      const Tensor bt = to_tensor(ref::random_values(cols, 36), {cols}, kFloat32);
      const Tensor all = F::layer_norm(xt, wt, bt).contiguous();
      for (int r = 0; r < 9; ++r) {
        const Tensor alone = F::layer_norm(xt.slice(0, r, r + 1).contiguous(), wt, bt).contiguous();
        const float* a = all.data_ptr<float>() + r * cols;
        const float* b = alone.data_ptr<float>();
        int differing = 0;
        for (int c = 0; c < cols; ++c) differing += a[c] != b[c];
        CHECK_MESSAGE(differing == 0, "row ", r);
      }
    }
  }
  SUBCASE("float32 rows of 6 to 256 columns: the three gradients against float64 (the vector loops)") {
    // Widths below, at and past one 8-column step, with a tail; run under both loop widths
    // (ctest's test_layers_8_lanes sets HEED_VEC_WIDTH=8).
    for (int cols : {6, 8, 19, 256}) {
      CAPTURE(cols);
      const Values xv = ref::random_values(static_cast<size_t>(9 * cols), 37), wv = ref::random_values(cols, 38);
      const Values gv = ref::random_values(static_cast<size_t>(9 * cols), 39);
      Tensor xt = leaf(xv, {9, cols}, kFloat32), wt = leaf(wv, {cols}, kFloat32), bt = leaf(wv, {cols}, kFloat32);
      F::layer_norm(xt, wt, bt).backward(to_tensor(gv, {9, cols}, kFloat32));
      const LayerNormGrads r = layer_norm_grads(ref::values(xt), cols, ref::values(wt), gv, 1e-5);
      check_close(xt.grad(), r.dx, 1e-4, 1e-5, "dx");
      check_close(wt.grad(), r.dw, 1e-5, 1e-5, "dweight");
      check_close(bt.grad(), r.db, 1e-5, 1e-5, "dbias");
    }
  }
  SUBCASE("constant rows: zero variance gives finite output") {
    Tensor xt = leaf(Values(12, 3.0), {2, 6});
    Tensor y = F::layer_norm(xt);
    check_close(y, Values(12, 0.0), 0, 1e-12, "forward");
    y.backward(to_tensor(Values(g.begin(), g.begin() + 12), {2, 6}));
    CHECK(isfinite_all(xt.grad()));
  }
}

TEST_CASE("F::layer_norm and the LayerNorm module: gradcheck in float64") {
  Tensor x = leaf(ref::random_values(15, 41), {3, 5});
  Tensor w = leaf(ref::random_values(5, 42), {5});
  Tensor b = leaf(ref::random_values(5, 43), {5});
  expect_gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], in[1], in[2], 1e-5); }, {x, w, b});
  expect_gradcheck([](const std::vector<Tensor>& in) { return F::layer_norm(in[0], Tensor(), Tensor(), 1e-3); }, {x});
  nn::LayerNorm norm(5, 1e-4);
  norm.to(kFloat64);
  {
    NoGradGuard no_grad;
    norm.weight.copy_(to_tensor(ref::random_values(5, 44, 2.0), {5}));
    norm.bias.copy_(to_tensor(ref::random_values(5, 45), {5}));
  }
  check_close(norm(x), ref::layer_norm(ref::values(x), 5, ref::values(norm.weight), ref::values(norm.bias), 1e-4),
              1e-10, 1e-10, "module forward");
  expect_gradcheck([&](const std::vector<Tensor>& in) { return norm(in[0]); }, {x, norm.weight, norm.bias});
}

TEST_CASE("LayerNorm: options and misuse") {
  nn::LayerNorm no_affine(4, 1e-5, false);
  CHECK_FALSE(no_affine.weight.defined());
  CHECK(no_affine.parameters().empty());
  nn::LayerNorm no_bias(4, 1e-5, true, false);
  CHECK(no_bias.weight.defined());
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.num_parameters() == 4);

  expect_error([] { nn::LayerNorm(0); }, {"heed::LayerNorm"});
  nn::LayerNorm norm(4);
  expect_error([&] { norm(zeros({2, 5})); }, {"heed::LayerNorm", "[2, 5]"});
  expect_error([&] { no_affine(zeros({2, 5})); }, {"heed::LayerNorm", "[2, 5]"});
  expect_error([&] { norm(zeros({})); }, {"heed::LayerNorm"});
  expect_error([] { F::layer_norm(zeros({2, 5}), ones({4})); }, {"heed::layer_norm", "[4]"});
  expect_error([] { F::layer_norm(zeros({2, 3}), Tensor(), Tensor(), -1.0); }, {"heed::layer_norm", "eps"});
  expect_error([] { F::layer_norm(zeros({2, 3}), zeros({2, 3})); }, {"heed::layer_norm"});
  expect_error([] { F::layer_norm(zeros({2, 0})); }, {"heed::layer_norm"});
  expect_error([] { F::layer_norm(zeros({2, 3}, kInt64)); }, {"heed::layer_norm"});
}

// ---- Dropout ---------------------------------------------------------------------------------

TEST_CASE("Dropout: seeded masks, inverted scaling, backward reuses the mask, identity in eval") {
  const double p = 0.3;
  nn::Dropout dropout(p);
  CHECK(dropout.is_training());
  Tensor x = (rand({100, 200}) + 0.5).requires_grad_(true);  // strictly positive values
  manual_seed(77);
  Tensor a = dropout(x);
  manual_seed(77);
  Tensor b = dropout(x);
  Tensor c = dropout(x);  // the stream moved on: a different mask
  CHECK(ref::max_abs_diff(ref::values(a), ref::values(b)) == 0.0);
  CHECK(ref::max_abs_diff(ref::values(a), ref::values(c)) > 0.0);

  const Values xv = ref::values(x), av = ref::values(a);
  int64_t dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (av[i] == 0.0) {
      ++dropped;
    } else if (std::fabs(av[i] - xv[i] / (1.0 - p)) > 1e-6 * std::fabs(av[i])) {
      FAIL_CHECK("kept element " << i << " is " << av[i] << ", expected " << xv[i] / (1.0 - p));
      break;
    }
  }
  // Binomial(20000, 0.3): mean 6000, sd 65; 6 sd either way.
  CHECK(dropped > 6000 - 390);
  CHECK(dropped < 6000 + 390);

  sum(a).backward();
  const Values g = ref::values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double want = av[i] == 0.0 ? 0.0 : 1.0 / (1.0 - p);
    if (std::fabs(g[i] - want) > 1e-6) {
      FAIL_CHECK("gradient " << i << " is " << g[i] << ", expected " << want);
      break;
    }
  }

  dropout.eval();
  CHECK_FALSE(dropout.is_training());
  Tensor e = dropout(x);
  CHECK(ref::values(e) == xv);
  dropout.train();
  CHECK(dropout.is_training());

  nn::Dropout all(1.0);
  CHECK(ref::values(all(x)) == Values(xv.size(), 0.0));
  nn::Dropout none(0.0);
  CHECK(ref::values(none(x)) == xv);
}

TEST_CASE("Dropout: gradcheck in float64 with the seed fixed per call") {
  nn::Dropout dropout(0.4);
  Tensor x = leaf(ref::random_values(12, 51), {3, 4});
  expect_gradcheck(
      [&](const std::vector<Tensor>& in) {
        manual_seed(5);
        return dropout(in[0]);
      },
      {x});
}

TEST_CASE("Dropout: misuse") {
  expect_error([] { nn::Dropout(-0.1); }, {"heed::Dropout", "[0, 1]"});
  expect_error([] { nn::Dropout(1.5); }, {"heed::Dropout", "[0, 1]"});
  nn::Dropout dropout(0.5);
  expect_error([&] { dropout(zeros({3}, kInt64)); }, {"heed::dropout"});
}

// ---- activations -----------------------------------------------------------------------------

TEST_CASE("ReLU and GELU modules against their formulas, gradcheck off the kinks") {
  Values x = ref::random_values(20, 61, 3.0);
  for (double& v : x)
    if (std::fabs(v) < 1e-3) v = 0.25;  // away from ReLU's kink
  Tensor xt = leaf(x, {4, 5});
  nn::ReLU relu_layer;
  nn::GELU gelu_erf;
  nn::GELU gelu_tanh(GeluApproximation::Tanh);
  Values want_relu(x.size()), want_erf(x.size()), want_tanh(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_relu[i] = ref::activate(x[i], nn::Activation::ReLU);
    want_erf[i] = ref::gelu_erf(x[i]);
    want_tanh[i] = ref::gelu_tanh(x[i]);
  }
  check_close(relu_layer(xt), want_relu, 0, 0, "relu");
  check_close(gelu_erf(xt), want_erf, 1e-12, 1e-14, "gelu erf");
  check_close(gelu_tanh(xt), want_tanh, 1e-12, 1e-14, "gelu tanh");
  check_close(nn::activate(xt, nn::Activation::GELUTanh), want_tanh, 1e-12, 1e-14, "activate");
  check_close(gelu_erf(xt.to(kFloat32)), want_erf, 1e-5, 1e-6, "gelu float32");
  expect_gradcheck([&](const std::vector<Tensor>& in) { return relu_layer(in[0]); }, {xt});
  expect_gradcheck([&](const std::vector<Tensor>& in) { return gelu_erf(in[0]); }, {xt});
  expect_gradcheck([&](const std::vector<Tensor>& in) { return gelu_tanh(in[0]); }, {xt});
}

// ---- FeedForward -----------------------------------------------------------------------------

TEST_CASE("FeedForward: fc2(act(fc1(x))) for every activation, with and without bias") {
  manual_seed(8);
  for (nn::Activation act : {nn::Activation::ReLU, nn::Activation::GELU, nn::Activation::GELUTanh})
    for (bool bias : {true, false}) {
      CAPTURE(static_cast<int>(act));
      CAPTURE(bias);
      nn::FeedForward ff(4, 6, 0.0, act, bias);
      CHECK(ff.num_parameters() == 4 * 6 + 6 * 4 + (bias ? 6 + 4 : 0));
      const ref::ParamMap p = ref::params_of(ff);
      const Values x = ref::random_values(2 * 3 * 4, 71);
      const Values want = ref::feed_forward(p, "", x, 4, 6, act);
      check_close(ff(to_tensor(x, {2, 3, 4}, kFloat32)), want, 1e-5, 1e-6, "float32");
      ff.to(kFloat64);
      check_close(ff(to_tensor(x, {2, 3, 4})), want, 1e-12, 1e-12, "float64");
    }
}

TEST_CASE("FeedForward: gradcheck of the input and every parameter in float64") {
  manual_seed(9);
  nn::FeedForward ff(3, 5, 0.0, nn::Activation::GELU);
  ff.to(kFloat64);
  Tensor x = leaf(ref::random_values(6, 81), {2, 3});
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : ff.parameters()) inputs.push_back(p);
  expect_gradcheck([&](const std::vector<Tensor>& in) { return ff(in[0]); }, inputs);
}

TEST_CASE("FeedForward: one feed_forward node when its dropout is off, linear_gelu and dropout when it is on") {
  manual_seed(12);
  nn::FeedForward ff(4, 8, 0.25);
  const Tensor x = randn({2, 3, 4});
  ff.eval();
  const Tensor fused = ff(x);
  CHECK(std::string(fused.grad_fn()->name()) == "feed_forward");
  CHECK(ref::values(fused) ==
        ref::values(F::linear(F::linear_gelu(x, ff.fc1->weight, ff.fc1->bias), ff.fc2->weight, ff.fc2->bias)));
  ff.train();
  const Tensor with_dropout = ff(x);
  CHECK(std::string(with_dropout.grad_fn()->name()) == "linear");
  nn::FeedForward no_dropout(4, 8, 0.0);
  CHECK(std::string(no_dropout(x).grad_fn()->name()) == "feed_forward");  // training, p = 0
  nn::FeedForward tanh_ff(4, 8, 0.0, nn::Activation::GELUTanh);
  CHECK(std::string(tanh_ff(x).grad_fn()->name()) == "linear");  // the tanh GELU: the two ops
}

TEST_CASE("FeedForward: misuse") {
  nn::FeedForward ff(4, 6);
  expect_error([&] { ff(zeros({2, 5})); }, {"heed::feed_forward", "[2, 5]"});
  expect_error([] { nn::FeedForward(4, 0); }, {"heed::Linear", "positive"});
  expect_error([] { nn::FeedForward(4, 6, 2.0); }, {"heed::Dropout"});
}

TEST_CASE("FeedForward: dropout is seeded in train mode and off in eval mode") {
  manual_seed(10);
  nn::FeedForward ff(4, 8, 0.5, nn::Activation::ReLU);
  Tensor x = randn({3, 4});
  manual_seed(3);
  const Values a = ref::values(ff(x));
  manual_seed(3);
  const Values b = ref::values(ff(x));
  CHECK(a == b);
  ff.eval();
  CHECK_FALSE(ff.dropout->is_training());
  CHECK_FALSE(ff.fc1->is_training());
  const Values want = ref::feed_forward(ref::params_of(ff), "", ref::values(x), 4, 8, nn::Activation::ReLU);
  check_close(ff(x), want, 1e-5, 1e-6, "eval forward");
  CHECK(ref::max_abs_diff(a, want) > 1e-3);  // dropout did change the training output
  ff.train();
  CHECK(ff.dropout->is_training());
}

// ---- positional encodings --------------------------------------------------------------------

TEST_CASE("SinusoidalPositionalEncoding: table values, rows by offset, non-persistent buffer") {
  for (int64_t d_model : {8, 7}) {
    CAPTURE(d_model);
    const int64_t max_len = 50;
    nn::SinusoidalPositionalEncoding pe(max_len, d_model);
    CHECK(pe.table.shape() == Dims{max_len, d_model});
    const Values table = ref::values(pe.table);
    for (int64_t pos = 0; pos < max_len; ++pos)
      for (int64_t i = 0; i + 1 < d_model; i += 2) {
        const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(i) / d_model);
        CHECK(table[pos * d_model + i] == doctest::Approx(std::sin(angle)).epsilon(1e-6));
        CHECK(table[pos * d_model + i + 1] == doctest::Approx(std::cos(angle)).epsilon(1e-6));
      }
    if (d_model % 2 == 1) {  // the last (even) column: sin with exponent (d_model - 1) / d_model
      const double angle = 3.0 / std::pow(10000.0, static_cast<double>(d_model - 1) / d_model);
      CHECK(table[3 * d_model + d_model - 1] == doctest::Approx(std::sin(angle)).epsilon(1e-6));
    }
    CHECK(table[0] == 0.0);
    CHECK(table[1] == 1.0);
    Tensor rows = pe.forward(4, 10);
    CHECK(rows.shape() == Dims{4, d_model});
    check_close(rows, Values(table.begin() + 10 * d_model, table.begin() + 14 * d_model), 0, 0, "rows");
    CHECK(pe.parameters().empty());
    CHECK(pe.state_dict().empty());
    REQUIRE(pe.named_buffers().size() == 1);
    CHECK(pe.named_buffers()[0].first == "table");
    expect_error([&] { pe.forward(10, max_len - 5); }, {"heed::SinusoidalPositionalEncoding", "max_len"});
    expect_error([&] { pe.forward(2, -1); }, {"heed::SinusoidalPositionalEncoding"});
  }
  expect_error([] { nn::SinusoidalPositionalEncoding(0, 4); }, {"heed::SinusoidalPositionalEncoding"});
}

TEST_CASE("LearnedPositionalEmbedding: rows of its weight, gradient only to the used rows") {
  manual_seed(12);
  nn::LearnedPositionalEmbedding pos(6, 3);
  CHECK(pos.weight.shape() == Dims{6, 3});
  const Values w = ref::values(pos.weight);
  Tensor rows = pos.forward(2, 3);
  check_close(rows, Values(w.begin() + 9, w.begin() + 15), 0, 0, "rows");
  sum(rows * 2.0).backward();
  const Values g = ref::values(pos.weight.grad());
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t d = 0; d < 3; ++d) CHECK(g[r * 3 + d] == (r == 3 || r == 4 ? 2.0 : 0.0));
  expect_error([&] { pos.forward(4, 3); }, {"heed::LearnedPositionalEmbedding", "context"});
  expect_error([] { nn::LearnedPositionalEmbedding(4, 0); }, {"heed::LearnedPositionalEmbedding"});
  pos.to(kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>&) { return probe_sum(pos.forward(3, 1), 5); }, {pos.weight});
}
