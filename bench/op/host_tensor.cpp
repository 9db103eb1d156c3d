#include "bench/op/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "bench/op/host_parallel.h"
#include "client/core/api/float16.h"

namespace kiln::bench {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

HostTensor HostTensor::Zeros(DType dtype, size_t count) {
  HostTensor t;
  t.dtype = dtype;
  t.bytes.assign(count * DTypeSize(dtype), 0);
  return t;
}

double HostTensor::Get(size_t i) const {
  const uint8_t* p = bytes.data() + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: return Load<float>(p);
    case DType::kFloat16: return client::HalfToFloat(Load<uint16_t>(p));
    case DType::kBFloat16: return client::BFloat16ToFloat(Load<uint16_t>(p));
    case DType::kInt8: return Load<int8_t>(p);
    case DType::kUInt8: return Load<uint8_t>(p);
    case DType::kInt32: return Load<int32_t>(p);
    case DType::kInt64: return static_cast<double>(Load<int64_t>(p));
    case DType::kFloat8E4M3: return client::Fp8E4M3ToFloat(Load<uint8_t>(p));
  }
  return 0;
}

void HostTensor::Set(size_t i, double value) {
  uint8_t* p = bytes.data() + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: Store(p, static_cast<float>(value)); break;
    case DType::kFloat16: Store(p, client::FloatToHalf(static_cast<float>(value))); break;
    case DType::kBFloat16: Store(p, client::FloatToBFloat16(static_cast<float>(value))); break;
    case DType::kInt8: Store(p, static_cast<int8_t>(value)); break;
    case DType::kUInt8: Store(p, static_cast<uint8_t>(value)); break;
    case DType::kInt32: Store(p, static_cast<int32_t>(value)); break;
    case DType::kInt64: Store(p, static_cast<int64_t>(value)); break;
    case DType::kFloat8E4M3: Store(p, client::FloatToFp8E4M3(static_cast<float>(value))); break;
  }
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

HostTensor RandomHostTensor(DType dtype, size_t count, std::mt19937_64& rng, double lo, double hi) {
  HostTensor t = HostTensor::Zeros(dtype, count);
  // Chunks of 1M elements, each from its own generator seeded in order from `rng`: the data
  // depends on the seed only, not on the number of threads that filled it (gigabytes of KV
  // cache take seconds instead of a minute).
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint64_t> seeds((count + kChunk - 1) / kChunk);
  for (auto& s : seeds) s = rng();
  uint8_t* bytes = t.bytes.data();
  ForEachChunk(count, kChunk, [&](size_t chunk, size_t begin, size_t end) {
    std::mt19937_64 gen(seeds[chunk]);
    if (!IsFloatDType(dtype)) {
      std::uniform_int_distribution<int64_t> uniform(static_cast<int64_t>(lo), static_cast<int64_t>(hi) - 1);
      for (size_t i = begin; i < end; ++i) t.Set(i, static_cast<double>(uniform(gen)));
      return;
    }
    std::uniform_real_distribution<double> uniform(lo, hi);
    for (size_t i = begin; i < end; ++i) {
      const float v = static_cast<float>(uniform(gen));
      // Never zero (a zero would hide a missing write), also after rounding to the dtype.
      switch (dtype) {
        case DType::kFloat16: {
          uint16_t h = client::FloatToHalf(v);
          if ((h & 0x7FFF) == 0) h = client::FloatToHalf(0.5f);
          Store(bytes + 2 * i, h);
          break;
        }
        case DType::kBFloat16: {
          uint16_t b = client::FloatToBFloat16(v);
          if ((b & 0x7FFF) == 0) b = client::FloatToBFloat16(0.5f);
          Store(bytes + 2 * i, b);
          break;
        }
        default: Store(bytes + 4 * i, v == 0.0f ? 0.5f : v); break;
      }
    }
  });
  return t;
}

Comparison CompareBits(const HostTensor& got, const HostTensor& want) {
  Comparison c;
  c.count = got.size();
  if (got.dtype != want.dtype || got.bytes.size() != want.bytes.size()) {
    c.ok = false;
    c.mismatches = c.count;
    c.first_mismatch = "sizes or dtypes differ: got " + std::to_string(c.count) + " " + DTypeName(got.dtype) +
                       " elements, want " + std::to_string(want.size()) + " " + DTypeName(want.dtype);
    return c;
  }
  if (std::memcmp(got.bytes.data(), want.bytes.data(), got.bytes.size()) == 0) return c;
  const size_t es = DTypeSize(got.dtype);
  for (size_t i = 0; i < c.count; ++i) {
    if (std::memcmp(got.bytes.data() + i * es, want.bytes.data() + i * es, es) == 0) continue;
    const double err = std::fabs(got.Get(i) - want.Get(i));
    if (std::isfinite(err)) c.max_abs_err = std::max(c.max_abs_err, err);
    if (c.mismatches++ == 0) {
      std::ostringstream s;
      s.precision(7);
      s << "[" << i << "] got " << got.Get(i) << ", want " << want.Get(i) << " (bits differ)";
      c.first_mismatch = s.str();
    }
  }
  c.ok = c.mismatches == 0;
  c.worst_fraction = c.ok ? 0.0 : HUGE_VAL;
  return c;
}

Tolerance Float64Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return {1e-5, 1e-5};
    case DType::kFloat16: return {2e-3, 2e-3};
    case DType::kBFloat16: return {1.6e-2, 1.6e-2};
    default: return {0, 0};
  }
}

Tolerance CrossTolerance(DType dtype) {
  const Tolerance t = Float64Tolerance(dtype);
  return {2 * t.abs, 2 * t.rel};
}

namespace {

template <typename WantAt>
Comparison CompareWith(const HostTensor& got, size_t count, WantAt want_at, Tolerance tolerance) {
  Comparison c;
  c.count = got.size();
  if (count != c.count) {
    c.ok = false;
    c.mismatches = c.count;
    c.first_mismatch = "sizes differ: got " + std::to_string(c.count) + " elements, want " + std::to_string(count);
    return c;
  }
  for (size_t i = 0; i < c.count; ++i) {
    const double g = got.Get(i);
    const double w = want_at(i);
    const double err = std::fabs(g - w);
    const bool pass = std::isfinite(g) && std::isfinite(w) && err <= tolerance.abs + tolerance.rel * std::fabs(w);
    if (std::isfinite(err)) {
      c.max_abs_err = std::max(c.max_abs_err, err);
      const double allowed = tolerance.abs + tolerance.rel * std::fabs(w);
      const double fraction = allowed > 0 ? err / allowed : (err > 0 ? HUGE_VAL : 0.0);
      c.worst_fraction = std::max(c.worst_fraction, fraction);
    }
    if (!pass && c.mismatches++ == 0) {
      std::ostringstream s;
      s.precision(7);
      s << "[" << i << "] got " << g << ", want " << w;
      c.first_mismatch = s.str();
    }
  }
  c.ok = c.mismatches == 0;
  return c;
}

}  // namespace

Comparison Compare(const HostTensor& got, const std::vector<double>& want, Tolerance tolerance) {
  return CompareWith(
      got, want.size(), [&](size_t i) { return want[i]; }, tolerance);
}

Comparison Compare(const HostTensor& got, const HostTensor& want, Tolerance tolerance) {
  return CompareWith(
      got, want.size(), [&](size_t i) { return want.Get(i); }, tolerance);
}

}  // namespace kiln::bench
