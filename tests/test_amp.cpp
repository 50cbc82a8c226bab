// tests/test_amp.cpp — mixed precision on the CPU (float16/bfloat16 storage, float32 math):
// Autocast scopes (nesting, disabling, per-thread state), the dtype each op returns under
// autocast and its values against float64 loops on the rounded inputs, gradients reaching
// float32 master weights, the per-scope cast cache (one conversion per weight, invalidated
// by in-place updates), GradScaler (overflow skips and backoff, growth, unscale_, misuse,
// state dict), fp16 training without loss scaling underflowing (zero gradients, a stalled
// loss) where the scaled run trains, and bf16/fp16 training of a small Transformer LM tracking
// float32 training.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace heed;

namespace {

// Half the spacing of 16-bit floats relative to the value: the largest relative error of
// one rounding to nearest.
double unit_roundoff(DType dtype) { return dtype == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8); }

std::vector<double> values(const Tensor& t) { return t.detach().to(kFloat64).contiguous().to_vector<double>(); }

// The values `t` takes after rounding to `dtype`, in float64.
std::vector<double> rounded(const Tensor& t, DType dtype) { return values(t.detach().to(dtype)); }

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// got[i] within bound[i] of want[i] for every i; reports the first failure.
void check_within(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& bound,
                  const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= bound[i])) {
      FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected " << want[i] << " within " << bound[i]);
      return;
    }
  }
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < want.size(); ++i) bound[i] = atol + rtol * std::fabs(want[i]);
  check_within(got, want, bound, what);
}

// (batch, m, k) @ (batch, k, n) on row-major float64 data.
std::vector<double> naive_bmm(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                              int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a[(t * m + i) * k + p] * b[(t * k + p) * n + j];
        c[(t * m + i) * n + j] = s;
      }
  return c;
}

// Runs `body` once for each autocast dtype (as a doctest subcase).
template <typename Body>
void for_each_autocast_dtype(Body body) {
  for (DType dtype : {kFloat16, kBFloat16}) {
    SUBCASE(std::string(dtype_name(dtype)).c_str()) { body(dtype); }
  }
}

}  // namespace

// ---- the scope ------------------------------------------------------------------------------

TEST_CASE("amp::Autocast: scopes nest and restore, nullopt disables, state is per thread") {
  CHECK_FALSE(amp::autocast_enabled());
  CHECK_FALSE(amp::autocast_dtype().has_value());
  {
    amp::Autocast outer(kFloat16);
    CHECK(amp::autocast_enabled());
    CHECK(amp::autocast_dtype() == kFloat16);
    {
      amp::Autocast inner(kBFloat16);
      CHECK(amp::autocast_dtype() == kBFloat16);
      {
        amp::Autocast off(std::nullopt);
        CHECK_FALSE(amp::autocast_enabled());
        CHECK_FALSE(amp::autocast_dtype().has_value());
        CHECK(matmul(ones({2, 3}), ones({3, 2})).dtype() == kFloat32);
      }
      CHECK(amp::autocast_dtype() == kBFloat16);
      CHECK(matmul(ones({2, 3}), ones({3, 2})).dtype() == kBFloat16);
    }
    CHECK(amp::autocast_dtype() == kFloat16);
    bool other_thread_enabled = true;
    std::thread([&] { other_thread_enabled = amp::autocast_enabled(); }).join();
    CHECK_FALSE(other_thread_enabled);
  }
  CHECK_FALSE(amp::autocast_enabled());
  CHECK(matmul(ones({2, 3}), ones({3, 2})).dtype() == kFloat32);
}

TEST_CASE("amp::Autocast: only 16-bit float dtypes") {
  for (DType bad : {kFloat32, kFloat64, kInt64, kBool}) {
    try {
      amp::Autocast scope(bad);
      FAIL("accepted " << dtype_name(bad));
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("amp::Autocast") != std::string::npos);
      CHECK(message.find(std::string(dtype_name(bad))) != std::string::npos);
    }
  }
  CHECK_FALSE(amp::autocast_enabled());  // a failed construction leaves the state alone
}

// ---- op dtypes and values under autocast ----------------------------------------------------

