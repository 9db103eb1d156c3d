// The op contract of the rope family (kiln/common/op_contract.h says what a contract is):
// rotary position embedding in place on q [tokens, q_heads, head_dim] and k [tokens, k_heads,
// head_dim], the first rotary_dim elements of each head, pairs (i, i + rotary_dim/2) (NeoX) or
// (2i, 2i + 1) (GPT-J):
//
//   apply_rope                     angle = position * theta^(-2i/rotary_dim) (Llama-3.1 scaling optional)
//   apply_rope_with_cos_sin_cache  cos/sin read from an fp32 table [max_position, rotary_dim]
//
// Params: dtype (fp16, bf16), rotary_dim (even, 2..kMaxRotaryDim), style (neox, gptj), pos_dtype
// (int32, int64), vec (kParamVec: a power of two, at most 16 bytes, dividing rotary_dim / 2).
// Launch (the only entry of each op): grid.x = ceil(tokens / items_per_block), items_per_block
// being tokens per block; grid.y = the number of head groups the client chooses (1..q_heads +
// k_heads, at most 65535; each thread of a token rotates its pairs of ceil(heads / grid.y)
// heads); threads per token = block / items_per_block; no dynamic shared memory.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace rope {

constexpr const char* kApplyRopeOp = "apply_rope";
constexpr const char* kApplyRopeEntry = "kiln_apply_rope";
constexpr const char* kApplyRopeWithCosSinCacheOp = "apply_rope_with_cos_sin_cache";
constexpr const char* kApplyRopeWithCosSinCacheEntry = "kiln_apply_rope_with_cos_sin_cache";

constexpr const char* kParamRotaryDim = "rotary_dim";
constexpr const char* kParamStyle = "style";         // "neox" or "gptj"
constexpr const char* kParamPosDType = "pos_dtype";  // "int32" or "int64"
constexpr const char* kStyleNeox = "neox";
constexpr const char* kStyleGptj = "gptj";

constexpr int kMaxRotaryDim = 512;
constexpr int kMaxHeads = 65536;  // per tensor: heads index as int on the GPU
constexpr int kMaxGridY = 65535;  // head groups of one launch

// The parameters both ops start with, in this order (the kernels' own order: a change of order
// changes ptxas' register allocation, measured). Strides in elements, free (q and k may be
// views into one fused qkv buffer), but no two rotated parts may overlap.
#define KILN_ROPE_COMMON_PARAMS                      \
  void* q;                                           \
  void* k;                                           \
  const void* positions; /* [tokens] of pos_dtype */ \
  long long tokens;                                  \
  long long q_token_stride;                          \
  long long q_head_stride;                           \
  int q_heads;                                       \
  long long k_token_stride;                          \
  long long k_head_stride;                           \
  int k_heads;

// kiln_apply_rope's parameter, by value. factor <= 0: no Llama-3.1 frequency scaling.
struct ApplyRopeParams {
  KILN_ROPE_COMMON_PARAMS
  double log2_theta;
  double factor;
  double low_freq_factor;
  double high_freq_factor;
  double original_max_position;
};
static_assert(sizeof(ApplyRopeParams) == 120, "ApplyRopeParams: the common 10 (2 ints padded), 5 doubles");

// kiln_apply_rope_with_cos_sin_cache's parameter, by value. A position outside
// [0, max_position) leaves that token unchanged.
struct ApplyRopeWithCosSinCacheParams {
  KILN_ROPE_COMMON_PARAMS
  const float* cos_sin_cache;  // [max_position, rotary_dim]: cos half, then sin half
  long long max_position;
  long long cache_stride;  // floats between rows
};
static_assert(sizeof(ApplyRopeWithCosSinCacheParams) == 104, "ApplyRopeWithCosSinCacheParams: the common 10, 3 words");

#undef KILN_ROPE_COMMON_PARAMS

}  // namespace rope
}  // namespace kiln
