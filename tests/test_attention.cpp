// tests/test_attention.cpp — F::scaled_dot_product_attention and its masks (heed/attention.h)
// and the attention modules (heed/nn/attention.h) against float64 loop references:
//  * every mask kind (causal bottom-right aligned, window, key lengths, key padding, boolean
//    keep mask, additive float mask) alone and combined, forward and gradcheck;
//  * fully masked query rows give zeros and finite gradients in float32/64 and float16/bf16;
//  * the scale modes (sqrt_dk, none, fixed, learnable, affine, cosine) with their learnable
//    parameters gradient-checked; the default scale is 1/sqrt(d_head), never 1/sqrt(d_model);
//  * MultiHeadAttention in all three projection layouts, with shared K/V, window, dropout,
//    recorded weights, computed from the module's own weights; causal leakage; the KV cache
//    (one token and chunks at a time, static cross-attention cache, reorder);
//  * AdditiveAttention; misuse raises heed::Error naming the op or layer.
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
using nn::AttentionScale;
using nn::ProjectionLayout;
using ref::Values;

namespace {

Tensor leaf(const Values& v, const Dims& shape, DType dtype = kFloat64) {
  return to_tensor(v, shape, dtype).requires_grad_(true);
}

// sum(out * probe) for a fixed probe: a scalar whose gradient reaches every output element.
Tensor probe_sum(const Tensor& out, uint64_t seed) {
  const Tensor probe = to_tensor(ref::random_values(static_cast<size_t>(out.numel()), seed), out.shape(), out.dtype());
  return sum(out * probe);
}

// Random (B, H, L, D) data for q, k, v.
struct Qkv {
  int64_t B, H, T, S, D, Dv;
  Values q, k, v;
  Qkv(int64_t B_, int64_t H_, int64_t T_, int64_t S_, int64_t D_, int64_t Dv_, uint64_t seed)
      : B(B_), H(H_), T(T_), S(S_), D(D_), Dv(Dv_) {
    q = ref::random_values(static_cast<size_t>(B * H * T * D), seed, 1.5);
    k = ref::random_values(static_cast<size_t>(B * H * S * D), seed + 1, 1.5);
    v = ref::random_values(static_cast<size_t>(B * H * S * Dv), seed + 2);
  }
  Tensor tq(DType dtype = kFloat64) const { return to_tensor(q, {B, H, T, D}, dtype); }
  Tensor tk(DType dtype = kFloat64) const { return to_tensor(k, {B, H, S, D}, dtype); }
  Tensor tv(DType dtype = kFloat64) const { return to_tensor(v, {B, H, S, Dv}, dtype); }
  Values reference(const ref::MaskSpec& mask, Values* weights = nullptr, ref::ScaleSpec scale = {}) const {
    return ref::attention(q, k, v, B, H, T, S, D, Dv, scale, mask, weights);
  }
};

// A boolean (T, S) keep mask and its values, true with probability ~2/3.
std::vector<bool> random_bools(size_t n, uint64_t seed) {
  const Values r = ref::random_values(n, seed);
  std::vector<bool> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = r[i] > -0.33;
  return out;
}
Tensor bool_tensor(const std::vector<bool>& values, const Dims& shape) { return from_vector(values, shape); }

// The named variants of every mask kind on (B=2, H=2, T=3, S=5) scores, each with its
// reference MaskSpec.
struct MaskCase {
  std::string name;
  F::AttentionMask mask;
  ref::MaskSpec spec;
};
std::vector<MaskCase> mask_cases(int64_t B, int64_t H, int64_t T, int64_t S) {
  std::vector<MaskCase> cases;
  auto add_case = [&](const std::string& name, auto fill) {
    MaskCase c{name, {}, {}};
    fill(c.mask, c.spec);
    cases.push_back(c);
  };
  add_case("none", [](F::AttentionMask&, ref::MaskSpec&) {});
  add_case("causal", [](F::AttentionMask& m, ref::MaskSpec& s) { m.causal = s.causal = true; });
  add_case("window", [](F::AttentionMask& m, ref::MaskSpec& s) { m.window = s.window = 1; });
  add_case("window 0", [](F::AttentionMask& m, ref::MaskSpec& s) { m.window = s.window = 0; });
  add_case("key_lengths", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    s.key_lengths = {3, S};
    m.key_lengths = from_vector(s.key_lengths, {B});
  });
  add_case("key_lengths int32", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    s.key_lengths = {S - 1, 2};
    m.key_lengths = from_vector(s.key_lengths, {B}).to(kInt32);
  });
  add_case("key_padding", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    s.key_padding = std::vector<bool>(static_cast<size_t>(B * S), false);
    s.key_padding[1] = s.key_padding[S + 0] = s.key_padding[S + 4] = true;
    m.key_padding = bool_tensor(s.key_padding, {B, S});
  });
  add_case("keep (T,S)", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    const std::vector<bool> keep = random_bools(static_cast<size_t>(T * S), 91);
    m.keep = bool_tensor(keep, {T, S});
    s.keep = [keep, S](int64_t, int64_t, int64_t i, int64_t j) { return bool(keep[i * S + j]); };
  });
  add_case("keep (B,1,T,S)", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    const std::vector<bool> keep = random_bools(static_cast<size_t>(B * T * S), 92);
    m.keep = bool_tensor(keep, {B, 1, T, S});
    s.keep = [keep, T, S](int64_t b, int64_t, int64_t i, int64_t j) { return bool(keep[(b * T + i) * S + j]); };
  });
  add_case("additive (T,S)", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    const Values add = ref::random_values(static_cast<size_t>(T * S), 93, 2.0);
    m.additive = to_tensor(add, {T, S});
    s.additive = [add, S](int64_t, int64_t, int64_t i, int64_t j) { return add[i * S + j]; };
  });
  add_case("additive (B,H,T,S) with -inf", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    Values add = ref::random_values(static_cast<size_t>(B * H * T * S), 94, 2.0);
    add[3] = add[7] = -INFINITY;
    m.additive = to_tensor(add, {B, H, T, S});
    s.additive = [add, H, T, S](int64_t b, int64_t h, int64_t i, int64_t j) {
      return add[((b * H + h) * T + i) * S + j];
    };
  });
  add_case("causal + key_lengths + additive", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    m.causal = s.causal = true;
    s.key_lengths = {4, 2};
    m.key_lengths = from_vector(s.key_lengths, {B});
    const Values add = ref::random_values(static_cast<size_t>(S), 95);
    m.additive = to_tensor(add, {S});
    s.additive = [add](int64_t, int64_t, int64_t, int64_t j) { return add[j]; };
  });
  add_case("window + key_padding + keep", [&](F::AttentionMask& m, ref::MaskSpec& s) {
    m.window = s.window = 2;
    s.key_padding = std::vector<bool>(static_cast<size_t>(B * S), false);
    s.key_padding[2] = true;
    m.key_padding = bool_tensor(s.key_padding, {B, S});
    const std::vector<bool> keep = random_bools(static_cast<size_t>(H * T * S), 96);
    m.keep = bool_tensor(keep, {H, T, S});
    s.keep = [keep, T, S](int64_t, int64_t h, int64_t i, int64_t j) { return bool(keep[(h * T + i) * S + j]); };
  });
  return cases;
}

}  // namespace

// ---- F::scaled_dot_product_attention ---------------------------------------------------------