TEST_CASE("autocast: matmul computes 16-bit inputs with float32 accumulation, 16-bit output") {
  for_each_autocast_dtype([](DType dtype) {
    manual_seed(11);
    struct Case {
      Tensor a, b;
      int64_t batch, m, k, n;
      Dims a_full, b_full, out_shape;
    };
    const Tensor at = randn({7, 5});  // transposed below: a non-contiguous (5, 7) operand
    std::vector<Case> cases = {
        {randn({3, 5}), randn({5, 4}), 1, 3, 5, 4, {1, 3, 5}, {1, 5, 4}, {3, 4}},
        {randn({2, 3, 5}), randn({5, 4}), 2, 3, 5, 4, {2, 3, 5}, {2, 5, 4}, {2, 3, 4}},
        {randn({2, 1, 3, 5}), randn({4, 5, 6}), 8, 3, 5, 6, {2, 4, 3, 5}, {2, 4, 5, 6}, {2, 4, 3, 6}},
        {at.t(), randn({7, 2}), 1, 5, 7, 2, {1, 5, 7}, {1, 7, 2}, {5, 2}},
        {randn({64, 96}), randn({96, 48}), 1, 64, 96, 48, {1, 64, 96}, {1, 96, 48}, {64, 48}},
    };
    for (const Case& c : cases) {
      Tensor out;
      {
        amp::Autocast autocast(dtype);
        out = matmul(c.a, c.b);
      }
      REQUIRE(out.dtype() == dtype);
      REQUIRE(out.shape() == c.out_shape);
      // Reference: float64 product of the inputs rounded to 16 bits; the only further error
      // is the output's rounding (plus float32 accumulation, far below it).
      const std::vector<double> a = values(c.a.detach().to(dtype).to(kFloat64).expand(c.a_full).contiguous());
      const std::vector<double> b = values(c.b.detach().to(dtype).to(kFloat64).expand(c.b_full).contiguous());
      const std::vector<double> want = naive_bmm(a, b, c.batch, c.m, c.k, c.n);
      check_close(values(out), want, unit_roundoff(dtype) * 1.001, 1e-5, "matmul " + shape_str(c.out_shape));
      // And against the float32 product of the unrounded inputs: within 16-bit tolerances.
      const std::vector<double> full = values(matmul(c.a, c.b));
      check_close(values(out), full, 0.0, 8 * unit_roundoff(dtype) * std::sqrt(double(c.k)) * max_abs(full) + 1e-5,
                  "matmul vs float32");
    }
    // A float64 operand is never cast down; the float32 one is, then promotion gives float64.
    const Tensor a64 = randn({3, 4}, kFloat64), b32 = randn({4, 2});
    Tensor mixed;
    {
      amp::Autocast autocast(dtype);
      mixed = matmul(a64, b32);
    }
    CHECK(mixed.dtype() == kFloat64);
    check_close(values(mixed), naive_bmm(values(a64), rounded(b32, dtype), 1, 3, 4, 2), 1e-12, 1e-12,
                "float64 @ autocast float32");
  });
}

TEST_CASE("autocast: linear casts input, weight and bias; nn::Linear too") {
  for_each_autocast_dtype([](DType dtype) {
    manual_seed(12);
    const Tensor x = randn({4, 3, 6});
    const Tensor w = randn({5, 6}).requires_grad_(), b = randn({5}).requires_grad_();
    Tensor out;
    {
      amp::Autocast autocast(dtype);
      out = F::linear(x, w, b);
    }
    REQUIRE(out.dtype() == dtype);
    REQUIRE(out.shape() == Dims{4, 3, 5});
    const std::vector<double> xv = rounded(x, dtype), wv = rounded(w, dtype), bv = rounded(b, dtype);
    std::vector<double> want(60), bound(60);
    for (int64_t r = 0; r < 12; ++r)
      for (int64_t o = 0; o < 5; ++o) {
        double p = 0;
        for (int64_t i = 0; i < 6; ++i) p += xv[r * 6 + i] * wv[o * 6 + i];
        want[r * 5 + o] = p + bv[o];
        // The product is rounded to 16 bits, then the sum with the bias: u |p| + u |p + b|,
        // up to second-order terms.
        const double u = unit_roundoff(dtype);
        bound[r * 5 + o] = (1 + 2 * u) * u * (std::fabs(p) + std::fabs(p + bv[o])) + 1e-6;
      }
    check_within(values(out), want, bound, "linear");

    nn::Linear layer(6, 5);
    Tensor y;
    {
      amp::Autocast autocast(dtype);
      y = layer.forward(x);
    }
    CHECK(y.dtype() == dtype);
    CHECK(layer.weight.dtype() == kFloat32);  // master weights stay float32
  });
}

