#include "bench/op/kernel_parts.h"

#include <catch2/catch.hpp>

namespace kiln::bench {
namespace {

// Call i of three kernels a, b, c: a for 10 + i us, a gap of 1 us, b for 5 us starting 0.5 us
// before a's end (an early programmatic launch), then c 2 us after b.
std::vector<KernelSpan> ThreeKernels(uint64_t at, uint64_t i) {
  const uint64_t a_end = at + 10000 + 1000 * i;
  const uint64_t b_start = a_end - 500;
  return {{"c", b_start + 5000 + 2000, b_start + 5000 + 2000 + 3000},  // out of order: sorted by start
          {"a", at, a_end},
          {"b", b_start, b_start + 5000}};
}

TEST_CASE("kernel parts: each kernel's median and the gap before it, overlaps negative", "[bench]") {
  std::vector<std::vector<KernelSpan>> calls;
  for (uint64_t i = 0; i < 5; ++i) calls.push_back(ThreeKernels(100000 * i, i));
  // a: 10, 11, 12, 13, 14 -> median 12; b after a by -0.5; c after b by +2.
  CHECK(KernelParts(calls) == "a 12.00 | -0.50 b 5.00 | +2.00 c 3.00");
}

TEST_CASE("kernel parts: calls of other kernels are left out and counted", "[bench]") {
  std::vector<std::vector<KernelSpan>> calls;
  for (uint64_t i = 0; i < 4; ++i) calls.push_back(ThreeKernels(100000 * i, 0));
  calls.push_back({{"a", 0, 99000}, {"b", 99000, 200000}});                         // one kernel fewer
  calls.push_back({{"a", 0, 99000}, {"x", 99000, 100000}, {"c", 100000, 110000}});  // another name
  CHECK(KernelParts(calls) == "a 10.00 | -0.50 b 5.00 | +2.00 c 3.00 (4 of 6 calls)");
}

TEST_CASE("kernel parts: nothing for calls of one kernel or no calls", "[bench]") {
  CHECK(KernelParts({}).empty());
  CHECK(KernelParts({{{"a", 0, 1000}}, {{"a", 5000, 6000}}}).empty());
}

}  // namespace
}  // namespace kiln::bench