TEST_CASE("F::scaled_dot_product_attention: every mask kind against a float64 loop") {
  const Qkv data(2, 2, 3, 5, 4, 3, 100);
  for (const MaskCase& c : mask_cases(2, 2, 3, 5)) {
    CAPTURE(c.name);
    Values want_weights;
    const Values want = data.reference(c.spec, &want_weights);
    F::AttentionResult r = F::scaled_dot_product_attention_with_weights(data.tq(), data.tk(), data.tv(), c.mask);
    CHECK(r.output.shape() == Dims{2, 2, 3, 3});
    CHECK(r.weights.shape() == Dims{2, 2, 3, 5});
    check_close(r.output, want, 1e-12, 1e-12, "output float64");
    check_close(r.weights, want_weights, 1e-12, 1e-12, "weights float64");
    check_close(F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv(), c.mask), want, 1e-12, 1e-12,
                "output-only path");
    // float32 inputs (the masks keep their own dtypes).
    F::AttentionResult r32 =
        F::scaled_dot_product_attention_with_weights(data.tq(kFloat32), data.tk(kFloat32), data.tv(kFloat32), c.mask);
    CHECK(r32.output.dtype() == kFloat32);
    check_close(r32.output, want, 1e-5, 1e-5, "output float32");
    check_close(r32.weights, want_weights, 1e-5, 1e-6, "weights float32");
  }
}

TEST_CASE("F::attention_keep_mask: undefined when nothing masks, broadcastable boolean otherwise") {
  const Dims scores{2, 3, 4, 5};
  CHECK_FALSE(F::attention_keep_mask({}, scores, kCPU).defined());
  F::AttentionMask additive_only;
  additive_only.additive = zeros({4, 5});
  CHECK_FALSE(additive_only.restricts());
  CHECK_FALSE(F::attention_keep_mask(additive_only, scores, kCPU).defined());
  F::AttentionMask m;
  m.causal = true;
  m.key_lengths = from_vector(std::vector<int64_t>{5, 2}, {2});
  CHECK(m.restricts());
  Tensor keep = F::attention_keep_mask(m, scores, kCPU);
  REQUIRE(keep.defined());
  CHECK(keep.dtype() == kBool);
  CHECK(broadcast_shapes(keep.shape(), scores, "test") == scores);
  const Tensor full_keep = logical_and(keep, ones(scores, kBool));  // materialised (2,3,4,5)
  const std::vector<bool> v = full_keep.to_vector<bool>();
  ref::MaskSpec spec;
  spec.causal = true;
  spec.key_lengths = {5, 2};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j) CHECK(v[((b * 3 + h) * 4 + i) * 5 + j] == spec.allowed(b, h, i, j, 4, 5));
  m.key_lengths = from_vector(std::vector<int64_t>{5, 2, 1}, {3});
  expect_error([&] { F::attention_keep_mask(m, scores, kCPU, "MyLayer"); }, {"heed::MyLayer", "key_lengths", "[3]"});
}

TEST_CASE("F::scaled_dot_product_attention: gradcheck of q, k, v for every mask kind") {
  const Qkv data(2, 2, 3, 5, 2, 2, 200);
  for (const MaskCase& c : mask_cases(2, 2, 3, 5)) {
    CAPTURE(c.name);
    Tensor q = leaf(data.q, {2, 2, 3, 2}), k = leaf(data.k, {2, 2, 5, 2}), v = leaf(data.v, {2, 2, 5, 2});
    expect_gradcheck(
        [&](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], c.mask); },
        {q, k, v});
  }
  // The additive mask is differentiable too.
  Tensor q = leaf(data.q, {2, 2, 3, 2}), k = leaf(data.k, {2, 2, 5, 2}), v = leaf(data.v, {2, 2, 5, 2});
  Tensor bias = leaf(ref::random_values(15, 201), {3, 5});
  expect_gradcheck(
      [&](const std::vector<Tensor>& in) {
        F::AttentionMask m;
        m.additive = in[3];
        m.causal = true;
        return F::scaled_dot_product_attention(in[0], in[1], in[2], m);
      },
      {q, k, v, bias});
}

TEST_CASE("F::scaled_dot_product_attention: scale, is_causal, ranks, broadcasting, non-contiguous") {
  const Qkv data(1, 2, 4, 4, 3, 2, 300);
  ref::MaskSpec causal;
  causal.causal = true;
  SUBCASE("default scale is 1/sqrt(head dim); an explicit scale replaces it") {
    ref::ScaleSpec fixed;
    fixed.mode = AttentionScale::Fixed;
    fixed.fixed = 0.7;
    check_close(F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv(), {}, 0.0, 0.7),
                data.reference({}, nullptr, fixed), 1e-12, 1e-12, "scale 0.7");
    check_close(F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv()), data.reference({}), 1e-12, 1e-12,
                "default scale");
  }
  SUBCASE("is_causal equals mask.causal") {
    check_close(F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv(), {}, 0.0, std::nullopt, true),
                data.reference(causal), 1e-12, 1e-12, "is_causal");
  }
  SUBCASE("causal with fewer queries than keys is bottom-right aligned") {
    // Queries 2 and 3 of the full causal problem, asked alone (T = 2, S = 4).
    F::AttentionMask m;
    m.causal = true;
    Tensor last_two = data.tq().narrow(2, 2, 2);
    const Values full = data.reference(causal);
    Values want;
    for (int h = 0; h < 2; ++h) want.insert(want.end(), full.begin() + (h * 4 + 2) * 2, full.begin() + (h * 4 + 4) * 2);
    check_close(F::scaled_dot_product_attention(last_two, data.tk(), data.tv(), m), want, 1e-12, 1e-12, "bottom-right");
  }
  SUBCASE("3-D and 2-D inputs") {
    Tensor q3 = data.tq().select(0, 0), k3 = data.tk().select(0, 0), v3 = data.tv().select(0, 0);
    check_close(F::scaled_dot_product_attention(q3, k3, v3), data.reference({}), 1e-12, 1e-12, "3-D");
    const Values full = data.reference({});
    check_close(F::scaled_dot_product_attention(q3.select(0, 1), k3.select(0, 1), v3.select(0, 1)),
                Values(full.begin() + 8, full.end()), 1e-12, 1e-12, "2-D");
  }
  SUBCASE("keys and values broadcast over heads") {
    Tensor k1 = data.tk().narrow(1, 0, 1), v1 = data.tv().narrow(1, 0, 1);  // (1,1,S,D)
    Values k_rep = ref::values(k1), v_rep = ref::values(v1);
    k_rep.insert(k_rep.end(), k_rep.begin(), k_rep.end());
    v_rep.insert(v_rep.end(), v_rep.begin(), v_rep.end());
    const Values want = ref::attention(data.q, k_rep, v_rep, 1, 2, 4, 4, 3, 2, {}, causal);
    F::AttentionMask m;
    m.causal = true;
    check_close(F::scaled_dot_product_attention(data.tq(), k1, v1, m), want, 1e-12, 1e-12, "broadcast");
  }
  SUBCASE("non-contiguous q, k, v") {
    // Stored as (B, T, H, D) and transposed to (B, H, T, D), as multi-head code does.
    auto bthd = [](const Values& x, int64_t H, int64_t L, int64_t D) {
      Values out(x.size());
      for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t d = 0; d < D; ++d) out[(l * H + h) * D + d] = x[(h * L + l) * D + d];
      return out;
    };
    Tensor q = to_tensor(bthd(data.q, 2, 4, 3), {1, 4, 2, 3}).transpose(1, 2);
    Tensor k = to_tensor(bthd(data.k, 2, 4, 3), {1, 4, 2, 3}).transpose(1, 2);
    Tensor v = to_tensor(bthd(data.v, 2, 4, 2), {1, 4, 2, 2}).transpose(1, 2);
    REQUIRE_FALSE(q.is_contiguous());
    F::AttentionMask m;
    m.causal = true;
    check_close(F::scaled_dot_product_attention(q, k, v, m), data.reference(causal), 1e-12, 1e-12, "non-contiguous");
  }
}

