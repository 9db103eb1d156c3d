// The sampling family's generators (ops "top_k_sampling", "top_p_sampling",
// "top_k_top_p_sampling", "min_p_sampling" and "argmax"): params → JitSpec. One compilation
// unit (kernels/src/sampling/sampling.cu) and one kernel signature for all five; the launch
// shape is fixed (one block of kSamplingBlock threads per row). Contract and launch:
// kiln/sampling/sampling.cuh, docs/kernels-sampling.md.
#pragma once

#include <memory>

#include "kernels/jit/op_generator.h"

namespace kiln::kernels {

inline constexpr int kSamplingBlock = 1024;
// The largest vocabulary (tokens per row): the value histograms keep a count and an exact
// significand sum in one 64-bit word (kiln/sampling/value_select.cuh, kMaxVocab).
inline constexpr int kSamplingMaxVocab = (1 << 20) - 1;
// Dynamic shared memory of the ops that select a threshold (top_k, top_p, top_k_top_p):
// sizeof(kiln::sampling::SelectSmem), two 2048-bin histograms and a 4096-token list.
inline constexpr int kSamplingSelectSmem = 2 * 2048 * 8 + 4096 * 8;

std::unique_ptr<OpGenerator> MakeTopKSamplingGenerator();     // "top_k_sampling"
std::unique_ptr<OpGenerator> MakeTopPSamplingGenerator();     // "top_p_sampling"
std::unique_ptr<OpGenerator> MakeTopKTopPSamplingGenerator(); // "top_k_top_p_sampling"
std::unique_ptr<OpGenerator> MakeMinPSamplingGenerator();     // "min_p_sampling"
std::unique_ptr<OpGenerator> MakeArgmaxGenerator();           // "argmax"

}  // namespace kiln::kernels
