// heed/dtype.h — element types, the 16-bit float storage types, and their conversions.
//
// Invariants: float16/bfloat16 are storage types only: every arithmetic kernel
// converts them to float32, computes, and rounds back (round-to-nearest-even).
// Conversions preserve Inf and NaN. The CPU path uses F16C when compiled in.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace heed {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kF32 = kFloat32, kF64 = kFloat64, kF16 = kFloat16, kBF16 = kBFloat16;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Bool:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }

// ---- 16-bit floats --------------------------------------------------------------------------

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// IEEE binary16 in portable C++: round-to-nearest-even, NaN stays NaN, overflow gives Inf.
// Always compiled so the tests can compare it with the F16C instructions.
inline uint16_t float_to_half_bits_portable(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (abs >= 0x38800000u) {                                              // normal half
    const uint32_t exponent = (abs >> 23) - 127 + 15;
    const uint32_t mantissa = abs & 0x7fffffu;
    uint32_t h = (exponent << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to zero
  const uint32_t exponent = abs >> 23;                         // subnormal half: units of 2^-24
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;
  uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // Inf, or NaN made quiet with its payload kept (as F16C does)
    return bits_to_float(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  }
  if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // mantissa * 2^-24
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half_bits(float f) {
#if defined(__F16C__)
  // (_cvtss_sh is a compound literal in clang's headers, which -Wpedantic rejects.)
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
#else
  return float_to_half_bits_portable(f);
#endif
}

inline float half_bits_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return half_bits_to_float_portable(h);
#endif
}

// bfloat16: the top 16 bits of a float32, rounded to nearest even; NaN stays quiet NaN.
inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bfloat16_bits_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(float_to_half_bits(f)) {}
  explicit operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  explicit operator float() const { return bfloat16_bits_to_float(bits); }
};

// Maps C++ element types to DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = kFloat64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = kFloat16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = kBFloat16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = kBool;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// The dtype two operands are computed in: the wider float wins; any float beats integers;
// float16 with bfloat16 gives float32 (neither holds the other).
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
  if (is_half(a) && is_half(b)) return DType::Float32;
  if (is_half(a)) return a;
  if (is_half(b)) return b;
  if (a == DType::Int64 || b == DType::Int64) return DType::Int64;
  if (a == DType::Int32 || b == DType::Int32) return DType::Int32;
  return DType::Bool;
}

}  // namespace heed