TEST_CASE("autocast: softmax, log_softmax, layer_norm, cross_entropy and reductions run in float32") {
  for_each_autocast_dtype([](DType dtype) {
    manual_seed(13);
    const Tensor x16 = (randn({4, 7}) * 3.0).to(dtype);
    const std::vector<double> xv = values(x16);
    // Float64 references on the 16-bit values.
    std::vector<double> soft(28), logsoft(28), soft0(28);
    for (int r = 0; r < 4; ++r) {
      double mx = -INFINITY, total = 0;
      for (int c = 0; c < 7; ++c) mx = std::max(mx, xv[r * 7 + c]);
      for (int c = 0; c < 7; ++c) total += std::exp(xv[r * 7 + c] - mx);
      for (int c = 0; c < 7; ++c) {
        soft[r * 7 + c] = std::exp(xv[r * 7 + c] - mx) / total;
        logsoft[r * 7 + c] = xv[r * 7 + c] - mx - std::log(total);
      }
    }
    for (int c = 0; c < 7; ++c) {
      double total = 0;
      for (int r = 0; r < 4; ++r) total += std::exp(xv[r * 7 + c]);
      for (int r = 0; r < 4; ++r) soft0[r * 7 + c] = std::exp(xv[r * 7 + c]) / total;
    }
    const Tensor w = randn({7}), b = randn({7});
    const std::vector<double> wv = values(w), bv = values(b), w16 = rounded(w, dtype), b16 = rounded(b, dtype);
    auto layer_norm_ref = [&](const std::vector<double>& wr, const std::vector<double>& br) {
      std::vector<double> out(28);
      for (int r = 0; r < 4; ++r) {
        double mu = 0, var = 0;
        for (int c = 0; c < 7; ++c) mu += xv[r * 7 + c] / 7;
        for (int c = 0; c < 7; ++c) var += (xv[r * 7 + c] - mu) * (xv[r * 7 + c] - mu) / 7;
        for (int c = 0; c < 7; ++c) out[r * 7 + c] = (xv[r * 7 + c] - mu) / std::sqrt(var + 1e-5) * wr[c] + br[c];
      }
      return out;
    };
    const Tensor targets = from_vector<int64_t>({1, 0, 6, 3}, {4});
    double ce = 0;
    for (int r = 0; r < 4; ++r) ce -= logsoft[r * 7 + std::vector<int>{1, 0, 6, 3}[r]] / 4;
    double total = 0;
    std::vector<double> row_sum(4, 0.0);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 7; ++c) {
        total += xv[r * 7 + c];
        row_sum[r] += xv[r * 7 + c];
      }
    double var_all = 0;
    for (double v : xv) var_all += (v - total / 28) * (v - total / 28) / 27;

    amp::Autocast autocast(dtype);
    const Tensor s = F::softmax(x16, -1), ls = F::log_softmax(x16, -1), s0 = F::softmax(x16, 0);
    const Tensor ln = F::layer_norm(x16, w, b), ln16 = F::layer_norm(x16, w.to(dtype), b.to(dtype));
    const Tensor loss = F::cross_entropy(x16, targets);
    const Tensor sum_all = sum(x16), sum_rows = sum(x16, {1}), mean_all = mean(x16), var_all_t = var(x16, {});
    for (const Tensor* t : {&s, &ls, &s0, &ln, &ln16, &loss, &sum_all, &sum_rows, &mean_all, &var_all_t})
      CHECK(t->dtype() == kFloat32);
    check_close(values(s), soft, 1e-6, 1e-7, "softmax");
    check_close(values(ls), logsoft, 1e-6, 1e-6, "log_softmax");
    check_close(values(s0), soft0, 1e-6, 1e-7, "softmax dim 0");
    check_close(values(ln), layer_norm_ref(wv, bv), 1e-5, 1e-5, "layer_norm");
    check_close(values(ln16), layer_norm_ref(w16, b16), 1e-5, 1e-5, "layer_norm 16-bit affine");
    check_close(values(loss), {ce}, 1e-6, 1e-6, "cross_entropy");
    check_close(values(sum_all), {total}, 1e-6, 1e-5, "sum");
    check_close(values(sum_rows), row_sum, 1e-6, 1e-5, "sum over dim 1");
    check_close(values(mean_all), {total / 28}, 1e-6, 1e-6, "mean");
    check_close(values(var_all_t), {var_all}, 1e-5, 1e-6, "var");
    // Ops outside both lists keep their usual dtype rules.
    CHECK(F::softmax(x16.to(kFloat32), -1).dtype() == kFloat32);
    CHECK(sum(x16.to(kFloat64)).dtype() == kFloat64);
    CHECK(sum(from_vector<int64_t>({1, 2}, {2})).dtype() == kInt64);
    CHECK((x16 + x16).dtype() == dtype);
    CHECK(relu(x16).dtype() == dtype);
    CHECK((x16 + ones({7})).dtype() == kFloat32);  // promotion, as without autocast
  });
  // Without autocast the same ops keep 16-bit results (autocast is what changed them).
  const Tensor h = randn({2, 3}).to(kFloat16);
  CHECK(F::softmax(h, -1).dtype() == kFloat16);
  CHECK(sum(h).dtype() == kFloat16);
  CHECK(var(h, {}).dtype() == kFloat16);
}

TEST_CASE("autocast: attention takes 16-bit q, k, v, keeps float32 scores, returns 16-bit") {
  for_each_autocast_dtype([](DType dtype) {
    manual_seed(14);
    const int64_t B = 2, H = 2, T = 5, S = 6, D = 8;
    const Tensor q = randn({B, H, T, D}).to(dtype), k = randn({B, H, S, D}).to(dtype),
                 v = randn({B, H, S, D}).to(dtype);
    // softmax(q k^T / sqrt(D)) v in float64 for (B, H, L, D) inputs.
    auto reference = [](const Tensor& qt, const Tensor& kt, const Tensor& vt, bool causal) {
      const int64_t B = qt.size(0), H = qt.size(1), T = qt.size(2), S = kt.size(2), D = qt.size(3);
      const std::vector<double> qv = values(qt), kv = values(kt), vv = values(vt);
      std::vector<double> out(static_cast<size_t>(B * H * T * D), 0.0);
      const double scale = 1.0 / std::sqrt(double(D));
      for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> s(S, -INFINITY);
          double mx = -INFINITY;
          for (int64_t j = 0; j < S; ++j) {
            if (causal && j > i + (S - T)) continue;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qv[(bh * T + i) * D + d] * kv[(bh * S + j) * D + d];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          double total = 0;
          for (int64_t j = 0; j < S; ++j) total += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
          for (int64_t j = 0; j < S; ++j) {
            const double p = std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx) / total;
            for (int64_t d = 0; d < D; ++d) out[(bh * T + i) * D + d] += p * vv[(bh * S + j) * D + d];
          }
        }
      return out;
    };
    for (bool causal : {false, true}) {
      Tensor out;
      {
        amp::Autocast autocast(dtype);
        out = F::scaled_dot_product_attention(q, k, v, {}, 0.0, std::nullopt, causal);
      }
      REQUIRE(out.dtype() == dtype);
      check_close(values(out), reference(q, k, v, causal), 1.001 * unit_roundoff(dtype), 1e-5,
                  causal ? "causal attention" : "attention");
    }
    // Scores of ~2.5e5 overflow float16 (max 65504) but not the float32 scores: finite output.
    const Tensor big_q = full({1, 1, 2, D}, 250.0).to(dtype), big_k = full({1, 1, 3, D}, 250.0).to(dtype);
    const Tensor small_v = randn({1, 1, 3, D}).to(dtype);
    Tensor big;
    {
      amp::Autocast autocast(dtype);
      big = F::scaled_dot_product_attention(big_q, big_k, small_v);
    }
    CHECK(isfinite_all(big));
    check_close(values(big), reference(big_q, big_k, small_v, false), 1.001 * unit_roundoff(dtype), 1e-5,
                "huge scores");
    // Through the layer: float32 activations in, 16-bit out, float32 parameter gradients.
    nn::MultiHeadAttention mha({.d_model = 16, .heads = 2, .layout = nn::ProjectionLayout::FusedQKV});
    const Tensor x = randn({2, 5, 16});
    Tensor y;
    {
      amp::Autocast autocast(dtype);
      F::AttentionMask causal;
      causal.causal = true;
      y = mha.forward(x, x, x, causal).output;
    }
    CHECK(y.dtype() == dtype);
    sum(y.to(kFloat32)).backward();
    for (const auto& [name, p] : mha.named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == kFloat32);
      CHECK(isfinite_all(p.grad()));
    }
  });
}

