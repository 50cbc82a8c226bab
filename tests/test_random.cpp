// tests/test_random.cpp — Philox4x32-10, the default generator and the random factories.
//
// Invariants checked: philox4x32_10 matches the Random123 known-answer vector and an
// independent implementation written here (itself checked on all three Random123 vectors);
// the same seed gives the same numbers, whatever the thread count; the distributions have
// the right range and moments within bounds derived from their standard errors.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace heed;

namespace {

// Philox4x32-10 written from the Random123 paper (Salmon et al., SC'11): a 128-bit counter
// and a 64-bit key; each round multiplies words 0 and 2, the key is bumped by the Weyl
// constants between rounds.
using Words4 = std::array<uint32_t, 4>;
Words4 reference_philox(Words4 ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * ctr[0], p1 = uint64_t{0xCD9E8D57u} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

// Sets the thread count for a scope and restores the previous one.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : previous_(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(previous_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int previous_;
};

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

struct Moments {
  double mean = 0, variance = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size() - 1);
  return m;
}

}  // namespace

// ---- Philox -----------------------------------------------------------------------------------

TEST_CASE("the reference Philox reproduces the Random123 known answers") {
  // kat_vectors of Random123 1.14 (philox4x32 with 10 rounds).
  CHECK(reference_philox({0, 0, 0, 0}, {0, 0}) == Words4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(reference_philox({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        Words4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(reference_philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        Words4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("philox4x32_10 matches the known answer and the reference") {
  const Philox4 zero = philox4x32_10(0, 0);
  CHECK(zero.v[0] == 0x6627e8d5u);
  CHECK(zero.v[1] == 0xe169c58du);
  CHECK(zero.v[2] == 0xbc57ac4cu);
  CHECK(zero.v[3] == 0x9b00dbd8u);
  // The 64-bit counter fills words 0 (low) and 1 (high); the key is (low, high) of the seed.
  const uint64_t counters[] = {1, 2, 0xffffffffull, 0x100000000ull, 0x123456789abcdefull, ~0ull};
  const uint64_t keys[] = {0, 1, 42, 0xdeadbeefcafef00dull, ~0ull};
  for (uint64_t c : counters) {
    for (uint64_t k : keys) {
      const Philox4 got = philox4x32_10(c, k);
      const Words4 want = reference_philox({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                                           {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)});
      CHECK(Words4{got.v[0], got.v[1], got.v[2], got.v[3]} == want);
    }
  }
}

TEST_CASE("philox_uniform and philox_normal are functions of (seed, index)") {
  for (uint64_t i : {0ull, 1ull, 2ull, 3ull, 77ull, 123456789ull}) {
    // Uniforms: lane i % 4 of block i / 4.
    const uint64_t block = i >> 2;
    const Words4 w = reference_philox({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0}, {5, 0});
    const float u = philox_uniform(5, i);
    CHECK(u == static_cast<float>(w[i & 3] >> 8) / 16777216.0f);  // 24 random bits in [0, 1)
    CHECK(u >= 0.0f);
    CHECK(u < 1.0f);
    // Normals: Box-Muller on lanes 0, 1 of block i / 2; cosine for even i, sine for odd i.
    const uint64_t pair = i >> 1;
    const Words4 p = reference_philox({static_cast<uint32_t>(pair), static_cast<uint32_t>(pair >> 32), 0, 0}, {5, 0});
    const double u1 = (static_cast<double>(p[0] >> 8) + 1.0) / 16777216.0,
                 u2 = static_cast<double>(p[1] >> 8) / 16777216.0;
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    const double normal = radius * ((i & 1) ? std::sin(angle) : std::cos(angle));
    CHECK(philox_normal(5, i) == doctest::Approx(normal).epsilon(1e-6));
  }
  // The bulk fill gives the same values from any starting index.
  std::vector<float> bulk(11);
  philox_uniform_fill(9, 6, 11, bulk.data());
  for (uint64_t j = 0; j < 11; ++j) CHECK(bulk[j] == philox_uniform(9, 6 + j));
}

// ---- the generator ----------------------------------------------------------------------------

TEST_CASE("manual_seed makes every random factory reproducible") {
  struct Draw {
    Tensor randn, rand, uniform, randint, dropout;
  };
  auto draw = [] {
    Draw d;
    d.randn = randn({5000});
    d.rand = rand({3, 700}, kF64);
    d.uniform = uniform({999}, -2.0, 3.0);
    d.randint = randint(-5, 17, {4, 321});
    d.dropout = F::dropout(ones({6000}), 0.25);
    return d;
  };
  manual_seed(2024);
  const Draw a = draw();
  manual_seed(2024);
  const Draw b = draw();
  CHECK(bit_equal(a.randn, b.randn));
  CHECK(bit_equal(a.rand, b.rand));
  CHECK(bit_equal(a.uniform, b.uniform));
  CHECK(bit_equal(a.randint, b.randint));
  CHECK(bit_equal(a.dropout, b.dropout));
  // The stream moves on: the next draw differs, and another seed differs.
  const Draw c = draw();
  CHECK_FALSE(bit_equal(a.randn, c.randn));
  CHECK_FALSE(bit_equal(a.dropout, c.dropout));
  manual_seed(2025);
  CHECK_FALSE(bit_equal(a.randn, randn({5000})));
}

TEST_CASE("each draw of n numbers takes the next n counters") {
  manual_seed(11);
  CHECK(default_generator().seed() == 11);
  CHECK(default_generator().offset() == 0);
  const Tensor first = randn({10});
  CHECK(default_generator().offset() == 10);
  const Tensor second = rand({4, 5});
  CHECK(default_generator().offset() == 30);
  const std::vector<float> f = first.to_vector<float>(), s = second.to_vector<float>();
  for (uint64_t i = 0; i < 10; ++i) CHECK(f[i] == philox_normal(11, i));
  for (uint64_t i = 0; i < 20; ++i) CHECK(s[i] == philox_uniform(11, 10 + i));
  // One big draw equals two consecutive smaller ones.
  manual_seed(11);
  const std::vector<float> joined = randn({30}).to_vector<float>();
  CHECK(std::vector<float>(joined.begin(), joined.begin() + 10) == f);
  // set_state resumes a stream.
  default_generator().set_state(11, 10);
  CHECK(rand({20}).to_vector<float>() == s);
}

TEST_CASE("the same numbers with 1 and 2 threads") {
  auto draw = [] {
    manual_seed(77);
    std::vector<Tensor> out;
    out.push_back(randn({3, 40000}));
    out.push_back(rand({100001}, kF64));
    out.push_back(uniform({70000}, -1.0, 1.0, kBFloat16));
    out.push_back(randint(0, 1000, {90000}));
    out.push_back(F::dropout(ones({120000}), 0.5));
    Tensor x = randn({50000}).requires_grad_();
    Tensor y = F::dropout(x, 0.3);
    y.backward(ones_like(y));
    out.push_back(y.detach());
    out.push_back(x.grad());
    return out;
  };
  std::vector<Tensor> one, two;
  {
    ThreadCount threads(1);
    CHECK(get_num_threads() == 1);
    one = draw();
  }
  {
    ThreadCount threads(2);
    CHECK(get_num_threads() == 2);
    two = draw();
  }
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(bit_equal(one[i], two[i]));
  }
}

// ---- distributions ----------------------------------------------------------------------------

TEST_CASE("randn: mean, variance and the one-sigma mass") {
  manual_seed(31337);
  const int64_t n = int64_t{1} << 20;
  const std::vector<double> v = randn({n}, kF64).to_vector<double>();
  const Moments m = moments(v);
  // Standard errors for n normal samples: mean 1/sqrt(n) ~ 0.00098, variance sqrt(2/n) ~ 0.0014.
  // Six standard errors: a false failure has probability ~2e-9.
  const double sn = std::sqrt(static_cast<double>(n));
  CHECK(std::fabs(m.mean) < 6.0 / sn);
  CHECK(std::fabs(m.variance - 1.0) < 6.0 * std::sqrt(2.0) / sn);
  // P(|z| < 1) = erf(1/sqrt 2) = 0.682689; binomial standard error sqrt(p(1-p)/n).
  const double p = std::erf(1.0 / std::sqrt(2.0));
  const double inside =
      static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 1.0; })) /
      static_cast<double>(n);
  CHECK(std::fabs(inside - p) < 6.0 * std::sqrt(p * (1 - p) / static_cast<double>(n)));
  // Tails: P(z > 3) = 0.0013499; the count is binomial too.
  const double p3 = 0.5 * std::erfc(3.0 / std::sqrt(2.0));
  const double above3 =
      static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) { return x > 3.0; })) / static_cast<double>(n);
  CHECK(std::fabs(above3 - p3) < 6.0 * std::sqrt(p3 * (1 - p3) / static_cast<double>(n)));
  CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));

  // Other dtypes draw the same stream.
  manual_seed(5);
  const std::vector<float> f32 = randn({1000}).to_vector<float>();
  manual_seed(5);
  const std::vector<double> f64 = randn({1000}, kF64).to_vector<double>();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(f64[i] == static_cast<double>(f32[i]));
  manual_seed(5);
  const std::vector<float> f16 = randn({1000}, kFloat16).to_vector<float>();
  for (size_t i = 0; i < f32.size(); ++i) CHECK(f16[i] == half_bits_to_float(float_to_half_bits(f32[i])));
}

