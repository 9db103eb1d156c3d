#include "bench/op/host_tensor.h"

#include <catch2/catch.hpp>

#include <cmath>

namespace kiln::bench {
namespace {

TEST_CASE("random host tensors: in range, rounded to the dtype, never zero", "[bench]") {
  std::mt19937_64 rng(1);
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const HostTensor t = RandomHostTensor(d, 10000, rng);
    REQUIRE(t.size() == 10000);
    for (size_t i = 0; i < t.size(); ++i) {
      const double v = t.Get(i);
      CHECK(v != 0);
      CHECK(v >= -2);
      CHECK(v <= 2);
    }
  }
  const HostTensor ints = RandomHostTensor(DType::kInt32, 1000, rng, 0, 10);
  for (size_t i = 0; i < ints.size(); ++i) {
    CHECK(ints.Get(i) >= 0);
    CHECK(ints.Get(i) < 10);
  }
}

TEST_CASE("random host tensors: the seed decides, not the threads, chunks differ", "[bench]") {
  // Three chunks of 1M elements and a part: filled on several threads.
  const size_t n = (size_t{3} << 20) + 12345;
  std::mt19937_64 a(42), b(42), c(43);
  const HostTensor x = RandomHostTensor(DType::kBFloat16, n, a);
  const HostTensor y = RandomHostTensor(DType::kBFloat16, n, b);
  const HostTensor z = RandomHostTensor(DType::kBFloat16, n, c);
  CHECK(x.bytes == y.bytes);
  CHECK(x.bytes != z.bytes);
  CHECK(a() == b());  // the generator advanced alike
  size_t same = 0;    // chunks are not copies of each other
  for (size_t i = 0; i < 1000; ++i) same += x.Get(i) == x.Get(i + (size_t{1} << 20));
  CHECK(same < 100);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x.Get(i);
  CHECK(std::fabs(sum / static_cast<double>(n)) < 0.01);  // uniform in [-2, 2): mean 0
}

TEST_CASE("bit-for-bit comparisons: equal bytes pass, any other bits fail", "[bench]") {
  HostTensor a = HostTensor::Zeros(DType::kBFloat16, 5), b = HostTensor::Zeros(DType::kBFloat16, 5);
  for (size_t i = 0; i < 5; ++i) {
    a.Set(i, 0.25 * static_cast<double>(i));
    b.Set(i, 0.25 * static_cast<double>(i));
  }
  const Comparison same = CompareBits(a, b);
  CHECK(same.ok);
  CHECK(same.count == 5);
  b.bytes[6] ^= 1;  // the last mantissa bit of element 3
  const Comparison off = CompareBits(a, b);
  CHECK(!off.ok);
  CHECK(off.mismatches == 1);
  CHECK(off.first_mismatch.rfind("[3] got 0.75, want 0.7", 0) == 0);
  a.bytes[6] ^= 1;
  CHECK(CompareBits(a, b).ok);
  a.bytes[0] = b.bytes[0] = 0xFF;  // the same NaN bits: a copy is exact
  a.bytes[1] = b.bytes[1] = 0xFF;
  CHECK(CompareBits(a, b).ok);
  CHECK(!CompareBits(a, HostTensor::Zeros(DType::kBFloat16, 4)).ok);
  CHECK(!CompareBits(a, HostTensor::Zeros(DType::kFloat16, 5)).ok);
}

TEST_CASE("comparisons: tolerance per dtype, NaN always fails, the first mismatch named", "[bench]") {
  HostTensor got = HostTensor::Zeros(DType::kBFloat16, 4);
  for (size_t i = 0; i < 4; ++i) got.Set(i, 1.0);
  const Tolerance t = CrossTolerance(DType::kBFloat16);
  CHECK(t.abs == Approx(3.2e-2));
  Comparison ok = Compare(got, std::vector<double>{1.0, 1.01, 0.99, 1.02}, t);
  CHECK(ok.ok);
  CHECK(ok.max_abs_err == Approx(0.02));
  CHECK(ok.worst_fraction < 1);

  Comparison bad = Compare(got, std::vector<double>{1.0, 1.0, 2.0, 1.0}, t);
  CHECK(!bad.ok);
  CHECK(bad.mismatches == 1);
  CHECK(bad.first_mismatch == "[2] got 1, want 2");

  got.bytes[0] = 0xFF;  // NaN (poison) in element 0
  got.bytes[1] = 0xFF;
  Comparison nan = Compare(got, std::vector<double>{1.0, 1.0, 1.0, 1.0}, t);
  CHECK(!nan.ok);
  CHECK(nan.first_mismatch.rfind("[0] got ", 0) == 0);
  CHECK(nan.first_mismatch.find("nan") != std::string::npos);

  HostTensor want = HostTensor::Zeros(DType::kBFloat16, 3);
  CHECK(!Compare(got, want, t).ok);  // sizes differ

  HostTensor a = HostTensor::Zeros(DType::kInt32, 2), b = HostTensor::Zeros(DType::kInt32, 2);
  a.Set(0, 5);
  b.Set(0, 5);
  CHECK(Compare(a, b, Float64Tolerance(DType::kInt32)).ok);  // integers: exact
  b.Set(1, 1);
  CHECK(!Compare(a, b, Float64Tolerance(DType::kInt32)).ok);
}

}  // namespace
}  // namespace kiln::bench