// ---- gradients ------------------------------------------------------------------------------

TEST_CASE("autocast: gradients reach the float32 master weights as float32") {
  for_each_autocast_dtype([](DType dtype) {
    manual_seed(15);
    const int64_t N = 6, I = 5, O = 4;
    const Tensor x = randn({N, I});
    Tensor w = randn({O, I}).requires_grad_(), b = randn({O}).requires_grad_();
    // L = mean(y^2) with y = x W^T + b, and W used twice: L2 = L + mean(y'^2) with y' from
    // the same (cached) cast of W.
    Tensor loss;
    {
      amp::Autocast autocast(dtype);
      const Tensor y = F::linear(x, w, b);
      loss = mean(y * y);
      CHECK(loss.dtype() == kFloat32);
    }
    loss.backward();
    REQUIRE(w.grad().defined());
    REQUIRE(b.grad().defined());
    CHECK(w.grad().dtype() == kFloat32);
    CHECK(b.grad().dtype() == kFloat32);
    CHECK(w.dtype() == kFloat32);
    // float64 reference of the exact gradient: dL/dW[o][i] = sum_n 2 y[n][o] x[n][i] / (N O),
    // dL/db[o] = sum_n 2 y[n][o] / (N O).
    const std::vector<double> xv = values(x), wv = values(w), bv = values(b);
    std::vector<double> gw(O * I, 0.0), gb(O, 0.0);
    // Error bounds: each term 2 y x / (N O) passes through about ten 16-bit roundings (x, w,
    // b, the product, the bias sum, the upstream gradients, the weight gradient), and the
    // rounding of w, x, b perturbs y by u times its magnitude sum_i |x w| + |b|.
    std::vector<double> bound_w(O * I, 0.0), bound_b(O, 0.0);
    const double c = 10 * unit_roundoff(dtype);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        double y = bv[o], y_magnitude = std::fabs(bv[o]);
        for (int64_t i = 0; i < I; ++i) {
          y += xv[n * I + i] * wv[o * I + i];
          y_magnitude += std::fabs(xv[n * I + i] * wv[o * I + i]);
        }
        gb[o] += 2 * y / double(N * O);
        bound_b[o] += c * 2 * y_magnitude / double(N * O);
        for (int64_t i = 0; i < I; ++i) {
          gw[o * I + i] += 2 * y * xv[n * I + i] / double(N * O);
          bound_w[o * I + i] += c * 2 * y_magnitude * std::fabs(xv[n * I + i]) / double(N * O);
        }
      }
    check_within(values(w.grad()), gw, bound_w, "dL/dW");
    check_within(values(b.grad()), gb, bound_b, "dL/db");

    // Two uses of the weight in one scope: the gradients of both uses add up.
    w.zero_grad();
    b.zero_grad();
    {
      amp::Autocast autocast(dtype);
      const Tensor y1 = F::linear(x, w, b), y2 = F::linear(x, w, b);
      loss = mean(y1 * y1) + mean(y2 * y2);
    }
    loss.backward();
    std::vector<double> gw2 = gw, bound_w2 = bound_w;
    for (double& g : gw2) g *= 2;
    for (double& e : bound_w2) e *= 2.2;  // plus the rounding of the sum of both uses
    check_within(values(w.grad()), gw2, bound_w2, "dL/dW, weight used twice");
  });
}

// ---- the cast cache -------------------------------------------------------------------------

