// tests/test_dtype.cpp — float16/bfloat16 conversions, type promotion, and arithmetic on the
// 16-bit float storage types.
//
// Invariants checked: the portable half conversions of heed/dtype.h agree bit for bit with
// the F16C instructions and with an independent reference (the exact value of every half
// computed with ldexp, and round-to-nearest-even by searching the sorted table of halves);
// bfloat16 rounds to nearest even and keeps NaN; 16-bit tensors compute in float32 and
// round once.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace heed;

namespace {

// The value of a binary16 bit pattern from the IEEE definition.
double half_reference_value(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0x1f)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    v = std::ldexp(static_cast<double>(mantissa), -24);
  else
    v = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return sign ? -v : v;
}

// Round-to-nearest-even float -> half, by looking the value up among all finite halves.
uint16_t half_reference_round(float f) {
  if (std::isnan(f)) return 0x7e00;  // any NaN; callers compare NaN-ness separately
  const double x = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  // Magnitudes 0x0000..0x7bff are increasing; 0x7c00 (Inf) acts as the next value 65536.
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (uint32_t h = 0; h <= 0x7c00; ++h)
      t.push_back(h == 0x7c00 ? 65536.0 : half_reference_value(static_cast<uint16_t>(h)));
    return t;
  }();
  if (x >= 65536.0) return sign | 0x7c00;
  const auto upper = std::lower_bound(table.begin(), table.end(), x);
  const uint16_t hi = static_cast<uint16_t>(upper - table.begin());
  if (table[hi] == x) return sign | hi;
  const uint16_t lo = hi - 1;
  const double below = x - table[lo], above = table[hi] - x;
  if (below < above) return sign | lo;
  if (above < below) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);  // tie: the even mantissa
}

// Round-to-nearest-even float -> bfloat16 from the two candidates around f.
uint16_t bfloat16_reference_round(float f) {
  const uint32_t bits = float_to_bits(f);
  if (std::isinf(f)) return static_cast<uint16_t>(bits >> 16);
  const uint32_t truncated = bits & 0xffff0000u;
  const double x = f, down = bits_to_float(truncated);
  const uint32_t up_bits = truncated + 0x10000u;
  // Above the largest finite bfloat16 the next candidate is Inf (exponent all ones).
  const double up = ((up_bits & 0x7f800000u) == 0x7f800000u) ? std::copysign(std::ldexp(1.0, 128), x)
                                                             : static_cast<double>(bits_to_float(up_bits));
  const double d_down = std::fabs(x - down), d_up = std::fabs(up - x);
  if (d_down < d_up) return static_cast<uint16_t>(truncated >> 16);
  if (d_up < d_down) return static_cast<uint16_t>(up_bits >> 16);
  return static_cast<uint16_t>(((truncated >> 16) & 1) ? up_bits >> 16 : truncated >> 16);
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || float_to_bits(a) == float_to_bits(b); }

// Floats that exercise every rounding case of the half conversion: each half value, the
// midpoints between neighbours, one float ulp either side, plus a sweep of bit patterns.
std::vector<float> half_probe_floats() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = static_cast<float>(half_reference_value(static_cast<uint16_t>(h)));
    const float next =
        static_cast<float>(h + 1 == 0x7c00 ? 65536.0 : half_reference_value(static_cast<uint16_t>(h + 1)));
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact in float
    for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), std::nextafter(v, 1e9f)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 16381)
    out.push_back(bits_to_float(static_cast<uint32_t>(bits)));
  const float specials[] = {0.0f,
                            -0.0f,
                            65504.0f,
                            65519.99f,
                            65520.0f,
                            65536.0f,
                            1e10f,
                            -1e10f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            5.960464477539063e-08f /* 2^-24 */,
                            2.9802322387695312e-08f /* 2^-25: tie to 0 */,
                            2.98023259e-08f /* just above */};
  out.insert(out.end(), std::begin(specials), std::end(specials));
  return out;
}

}  // namespace

// ---- float16 ----------------------------------------------------------------------------------