TEST_CASE("rand and uniform: range, mean and variance") {
  manual_seed(8);
  const int64_t n = 400000;
  const std::vector<double> u = rand({n}, kF64).to_vector<double>();
  CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
  CHECK(*std::max_element(u.begin(), u.end()) < 1.0);
  const Moments mu = moments(u);
  // Uniform(0,1): variance 1/12; the sample mean's standard error is sqrt(1/12/n);
  // the sample variance's is sqrt((mu4 - sigma^4)/n) with mu4 = 1/80.
  const double dn = static_cast<double>(n);
  CHECK(std::fabs(mu.mean - 0.5) < 6.0 * std::sqrt(1.0 / 12.0 / dn));
  CHECK(std::fabs(mu.variance - 1.0 / 12.0) < 6.0 * std::sqrt((1.0 / 80.0 - 1.0 / 144.0) / dn));

  const double low = -3.0, high = 5.0, width = high - low;
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    const std::vector<double> w = uniform({n}, low, high, dt).to_vector<double>();
    CHECK(*std::min_element(w.begin(), w.end()) >= low);
    CHECK(*std::max_element(w.begin(), w.end()) < high);
    const Moments mw = moments(w);
    CHECK(std::fabs(mw.mean - 1.0) < 6.0 * std::sqrt(width * width / 12.0 / dn));
    CHECK(std::fabs(mw.variance - width * width / 12.0) <
          6.0 * width * width * std::sqrt((1.0 / 80.0 - 1.0 / 144.0) / dn));
  }
  // A degenerate range gives the bound itself.
  CHECK(uniform({3}, 2.0, 2.0).to_vector<float>() == std::vector<float>(3, 2.0f));
  CHECK_HEED_ERROR(uniform({3}, 1.0, 0.0), "uniform");
  CHECK_HEED_ERROR(uniform({3}, 0.0, std::nan("")), "uniform");
  CHECK_HEED_ERROR(rand({3}, kInt64), "rand");
  CHECK_HEED_ERROR(rand({3}, kBool), "rand");
  CHECK_HEED_ERROR(randn({3}, kInt32), "randn");
  CHECK_HEED_ERROR(uniform({3}, 0.0, 1.0, kInt32), "uniform");
}