TEST_CASE("autocast: the cast cache converts a weight once per scope and sees in-place updates") {
  manual_seed(16);
  const Tensor x16 = randn({4, 6}).to(kFloat16);  // already 16-bit: only parameters convert
  Tensor w = randn({3, 6}).requires_grad_(), b = randn({3}).requires_grad_();
  const std::vector<double> w_before = values(w), bv = values(b);
  amp::reset_cast_cache_stats();
  {
    amp::Autocast autocast(kFloat16);
    const Tensor y1 = F::linear(x16, w, b);
    const Tensor y2 = F::linear(x16, w, b);
    const Tensor y3 = F::linear(x16, w, b);
    amp::CastCacheStats stats = amp::cast_cache_stats();
    CHECK(stats.conversions == 2);  // w and b once each
    CHECK(stats.hits == 4);
    CHECK(stats.entries == 2);
    CHECK(amp::cast_to_autocast_dtype(w).is_same(amp::cast_to_autocast_dtype(w)));  // same cast tensor
    CHECK(values(y1) == values(y3));

    // An in-place update bumps the version: the next use converts the new values.
    {
      NoGradGuard no_grad;
      w.add_(1.0);
    }
    const Tensor y4 = F::linear(x16, w, b);
    stats = amp::cast_cache_stats();
    CHECK(stats.conversions == 3);  // only w again
    const std::vector<double> v1 = values(y1), v4 = values(y4), xv = values(x16);
    std::vector<double> want(12), bound(12);
    const double u = unit_roundoff(kFloat16);
    for (int r = 0; r < 4; ++r)
      for (int o = 0; o < 3; ++o) {
        double row = 0, weight_rounding = 0;
        for (int i = 0; i < 6; ++i) {
          row += xv[r * 6 + i];
          weight_rounding += std::fabs(xv[r * 6 + i]) * (2 * std::fabs(w_before[o * 6 + i]) + 1);
        }
        const double y1 = v1[r * 3 + o], y4 = y1 + row, bias = bv[o];
        want[r * 3 + o] = y4;  // (W + 1) x + b = W x + b + sum(x)
        // y1 and y4 are each rounded twice (product, bias sum); W and W + 1 once each.
        bound[r * 3 + o] = 1.01 * u * (std::fabs(y1 - bias) + std::fabs(y1) + std::fabs(y4 - bias) + std::fabs(y4)) +
                           1.01 * u * weight_rounding + 1e-6;
      }
    check_within(v4, want, bound, "linear after the in-place update");

    // Nested scopes keep the cache; a bf16 scope has its own entries; a disabled one casts nothing.
    {
      amp::Autocast inner(kBFloat16);
      CHECK(F::linear(x16, w, b).dtype() == kBFloat16);
      // x16 (float16, not a parameter) is converted too, uncached
      CHECK(amp::cast_cache_stats().conversions == 6);
    }
    {
      amp::Autocast off(std::nullopt);
      CHECK(F::linear(x16.to(kFloat32), w, b).dtype() == kFloat32);
      CHECK(amp::cast_cache_stats().conversions == 6);
    }
    CHECK(amp::cast_cache_stats().entries == 4);
    // Activations (no grad) are converted at every use, never cached.
    const Tensor x32 = randn({4, 6});
    F::linear(x32, w, b);
    F::linear(x32, w, b);
    CHECK(amp::cast_cache_stats().conversions == 8);
    CHECK(amp::cast_cache_stats().entries == 4);
  }
  CHECK(amp::cast_cache_stats().entries == 0);  // dropped when the outermost scope exits
}

TEST_CASE("autocast: cached casts stay differentiable (no_grad use, backward inside the scope)") {
  manual_seed(17);
  const Tensor x = randn({5, 4});
  Tensor w = randn({3, 4}).requires_grad_();
  // Gradient of sum(x W^T) with respect to W: every row of W gets the column sums of x.
  Tensor single;
  {
    amp::Autocast autocast(kFloat16);
    sum(F::linear(x, w)).backward();
  }
  REQUIRE(w.grad().defined());
  single = w.grad().clone();
  std::vector<double> col(4, 0.0);
  const std::vector<double> xv = rounded(x, kFloat16);
  for (int r = 0; r < 5; ++r)
    for (int i = 0; i < 4; ++i) col[i] += xv[r * 4 + i];
  std::vector<double> want;
  for (int o = 0; o < 3; ++o) want.insert(want.end(), col.begin(), col.end());
  check_close(values(single), want, 2 * unit_roundoff(kFloat16), 1e-4, "dW");

  w.zero_grad();
  {
    amp::Autocast autocast(kFloat16);
    {
      NoGradGuard no_grad;  // caches a cast without history
      F::linear(x, w);
    }
    // Two forward/backward passes in one scope (gradient accumulation): the cached cast's
    // graph was consumed by the first backward, so the second converts again.
    sum(F::linear(x, w)).backward();
    sum(F::linear(x, w)).backward();
  }
  REQUIRE(w.grad().defined());
  std::vector<double> twice = values(single);
  for (double& g : twice) g *= 2;
  check_close(values(w.grad()), twice, 1e-6, 1e-6, "accumulated dW");
}

// ---- GradScaler -----------------------------------------------------------------------------

namespace {

// A linear regression y = x . w_true in float16 autocast, trained with AdamW and a scaler.
struct Regression {
  std::shared_ptr<nn::Linear> model;
  Tensor x, y;
  explicit Regression(uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<nn::Linear>(8, 1);
    x = randn({32, 8});
    const Tensor w_true = randn({8, 1});
    y = matmul(x, w_true) + 3.0;
  }
  // sum((pred - y)^2): its gradient with respect to pred is 2 (pred - y), times the scale.
  Tensor loss(const Tensor& input) const {
    amp::Autocast autocast(kFloat16);
    const Tensor pred = model->forward(input);
    CHECK(pred.dtype() == kFloat16);
    const Tensor diff = pred - y;
    return sum(diff * diff);
  }
};

}  // namespace

