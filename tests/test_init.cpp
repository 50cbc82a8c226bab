// tests/test_init.cpp — the initialisers (heed/nn/init.h) and the default initialisation of
// the layers: fan computation, uniform/normal/constant, Xavier uniform/normal bounds and
// variance with gain, Kaiming uniform, orthogonal (Q^T Q = gain^2 I to 1e-10 in float64 for
// tall, wide, square and 3-D shapes), seeded reproducibility, no autograd history, and the
// MultiHeadAttention qk_gain / orthogonal_output options.
//
// Statistical checks use enough samples that the tolerance is several standard errors wide.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <vector>

#include "layers_reference.h"

using namespace heed;
namespace ref = layers_reference;
using layers_testing::expect_error;
using ref::Values;

namespace {

struct Stats {
  double mean = 0, std = 0, max_abs = 0, min = 0, max = 0;
};
Stats stats_of(const Tensor& t) {
  const Values v = ref::values(t);
  Stats s;
  s.min = s.max = v[0];
  for (double x : v) {
    s.mean += x;
    s.max_abs = std::max(s.max_abs, std::fabs(x));
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size() - 1));
  return s;
}

// Checks a tensor looks like U(-bound, bound): inside the bounds, reaching close to them,
// mean ~ 0 and std ~ bound / sqrt(3) (relative tolerance 5%, > 5 standard errors here).
void check_uniform(const Tensor& t, double bound) {
  const Stats s = stats_of(t);
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > 0.95 * bound);
  CHECK(std::fabs(s.mean) < 0.05 * bound);
  CHECK(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.05));
}

// Largest |(A^T A or A A^T) - gain^2 I| for a (rows, cols) matrix: the smaller Gram matrix.
double orthogonality_error(const Values& a, int64_t rows, int64_t cols, double gain) {
  const bool tall = rows >= cols;
  const int64_t n = tall ? cols : rows, inner = tall ? rows : cols;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < inner; ++k)
        dot += tall ? a[k * cols + i] * a[k * cols + j] : a[i * cols + k] * a[j * cols + k];
      worst = std::max(worst, std::fabs(dot - (i == j ? gain * gain : 0.0)));
    }
  return worst;
}

}  // namespace

TEST_CASE("init: fan_in and fan_out as PyTorch computes them") {
  CHECK(nn::init::fan_in_and_fan_out(empty({5, 3})) == std::pair<int64_t, int64_t>{3, 5});
  CHECK(nn::init::fan_in_and_fan_out(empty({8, 4, 3, 2})) == std::pair<int64_t, int64_t>{24, 48});
  expect_error([] { nn::init::fan_in_and_fan_out(empty({5})); }, {"heed::init", "[5]"});
  Tensor v = empty({5});
  expect_error([&] { nn::init::xavier_uniform_(v); }, {"heed::init"});
  expect_error([&] { nn::init::orthogonal_(v); }, {"heed::orthogonal_", "[5]"});
  expect_error([&] { nn::init::normal_(v, 0.0, -1.0); }, {"heed::normal_", "std"});
}

TEST_CASE("init: uniform_, normal_, constant_, zeros_, ones_") {
  manual_seed(70);
  Tensor t = empty({200, 100});
  nn::init::uniform_(t, -0.5, 1.5);
  const Stats u = stats_of(t);
  CHECK(u.min >= -0.5);
  CHECK(u.max < 1.5);
  CHECK(u.mean == doctest::Approx(0.5).epsilon(0.02));
  CHECK(u.std == doctest::Approx(2.0 / std::sqrt(12.0)).epsilon(0.03));
  nn::init::normal_(t, 2.0, 0.5);
  const Stats n = stats_of(t);
  CHECK(n.mean == doctest::Approx(2.0).epsilon(0.01));
  CHECK(n.std == doctest::Approx(0.5).epsilon(0.03));
  nn::init::constant_(t, -1.25);
  CHECK(stats_of(t).min == -1.25);
  CHECK(stats_of(t).max == -1.25);
  nn::init::zeros_(t);
  CHECK(stats_of(t).max_abs == 0.0);
  nn::init::ones_(t);
  CHECK(stats_of(t).min == 1.0);
  // Float64 and 16-bit tensors are written in their own dtype.
  Tensor d = empty({10, 10}, kFloat64), h = empty({10, 10}, kBFloat16);
  nn::init::constant_(d, 0.1);
  nn::init::constant_(h, 0.1);
  CHECK(d.dtype() == kFloat64);
  CHECK(ref::values(d)[7] == 0.1);
  CHECK(h.dtype() == kBFloat16);
  CHECK(ref::values(h)[7] == doctest::Approx(0.1).epsilon(1e-2));
}