TEST_CASE("rand and uniform stay below high in every floating dtype") {
  // Rounding low + (high - low) * u to the storage dtype must not reach high: in float16 and
  // bfloat16 every u above 1 - 2^-12 (resp. 1 - 2^-9) would round to 1.0.
  manual_seed(9);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    const std::vector<double> r = rand({200000}, dt).to_vector<double>();
    CHECK(*std::min_element(r.begin(), r.end()) >= 0.0);
    CHECK(*std::max_element(r.begin(), r.end()) < 1.0);
    const std::vector<double> w = uniform({200000}, -2.0, 6.0, dt).to_vector<double>();
    CHECK(*std::min_element(w.begin(), w.end()) >= -2.0);
    CHECK(*std::max_element(w.begin(), w.end()) < 6.0);
  }
  // A range a few float32 ulps wide.
  const double high = 1.0 + 2.0 * std::ldexp(1.0, -23);
  const std::vector<double> narrow = uniform({100000}, 1.0, high).to_vector<double>();
  CHECK(*std::max_element(narrow.begin(), narrow.end()) < high);
}

TEST_CASE("randint: range, uniform buckets and errors") {
  manual_seed(3);
  const int64_t n = 200000;
  for (DType dt : {kInt64, kInt32}) {
    CAPTURE(dtype_name(dt));
    Tensor r = randint(-4, 6, {n}, dt);
    CHECK(r.dtype() == dt);
    const std::vector<int64_t> v = r.to_vector<int64_t>();
    std::vector<int64_t> counts(10, 0);
    for (int64_t x : v) {
      REQUIRE(x >= -4);
      REQUIRE(x < 6);
      ++counts[static_cast<size_t>(x + 4)];
    }
    // Each bucket is binomial(n, 1/10): standard error sqrt(n * 0.1 * 0.9).
    for (int64_t c : counts) CHECK(std::fabs(static_cast<double>(c) - 0.1 * n) < 6.0 * std::sqrt(n * 0.09));
  }
  // A range of one value, and a large range.
  CHECK(randint(7, 8, {5}).to_vector<int64_t>() == std::vector<int64_t>(5, 7));
  const std::vector<int64_t> wide = randint(0, int64_t{1} << 40, {1000}).to_vector<int64_t>();
  CHECK(*std::max_element(wide.begin(), wide.end()) > (int64_t{1} << 39));
  CHECK(*std::min_element(wide.begin(), wide.end()) >= 0);

  CHECK_HEED_ERROR(randint(5, 5, {3}), "randint");
  CHECK_HEED_ERROR(randint(5, 2, {3}), "randint");
  CHECK_HEED_ERROR(randint(0, 10, {3}, kFloat32), "randint");
  CHECK_HEED_ERROR(randint(0, int64_t{1} << 40, {3}, kInt32), "randint");
  CHECK_HEED_ERROR(randint(0, int64_t{1} << 60, {3}), "randint");
  CHECK_HEED_ERROR(randint(0, 10, {-3}), "randint");
}

