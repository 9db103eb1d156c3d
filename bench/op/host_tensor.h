// Host-side tensors of kiln-bench: elements of one dtype in host memory (fp16 and bf16
// rounded to nearest even, as the kernels' FromFloat: client/core/api/float16.h), random
// fills, and the element-wise comparison behind every refcheck.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/tensor_view.h"

namespace kiln::bench {

struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<uint8_t> bytes;

  static HostTensor Zeros(DType dtype, size_t count);
  size_t size() const { return bytes.size() / DTypeSize(dtype); }
  double Get(size_t i) const;
  void Set(size_t i, double value);  // rounded to the dtype (integers: truncated)
};

bool IsFloatDType(DType dtype);

// Uniform in [lo, hi), rounded to the dtype, never zero (a zero would hide a missing write);
// integer dtypes draw integers in [lo, hi). Filled on all cores; the same rng state gives the
// same data on any machine.
HostTensor RandomHostTensor(DType dtype, size_t count, std::mt19937_64& rng, double lo = -2, double hi = 2);

struct Tolerance {
  double abs = 0;
  double rel = 0;
};
// One rounding to the dtype plus fp32 accumulation, against a float64 reference (the GPU
// tests' figures): fp32 1e-5, fp16 2e-3, bf16 1.6e-2; integers exact.
Tolerance Float64Tolerance(DType dtype);
// Between two GPU results that each meet Float64Tolerance: twice it.
Tolerance CrossTolerance(DType dtype);

struct Comparison {
  bool ok = true;
  size_t count = 0;
  size_t mismatches = 0;  // outside the tolerance, or not finite
  double max_abs_err = 0;
  // The largest |got - want| / (abs + rel * |want|) over finite pairs: the share of the
  // tolerance used (<= 1 passes; integers, with no tolerance, give 0 or infinity).
  double worst_fraction = 0;
  std::string first_mismatch;  // "[7] got nan, want 0.1234"
};

// Element i passes when got is finite and |got - want| <= abs + rel * |want|.
Comparison Compare(const HostTensor& got, const std::vector<double>& want, Tolerance tolerance);
Comparison Compare(const HostTensor& got, const HostTensor& want, Tolerance tolerance);
// Bit for bit (a copy: bits in, bits out); the first differing element is named.
Comparison CompareBits(const HostTensor& got, const HostTensor& want);

}  // namespace kiln::bench