TEST_CASE("F::scaled_dot_product_attention: fully masked rows give zeros, never NaN, in every dtype") {
  const Qkv data(2, 1, 3, 4, 2, 2, 400);
  // Batch 0: key_lengths 0 masks every key. Batch 1: a keep mask empties query row 1 and an
  // additive -inf row empties query row 2; row 0 is ordinary.
  std::vector<bool> keep(2 * 3 * 4, true);
  for (int j = 0; j < 4; ++j) keep[(1 * 3 + 1) * 4 + j] = false;
  Values additive(2 * 3 * 4, 0.0);
  for (int j = 0; j < 4; ++j) additive[(1 * 3 + 2) * 4 + j] = -INFINITY;
  F::AttentionMask mask;
  mask.key_lengths = from_vector(std::vector<int64_t>{0, 4}, {2});
  mask.keep = bool_tensor(keep, {2, 1, 3, 4});
  mask.additive = to_tensor(additive, {2, 1, 3, 4});
  ref::MaskSpec spec;
  spec.key_lengths = {0, 4};
  spec.keep = [keep](int64_t b, int64_t, int64_t i, int64_t j) { return bool(keep[(b * 3 + i) * 4 + j]); };
  spec.additive = [additive](int64_t b, int64_t, int64_t i, int64_t j) { return additive[(b * 3 + i) * 4 + j]; };
  // Rows (b=0, all i), (b=1, i=1), (b=1, i=2) are empty.
  auto row_is_masked = [](int64_t b, int64_t i) { return b == 0 || i >= 1; };
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dtype));
    Tensor q = leaf(data.q, {2, 1, 3, 2}, dtype), k = leaf(data.k, {2, 1, 4, 2}, dtype);
    Tensor v = leaf(data.v, {2, 1, 4, 2}, dtype);
    F::AttentionResult r = F::scaled_dot_product_attention_with_weights(q, k, v, mask);
    CHECK(r.output.dtype() == dtype);
    // Scores and softmax run in float32 for 16-bit inputs.
    CHECK(r.weights.dtype() == (is_half(dtype) ? kFloat32 : dtype));
    CHECK(isfinite_all(r.output));
    CHECK(isfinite_all(r.weights));
    const Values out = ref::values(r.output), w = ref::values(r.weights);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i) {
        double row_sum = 0;
        for (int64_t j = 0; j < 4; ++j) row_sum += w[(b * 3 + i) * 4 + j];
        CHECK(row_sum == doctest::Approx(row_is_masked(b, i) ? 0.0 : 1.0).epsilon(1e-6));
        if (row_is_masked(b, i))
          for (int64_t d = 0; d < 2; ++d) CHECK(out[(b * 3 + i) * 2 + d] == 0.0);
      }
    // The reference on the inputs as rounded to `dtype`; the output is rounded once more.
    const Values want = ref::attention(ref::values(q), ref::values(k), ref::values(v), 2, 1, 3, 4, 2, 2, {}, spec);
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : dtype == kFloat16 ? 2e-3 : 1e-2;
    check_close(out, want, tol, tol, "output");
    probe_sum(r.output.to(kFloat64), 7).backward();
    for (const Tensor* t : {&q, &k, &v}) {
      REQUIRE(t->grad().defined());
      CHECK(isfinite_all(t->grad()));
    }
    const Values gq = ref::values(q.grad());
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        if (row_is_masked(b, i))
          for (int64_t d = 0; d < 2; ++d) CHECK(gq[(b * 3 + i) * 2 + d] == 0.0);
  }
  // And the float64 gradients of such a problem pass gradcheck.
  Tensor q = leaf(data.q, {2, 1, 3, 2}), k = leaf(data.k, {2, 1, 4, 2}), v = leaf(data.v, {2, 1, 4, 2});
  expect_gradcheck(
      [&](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], mask); },
      {q, k, v});
}

TEST_CASE("F::scaled_dot_product_attention: causal with more queries than keys masks the first rows") {
  // T = 4, S = 2: query i sits at i - 2, so queries 0 and 1 see no key.
  const Qkv data(1, 1, 4, 2, 2, 2, 450);
  F::AttentionMask m;
  m.causal = true;
  ref::MaskSpec spec;
  spec.causal = true;
  Tensor q = leaf(data.q, {1, 1, 4, 2}), k = leaf(data.k, {1, 1, 2, 2}), v = leaf(data.v, {1, 1, 2, 2});
  Tensor out = F::scaled_dot_product_attention(q, k, v, m);
  const Values want = data.reference(spec);
  check_close(out, want, 1e-12, 1e-12, "output");
  CHECK(want[0] == 0.0);
  CHECK(want[3] == 0.0);
  expect_gradcheck(
      [&](const std::vector<Tensor>& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], m); },
      {q, k, v});
}

TEST_CASE("F::scaled_dot_product_attention: attention dropout is seeded and drops weights") {
  const Qkv data(2, 2, 3, 4, 3, 2, 500);
  const double p = 0.4;
  manual_seed(11);
  F::AttentionResult r = F::scaled_dot_product_attention_with_weights(data.tq(), data.tk(), data.tv(), {}, p);
  manual_seed(11);
  Tensor again = F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv(), {}, p);
  // The fused path draws the same mask; only the summation order differs.
  check_close(ref::values(again), ref::values(r.output), 1e-12, 1e-14, "fused vs composed dropout");
  // The same Philox counters give the mask: F::dropout of ones of the weights' shape.
  manual_seed(11);
  const Values keep_scale = ref::values(F::dropout(ones({2, 2, 3, 4}, kFloat64), p));
  const Values w = ref::values(r.weights);  // before dropout
  CHECK(r.weights.shape() == Dims{2, 2, 3, 4});
  check_close(
      w,
      [&] {
        Values want_w;
        data.reference({}, &want_w);
        return want_w;
      }(),
      1e-12, 1e-12, "weights before dropout");
  Values want(2 * 2 * 3 * 2, 0.0);
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t d = 0; d < 2; ++d)
          want[(n * 3 + i) * 2 + d] +=
              w[(n * 3 + i) * 4 + j] * keep_scale[(n * 3 + i) * 4 + j] * data.v[(n * 4 + j) * 2 + d];
  check_close(r.output, want, 1e-12, 1e-12, "dropped output");
  CHECK(ref::max_abs_diff(ref::values(r.output), data.reference({})) > 1e-3);
  // p = 0 is the plain attention.
  check_close(F::scaled_dot_product_attention(data.tq(), data.tk(), data.tv(), {}, 0.0), data.reference({}), 1e-12,
              1e-12, "p = 0");
  Tensor q = leaf(data.q, {2, 2, 3, 3}), k = leaf(data.k, {2, 2, 4, 3}), v = leaf(data.v, {2, 2, 4, 2});
  expect_gradcheck(
      [&](const std::vector<Tensor>& in) {
        manual_seed(12);
        return F::scaled_dot_product_attention(in[0], in[1], in[2], {}, p);
      },
      {q, k, v});
}

