// kiln::ops rotary position embedding (RoPE): apply_rope and apply_rope_with_cos_sin_cache,
// in place on the query and key heads of a batch of tokens. Part of kiln/ops.h (devices,
// contexts and streams as described there).
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_ROPE_H_
#define KILN_OPS_ROPE_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include <cstdint>
#include <optional>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

// Llama-3.1 frequency scaling (the published rule, as in Meta's and Hugging Face's code): with
// wavelength = 2π / inv_freq, low = original_max_position / low_freq_factor and high =
// original_max_position / high_freq_factor:
//   wavelength > low:   inv_freq / factor
//   wavelength < high:  inv_freq
//   otherwise:          (1 - s) · inv_freq / factor + s · inv_freq,
//                       s = (original_max_position / wavelength - low_freq_factor) /
//                           (high_freq_factor - low_freq_factor)
// factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position > 0, all finite.
struct Llama31RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct RopeOptions {
  int64_t rotary_dim = 0;    // rotated elements at the start of each head; 0: the head dim
  bool interleaved = false;  // false: NeoX pairs (i, i + rotary_dim/2); true: GPT-J (2i, 2i + 1)
  double theta = 10000.0;    // inv_freq[i] = theta^(-2i / rotary_dim); finite and > 0
  std::optional<Llama31RopeScaling> llama31;
};

// For every token t, head of q and k, and pair i < rotary_dim / 2 (x1, x2 as the style pairs):
//   x1 ← x1·cos(a) − x2·sin(a),  x2 ← x2·cos(a) + x1·sin(a),  a = positions[t] · inv_freq[i]
// in fp32 (angles reduced in double: exact to fp32 rounding at any position), rounded once.
// Elements from rotary_dim on are neither read nor written.
//
//   q          [tokens, q_heads, head_dim]  fp16 or bf16, in place; head_dim has stride 1, the
//              token and head strides are free (q and k may be views into one fused qkv
//              buffer), but no two rotated parts may overlap
//   k          [tokens, k_heads, head_dim]  q's dtype and head_dim, in place; must not overlap q
//   positions  [tokens]  int32 or int64, contiguous; any value (negative rotates backwards)
//   rotary_dim even, 2 ... min(head_dim, 512)
// tokens == 0 or q_heads + k_heads == 0 returns OK without launching.
KILN_API Status apply_rope(const TensorView& q, const TensorView& k, const TensorView& positions,
                           const RopeOptions& options, void* stream = nullptr);

// The same rotation with cos/sin read from a table (vLLM's layout):
//   cos_sin_cache  [max_position, rotary_dim] fp32; row p holds cos(p·inv_freq[i]) in columns
//                  0 .. rotary_dim/2 − 1, then sin(p·inv_freq[i]); rows may be padded (row
//                  stride >= rotary_dim), columns contiguous
// rotary_dim is the cache's second dim (even, 2 ... min(head_dim, 512)). Positions are read on
// the GPU, so they cannot be checked here: a position outside [0, max_position) is the
// caller's bug, and the kernel leaves that token's q and k unchanged (it never reads outside
// the cache).
KILN_API Status apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                              const TensorView& cos_sin_cache, bool interleaved,
                                              void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* Rotary position embedding, in place on q [tokens, q_heads, head_dim] and k [tokens, k_heads,
 * head_dim] (fp16 or bf16, same dtype and head_dim; head dim stride 1, token and head strides
 * free: q and k may be views into one fused qkv buffer, but must not overlap). positions
 * [tokens] int32 or int64, contiguous. For each pair i < rotary_dim/2 of every head (NeoX:
 * (i, i + rotary_dim/2); interleaved != 0, GPT-J: (2i, 2i + 1)):
 *   x1 <- x1 cos(a) - x2 sin(a),  x2 <- x2 cos(a) + x1 sin(a),  a = positions[t] * inv_freq[i]
 * in fp32. Elements from rotary_dim on are untouched. No tokens: KILN_OK without a launch.
 * kiln_apply_rope: inv_freq[i] = theta^(-2i/rotary_dim), rotary_dim 0 means head_dim, else
 * even and <= min(head_dim, 512); theta finite > 0; llama31 NULL or Llama-3.1 scaling (the
 * rule in kiln/ops/rope.h). */
typedef struct kiln_llama31_rope_scaling {
  double factor;                 /* > 0, e.g. 8 */
  double low_freq_factor;        /* > 0, e.g. 1 */
  double high_freq_factor;       /* > low_freq_factor, e.g. 4 */
  int64_t original_max_position; /* > 0, e.g. 8192 */
} kiln_llama31_rope_scaling;

KILN_API kiln_status kiln_apply_rope(DLTensor* q, DLTensor* k, const DLTensor* positions, int64_t rotary_dim,
                                     int interleaved, double theta, const kiln_llama31_rope_scaling* llama31,
                                     void* stream);

/* cos/sin from cos_sin_cache [max_position, rotary_dim] fp32 (vLLM's layout: cos in columns
 * 0..rotary_dim/2-1, then sin; row stride free, column stride 1). A position outside
 * [0, max_position) is the caller's bug: that token's q and k are left unchanged. */
KILN_API kiln_status kiln_apply_rope_with_cos_sin_cache(DLTensor* q, DLTensor* k, const DLTensor* positions,
                                                        const DLTensor* cos_sin_cache, int interleaved, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_ROPE_H_ */