TEST_CASE("init: xavier_uniform_ and xavier_normal_ bounds and variance, with gain") {
  manual_seed(71);
  for (double gain : {1.0, 2.0, 0.1}) {
    CAPTURE(gain);
    Tensor w = empty({300, 120});  // fan_in 120, fan_out 300
    nn::init::xavier_uniform_(w, gain);
    check_uniform(w, gain * std::sqrt(6.0 / 420.0));
    nn::init::xavier_normal_(w, gain);
    const Stats s = stats_of(w);
    CHECK(std::fabs(s.mean) < 0.05 * s.std);
    CHECK(s.std == doctest::Approx(gain * std::sqrt(2.0 / 420.0)).epsilon(0.03));
  }
  Tensor conv = empty({64, 16, 3, 3});  // fan_in 144, fan_out 576
  nn::init::xavier_uniform_(conv);
  check_uniform(conv, std::sqrt(6.0 / 720.0));
}

TEST_CASE("init: kaiming_uniform_ and the Linear default U(+-1/sqrt(in))") {
  manual_seed(72);
  Tensor w = empty({400, 50});
  nn::init::kaiming_uniform_(w);  // a = 0: bound sqrt(6 / fan_in)
  check_uniform(w, std::sqrt(6.0 / 50.0));
  nn::init::kaiming_uniform_(w, 1.0);  // gain sqrt(2/2) = 1: bound sqrt(3 / fan_in)
  check_uniform(w, std::sqrt(3.0 / 50.0));
  nn::Linear linear(64, 300);
  check_uniform(linear.weight, 1.0 / 8.0);
  const Stats b = stats_of(linear.bias);
  CHECK(b.max_abs <= 1.0 / 8.0);
  CHECK(b.max_abs > 0.9 / 8.0);
}

TEST_CASE("init: the layers' default initialisations") {
  manual_seed(73);
  nn::Embedding table(500, 40, 3);
  const Stats e = stats_of(table.weight);
  CHECK(std::fabs(e.mean) < 0.02);
  CHECK(e.std == doctest::Approx(1.0).epsilon(0.03));
  nn::LearnedPositionalEmbedding positions(500, 40);
  CHECK(stats_of(positions.weight).std == doctest::Approx(0.02).epsilon(0.03));
  nn::LayerNorm norm(7);
  CHECK(ref::values(norm.weight) == Values(7, 1.0));
  CHECK(ref::values(norm.bias) == Values(7, 0.0));
  nn::AdditiveAttention additive(4, 4, 3600);
  check_uniform(additive.v, 1.0 / 60.0);
  // The language model's position table is N(0, 1) like its token table.
  nn::TransformerLMOptions o;
  o.vocab = 300;
  o.d_model = 64;
  o.heads = 2;
  o.layers = 1;
  o.context = 256;
  nn::TransformerLM lm(o);
  CHECK(stats_of(lm.tok_embed->weight).std == doctest::Approx(1.0).epsilon(0.03));
  CHECK(stats_of(lm.pos_embed->weight).std == doctest::Approx(1.0).epsilon(0.03));
  // The seq2seq embeddings are N(0, 1/d_model), scaled by sqrt(d_model) on lookup.
  nn::TransformerOptions t;
  t.src_vocab = 400;
  t.tgt_vocab = 400;
  t.encoder_layers = 1;
  t.decoder_layers = 1;
  t.layer.d_model = 64;
  t.layer.heads = 2;
  t.layer.d_ff = 8;
  nn::Transformer seq2seq(t);
  CHECK(stats_of(seq2seq.src_embed->weight).std == doctest::Approx(1.0 / 8.0).epsilon(0.03));
  CHECK(stats_of(seq2seq.tgt_embed->weight).std == doctest::Approx(1.0 / 8.0).epsilon(0.03));
}

TEST_CASE("init: orthogonal_ gives orthonormal rows or columns times the gain") {
  struct Case {
    Dims shape;
    double gain;
  };
  manual_seed(74);
  for (const Case& c : {Case{{8, 5}, 1.0}, Case{{3, 7}, 1.0}, Case{{6, 6}, 1.0}, Case{{40, 12}, 1.5},
                        Case{{5, 20}, 0.5}, Case{{4, 2, 3}, 2.0}, Case{{1, 9}, 1.0}, Case{{9, 1}, 1.0}}) {
    CAPTURE(shape_str(c.shape));
    CAPTURE(c.gain);
    Tensor t = empty(c.shape, kFloat64);
    nn::init::orthogonal_(t, c.gain);
    CHECK(t.shape() == c.shape);
    const int64_t rows = c.shape[0], cols = t.numel() / rows;
    CHECK(orthogonality_error(ref::values(t), rows, cols, c.gain) < 1e-10);
    // A float32 tensor gets the rounded matrix.
    Tensor f = empty(c.shape);
    nn::init::orthogonal_(f, c.gain);
    CHECK(orthogonality_error(ref::values(f), rows, cols, c.gain) < 1e-5 * (1 + c.gain * c.gain));
  }
  // Not a fixed matrix: two draws differ, and the same seed repeats a draw.
  Tensor a = empty({4, 4}, kFloat64), b = empty({4, 4}, kFloat64);
  manual_seed(5);
  nn::init::orthogonal_(a);
  nn::init::orthogonal_(b);
  CHECK(ref::max_abs_diff(ref::values(a), ref::values(b)) > 1e-3);
  manual_seed(5);
  nn::init::orthogonal_(b);
  CHECK(ref::values(a) == ref::values(b));
}