TEST_CASE("F::scaled_dot_product_attention: misuse names the op, the mask and the shapes") {
  const char* op = "heed::scaled_dot_product_attention";
  Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, const F::AttentionMask& m = {}) {
    return F::scaled_dot_product_attention(a, b, c, m);
  };
  expect_error([&] { sdpa(zeros({3, 4}, kInt64), k, v); }, {op});
  expect_error([&] { sdpa(zeros({4}), zeros({4}), zeros({4})); }, {op, "2 dims"});
  expect_error([&] { sdpa(q, zeros({2, 5, 3}), v); }, {op, "head dim"});
  expect_error([&] { sdpa(q, k, zeros({2, 4, 6})); }, {op, "number of keys"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, {}, 1.0); }, {op, "dropout_p"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, {}, -0.1); }, {op, "dropout_p"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, {}, 0.0, INFINITY); }, {op, "scale"});
  F::AttentionMask m;
  m.key_lengths = tensor({3.0, 4.0});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_lengths"});
  m.key_lengths = from_vector(std::vector<int64_t>{3, 4, 5}, {3});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_lengths", "[2]"});
  m.key_lengths = from_vector(std::vector<int64_t>{3, 6}, {2});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_lengths[1] = 6"});
  m.key_lengths = from_vector(std::vector<int64_t>{-1, 2}, {2});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_lengths[0] = -1"});
  m.key_lengths = from_vector(std::vector<int64_t>{1}, {1});
  expect_error([&] { sdpa(zeros({3, 4}), zeros({5, 4}), zeros({5, 4}), m); }, {op, "key_lengths"});
  m = {};
  m.key_padding = zeros({2, 5});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_padding", "bool"});
  m.key_padding = zeros({2, 4}, kBool);
  expect_error([&] { sdpa(q, k, v, m); }, {op, "key_padding", "[2, 4]"});
  m = {};
  m.keep = ones({3, 5});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "bool"});
  m.keep = ones({3, 4}, kBool);
  expect_error([&] { sdpa(q, k, v, m); }, {op, "keep mask", "[3, 4]", "[2, 3, 5]"});
  m.keep = ones({1, 2, 3, 5}, kBool);  // broadcasts with the scores, but to a larger shape
  expect_error([&] { sdpa(q, k, v, m); }, {op, "[1, 2, 3, 5]"});
  m = {};
  m.additive = zeros({3, 5}, kInt64);
  expect_error([&] { sdpa(q, k, v, m); }, {op, "additive", "floating"});
  m.additive = zeros({2, 5});
  expect_error([&] { sdpa(q, k, v, m); }, {op, "additive", "[2, 5]", "[2, 3, 5]"});
}

// ---- scale modes -----------------------------------------------------------------------------

namespace {

// Non-default values for the learnable scale parameters, so their gradients are not trivial.
void perturb_scale_parameters(nn::AttentionScaling& scaling, uint64_t seed) {
  NoGradGuard no_grad;
  for (Tensor& p : scaling.parameters()) {
    const Values r = ref::random_values(static_cast<size_t>(p.numel()), seed++, 0.2);
    p.add_(to_tensor(r, p.shape(), p.dtype()));
  }
}

ref::ScaleSpec scale_spec_of(const nn::AttentionScaling& scaling, double fixed = 0.0) {
  ref::ScaleSpec s;
  s.mode = scaling.mode();
  s.fixed = fixed;
  if (scaling.alpha.defined()) s.alpha = ref::values(scaling.alpha);
  if (scaling.beta.defined()) s.beta = ref::values(scaling.beta);
  if (scaling.tau.defined()) s.tau = ref::values(scaling.tau);
  return s;
}

const AttentionScale kAllScales[] = {AttentionScale::SqrtDk,    AttentionScale::None,   AttentionScale::Fixed,
                                     AttentionScale::Learnable, AttentionScale::Affine, AttentionScale::Cosine};

}  // namespace

TEST_CASE("AttentionScaling: names, parameters and their initial values") {
  for (AttentionScale s : {AttentionScale::SqrtDk, AttentionScale::None, AttentionScale::Learnable,
                           AttentionScale::Affine, AttentionScale::Cosine})
    CHECK(nn::parse_attention_scale(nn::attention_scale_name(s)) == s);
  CHECK(std::string(nn::attention_scale_name(AttentionScale::Fixed)) == "fixed");
  expect_error([] { nn::parse_attention_scale("sqrt_dmodel"); }, {"heed::parse_attention_scale", "sqrt_dmodel"});

  const int64_t d_k = 16, H = 3;
  nn::AttentionScaling learnable(AttentionScale::Learnable, d_k, H);
  REQUIRE(learnable.named_parameters().size() == 1);
  CHECK(learnable.named_parameters()[0].first == "alpha");
  check_close(learnable.alpha, Values(H, 0.25), 0, 1e-7, "alpha init 1/sqrt(d_k)");
  nn::AttentionScaling affine(AttentionScale::Affine, d_k, H);
  REQUIRE(affine.named_parameters().size() == 2);
  check_close(affine.alpha, Values(H, 1.0), 0, 0, "affine alpha");
  check_close(affine.beta, Values(H, 0.0), 0, 0, "affine beta");
  nn::AttentionScaling cosine(AttentionScale::Cosine, d_k, H);
  check_close(cosine.tau, Values(H, 4.0), 0, 0, "tau init sqrt(d_k)");
  for (AttentionScale s : {AttentionScale::SqrtDk, AttentionScale::None})
    CHECK(nn::AttentionScaling(s, d_k, H).parameters().empty());

  CHECK(nn::AttentionScaling(AttentionScale::SqrtDk, d_k, H).effective_scale() == std::vector<double>(H, 0.25));
  CHECK(nn::AttentionScaling(AttentionScale::None, d_k, H).effective_scale() == std::vector<double>(H, 1.0));
  CHECK(nn::AttentionScaling(AttentionScale::Fixed, d_k, H, 0.125).effective_scale() == std::vector<double>(H, 0.125));
  perturb_scale_parameters(affine, 5);
  const Values a = ref::values(affine.alpha), b = ref::values(affine.beta);
  const std::vector<double> eff = affine.effective_scale();
  for (int64_t h = 0; h < H; ++h) CHECK(eff[h] == doctest::Approx(1.0 / (a[h] * 4.0 + b[h])));
  CHECK(learnable.effective_scale()[1] == doctest::Approx(0.25));
  CHECK(cosine.effective_scale()[2] == doctest::Approx(4.0));

  expect_error([] { nn::AttentionScaling(AttentionScale::Fixed, 4, 1, 0.0); }, {"heed::AttentionScaling", "fixed"});
  expect_error([] { nn::AttentionScaling(AttentionScale::Fixed, 4, 1, NAN); }, {"heed::AttentionScaling"});
  expect_error([] { nn::AttentionScaling(AttentionScale::SqrtDk, 0, 1); }, {"heed::AttentionScaling"});
}

TEST_CASE(
    "ScaledDotProductAttention: every scale mode against the reference, gradcheck incl. "
    "parameters") {
  const Qkv data(2, 1, 3, 4, 4, 3, 600);
  for (AttentionScale mode : kAllScales) {
    CAPTURE(nn::attention_scale_name(mode));
    nn::ScaledDotProductAttention attn(4, mode, 0.0, 0.3);
    attn.to(kFloat64);
    perturb_scale_parameters(*attn.scaling, 7);
    const ref::ScaleSpec spec = scale_spec_of(*attn.scaling, 0.3);
    ref::MaskSpec causal;
    causal.causal = true;
    F::AttentionMask m;
    m.causal = true;
    // (B, T, d_k) single-head inputs.
    Tensor q = leaf(data.q, {2, 3, 4}), k = leaf(data.k, {2, 4, 4}), v = leaf(data.v, {2, 4, 3});
    Values want_weights;
    const Values want = data.reference(causal, &want_weights, spec);
    F::AttentionResult r = attn.forward(q, k, v, m, true);
    check_close(r.output, want, 1e-12, 1e-12, "output");
    check_close(r.weights, want_weights, 1e-12, 1e-12, "weights");
    CHECK_FALSE(attn.forward(q, k, v, m).weights.defined());
    std::vector<Tensor> inputs{q, k, v};
    for (const Tensor& p : attn.parameters()) inputs.push_back(p);
    CHECK(inputs.size() == 3 + (mode == AttentionScale::Affine                                        ? 2
                                : mode == AttentionScale::Learnable || mode == AttentionScale::Cosine ? 1
                                                                                                      : 0));
    expect_gradcheck([&](const std::vector<Tensor>& in) { return attn.forward(in[0], in[1], in[2], m).output; },
                     inputs);
    // float32 module and inputs.
    attn.to(kFloat32);
    check_close(
        attn.forward(data.tq(kFloat32).select(1, 0), data.tk(kFloat32).select(1, 0), data.tv(kFloat32).select(1, 0), m)
            .output,
        want, 1e-5, 1e-5, "float32");
  }
}