TEST_CASE("GradScaler: a float16 gradient overflow skips the step, backs off, and training continues") {
  Regression r(21);
  optim::AdamW optimizer(r.model->parameters(), {.lr = 0.05, .weight_decay = 0.0});
  amp::GradScaler scaler;  // PyTorch's defaults
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.options().growth_factor == 2.0);
  CHECK(scaler.options().backoff_factor == 0.5);
  CHECK(scaler.options().growth_interval == 2000);
  const double first_loss = r.loss(r.x).item<double>();
  int skipped = 0, stepped = 0;
  double expected_scale = 65536.0, last_loss = first_loss;
  for (int it = 0; it < 150; ++it) {
    const std::vector<double> before = values(r.model->weight);
    Tensor loss = r.loss(r.x);
    optimizer.zero_grad();
    const Tensor scaled = scaler.scale(loss);
    CHECK(scaled.item<double>() == doctest::Approx(loss.item<double>() * scaler.get_scale()).epsilon(1e-6));
    scaled.backward();
    // The float16 gradient of pred is 2 (pred - y) * scale: Inf beyond 65504.
    const bool did_step = scaler.step(optimizer);
    CHECK(did_step == !scaler.found_inf(optimizer));
    if (!did_step) {
      ++skipped;
      CHECK(values(r.model->weight) == before);  // untouched
      expected_scale *= 0.5;
    } else {
      ++stepped;
      CHECK(values(r.model->weight) != before);
    }
    scaler.update();
    CHECK(scaler.get_scale() == expected_scale);
    last_loss = loss.item<double>();
  }
  CHECK(skipped >= 1);  // 2 * |pred - y| * 65536 > 65504 for any error above 0.5
  CHECK(stepped >= 140);
  CHECK(optimizer.state(0, 0).step == stepped);  // skipped steps left the optimizer alone
  CHECK(isfinite_all(r.model->weight));
  CHECK(isfinite_all(r.model->bias));
  CHECK(last_loss < 0.05 * first_loss);

  // A batch whose forward overflows float16 (|pred| > 65504): Inf loss, the step is skipped,
  // the weights stay finite, and the next clean batch steps again.
  const std::vector<double> before = values(r.model->weight);
  const double scale_before = scaler.get_scale();
  Tensor loss = r.loss(r.x * 1e5);
  CHECK_FALSE(std::isfinite(loss.item<double>()));
  optimizer.zero_grad();
  scaler.scale(loss).backward();
  CHECK_FALSE(scaler.step(optimizer));
  scaler.update();
  CHECK(scaler.get_scale() == scale_before * 0.5);
  CHECK(values(r.model->weight) == before);
  CHECK(isfinite_all(r.model->weight));
  loss = r.loss(r.x);
  optimizer.zero_grad();
  scaler.scale(loss).backward();
  CHECK(scaler.step(optimizer));
  scaler.update();
  CHECK(isfinite_all(r.model->weight));
}

namespace {

// A regression whose per-example gradients are tiny: y = x w_true with |x| <= 1 and
// |w_true| <= 1e-5 over 8 features, so |y| <= 8e-5, and the gradient of mean((pred - y)^2)
// with respect to each prediction, 2 (pred - y) / 8192, is at most 2e-8 at the start: below
// half the smallest float16 subnormal (2^-25, about 3e-8), so it rounds to zero.
// Trains `steps` Adam steps (weight decay 0: a zero gradient moves nothing) from zero weights;
// `mode`: "fp32" (no autocast), "fp16" (autocast, no loss scaling) or "fp16+scaler".
struct TinyGradientRun {
  std::vector<double> losses;
  std::vector<double> weight_grad_max;  // max |dL/dw| after unscaling, per step
  std::vector<double> final_weight;
};

TinyGradientRun train_tiny_gradients(const std::string& mode, int steps) {
  Generator gen(77);
  const Tensor x = uniform({8192, 8}, -1.0, 1.0, gen);      // (N,F)
  const Tensor w_true = uniform({8, 1}, -1e-5, 1e-5, gen);  // (F,1)
  const Tensor y = matmul(x, w_true);                       // (N,1)
  nn::Linear model(8, 1);
  {
    NoGradGuard no_grad;
    model.weight.zero_();
    model.bias.zero_();
  }
  optim::Adam optimizer(model.parameters(), {.lr = 5e-7});
  amp::GradScaler scaler({.enabled = mode == "fp16+scaler"});
  TinyGradientRun run;
  for (int it = 0; it < steps; ++it) {
    Tensor loss;
    {
      amp::Autocast autocast(mode == "fp32" ? std::nullopt : std::optional<DType>(kFloat16));
      const Tensor diff = model.forward(x) - y;  // (N,1); fp16 predictions under autocast
      loss = mean(diff * diff);
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(optimizer);
    run.weight_grad_max.push_back(max_abs(values(model.weight.grad())));
    scaler.step(optimizer);
    scaler.update();
    run.losses.push_back(loss.item<double>());
  }
  run.final_weight = values(model.weight);
  return run;
}

}  // namespace

TEST_CASE("fp16 training without loss scaling underflows (zero gradients, the loss stalls); GradScaler trains") {
  constexpr int kSteps = 60;
  const TinyGradientRun fp32 = train_tiny_gradients("fp32", kSteps);
  const TinyGradientRun unscaled = train_tiny_gradients("fp16", kSteps);
  const TinyGradientRun scaled = train_tiny_gradients("fp16+scaler", kSteps);
  // float32 has the range: the gradients are small but not zero, and the loss falls.
  CHECK(fp32.weight_grad_max[0] > 0);
  CHECK(fp32.losses.back() < 0.1 * fp32.losses.front());
  // float16 without scaling: every gradient of the predictions rounds to zero, so every weight
  // gradient is exactly zero, the weights never move and the loss stays where it started.
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(unscaled.weight_grad_max[static_cast<size_t>(i)] == 0.0);
    CHECK(unscaled.losses[static_cast<size_t>(i)] == unscaled.losses[0]);
  }
  CHECK(max_abs(unscaled.final_weight) == 0.0);
  // float16 with GradScaler (2^16): the scaled gradients are representable, the unscaled
  // float32 gradients match float32's order, and the loss falls as in float32.
  CHECK(scaled.weight_grad_max[0] > 0.5 * fp32.weight_grad_max[0]);
  CHECK(scaled.weight_grad_max[0] < 2.0 * fp32.weight_grad_max[0]);
  CHECK(scaled.losses.back() < 0.1 * scaled.losses.front());
  MESSAGE("loss after ", kSteps, " steps / first loss: fp32 ", fp32.losses.back() / fp32.losses.front(),
          ", fp16 unscaled ", unscaled.losses.back() / unscaled.losses.front(), ", fp16 + GradScaler ",
          scaled.losses.back() / scaled.losses.front());
}

