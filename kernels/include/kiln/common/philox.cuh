// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator. Four 32-bit words out of a 128-bit counter and a 64-bit
// key, with no state: the same (counter, key) gives the same words on every thread, launch
// and GPU, which is what makes a sampling call reproducible bit for bit from (seed, offset).
// Ten rounds, the constants of the paper and of Random123 (its known-answer vectors are
// checked on the host in tests/client/ops/gpu_sampling_test.cpp against a host copy).
#pragma once

namespace kiln {

struct Philox4x32Counter {
  unsigned int w[4];
};

namespace detail {

constexpr unsigned int kPhiloxM0 = 0xD2511F53u;
constexpr unsigned int kPhiloxM1 = 0xCD9E8D57u;
constexpr unsigned int kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr unsigned int kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

__device__ __forceinline__ void PhiloxRound(unsigned int (&c)[4], unsigned int k0, unsigned int k1) {
  const unsigned int hi0 = __umulhi(kPhiloxM0, c[0]);
  const unsigned int lo0 = kPhiloxM0 * c[0];
  const unsigned int hi1 = __umulhi(kPhiloxM1, c[2]);
  const unsigned int lo1 = kPhiloxM1 * c[2];
  c[0] = hi1 ^ c[1] ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k1;
  c[3] = lo0;
}

}  // namespace detail

// Philox4x32-10 of `counter` under key (key0, key1).
__device__ __forceinline__ Philox4x32Counter Philox4x32(Philox4x32Counter counter, unsigned int key0,
                                                        unsigned int key1) {
  unsigned int c[4] = {counter.w[0], counter.w[1], counter.w[2], counter.w[3]};
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    detail::PhiloxRound(c, key0, key1);
    key0 += detail::kPhiloxW0;
    key1 += detail::kPhiloxW1;
  }
  return {{c[0], c[1], c[2], c[3]}};
}

// A uniform float in the open interval (0, 1) from the top 23 bits of a random word:
// k * 2^-23 + 2^-24 for k in [0, 2^23), every value exact. Never 0 or 1, so -log(u) is finite
// and positive.
__device__ __forceinline__ float OpenUniform(unsigned int bits) {
  return (__uint_as_float(0x3f800000u | (bits >> 9)) - 1.0f) + 0x1p-24f;
}

}  // namespace kiln