TEST_CASE("ScaledDotProductAttention: misuse") {
  expect_error([] { nn::ScaledDotProductAttention(4, AttentionScale::SqrtDk, 1.0); },
               {"heed::ScaledDotProductAttention", "dropout"});
  nn::ScaledDotProductAttention attn(4);
  // A head dim other than the d_k it was built for would silently use the wrong scale.
  expect_error(
      [&] {
        attn.forward(zeros({1, 2, 8}), zeros({1, 2, 8}), zeros({1, 2, 8}));
      },
      {"heed::ScaledDotProductAttention", "d_k = 4", "[1, 2, 8]"});
  // The scaling module checks its inputs too: per-head parameters need a heads dim.
  nn::AttentionScaling learnable(AttentionScale::Learnable, 4, 3);
  expect_error([&] { learnable.apply(zeros({2, 5, 4}), zeros({2, 5, 4})); }, {"heed::AttentionScaling", "3 heads"});
  expect_error([&] { learnable.apply(zeros({1, 3, 5, 2}), zeros({1, 3, 5, 2})); }, {"heed::AttentionScaling"});
}

// ---- MultiHeadAttention ----------------------------------------------------------------------

namespace {

nn::MultiHeadAttentionOptions mha_options(int64_t C, int64_t H, ProjectionLayout layout, bool shared_kv,
                                          bool bias = true) {
  nn::MultiHeadAttentionOptions o;
  o.d_model = C;
  o.heads = H;
  o.layout = layout;
  o.shared_kv = shared_kv;
  o.bias = bias;
  return o;
}

struct LayoutCase {
  ProjectionLayout layout;
  bool shared_kv;
  bool bias;
};
const LayoutCase kLayouts[] = {
    {ProjectionLayout::Separate, false, true},  {ProjectionLayout::Separate, true, true},
    {ProjectionLayout::FusedQKV, false, true},  {ProjectionLayout::FusedQKV, true, true},
    {ProjectionLayout::PerHead, false, true},   {ProjectionLayout::PerHead, true, true},
    {ProjectionLayout::Separate, false, false}, {ProjectionLayout::FusedQKV, false, false},
    {ProjectionLayout::PerHead, true, false},
};

std::string layout_name(const LayoutCase& c) {
  return std::string(nn::projection_layout_name(c.layout)) + (c.shared_kv ? " shared_kv" : "") +
         (c.bias ? "" : " no bias");
}

}  // namespace

TEST_CASE("MultiHeadAttention: parameter names and shapes of each layout") {
  const int64_t C = 8, H = 2;
  auto names_and_shapes = [](const nn::Module& m) {
    std::vector<std::string> out;
    for (const auto& [name, t] : m.named_parameters()) out.push_back(name + shape_str(t.shape()));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(names_and_shapes(nn::MultiHeadAttention(mha_options(C, H, ProjectionLayout::Separate, false))) ==
        V{"q_proj.weight[8, 8]", "q_proj.bias[8]", "k_proj.weight[8, 8]", "k_proj.bias[8]", "v_proj.weight[8, 8]",
          "v_proj.bias[8]", "out_proj.weight[8, 8]", "out_proj.bias[8]"});
  CHECK(names_and_shapes(nn::MultiHeadAttention(mha_options(C, H, ProjectionLayout::Separate, true))) ==
        V{"q_proj.weight[8, 8]", "q_proj.bias[8]", "kv_proj.weight[8, 8]", "kv_proj.bias[8]", "out_proj.weight[8, 8]",
          "out_proj.bias[8]"});
  CHECK(names_and_shapes(nn::MultiHeadAttention(mha_options(C, H, ProjectionLayout::FusedQKV, false))) ==
        V{"qkv_proj.weight[24, 8]", "qkv_proj.bias[24]", "out_proj.weight[8, 8]", "out_proj.bias[8]"});
  CHECK(names_and_shapes(nn::MultiHeadAttention(mha_options(C, H, ProjectionLayout::FusedQKV, true, false))) ==
        V{"qkv_proj.weight[16, 8]", "out_proj.weight[8, 8]"});
  nn::MultiHeadAttention per_head(mha_options(C, H, ProjectionLayout::PerHead, false));
  const V per_head_names = names_and_shapes(per_head);
  REQUIRE(per_head_names.size() == 2 * 6 + 2);
  CHECK(per_head_names[0] == "heads.0.q_proj.weight[4, 8]");
  CHECK(per_head_names[6] == "heads.1.q_proj.weight[4, 8]");
  CHECK(per_head_names[10] == "heads.1.v_proj.weight[4, 8]");
  CHECK(per_head.num_parameters() == 3 * (C * C + C) + C * C + C);
  nn::MultiHeadAttention learnable([&] {
    auto o = mha_options(C, H, ProjectionLayout::Separate, false);
    o.scale = AttentionScale::Affine;
    return o;
  }());
  const V learnable_names = names_and_shapes(learnable);
  CHECK(learnable_names[learnable_names.size() - 2] == "scaling.alpha[2]");
  CHECK(learnable_names.back() == "scaling.beta[2]");
  CHECK(learnable.d_head() == 4);
}

TEST_CASE("MultiHeadAttention: every layout, shared K/V and bias against loops over its own weights") {
  const int64_t B = 2, T = 3, S = 5, C = 6, H = 3;
  const Values x = ref::random_values(B * T * C, 700);
  const Values mem = ref::random_values(B * S * C, 701);
  const Values mem2 = ref::random_values(B * S * C, 702);
  for (const LayoutCase& lc : kLayouts) {
    CAPTURE(layout_name(lc));
    manual_seed(13);
    const nn::MultiHeadAttentionOptions o = mha_options(C, H, lc.layout, lc.shared_kv, lc.bias);
    nn::MultiHeadAttention mha(o);
    const ref::MhaWeights w = ref::mha_weights(ref::params_of(mha), "", o);
    // Self-attention with a causal mask and key padding.
    ref::MaskSpec spec;
    spec.causal = true;
    spec.key_padding = {false, false, true, false, false, false};
    F::AttentionMask mask;
    mask.causal = true;
    mask.key_padding = bool_tensor(spec.key_padding, {B, T});
    Values want_weights;
    const Values want = ref::multi_head_attention(w, x, x, x, B, T, T, spec, &want_weights);
    Tensor xt = to_tensor(x, {B, T, C}, kFloat32);
    F::AttentionResult r = mha.forward(xt, mask, true);
    CHECK(r.output.shape() == Dims{B, T, C});
    CHECK(r.weights.shape() == Dims{B, H, T, T});
    check_close(r.output, want, 1e-5, 1e-5, "self float32");
    check_close(r.weights, want_weights, 1e-5, 1e-6, "self weights float32");
    CHECK_FALSE(mha.forward(xt, mask).weights.defined());
    // Cross-attention: keys and values from other tensors (distinct key and value too).
    ref::MaskSpec lengths;
    lengths.key_lengths = {5, 2};
    F::AttentionMask lengths_mask;
    lengths_mask.key_lengths = from_vector(lengths.key_lengths, {B});
    const Values want_cross = ref::multi_head_attention(w, x, mem, mem2, B, T, S, lengths);
    check_close(
        mha.forward(xt, to_tensor(mem, {B, S, C}, kFloat32), to_tensor(mem2, {B, S, C}, kFloat32), lengths_mask).output,
        want_cross, 1e-5, 1e-5, "cross float32");
    // The same in float64, tightly.
    mha.to(kFloat64);
    check_close(mha.forward(to_tensor(x, {B, T, C}), mask).output, want, 1e-12, 1e-12, "self float64");
    check_close(
        mha.forward(to_tensor(x, {B, T, C}), to_tensor(mem, {B, S, C}), to_tensor(mem2, {B, S, C}), lengths_mask)
            .output,
        want_cross, 1e-12, 1e-12, "cross float64");
  }
}

TEST_CASE("MultiHeadAttention: gradcheck for every layout and shared K/V (inputs and all parameters)") {
  const int64_t B = 1, T = 3, C = 4, H = 2;
  for (const LayoutCase& lc : kLayouts) {
    CAPTURE(layout_name(lc));
    manual_seed(14);
    nn::MultiHeadAttention mha(mha_options(C, H, lc.layout, lc.shared_kv, lc.bias));
    mha.to(kFloat64);
    Tensor x = leaf(ref::random_values(B * T * C, 710), {B, T, C});
    Tensor mem = leaf(ref::random_values(B * 2 * C, 711), {B, 2, C});
    std::vector<Tensor> inputs{x, mem};
    for (const Tensor& p : mha.parameters()) inputs.push_back(p);
    F::AttentionMask causal;
    causal.causal = true;
    expect_gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], causal).output; }, inputs);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[1]).output; }, inputs);
  }
}

