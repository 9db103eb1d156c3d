// Sums across the threads of a warp or a block, in fp32. Butterfly (xor) shuffles: every
// participating thread ends with the same bits, so no broadcast is needed afterwards.
#pragma once

namespace kiln {

// Sums over each aligned group of kWidth lanes (kWidth a power of two, 1..32). Every lane
// of the warp must call it (full mask).
template <int kWidth>
__device__ __forceinline__ float WarpSum(float value) {
  static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0,
                "WarpSum groups are a power of two of at most 32 lanes");
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sums over a block of kThreads threads (a multiple of 32, at most 1024). Every thread must
// call it; `warp_sums` is shared memory of kThreads / 32 floats, written once: a second
// call on the same buffer needs a __syncthreads() before it.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float value, float* warp_sums) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "BlockSum needs whole warps");
  constexpr int kWarps = kThreads / 32;
  value = WarpSum<32>(value);
  if constexpr (kWarps == 1) {
    return value;
  } else {
    const int lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[threadIdx.x / 32] = value;
    __syncthreads();
    // Each warp sums the partials itself: no second barrier and no broadcast.
    value = lane < kWarps ? warp_sums[lane] : 0.0f;
    return WarpSum<32>(value);
  }
}

}  // namespace kiln
