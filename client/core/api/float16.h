// fp16 and bf16 element values on the host: the conversions from and to float that the
// kernels' FromFloat makes (round to nearest, ties to even), for every host-side fill, read
// and comparison of such tensors — the CLI's replay comparison, kiln-bench and the tests.
//
// Header-only and inline: kiln-bench and the GPU tests convert tensors of millions of elements
// on the host, one call per element.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::client {
namespace float16_detail {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace float16_detail

// bf16 is the upper half of a float: widening is exact (NaN payloads included).
inline float BFloat16ToFloat(uint16_t bits) { return float16_detail::FromBits(static_cast<uint32_t>(bits) << 16); }

// Rounded to nearest, ties to even; too large becomes infinity. Every NaN becomes the quiet
// NaN 0x7FC0: adding the rounding bias to a NaN's bits could carry it into infinity.
inline uint16_t FloatToBFloat16(float value) {
  if (std::isnan(value)) return 0x7FC0;
  uint32_t u = float16_detail::Bits(value);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// Exact: every fp16 value (subnormals, infinities, NaN payloads) is a float.
inline float HalfToFloat(uint16_t bits) {
  using float16_detail::FromBits;
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) / 16777216.0f;  // 2^-24 units
    return sign ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7F800000u | (mantissa << 13));
  return FromBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

// Rounded to nearest, ties to even, subnormals included; 65520 and above (the midpoint
// between 65504, the largest fp16, and the next power of two) become infinity. Every NaN
// becomes the quiet NaN 0x7E00.
inline uint16_t FloatToHalf(float value) {
  using float16_detail::Bits;
  const uint32_t sign = (Bits(value) >> 16) & 0x8000;
  if (std::isnan(value)) return 0x7E00;
  const float a = std::fabs(value);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to infinity
  if (a < 6.103515625e-05f) {
    // Subnormal: a multiple of 2^-24. a * 2^24 is exact, and nearbyint rounds it to nearest
    // even in the default rounding mode; 1024 is the smallest normal, encoded the same way.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t mag = Bits(a);
  const uint32_t exponent = ((mag >> 23) & 0xFF) - 127 + 15;
  const uint32_t mantissa = mag & 0x7FFFFF;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(sign | half);
}

// fp8 e4m3 (OCP "e4m3fn", what DeepSeek-V3's weights and torch.float8_e4m3fn use): 1 sign, 4
// exponent (bias 7), 3 mantissa bits, no infinities, 0x7F/0xFF the NaN; largest 448, smallest
// subnormal 2^-9.
inline float Fp8E4M3ToFloat(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

// Rounded to nearest, ties to even; beyond 448 saturated to 448 (as the kernels' satfinite
// conversions do: e4m3fn has no infinity); NaN becomes 0x7F.
inline uint8_t FloatToFp8E4M3(float value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float a = std::fabs(value);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7E);
  // Subnormals are multiples of 2^-9 and the code of one is that multiple (8 is the smallest
  // normal, 2^-6, encoded the same way); nearbyint rounds to nearest even.
  if (a < 0.015625f) return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 512.0f)));
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // code = biased exponent * 8 + mantissa, the mantissa's rounding carrying into the exponent.
  const float scaled = (2.0f * f - 1.0f) * 8.0f;  // 0 <= scaled < 8
  const uint32_t code = static_cast<uint32_t>((e - 1 + 7) * 8) + static_cast<uint32_t>(std::nearbyint(scaled));
  return static_cast<uint8_t>(sign | (code > 0x7E ? 0x7E : code));
}

}  // namespace kiln::client