TEST_CASE("MultiHeadAttention: every scale mode through the module, gradcheck of the scale parameters") {
  const int64_t B = 1, T = 3, C = 4, H = 2;
  const Values x = ref::random_values(B * T * C, 720, 2.0);
  for (AttentionScale mode : kAllScales) {
    CAPTURE(nn::attention_scale_name(mode));
    manual_seed(15);
    nn::MultiHeadAttentionOptions o = mha_options(C, H, ProjectionLayout::FusedQKV, false);
    o.scale = mode;
    o.fixed_scale = 0.9;
    nn::MultiHeadAttention mha(o);
    mha.to(kFloat64);
    perturb_scale_parameters(*mha.scaling, 9);
    ref::MaskSpec causal;
    causal.causal = true;
    F::AttentionMask m;
    m.causal = true;
    const Values want =
        ref::multi_head_attention(ref::mha_weights(ref::params_of(mha), "", o), x, x, x, B, T, T, causal);
    check_close(mha.forward(to_tensor(x, {B, T, C}), m).output, want, 1e-12, 1e-12, "forward");
    // Gradcheck the input and the scale parameters (the projections are covered above).
    std::vector<Tensor> inputs{leaf(x, {B, T, C})};
    for (const Tensor& p : mha.scaling->parameters()) inputs.push_back(p);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], m).output; }, inputs);
  }
}

TEST_CASE("MultiHeadAttention: the scale is 1/sqrt(d_head), read back from the returned weights") {
  // d_model 16, 4 heads: d_head 4, so the scale is 1/2 (1/sqrt(d_model) would be 1/4).
  const int64_t C = 16, H = 4, T = 5;
  manual_seed(16);
  const nn::MultiHeadAttentionOptions o = mha_options(C, H, ProjectionLayout::Separate, false);
  nn::MultiHeadAttention mha(o);
  mha.to(kFloat64);
  const ref::MhaWeights w = ref::mha_weights(ref::params_of(mha), "", o);
  const Values x = ref::random_values(T * C, 730, 2.0);
  F::AttentionResult r = mha.forward(to_tensor(x, {1, T, C}), {}, true);
  const Values weights = ref::values(r.weights);  // (1,H,T,T)
  for (int64_t h = 0; h < H; ++h) {
    const Values q = ref::linear(x, C, w.wq[h], w.bq[h], 4), k = ref::linear(x, C, w.wk[h], w.bk[h], 4);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 1; j < T; ++j) {
        // log w_ij - log w_i0 = scale * (q_i.k_j - q_i.k_0)
        double dot_j = 0, dot_0 = 0;
        for (int d = 0; d < 4; ++d) {
          dot_j += q[i * 4 + d] * k[j * 4 + d];
          dot_0 += q[i * 4 + d] * k[d];
        }
        if (std::fabs(dot_j - dot_0) < 1e-3) continue;
        const double scale =
            (std::log(weights[(h * T + i) * T + j]) - std::log(weights[(h * T + i) * T])) / (dot_j - dot_0);
        CHECK(scale == doctest::Approx(0.5).epsilon(1e-9));
      }
  }
  CHECK(mha.scaling->effective_scale() == std::vector<double>(H, 0.5));
  expect_error([] { nn::MultiHeadAttention(mha_options(10, 4, ProjectionLayout::Separate, false)); },
               {"heed::MultiHeadAttention", "divisible"});
  expect_error([] { nn::MultiHeadAttention(mha_options(10, 4, ProjectionLayout::PerHead, false)); },
               {"heed::MultiHeadAttention", "10", "4"});
  expect_error([] { nn::MultiHeadAttention(mha_options(8, 0, ProjectionLayout::FusedQKV, false)); },
               {"heed::MultiHeadAttention"});
}

TEST_CASE("MultiHeadAttention: local window attention") {
  const int64_t B = 1, T = 6, C = 4, H = 2;
  for (int64_t window : {0, 1, 2}) {
    CAPTURE(window);
    manual_seed(17);
    nn::MultiHeadAttentionOptions o = mha_options(C, H, ProjectionLayout::Separate, false);
    o.window = window;
    nn::MultiHeadAttention mha(o);
    mha.to(kFloat64);
    const Values x = ref::random_values(B * T * C, 740);
    ref::MaskSpec spec;
    spec.window = window;
    Values want_weights;
    const Values want =
        ref::multi_head_attention(ref::mha_weights(ref::params_of(mha), "", o), x, x, x, B, T, T, spec, &want_weights);
    F::AttentionResult r = mha.forward(to_tensor(x, {B, T, C}), {}, true);
    check_close(r.output, want, 1e-12, 1e-12, "output");
    check_close(r.weights, want_weights, 1e-12, 1e-12, "weights");
    const Values w = ref::values(r.weights);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        if (std::abs(i - j) > window) CHECK(w[i * T + j] == 0.0);
    if (window == 1) {
      F::AttentionMask causal;
      causal.causal = true;
      expect_gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], causal).output; },
                       {leaf(x, {B, T, C})});
    }
  }
}

TEST_CASE("MultiHeadAttention: causal masking leaks nothing from future tokens") {
  const int64_t B = 2, T = 6, C = 8, H = 2, cut = 3;
  for (const LayoutCase& lc : kLayouts) {
    CAPTURE(layout_name(lc));
    manual_seed(18);
    nn::MultiHeadAttention mha(mha_options(C, H, lc.layout, lc.shared_kv, lc.bias));
    F::AttentionMask causal;
    causal.causal = true;
    Values x = ref::random_values(B * T * C, 750);
    Values changed = x;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = cut; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) changed[(b * T + t) * C + c] += 10.0 * std::sin(double(t + c));
    const Values a = ref::values(mha.forward(to_tensor(x, {B, T, C}, kFloat32), causal).output);
    const Values b = ref::values(mha.forward(to_tensor(changed, {B, T, C}, kFloat32), causal).output);
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = static_cast<size_t>((bb * T + t) * C + c);
          if (t < cut) {
            CHECK(a[i] == b[i]);
          } else if (c == 0) {
            CHECK(a[i] != b[i]);  // the later positions do see the change
          }
        }
    // No gradient flows from earlier outputs to later inputs.
    Tensor xt = to_tensor(x, {B, T, C}, kFloat32).requires_grad_(true);
    probe_sum(mha.forward(xt, causal).output.narrow(1, 0, cut), 3).backward();
    const Values g = ref::values(xt.grad().narrow(1, cut, T - cut));
    CHECK(g == Values(g.size(), 0.0));
  }
}