TEST_CASE("half -> float: all 65536 bit patterns, portable vs F16C vs the IEEE definition") {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float portable = half_bits_to_float_portable(bits);
    const float fast = half_bits_to_float(bits);
    const double reference = half_reference_value(bits);
    bool ok = float_to_bits(portable) == float_to_bits(fast);  // bit-identical, NaN payloads too
    if (std::isnan(reference)) {
      ok = ok && std::isnan(portable) && std::signbit(portable) == ((bits & 0x8000) != 0);
    } else {
      ok = ok && static_cast<double>(portable) == reference && std::signbit(portable) == ((bits & 0x8000) != 0);
    }
    if (!ok && ++mismatches <= 10)
      FAIL_CHECK("half 0x" << std::hex << h << ": portable 0x" << float_to_bits(portable) << ", F16C 0x"
                           << float_to_bits(fast) << std::dec << ", reference " << reference);
  }
  CHECK(mismatches == 0);
#if defined(__F16C__)
  MESSAGE("compared against the F16C instructions");
#else
  MESSAGE("F16C not compiled in: half_bits_to_float is the portable path");
#endif
}

TEST_CASE("float -> half: portable vs F16C vs round-to-nearest-even reference") {
  int mismatches = 0;
  const std::vector<float> probes = half_probe_floats();
  CHECK(probes.size() > 500000);
  for (float f : probes) {
    const uint16_t portable = float_to_half_bits_portable(f), fast = float_to_half_bits(f);
    bool ok;
    if (std::isnan(f)) {
      ok = (portable & 0x7c00) == 0x7c00 && (portable & 0x3ff) != 0 && (portable & 0x200) != 0 &&
           portable == fast;  // a quiet NaN, as F16C makes it
    } else {
      ok = portable == fast && portable == half_reference_round(f);
    }
    if (!ok && ++mismatches <= 10)
      FAIL_CHECK("float " << f << " (0x" << std::hex << float_to_bits(f) << "): portable 0x" << portable << ", F16C 0x"
                          << fast << ", reference 0x" << half_reference_round(f) << std::dec);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float -> half: named cases") {
  CHECK(float_to_half_bits_portable(1.0f) == 0x3c00);
  CHECK(float_to_half_bits_portable(-2.0f) == 0xc000);
  CHECK(float_to_half_bits_portable(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits_portable(65519.0f) == 0x7bff);  // below the midpoint 65520
  CHECK(float_to_half_bits_portable(65520.0f) == 0x7c00);  // midpoint: ties to even = Inf
  CHECK(float_to_half_bits_portable(1e6f) == 0x7c00);
  CHECK(float_to_half_bits_portable(-1e6f) == 0xfc00);
  CHECK(float_to_half_bits_portable(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_half_bits_portable(5.960464477539063e-08f) == 0x0001);   // 2^-24, smallest subnormal
  CHECK(float_to_half_bits_portable(2.9802322387695312e-08f) == 0x0000);  // 2^-25: tie to even (0)
  CHECK(float_to_half_bits_portable(8.940696716308594e-08f) == 0x0002);   // 1.5 * 2^-24: tie to even (2)
  CHECK(float_to_half_bits_portable(6.097555160522461e-05f) == 0x03ff);   // largest subnormal
  CHECK(float_to_half_bits_portable(6.103515625e-05f) == 0x0400);         // smallest normal
  // 1 + 2^-11 is the midpoint between 1 and 1 + 2^-10: ties to even (1.0).
  CHECK(float_to_half_bits_portable(1.00048828125f) == 0x3c00);
  // 1 + 3 * 2^-11 is the midpoint between 1 + 2^-10 and 1 + 2^-9: ties to even (1 + 2^-9).
  CHECK(float_to_half_bits_portable(1.00146484375f) == 0x3c02);
  CHECK(float_to_half_bits_portable(-0.0f) == 0x8000);
  CHECK(std::isnan(half_bits_to_float_portable(float_to_half_bits_portable(std::nanf("")))));
  CHECK(half_bits_to_float_portable(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(half_bits_to_float_portable(0xfc00) == -std::numeric_limits<float>::infinity());
  // Every half survives a round trip exactly.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs: payload may be quieted
    if (float_to_half_bits_portable(half_bits_to_float_portable(static_cast<uint16_t>(h))) != h) {
      FAIL_CHECK("round trip of half 0x" << std::hex << h);
      break;
    }
  }
}

// ---- bfloat16 ---------------------------------------------------------------------------------

TEST_CASE("float -> bfloat16 rounds to nearest even and keeps NaN") {
  CHECK(float_to_bfloat16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bfloat16_bits(bits_to_float(0x3f808000u)) == 0x3f80);         // tie, even stays
  CHECK(float_to_bfloat16_bits(bits_to_float(0x3f818000u)) == 0x3f82);         // tie, odd rounds up
  CHECK(float_to_bfloat16_bits(bits_to_float(0x3f808001u)) == 0x3f81);         // above the tie
  CHECK(float_to_bfloat16_bits(bits_to_float(0x3f807fffu)) == 0x3f80);         // below the tie
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to Inf
  CHECK(float_to_bfloat16_bits(bits_to_float(0x7f7f7fffu)) == 0x7f7f);         // stays finite
  CHECK(float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(float_to_bfloat16_bits(-0.0f) == 0x8000);
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  // NaNs stay NaN (quiet), whatever their payload, including ones whose payload sits in the
  // low 16 bits only (truncating would make them Inf) and signalling ones.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu, 0xffc12345u}) {
    const uint16_t b = float_to_bfloat16_bits(bits_to_float(nan_bits));
    CAPTURE(nan_bits);
    CHECK(std::isnan(bfloat16_bits_to_float(b)));
    CHECK((b & 0x40) != 0);  // quiet bit
    CHECK((b & 0x8000) == ((nan_bits >> 16) & 0x8000));
  }
  // bfloat16 -> float is exact: the bits move up.
  for (uint32_t b = 0; b <= 0xffff; b += 7)
    CHECK_MESSAGE(float_to_bits(bfloat16_bits_to_float(static_cast<uint16_t>(b))) == (b << 16), b);
}

TEST_CASE("float -> bfloat16 against the reference on a sweep of bit patterns") {
  int mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4099) {
    const float f = bits_to_float(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    const uint16_t got = float_to_bfloat16_bits(f), want = bfloat16_reference_round(f);
    if (got != want && ++mismatches <= 10)
      FAIL_CHECK("float 0x" << std::hex << bits << ": got 0x" << got << ", want 0x" << want << std::dec);
  }
  // Every tie: low 16 bits exactly 0x8000, for many high parts.
  for (uint32_t high = 0; high < 0x7f80; high += 3) {
    const float f = bits_to_float((high << 16) | 0x8000u);
    const uint16_t got = float_to_bfloat16_bits(f), want = bfloat16_reference_round(f);
    if (got != want && ++mismatches <= 10) FAIL_CHECK("tie 0x" << std::hex << high << std::dec);
  }
  CHECK(mismatches == 0);
}

// ---- promotion --------------------------------------------------------------------------------

TEST_CASE("promote_types table") {
  // Rows and columns: f32, f64, f16, bf16, i32, i64, bool.
  const DType order[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
  const DType table[7][7] = {
      /* f32  */ {kF32, kF64, kF32, kF32, kF32, kF32, kF32},
      /* f64  */ {kF64, kF64, kF64, kF64, kF64, kF64, kF64},
      /* f16  */ {kF32, kF64, kF16, kF32, kF16, kF16, kF16},
      /* bf16 */ {kF32, kF64, kF32, kBF16, kBF16, kBF16, kBF16},
      /* i32  */ {kF32, kF64, kF16, kBF16, kInt32, kInt64, kInt32},
      /* i64  */ {kF32, kF64, kF16, kBF16, kInt64, kInt64, kInt64},
      /* bool */ {kF32, kF64, kF16, kBF16, kInt32, kInt64, kBool},
  };
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 7; ++j) {
      CAPTURE(dtype_name(order[i]));
      CAPTURE(dtype_name(order[j]));
      CHECK(promote_types(order[i], order[j]) == table[i][j]);
    }
  }
  // Tensor ops follow the table.
  CHECK((ones({2}, kF16) + ones({2}, kBF16)).dtype() == kFloat32);
  CHECK((ones({2}, kF16) + ones({2}, kInt64)).dtype() == kFloat16);
  CHECK((ones({2}, kInt32) + ones({2}, kInt64)).dtype() == kInt64);
  CHECK((ones({2}, kF32) * ones({2}, kF64)).dtype() == kFloat64);
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(is_half(kFloat16));
  CHECK(is_half(kBFloat16));
  CHECK_FALSE(is_half(kFloat32));
  CHECK(is_floating(kBFloat16));
  CHECK_FALSE(is_floating(kInt32));
  CHECK(is_integral(kInt64));
  CHECK_FALSE(is_integral(kBool));
  CHECK(dtype_name(kBFloat16) == "bfloat16");
}

// ---- arithmetic on 16-bit tensors -------------------------------------------------------------

TEST_CASE("float16/bfloat16 arithmetic computes in float32 and rounds once") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    auto round_to = [dt](float v) {
      return dt == kFloat16 ? half_bits_to_float(float_to_half_bits(v))
                            : bfloat16_bits_to_float(float_to_bfloat16_bits(v));
    };
    manual_seed(7);
    // Non-contiguous, broadcast operands: a (64,48) transposed view, b (48) row.
    Tensor a = (randn({48, 64}) * 3.0).to(dt).t();
    Tensor b = (rand({48}) + 0.5).to(dt);
    Tensor pos = (rand({64, 48}) * 4.0 + 0.1).to(dt);
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), pv = pos.to_vector<float>();
    struct Case {
      const char* name;
      Tensor out;
      std::function<float(size_t)> expected;
    };
    const size_t cols = 48;
    std::vector<Case> cases;
    cases.push_back({"add", a + b, [&](size_t i) { return av[i] + bv[i % cols]; }});
    cases.push_back({"sub", a - b, [&](size_t i) { return av[i] - bv[i % cols]; }});
    cases.push_back({"mul", a * b, [&](size_t i) { return av[i] * bv[i % cols]; }});
    cases.push_back({"div", a / b, [&](size_t i) { return av[i] / bv[i % cols]; }});
    cases.push_back({"mul_scalar", a * 0.1, [&](size_t i) { return av[i] * 0.1f; }});
    cases.push_back({"add_scalar", a + 1000.25, [&](size_t i) { return av[i] + 1000.25f; }});
    cases.push_back({"exp", a.exp(), [&](size_t i) { return std::exp(av[i]); }});
    cases.push_back({"log", pos.log(), [&](size_t i) { return std::log(pv[i]); }});
    cases.push_back({"sqrt", pos.sqrt(), [&](size_t i) { return std::sqrt(pv[i]); }});
    cases.push_back({"tanh", a.tanh(), [&](size_t i) { return std::tanh(av[i]); }});
    cases.push_back({"neg", -a, [&](size_t i) { return -av[i]; }});
    for (const Case& c : cases) {
      CAPTURE(c.name);
      CHECK(c.out.dtype() == dt);
      const std::vector<float> got = c.out.to_vector<float>();
      REQUIRE(got.size() == av.size());
      int bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float want = round_to(c.expected(i));
        if (!same_float(got[i], want) && ++bad <= 3)
          FAIL_CHECK("element " << i << ": got " << got[i] << ", want " << want);
      }
      CHECK(bad == 0);
    }
    // Mixed with float32, the result is float32 and computed from the exact 16-bit values.
    Tensor wide = randn({48});
    const std::vector<float> wv = wide.to_vector<float>();
    const std::vector<float> mixed = (a * wide).to_vector<float>();
    CHECK((a * wide).dtype() == kFloat32);
    for (size_t i = 0; i < mixed.size(); ++i) {
      if (!same_float(mixed[i], av[i] * wv[i % cols])) {
        FAIL_CHECK("mixed element " << i);
        break;
      }
    }
  }
}

