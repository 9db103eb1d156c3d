// fused_moe_fp8's quantizers divide by a group's scale through its reciprocal, refined once
// (QuotientByScale, kiln/moe/moe_contract.h): on the host, the same functions against IEEE division over the
// quantizer's whole range of scales and values, for every approximation of the reciprocal
// within an ulp (rcp.approx's bound on the device). The quotient must have the division's bits
// wherever it is at least 2^-10 (a nonzero e4m3 code) and give the division's code everywhere.
// The kernels' own codes are checked on a GPU (gpu_fused_moe_fp8_quantize_test.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "client/core/api/float16.h"
#include "kiln/moe/moe_contract.h"

namespace {

using kiln::client::FloatToFp8E4M3;
using kiln::moe::QuotientByScale;
using kiln::moe::RefinedReciprocal;

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Checks one (v, scale) against every reciprocal approximation within an ulp of 1 / scale;
// returns a description of the first mismatch, or "".
std::string Mismatch(float v, float scale) {
  const float want = v / scale;
  const float nearest = 1.0f / scale;
  for (float r0 : {nearest, std::nextafter(nearest, 0.0f), std::nextafter(nearest, 1e38f)}) {
    const float q = QuotientByScale(v, scale, RefinedReciprocal(scale, r0));
    const bool bits_differ = BitsOf(q) != BitsOf(want);
    if (FloatToFp8E4M3(q) != FloatToFp8E4M3(want) || (std::fabs(want) >= 0x1p-10f && bits_differ))
      return "v " + std::to_string(v) + " (bits " + std::to_string(BitsOf(v)) + "), scale " + std::to_string(scale) +
             " (bits " + std::to_string(BitsOf(scale)) + "), r0 bits " + std::to_string(BitsOf(r0)) +
             ": quotient bits " + std::to_string(BitsOf(q)) + ", the division's " + std::to_string(BitsOf(want));
  }
  return "";
}

float ScaleOf(float amax) { return std::fmax(amax, kiln::moe::kFp8MinAmax) / kiln::moe::kFp8E4M3Max; }

TEST_CASE("fused_moe_fp8's quotient from a refined reciprocal has the IEEE division's bits and codes",
          "[moe][fp8][quotient]") {
  std::mt19937 rng(20261207);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> amax_exponent(-140, 126);  // below kFp8MinAmax up to near fp32's top
  std::uniform_int_distribution<int> shrink(0, 160);            // how far below amax a value lies
  int mismatches = 0, checked = 0;
  std::string first;
  auto check = [&](float v, float scale) {
    ++checked;
    const std::string m = Mismatch(v, scale);
    if (!m.empty() && mismatches++ == 0) first = m;
  };
  for (int trial = 0; trial < 20000; ++trial) {
    const float amax = std::ldexp(1.0f + std::fabs(unit(rng)), amax_exponent(rng));
    const float scale = ScaleOf(amax);
    // Values of the group: up to amax (the quotient up to 448), spread over every binade below it
    // down to the denormals, random signs; amax itself and its negative.
    check(amax, scale);
    check(-amax, scale);
    for (int i = 0; i < 30; ++i) check(std::ldexp(amax * unit(rng), -shrink(rng)), scale);
  }
  // Exact e4m3 midpoints at scale 1 (amax 448): the normals' (1 + (2m + 1) / 16) 2^e and the
  // subnormals' (2m + 1) 2^-10, each side of them by an ulp, and the signed zeros.
  const float one = ScaleOf(448.0f);
  REQUIRE(one == 1.0f);
  for (int e = -6; e <= 8; ++e)
    for (int m = 0; m < 8; ++m) {
      const float mid = std::ldexp(1.0f + (2 * m + 1) / 16.0f, e);
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        check(v, one);
        check(-v, one);
      }
    }
  for (int m = 0; m < 8; ++m) check(std::ldexp(2.0f * m + 1.0f, -10), one);
  check(0.0f, one);
  check(-0.0f, one);
  check(-0.0f, ScaleOf(0.0f));
  CHECK(FloatToFp8E4M3(QuotientByScale(-0.0f, one, RefinedReciprocal(one, 1.0f))) == 0x80);
  INFO(first);
  CHECK(checked > 600000);
  CHECK(mismatches == 0);
}

}  // namespace