TEST_CASE("MultiHeadAttention: attention dropout is seeded, and off in eval mode") {
  const int64_t B = 2, T = 4, C = 8, H = 2;
  manual_seed(19);
  nn::MultiHeadAttentionOptions o = mha_options(C, H, ProjectionLayout::FusedQKV, false);
  o.dropout = 0.5;
  nn::MultiHeadAttention mha(o);
  Tensor x = randn({B, T, C});
  manual_seed(4);
  const Values a = ref::values(mha.forward(x).output);
  manual_seed(4);
  const Values b = ref::values(mha.forward(x).output);
  CHECK(a == b);
  const Values want = ref::multi_head_attention(ref::mha_weights(ref::params_of(mha), "", o), ref::values(x),
                                                ref::values(x), ref::values(x), B, T, T, {});
  CHECK(ref::max_abs_diff(a, want) > 1e-3);
  mha.eval();
  CHECK_FALSE(mha.out_proj->is_training());
  CHECK_FALSE(mha.scaling->is_training());
  check_close(mha.forward(x).output, want, 1e-5, 1e-5, "eval");
  mha.train();
  CHECK(mha.qkv_proj->is_training());
}

TEST_CASE("MultiHeadAttention: recorded weights for diagnostics") {
  manual_seed(20);
  nn::MultiHeadAttention mha(mha_options(4, 2, ProjectionLayout::Separate, false));
  Tensor x = randn({1, 3, 4});
  CHECK_FALSE(mha.last_weights().defined());
  mha.set_record_weights(true);
  F::AttentionResult r = mha.forward(x);
  CHECK_FALSE(r.weights.defined());
  REQUIRE(mha.last_weights().defined());
  CHECK(mha.last_weights().shape() == Dims{1, 2, 3, 3});
  CHECK_FALSE(mha.last_weights().requires_grad());
  check_close(mha.last_weights(), ref::values(mha.forward(x, {}, true).weights), 0, 0, "recorded");
}

TEST_CASE("MultiHeadAttention: misuse names the layer and the shapes") {
  nn::MultiHeadAttention mha(mha_options(8, 2, ProjectionLayout::Separate, false));
  const char* name = "heed::MultiHeadAttention";
  expect_error([&] { mha.forward(zeros({3, 8})); }, {name, "[3, 8]"});
  expect_error([&] { mha.forward(zeros({1, 3, 6})); }, {name, "[1, 3, 6]"});
  expect_error([&] { mha.forward(zeros({1, 3, 8}), zeros({2, 4, 8}), zeros({2, 4, 8})); }, {name, "batch"});
  expect_error([&] { mha.forward(zeros({1, 3, 8}), zeros({1, 4, 8}), zeros({1, 5, 8})); }, {name});
  expect_error([&] { mha.forward(zeros({1, 3, 8}), zeros({1, 4, 7}), zeros({1, 4, 8})); }, {name});
  expect_error([&] { mha.forward(zeros({1, 3, 8}), Tensor(), Tensor()); }, {name});
  F::AttentionMask m;
  m.key_padding = zeros({1, 4}, kBool);
  expect_error([&] { mha.forward(zeros({1, 3, 8}), m); }, {"heed::scaled_dot_product_attention", "key_padding"});
  m = {};
  m.key_lengths = from_vector(std::vector<int64_t>{4}, {1});
  expect_error([&] { mha.forward(zeros({1, 3, 8}), m); }, {"heed::scaled_dot_product_attention", "key_lengths"});
  auto with_dropout = mha_options(8, 2, ProjectionLayout::Separate, false);
  with_dropout.dropout = 1.0;
  expect_error([&] { nn::MultiHeadAttention bad(with_dropout); }, {name, "dropout"});
  nn::KVCache cache;
  mha.forward(zeros({2, 1, 8}), {}, false, &cache);
  expect_error([&] { mha.forward(zeros({3, 1, 8}), {}, false, &cache); }, {name, "batch"});
}

// ---- KV cache --------------------------------------------------------------------------------

TEST_CASE(
    "MultiHeadAttention: KV cache decoding matches the full forward, one token or chunks at a "
    "time") {
  const int64_t B = 2, T = 7, C = 8, H = 2;
  const Values x = ref::random_values(B * T * C, 760);
  for (const LayoutCase& lc : kLayouts)
    for (int64_t window : {-1, 2}) {
      CAPTURE(layout_name(lc));
      CAPTURE(window);
      manual_seed(21);
      nn::MultiHeadAttentionOptions o = mha_options(C, H, lc.layout, lc.shared_kv, lc.bias);
      o.window = window;
      nn::MultiHeadAttention mha(o);
      F::AttentionMask causal;
      causal.causal = true;
      Tensor xt = to_tensor(x, {B, T, C}, kFloat32);
      const Values full = ref::values(mha.forward(xt, causal).output);
      for (const std::vector<int64_t>& chunks :
           {std::vector<int64_t>(T, 1), std::vector<int64_t>{3, 2, 2}, std::vector<int64_t>{1, 4, 1, 1}}) {
        nn::KVCache cache;
        Values stepped;
        int64_t done = 0;
        for (int64_t n : chunks) {
          Tensor out = mha.forward(xt.narrow(1, done, n), causal, false, &cache).output;  // (B,n,C)
          CHECK(out.shape() == Dims{B, n, C});
          done += n;
          CHECK(cache.length() == done);
          CHECK(cache.k.shape() == Dims{B, H, done, C / H});
          const Values ov = ref::values(out);
          stepped.insert(stepped.end(), ov.begin(), ov.end());
        }
        // stepped is chunk-major; reorder to (B,T,C).
        Values reordered(stepped.size());
        int64_t start = 0;
        size_t pos = 0;
        for (int64_t n : chunks) {
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < n; ++t)
              for (int64_t c = 0; c < C; ++c) reordered[((b * T) + start + t) * C + c] = stepped[pos++];
          start += n;
        }
        check_close(reordered, full, 1e-5, 1e-5, "cached decoding");
      }
    }
}

TEST_CASE("MultiHeadAttention: static cross-attention cache and KVCache::reorder") {
  const int64_t B = 3, T = 4, S = 5, C = 6, H = 3;
  manual_seed(22);
  nn::MultiHeadAttention mha(mha_options(C, H, ProjectionLayout::FusedQKV, false));
  Tensor x = randn({B, T, C}), memory = randn({B, S, C});
  ref::MaskSpec lengths_spec;
  lengths_spec.key_lengths = {5, 3, 1};
  F::AttentionMask lengths;
  lengths.key_lengths = from_vector(lengths_spec.key_lengths, {B});
  const Values full = ref::values(mha.forward(x, memory, memory, lengths).output);

  nn::KVCache cross{Tensor(), Tensor(), true};
  Values stepped;
  for (int64_t t = 0; t < T; ++t) {
    // After the first step the memory argument is not projected again: pass zeros to prove it.
    Tensor mem_arg = t == 0 ? memory : zeros({B, S, C});
    const Values ov = ref::values(mha.forward(x.narrow(1, t, 1), mem_arg, mem_arg, lengths, false, &cross).output);
    CHECK(cross.length() == S);
    stepped.insert(stepped.end(), ov.begin(), ov.end());
  }
  Values reordered(stepped.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) reordered[(b * T + t) * C + c] = stepped[(t * B + b) * C + c];
  check_close(reordered, full, 1e-5, 1e-5, "static cache");

  // reorder: follow beams (2, 0, 0) and keep decoding a self-attention cache.
  F::AttentionMask causal;
  causal.causal = true;
  nn::KVCache self;
  mha.forward(x.narrow(1, 0, 2), causal, false, &self);
  const Values k_before = ref::values(self.k);
  Tensor beams = from_vector(std::vector<int64_t>{2, 0, 0}, {3});
  self.reorder(beams);
  CHECK(self.length() == 2);
  const Values k_after = ref::values(self.k);
  const size_t per_row = static_cast<size_t>(H * 2 * (C / H));
  for (size_t b = 0; b < 3; ++b) {
    const size_t src = b == 0 ? 2 : 0;
    CHECK(Values(k_after.begin() + b * per_row, k_after.begin() + (b + 1) * per_row) ==
          Values(k_before.begin() + src * per_row, k_before.begin() + (src + 1) * per_row));
  }
  // Continuing from the reordered cache equals a fresh run over the reordered batch.
  Tensor x_beams = index_select(x, 0, beams);
  Tensor next = mha.forward(x_beams.narrow(1, 2, 2), causal, false, &self).output;
  const Values want = ref::values(mha.forward(x_beams, causal).output.narrow(1, 2, 2));
  check_close(next, want, 1e-5, 1e-5, "after reorder");
  nn::KVCache empty;
  empty.reorder(beams);  // nothing cached: a no-op
  CHECK(empty.length() == 0);
  // reset() empties a cache but keeps it static.
  cross.reset();
  CHECK(cross.length() == 0);
  CHECK(cross.is_static);
  const Values again = ref::values(mha.forward(x.narrow(1, 0, 1), memory, memory, lengths, false, &cross).output);
  CHECK(cross.length() == S);
  check_close(again, Values(stepped.begin(), stepped.begin() + B * C), 1e-6, 1e-6, "after reset");
}