TEST_CASE("init: writing into parameters records no history and repeats with the seed") {
  nn::Linear x(10, 10), y(10, 10);
  manual_seed(75);
  nn::init::xavier_normal_(x.weight);
  manual_seed(75);
  nn::init::xavier_normal_(y.weight);
  CHECK(ref::values(x.weight) == ref::values(y.weight));
  for (Tensor* w : {&x.weight, &y.weight}) {
    CHECK(w->is_leaf());
    CHECK(w->requires_grad());
  }
  nn::init::orthogonal_(x.weight);
  CHECK(x.weight.is_leaf());
  // Same seed, same model.
  manual_seed(76);
  nn::Linear p(6, 4);
  manual_seed(76);
  nn::Linear q(6, 4);
  CHECK(ref::values(p.weight) == ref::values(q.weight));
  CHECK(ref::values(p.bias) == ref::values(q.bias));
}

TEST_CASE("init: MultiHeadAttention qk_gain (Xavier on Q and K) and orthogonal_output") {
  const int64_t C = 64, H = 4, dh = 16;
  using nn::ProjectionLayout;
  for (double gain : {1.0, 0.1}) {
    CAPTURE(gain);
    manual_seed(77);
    nn::MultiHeadAttentionOptions o;
    o.d_model = C;
    o.heads = H;
    o.qk_gain = gain;
    o.orthogonal_output = true;
    const double qk_bound = gain * std::sqrt(6.0 / (2.0 * C));
    SUBCASE("separate") {
      nn::MultiHeadAttention mha(o);
      check_uniform(mha.q_proj->weight, qk_bound);
      check_uniform(mha.k_proj->weight, qk_bound);
      check_uniform(mha.v_proj->weight, 1.0 / 8.0);  // V keeps the Linear default
      CHECK(orthogonality_error(ref::values(mha.out_proj->weight), C, C, 1.0) < 1e-5);
    }
    SUBCASE("separate with shared K/V") {
      o.shared_kv = true;
      nn::MultiHeadAttention mha(o);
      check_uniform(mha.kv_proj->weight, qk_bound);
    }
    SUBCASE("fused: Q and K rows Xavier, V rows default") {
      o.layout = ProjectionLayout::FusedQKV;
      nn::MultiHeadAttention mha(o);
      check_uniform(mha.qkv_proj->weight.narrow(0, 0, C), qk_bound);
      check_uniform(mha.qkv_proj->weight.narrow(0, C, C), qk_bound);
      check_uniform(mha.qkv_proj->weight.narrow(0, 2 * C, C), 1.0 / 8.0);
      CHECK(mha.qkv_proj->weight.is_leaf());
      CHECK(orthogonality_error(ref::values(mha.out_proj->weight), C, C, 1.0) < 1e-5);
    }
    SUBCASE("per head: Xavier over each (d_head, C) projection") {
      o.layout = ProjectionLayout::PerHead;
      nn::MultiHeadAttention mha(o);
      const ref::ParamMap p = ref::params_of(mha);
      const double head_bound = gain * std::sqrt(6.0 / static_cast<double>(C + dh));
      for (int64_t h = 0; h < H; ++h) {
        const std::string prefix = "heads." + std::to_string(h) + ".";
        for (const char* proj : {"q_proj.weight", "k_proj.weight"}) {
          const Stats s = stats_of(p.at(prefix + proj));
          CHECK(s.max_abs <= head_bound);
          CHECK(s.max_abs > 0.9 * head_bound);
        }
        CHECK(stats_of(p.at(prefix + "v_proj.weight")).max_abs <= 1.0 / 8.0);
      }
    }
  }
  // Without orthogonal_output the output projection is the Linear default, not orthogonal.
  manual_seed(78);
  nn::MultiHeadAttentionOptions plain;
  plain.d_model = C;
  plain.heads = H;
  nn::MultiHeadAttention mha(plain);
  CHECK(orthogonality_error(ref::values(mha.out_proj->weight), C, C, 1.0) > 0.1);
}