TEST_CASE("16-bit tensors: overflow, NaN and in-place updates") {
  Tensor h = tensor({60000, 1, -60000}, kFloat16);
  const std::vector<float> doubled = (h * 2.0).to_vector<float>();
  CHECK(doubled[0] == std::numeric_limits<float>::infinity());
  CHECK(doubled[1] == 2.0f);
  CHECK(doubled[2] == -std::numeric_limits<float>::infinity());
  // float32 holds 60000 * 2 fine: only the final rounding overflows in float16.
  CHECK((h * 2.0 / 4.0).to_vector<float>()[0] == std::numeric_limits<float>::infinity());
  CHECK((h.to(kFloat32) * 2.0 / 4.0).to_vector<float>()[0] == 30000.0f);
  Tensor bf = tensor({1e38, 1}, kBFloat16);
  CHECK(std::isfinite((bf * 2.0).to_vector<float>()[0]));  // bfloat16 has float32's range
  Tensor n = tensor({std::nan(""), 1.0}, kBFloat16);
  CHECK(std::isnan((n + 1.0).to_vector<float>()[0]));

  // In place: x += 0.001 on a float16 1.0 stays 1.0 (the step is below half an ulp, 2^-11).
  Tensor one = ones({4}, kFloat16);
  one.add_(0.0004);
  CHECK(one.to_vector<float>() == std::vector<float>(4, 1.0f));
  one.add_(0.0006);  // above half an ulp: rounds up to 1 + 2^-10
  CHECK(one.to_vector<float>() == std::vector<float>(4, 1.0009765625f));
}