TEST_CASE("GradScaler: growth after growth_interval clean steps; an overflow resets the count") {
  Tensor p = zeros({3}).requires_grad_();
  optim::SGD optimizer({p}, {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 8.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3});
  // A "scaled backward": the gradient is scale * (1, 2, 3).
  auto scaled_grad = [&](double extra = 0.0) {
    p.set_grad(from_vector<float>({1, 2, 3}, {3}) * scaler.get_scale() + extra);
  };
  std::vector<double> expected = {0, 0, 0};
  const std::vector<double> g = {1, 2, 3};
  auto clean_step = [&] {
    scaled_grad();
    scaler.unscale_(optimizer);
    CHECK(values(p.grad()) == g);  // exact: the scale is a power of two
    CHECK(scaler.step(optimizer));
    for (int i = 0; i < 3; ++i) expected[i] -= 0.5 * g[i];
    CHECK(values(p) == expected);
    scaler.update();
  };
  clean_step();
  clean_step();
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.growth_tracker() == 2);
  clean_step();
  CHECK(scaler.get_scale() == 32.0);  // grown after 3 clean steps
  CHECK(scaler.growth_tracker() == 0);
  clean_step();
  CHECK(scaler.growth_tracker() == 1);
  scaled_grad(INFINITY);
  CHECK_FALSE(scaler.step(optimizer));
  CHECK(values(p) == expected);
  scaler.update();
  CHECK(scaler.get_scale() == 8.0);  // backed off by 0.25
  CHECK(scaler.growth_tracker() == 0);
  p.set_grad(full({3}, NAN));
  CHECK_FALSE(scaler.step(optimizer));
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);
  clean_step();
  clean_step();
  clean_step();
  CHECK(scaler.get_scale() == 8.0);
}

TEST_CASE("GradScaler: unscale_ before clipping, several optimizers, misuse, disabled scaler") {
  Tensor a = zeros({2}).requires_grad_(), c = zeros({2}).requires_grad_();
  optim::SGD opt_a({a}, {.lr = 1.0}), opt_c({c}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 1024.0});
  a.set_grad(full({2}, 3.0 * 1024));
  c.set_grad(full({2}, 4.0 * 1024));
  scaler.unscale_(opt_a);
  CHECK(values(a.grad()) == std::vector<double>{3, 3});
  CHECK(values(c.grad()) == std::vector<double>{4096, 4096});  // other optimizer untouched
  // Clipping sees the true gradient.
  CHECK(nn::clip_grad_norm_({a}, 1.0) == doctest::Approx(std::sqrt(18.0)));
  { CHECK_THROWS_WITH_AS(scaler.unscale_(opt_a), doctest::Contains("amp::GradScaler::unscale_"), Error); }
  CHECK(scaler.step(opt_a));  // not unscaled twice
  CHECK(values(a) == values(a.grad() * -1.0));
  CHECK_THROWS_WITH_AS(scaler.step(opt_a), doctest::Contains("amp::GradScaler::step"), Error);
  c.set_grad(full({2}, INFINITY));
  CHECK_FALSE(scaler.step(opt_c));
  CHECK_FALSE(scaler.found_inf(opt_a));
  CHECK(scaler.found_inf(opt_c));
  scaler.update();  // an overflow in any optimizer backs off
  CHECK(scaler.get_scale() == 512.0);
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("amp::GradScaler::update"), Error);

  // 16-bit gradients are refused before anything changes.
  Tensor h = zeros({2}, kFloat16).requires_grad_();
  optim::SGD opt_h({a, h}, {.lr = 1.0});
  a.set_grad(full({2}, 512.0));
  h.set_grad(full({2}, 1.0, kFloat16));
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt_h), doctest::Contains("float16"), Error);
  CHECK(values(a.grad()) == std::vector<double>{512, 512});

  // Options.
  CHECK_THROWS_WITH_AS(amp::GradScaler({.init_scale = 0.0}), doctest::Contains("amp::GradScaler"), Error);
  CHECK_THROWS_AS(amp::GradScaler({.growth_factor = 1.0}), Error);
  CHECK_THROWS_AS(amp::GradScaler({.backoff_factor = 1.0}), Error);
  CHECK_THROWS_AS(amp::GradScaler({.growth_interval = 0}), Error);
  CHECK_THROWS_AS(scaler.scale(from_vector<int64_t>({1}, {1})), Error);

  // A disabled scaler is a pass-through.
  amp::GradScaler off({.enabled = false});
  const Tensor loss = full({}, 2.5);
  CHECK(off.scale(loss).is_same(loss));
  a.set_grad(full({2}, INFINITY));
  const std::vector<double> before = values(a);
  CHECK(off.step(opt_a));  // steps whatever the gradient
  CHECK(values(a) != before);
  off.update();
  off.update();
  CHECK(off.get_scale() == 65536.0);
}