TEST_CASE("dropout: keep rate, scaling, eval mode and the mask in backward") {
  manual_seed(123);
  const int64_t n = 100000;
  const double p = 0.3;
  const std::vector<float> y = F::dropout(ones({n}), p).to_vector<float>();
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  int64_t zeros_count = 0;
  for (float v : y) {
    REQUIRE((v == 0.0f || v == kept));
    zeros_count += v == 0.0f;
  }
  CHECK(std::fabs(static_cast<double>(zeros_count) / n - p) < 6.0 * std::sqrt(p * (1 - p) / n));

  Tensor x = randn({64});
  CHECK(F::dropout(x, 0.5, /*training=*/false).is_same(x));
  CHECK(F::dropout(x, 0.0).is_same(x));
  CHECK(F::dropout(x, 1.0).to_vector<float>() == std::vector<float>(64, 0.0f));

  // Backward regenerates the same mask even after other draws moved the generator on.
  Tensor w = randn({5000}, kF64).requires_grad_();
  Tensor out = F::dropout(w, 0.4);
  (void)randn({777});
  out.backward(ones_like(out));
  const std::vector<double> ov = out.to_vector<double>(), wv = w.to_vector<double>(), gv = w.grad().to_vector<double>();
  for (size_t i = 0; i < ov.size(); ++i) {
    const double scale = ov[i] == 0.0 ? 0.0 : 1.0 / 0.6;
    REQUIRE(ov[i] == doctest::Approx(wv[i] * scale));
    CHECK(gv[i] == doctest::Approx(scale));
  }
  CHECK_HEED_ERROR(F::dropout(x, 1.5), "dropout");
  CHECK_HEED_ERROR(F::dropout(x, -0.1), "dropout");
}

