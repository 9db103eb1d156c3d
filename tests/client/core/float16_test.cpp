// client/core/api/float16.h: every fp16 and bf16 bit pattern survives the trip through float,
// every rounding tie between two neighbours goes to the even one, and the values the tests
// and kiln-bench rely on (largest, smallest, infinity, the 0xFF poison) come out right.
#include "client/core/api/float16.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

namespace kiln::client {
namespace {

bool HalfIsNan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool BFloat16IsNan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

TEST_CASE("fp16: every bit pattern round-trips through float", "[client][float16]") {
  int nans = 0;
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (HalfIsNan(h)) {
      ++nans;
      REQUIRE(std::isnan(f));
      REQUIRE(FloatToHalf(f) == 0x7E00);
      continue;
    }
    REQUIRE(std::signbit(f) == ((h & 0x8000) != 0));
    REQUIRE(FloatToHalf(f) == h);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("bf16: every bit pattern round-trips through float", "[client][float16]") {
  int nans = 0;
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = BFloat16ToFloat(b);
    if (BFloat16IsNan(b)) {
      ++nans;
      REQUIRE(std::isnan(f));
      REQUIRE(FloatToBFloat16(f) == 0x7FC0);
      continue;
    }
    REQUIRE(std::signbit(f) == ((b & 0x8000) != 0));
    REQUIRE(FloatToBFloat16(f) == b);
  }
  CHECK(nans == 2 * 127);
}

// The midpoint of two neighbouring fp16 (or bf16) values has at most 12 (9) significant bits,
// so it is a float: it must round to the even neighbour, and the floats just beside it to the
// nearer one. Every pair of positive neighbours is checked; negatives mirror them. The
// midpoint is lo + (hi - lo) / 2, exact at every step, where lo + hi would overflow at the top
// of bf16's range.
TEST_CASE("fp16: ties round to even, everything else to nearest", "[client][float16]") {
  for (uint16_t h = 0; h < 0x7C00; ++h) {
    const uint16_t up = static_cast<uint16_t>(h + 1);
    // 65520, between 65504 and 65536 (which fp16 cannot hold), is where infinity begins.
    const float mid = up == 0x7C00 ? 65520.0f : HalfToFloat(h) + (HalfToFloat(up) - HalfToFloat(h)) / 2;
    const uint16_t even = (h & 1) ? up : h;
    REQUIRE(FloatToHalf(mid) == even);
    REQUIRE(FloatToHalf(std::nextafter(mid, 0.0f)) == h);
    REQUIRE(FloatToHalf(std::nextafter(mid, INFINITY)) == up);
    REQUIRE(FloatToHalf(-mid) == (even | 0x8000));
  }
}

TEST_CASE("bf16: ties round to even, everything else to nearest", "[client][float16]") {
  // Up to the largest finite bf16, 0x7F7F: the midpoint above it is beyond FLT_MAX.
  for (uint16_t b = 0; b < 0x7F7F; ++b) {
    const uint16_t up = static_cast<uint16_t>(b + 1);
    const float mid = BFloat16ToFloat(b) + (BFloat16ToFloat(up) - BFloat16ToFloat(b)) / 2;
    const uint16_t even = (b & 1) ? up : b;
    REQUIRE(FloatToBFloat16(mid) == even);
    REQUIRE(FloatToBFloat16(std::nextafter(mid, 0.0f)) == b);
    REQUIRE(FloatToBFloat16(std::nextafter(mid, INFINITY)) == up);
    REQUIRE(FloatToBFloat16(-mid) == (even | 0x8000));
  }
}

TEST_CASE("fp16: known values", "[client][float16]") {
  CHECK(FloatToHalf(1.0f) == 0x3C00);
  CHECK(FloatToHalf(-2.0f) == 0xC000);
  CHECK(FloatToHalf(0.0f) == 0x0000);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(FloatToHalf(65504.0f) == 0x7BFF);   // the largest fp16
  CHECK(FloatToHalf(65519.99f) == 0x7BFF);  // below the midpoint to 65536
  CHECK(FloatToHalf(65520.0f) == 0x7C00);   // the midpoint: to even, infinity
  CHECK(FloatToHalf(70000.0f) == 0x7C00);
  CHECK(FloatToHalf(-INFINITY) == 0xFC00);
  CHECK(FloatToHalf(FLT_MAX) == 0x7C00);
  CHECK(FloatToHalf(6.103515625e-05f) == 0x0400);         // 2^-14, the smallest normal
  CHECK(FloatToHalf(5.960464477539063e-08f) == 0x0001);   // 2^-24, the smallest subnormal
  CHECK(FloatToHalf(2.9802322387695312e-08f) == 0x0000);  // 2^-25: a tie, to even (zero)
  CHECK(FloatToHalf(8.940696716308594e-08f) == 0x0002);   // 3 * 2^-25: a tie, to even
  CHECK(FloatToHalf(1.0f + 1.0f / 2048) == 0x3C00);       // a tie between 0x3C00 and 0x3C01
  CHECK(FloatToHalf(1.0f + 3.0f / 2048) == 0x3C02);       // a tie between 0x3C01 and 0x3C02
  CHECK(FloatToHalf(FLT_MIN) == 0x0000);
  CHECK(FloatToHalf(NAN) == 0x7E00);
  CHECK(FloatToHalf(-NAN) == 0x7E00);
  CHECK(HalfToFloat(0x3555) == 0.333251953125f);
  CHECK(HalfToFloat(0x7BFF) == 65504.0f);
  CHECK(HalfToFloat(0x03FF) == 6.097555160522461e-05f);  // the largest subnormal
  CHECK(HalfToFloat(0xFC00) == -INFINITY);
  CHECK(std::isnan(HalfToFloat(0xFFFF)));  // the 0xFF poison of the GPU tests
}

TEST_CASE("bf16: known values", "[client][float16]") {
  CHECK(FloatToBFloat16(1.0f) == 0x3F80);
  CHECK(FloatToBFloat16(-2.0f) == 0xC000);
  CHECK(FloatToBFloat16(-0.0f) == 0x8000);
  CHECK(FloatToBFloat16(1.0f + 1.0f / 256) == 0x3F80);  // a tie between 0x3F80 and 0x3F81
  CHECK(FloatToBFloat16(1.0f + 3.0f / 256) == 0x3F82);  // a tie between 0x3F81 and 0x3F82
  CHECK(FloatToBFloat16(FLT_MAX) == 0x7F80);            // beyond the largest bf16: infinity
  CHECK(FloatToBFloat16(INFINITY) == 0x7F80);
  CHECK(FloatToBFloat16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(FloatToBFloat16(NAN) == 0x7FC0);
  CHECK(FloatToBFloat16(-NAN) == 0x7FC0);
  CHECK(BFloat16ToFloat(0x3FC0) == 1.5f);
  CHECK(BFloat16ToFloat(0x7F7F) == 3.3895313892515355e+38f);  // the largest bf16
  CHECK(std::isnan(BFloat16ToFloat(0xFFFF)));                 // the 0xFF poison of the GPU tests
}

}  // namespace
}  // namespace kiln::client

TEST_CASE("fp8 e4m3: every code round-trips, and floats round to nearest even, saturating at 448", "[float16]") {
  using kiln::client::FloatToFp8E4M3;
  using kiln::client::Fp8E4M3ToFloat;
  for (int code = 0; code < 256; ++code) {
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(code));
    INFO("code " << code << " = " << f);
    if ((code & 0x7F) == 0x7F) {
      CHECK(std::isnan(f));
      continue;
    }
    const uint8_t back = FloatToFp8E4M3(f);
    if (code == 0x80) CHECK(back == 0x80);  // -0 keeps its sign
    else CHECK(back == code);
  }
  CHECK(Fp8E4M3ToFloat(0x7E) == 448.0f);
  CHECK(Fp8E4M3ToFloat(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(Fp8E4M3ToFloat(0x08) == std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(Fp8E4M3ToFloat(0x38) == 1.0f);
  CHECK(FloatToFp8E4M3(1000.0f) == 0x7E);  // saturated, no infinity
  CHECK(FloatToFp8E4M3(-1000.0f) == 0xFE);
  CHECK(FloatToFp8E4M3(std::nanf("")) == 0x7F);
  // Halfway cases go to the even code: 1.0625 is between 1.0 (0x38) and 1.125 (0x39).
  CHECK(FloatToFp8E4M3(1.0625f) == 0x38);
  CHECK(FloatToFp8E4M3(1.1875f) == 0x3A);  // between 1.125 (0x39) and 1.25 (0x3A)
  CHECK(FloatToFp8E4M3(1.07f) == 0x39);
  CHECK(FloatToFp8E4M3(std::ldexp(1.0f, -10)) == 0x00);  // half the smallest subnormal: to even 0
  CHECK(FloatToFp8E4M3(std::ldexp(3.0f, -10)) == 0x02);  // 1.5 subnormal steps: to even 2
  CHECK(FloatToFp8E4M3(0.0155f) == 0x08);                // rounds up into the smallest normal
}