TEST_CASE("GradScaler: state_dict round trip and bad states") {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD optimizer({p}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 256.0, .growth_interval = 4});
  auto iteration = [&](amp::GradScaler& s, bool overflow) {
    p.set_grad(full({2}, overflow ? INFINITY : s.get_scale()));
    s.step(optimizer);
    s.update();
  };
  for (bool overflow : {false, true, false, false, false, false, false}) iteration(scaler, overflow);
  const nlohmann::json state = scaler.state_dict();
  CHECK(state["scale"].get<double>() == 256.0);  // 256 -> 128 -> (4 clean) 256
  CHECK(state["growth_tracker"].get<int64_t>() == 1);
  CHECK(state["growth_interval"].get<int64_t>() == 4);
  CHECK(state["enabled"].get<bool>());

  amp::GradScaler restored({.growth_interval = 4});
  restored.load_state_dict(nlohmann::json::parse(state.dump()));  // through text, as in a checkpoint
  CHECK(restored.get_scale() == scaler.get_scale());
  CHECK(restored.growth_tracker() == scaler.growth_tracker());
  CHECK(restored.state_dict() == state);
  for (bool overflow : {false, false, false, true, false}) {
    iteration(scaler, overflow);
    iteration(restored, overflow);
    CHECK(restored.get_scale() == scaler.get_scale());
    CHECK(restored.growth_tracker() == scaler.growth_tracker());
  }

  auto broken = [&](const char* key, nlohmann::json value) {
    nlohmann::json s = state;
    if (value.is_null())
      s.erase(key);
    else
      s[key] = value;
    return s;
  };
  amp::GradScaler target;
  const nlohmann::json untouched = target.state_dict();
  for (const nlohmann::json& bad :
       {broken("scale", nullptr), broken("scale", -1.0), broken("scale", "big"), broken("growth_tracker", 4),
        broken("growth_tracker", -1), broken("growth_interval", 2.5), broken("backoff_factor", 1.5),
        broken("enabled", false), nlohmann::json::array()}) {
    INFO(bad.dump());
    CHECK_THROWS_WITH_AS(target.load_state_dict(bad), doctest::Contains("amp::GradScaler::load_state_dict"), Error);
    CHECK(target.state_dict() == untouched);
  }
  amp::GradScaler disabled({.enabled = false});
  CHECK_THROWS_AS(disabled.load_state_dict(state), Error);
  disabled.load_state_dict(amp::GradScaler({.enabled = false}).state_dict());
}

// ---- training -------------------------------------------------------------------------------

namespace {

// Trains a small causal LM on sequences that count up by a per-sequence step (mod vocab),
// with AdamW, in float32 (amp = nullopt) or under autocast; returns the loss of each step.
std::vector<double> train_small_lm(std::optional<DType> amp_dtype, int steps) {
  manual_seed(5);
  nn::TransformerLMOptions options;
  options.vocab = 16;
  options.d_model = 32;
  options.heads = 4;
  options.layers = 2;
  options.context = 16;
  nn::TransformerLM model(options);
  optim::AdamW optimizer(model.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  amp::GradScaler scaler({.enabled = amp_dtype == kFloat16});
  std::mt19937_64 rng(99);
  std::vector<double> losses;
  for (int it = 0; it < steps; ++it) {
    const int64_t B = 8, T = 16;
    std::vector<int64_t> idx(B * T), tgt(B * T);
    for (int64_t b = 0; b < B; ++b) {
      int64_t token = static_cast<int64_t>(rng() % 16), step = 1 + static_cast<int64_t>(rng() % 3);
      for (int64_t t = 0; t < T; ++t) {
        idx[b * T + t] = token;
        token = (token + step) % 16;
        tgt[b * T + t] = token;
      }
    }
    const Tensor x = from_vector(idx, {B, T}), y = from_vector(tgt, {B, T});
    Tensor loss;
    {
      amp::Autocast autocast(amp_dtype);
      const Tensor logits = model.forward(x);
      CHECK(logits.dtype() == amp_dtype.value_or(kFloat32));
      loss = F::cross_entropy(logits, y);
    }
    REQUIRE(loss.dtype() == kFloat32);
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(optimizer);
    nn::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(optimizer);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : model.parameters()) CHECK(p.dtype() == kFloat32);
  return losses;
}

double mean_of(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

}  // namespace

TEST_CASE("autocast: bf16 and fp16 (with GradScaler) training of a small Transformer LM tracks float32") {
  const int steps = 40;
  const std::vector<double> fp32 = train_small_lm(std::nullopt, steps);
  for (DType dtype : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dtype));
    const std::vector<double> low = train_small_lm(dtype, steps);
    REQUIRE(low.size() == fp32.size());
    // Same initialisation and batches: the first loss differs only by rounding.
    CHECK(low[0] == doctest::Approx(fp32[0]).epsilon(0.01));
    // Both learn (the counting pattern is easy), and the curves stay close.
    const double start32 = mean_of(fp32, 0, 5), end32 = mean_of(fp32, steps - 5, steps);
    const double start16 = mean_of(low, 0, 5), end16 = mean_of(low, steps - 5, steps);
    CHECK(end32 < 0.75 * start32);
    CHECK(end16 < 0.75 * start16);
    CHECK(std::fabs(end16 - end32) <= 0.05 * end32);
    for (int i = 0; i < steps; i += 5)
      CHECK(mean_of(low, i, i + 5) == doctest::Approx(mean_of(fp32, i, i + 5)).epsilon(0.05));
  }
}