// ---- generators shared between threads, and explicit generators ------------------------------

TEST_CASE("threads sharing one generator get disjoint counters and no counter is lost") {
  Generator shared(7);
  constexpr int kDraws = 2000;
  constexpr uint64_t kCount = 3;
  std::vector<uint64_t> firsts[2];
  auto worker = [&](int id) {
    for (int i = 0; i < kDraws; ++i) firsts[id].push_back(shared.reserve(kCount).first);
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(shared.offset() == 2 * kDraws * kCount);
  std::vector<uint64_t> all = firsts[0];
  all.insert(all.end(), firsts[1].begin(), firsts[1].end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) CHECK(all[i] == i * kCount);  // every range once, none overlapping

  // The same through the factories on the default generator: every counter is used once.
  manual_seed(3);
  auto draw = [] {
    for (int i = 0; i < 200; ++i) (void)randn({5});
  };
  std::thread c(draw), d(draw);
  c.join();
  d.join();
  CHECK(default_generator().offset() == 2 * 200 * 5);
}

TEST_CASE("an explicit generator per thread gives reproducible numbers whatever the other thread draws") {
  auto run = [](uint64_t seed) {
    Generator gen(seed);
    Tensor x = randn({4, 3}, gen);
    Tensor u = uniform({6}, -2.0, 2.0, gen);
    Tensor i = randint(0, 10, {5}, gen);
    Tensor dropped = F::dropout(ones({64}), 0.5, true, gen);
    Tensor w = empty({3, 5}, kFloat64);
    nn::init::xavier_uniform_(w, 1.0, &gen);
    Tensor q = empty({4, 4}, kFloat64);
    nn::init::orthogonal_(q, 1.0, &gen);
    return std::vector<Tensor>{x, u, i, dropped, w, q};
  };
  const std::vector<Tensor> alone = run(11);
  std::vector<Tensor> threaded[2];
  std::thread a([&] { threaded[0] = run(11); });
  std::thread b([&] {
    for (int k = 0; k < 50; ++k) (void)randn({32});  // the default generator, concurrently
    threaded[1] = run(12);
  });
  a.join();
  b.join();
  for (size_t k = 0; k < alone.size(); ++k) CHECK(bit_equal(alone[k], threaded[0][k]));
  CHECK_FALSE(bit_equal(alone[0], threaded[1][0]));
  // The explicit draws equal the default generator's for the same seed and offset.
  manual_seed(11);
  CHECK(bit_equal(randn({4, 3}), alone[0]));
}

TEST_CASE("a copied generator continues the same stream independently") {
  Generator a(5);
  (void)randn({3}, a);
  Generator b = a;
  CHECK(b.seed() == 5);
  CHECK(b.offset() == 3);
  CHECK(bit_equal(randn({4}, a), randn({4}, b)));
  b = Generator(9);
  CHECK(b.seed() == 9);
  CHECK(b.offset() == 0);
}