// ---- AdditiveAttention -----------------------------------------------------------------------

namespace {

// Bahdanau attention with plain loops: score_ij = v . tanh(Wq q_i + Wk k_j + bk).
Values additive_reference(const ref::ParamMap& p, const Values& q, const Values& k, const Values& val, int64_t B,
                          int64_t T, int64_t S, int64_t Dq, int64_t Dk, int64_t Dv, int64_t A,
                          const ref::MaskSpec& mask, Values* weights) {
  const Values wq = ref::param(p, "w_query.weight"), wk = ref::param(p, "w_key.weight");
  const Values bk = ref::param(p, "w_key.bias"), v = ref::param(p, "v");
  Values out(static_cast<size_t>(B * T * Dv), 0.0);
  weights->assign(static_cast<size_t>(B * T * S), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const Values qp = ref::linear(Values(q.begin() + b * T * Dq, q.begin() + (b + 1) * T * Dq), Dq, wq, {}, A);
    const Values kp = ref::linear(Values(k.begin() + b * S * Dk, k.begin() + (b + 1) * S * Dk), Dk, wk, bk, A);
    for (int64_t i = 0; i < T; ++i) {
      Values s(static_cast<size_t>(S));
      double best = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double score = 0;
        for (int64_t a = 0; a < A; ++a) score += v[a] * std::tanh(qp[i * A + a] + kp[j * A + a]);
        if (mask.additive) score += mask.additive(b, 0, i, j);
        s[j] = mask.allowed(b, 0, i, j, T, S) ? score : -INFINITY;
        best = std::max(best, s[j]);
      }
      if (best == -INFINITY) continue;
      double total = 0;
      for (int64_t j = 0; j < S; ++j) total += std::exp(s[j] - best);
      for (int64_t j = 0; j < S; ++j) {
        const double w = std::exp(s[j] - best) / total;
        (*weights)[(b * T + i) * S + j] = w;
        for (int64_t d = 0; d < Dv; ++d) out[(b * T + i) * Dv + d] += w * val[(b * S + j) * Dv + d];
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("AdditiveAttention: against a float64 loop, with masks, fully masked rows and gradcheck") {
  const int64_t B = 2, T = 3, S = 4, Dq = 3, Dk = 5, Dv = 2, A = 4;
  manual_seed(23);
  nn::AdditiveAttention attn(Dq, Dk, A);
  CHECK(attn.v.shape() == Dims{A});
  CHECK(attn.num_parameters() == A * Dq + A * Dk + A + A);
  attn.to(kFloat64);
  const ref::ParamMap p = ref::params_of(attn);
  const Values q = ref::random_values(B * T * Dq, 780), k = ref::random_values(B * S * Dk, 781);
  const Values v = ref::random_values(B * S * Dv, 782);
  struct Case {
    std::string name;
    F::AttentionMask mask;
    ref::MaskSpec spec;
  };
  std::vector<Case> cases(4);
  cases[0].name = "no mask";
  cases[1].name = "key_lengths with an empty batch";
  cases[1].spec.key_lengths = {0, 3};
  cases[1].mask.key_lengths = from_vector(cases[1].spec.key_lengths, {B});
  cases[2].name = "key_padding + causal";
  cases[2].spec.key_padding = {false, true, false, false, false, false, false, true};
  cases[2].mask.key_padding = bool_tensor(cases[2].spec.key_padding, {B, S});
  cases[2].spec.causal = cases[2].mask.causal = true;
  cases[3].name = "additive";
  const Values add = ref::random_values(T * S, 783);
  cases[3].mask.additive = to_tensor(add, {T, S});
  cases[3].spec.additive = [add](int64_t, int64_t, int64_t i, int64_t j) { return add[i * S + j]; };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Values want_weights;
    const Values want = additive_reference(p, q, k, v, B, T, S, Dq, Dk, Dv, A, c.spec, &want_weights);
    Tensor qt = leaf(q, {B, T, Dq}), kt = leaf(k, {B, S, Dk}), vt = leaf(v, {B, S, Dv});
    F::AttentionResult r = attn.forward(qt, kt, vt, c.mask);
    CHECK(r.output.shape() == Dims{B, T, Dv});
    CHECK(r.weights.shape() == Dims{B, T, S});
    check_close(r.output, want, 1e-12, 1e-12, "output");
    check_close(r.weights, want_weights, 1e-12, 1e-12, "weights");
    CHECK(isfinite_all(r.output));
    std::vector<Tensor> inputs{qt, kt, vt};
    for (const Tensor& t : attn.parameters()) inputs.push_back(t);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return attn.forward(in[0], in[1], in[2], c.mask).output; },
                     inputs);
  }
}

TEST_CASE("AdditiveAttention: misuse") {
  nn::AdditiveAttention attn(3, 5, 4);
  const char* name = "heed::AdditiveAttention";
  expect_error([&] { attn.forward(zeros({3, 3}), zeros({2, 4, 5}), zeros({2, 4, 2})); }, {name, "[3, 3]"});
  expect_error([&] { attn.forward(zeros({2, 3, 3}), zeros({2, 4, 5}), zeros({2, 3, 2})); }, {name, "[2, 3, 2]"});
  expect_error([&] { attn.forward(zeros({1, 3, 3}), zeros({2, 4, 5}), zeros({2, 4, 2})); }, {name});
  expect_error([&] { attn.forward(zeros({2, 3, 4}), zeros({2, 4, 5}), zeros({2, 4, 2})); }, {"heed::linear"});
  F::AttentionMask m;
  m.key_padding = zeros({2, 3}, kBool);
  expect_error(
      [&] {
        attn.forward(zeros({2, 3, 3}), zeros({2, 4, 5}), zeros({2, 4, 2}), m);
      },
      {name, "key_padding", "[2, 3]"});
  m = {};
  m.additive = zeros({3, 5});
  expect_error([&] { attn.forward(zeros({2, 3, 3}), zeros({2, 4, 5}), zeros({2, 4, 2}), m); }, {name, "additive"});
  m.additive = zeros({3, 4}, kInt64);
  expect_error([&] { attn.forward(zeros({2, 3, 3}), zeros({2, 4, 5}), zeros({2, 4, 2}), m); }, {name, "floating"});
}

TEST_CASE("F::scaled_dot_product_attention: no keys gives zeros, no queries an empty output") {
  Tensor q = leaf(ref::random_values(24, 460), {2, 3, 4});
  Tensor out = F::scaled_dot_product_attention(q, zeros({2, 0, 4}, kFloat64), zeros({2, 0, 5}, kFloat64));
  CHECK(out.shape() == Dims{2, 3, 5});
  CHECK(ref::values(out) == Values(30, 0.0));
  sum(out).backward();
  REQUIRE(q.grad().defined());
  CHECK(ref::values(q.grad()) == Values(24, 0.0));
  F::AttentionMask causal;
  causal.causal = true;
  Tensor none = F::scaled_dot_product_attention(zeros({2, 0, 4}), randn({2, 3, 4}), randn({2, 3, 5}), causal);
  CHECK(none.shape() == Dims{2, 0, 5});
}
