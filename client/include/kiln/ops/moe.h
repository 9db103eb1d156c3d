// kiln::ops mixture of experts on the GPU: moe_route, the router's choice of experts per token;
// moe_permute, those choices as the contiguous grouped layout of grouped_gemm; moe_unpermute,
// the combine of the experts' output rows back into one row per token; fused_moe, a whole
// expert layer on routed tokens; fused_moe_fp8, the same on block-scaled fp8 experts. Part of kiln/ops.h
// (devices, contexts and streams as described there); docs/kernels-moe.md.
//
// ---- moe_route ----
//
//   logits           [T, E]      fp32, fp16 or bf16; the last dim has stride 1, rows may be
//                                padded; 1 <= E <= 256
//   correction_bias  [E]         fp32, contiguous, optional (null: none); added to the scores
//                                for the choice only (DeepSeek-V3's e_score_correction_bias)
//   topk_ids         [T, top_k]  int32, written: the chosen experts, best first; last dim
//                                stride 1, rows may be padded; 1 <= top_k <= min(E, 16)
//   topk_weights     [T, top_k]  fp32, written: their weights, in the same order
//
// Per token, computed in fp64 (so the choice is the float64 reference's, ties included):
//   u[e]    softmax: exp(x[e] - max x) / sum exp(x - max x);  sigmoid: 1 / (1 + exp(-x[e]))
//   key[e]  u[e] + correction_bias[e] (u[e] without a bias)
//   groups  n_group > 1 (DeepSeek-V3): E / n_group consecutive experts per group; the
//           topk_group groups with the largest sum of their two largest keys are kept
//   choice  the top_k kept experts of largest key, in descending order; equal keys (and equal
//           group sums): the lower id first. Deterministic.
//   weight  u of the chosen expert; renormalize: divided by (the sum over the chosen + 1e-20);
//           then times routed_scaling_factor
// Mixtral, Qwen3-MoE: softmax, renormalize. DeepSeek-V3: sigmoid, the bias, n_group 8,
// topk_group 4, top_k 8, renormalize, routed_scaling_factor 2.5.
// Rows with a NaN or infinite logit get valid, distinct ids (a NaN key ranks last) and
// unspecified weights. T = 0: OK, nothing launched. Outputs must not overlap the inputs or
// each other.
//
// ---- moe_permute ----
//
//   topk_ids       [T, top_k]  int32 (moe_route's output); last dim stride 1, rows may be
//                              padded; 1 <= top_k <= 16; T = 0 is OK
//   expert_counts  [E]         int32, written: the slots of each expert; E (1..256) is its dim 0
//   m_indptr       [E + 1]     int32, written: group e is rows m_indptr[e] .. m_indptr[e+1] - 1;
//                              m_indptr[0] = 0, m_indptr[e+1] = m_indptr[e] + roundup(counts[e], align)
//   row_to_slot    [R]         int32, written: the slot s = t * top_k + j of each row; -1 for a
//                              group's padding rows and for every row from m_indptr[E] on;
//                              R >= moe_permute_rows(T, top_k, E, align)
//   slot_to_row    [T, top_k]  int32, written: the row of each slot (the inverse); last dim
//                              stride 1, rows may be padded
//   align          1 (no padding) or a power of two up to 256: every group's row count is
//                  rounded up to a multiple of it (so every group starts at one), for a grouped
//                  GEMM tactic that wants whole tiles per group
//   x, permuted_x  optional, both or neither (the gather): x [T, H] bf16 or fp16, permuted_x
//                  [R', H] of x's dtype, R' >= moe_permute_rows(...); row r < m_indptr[E] of
//                  permuted_x becomes x[row_to_slot[r] / top_k], a padding row zeros; rows
//                  from m_indptr[E] on are not written. permuted_x is grouped_gemm's `a`.
// Stable: inside a group, rows in ascending slot order (tokens keep their order). A slot whose
// id is outside [0, E) gets no row (slot_to_row -1) and is not counted. Deterministic: the
// outputs depend on topk_ids only. Everything stays on the device (no host sync; capturable in
// a CUDA graph): one single-block launch, and with x one more, in stream order. Outputs must
// not overlap the inputs or each other.
//
// ---- moe_unpermute ----
//
//   expert_out    [R, H]      bf16 or fp16: the grouped GEMM's output rows in moe_permute's
//                             layout; last dim stride 1, rows may be padded; H >= 1
//   slot_to_row   [T, top_k]  int32 (moe_permute's output): the row of token t's j-th choice;
//                             last dim stride 1, rows may be padded; 1 <= top_k <= 16
//   topk_weights  [T, top_k]  fp32 (moe_route's output), the same shape
//   out           [T, H]      expert_out's dtype, written; last dim stride 1, rows may be padded
// out[t, :] = sum over j with 0 <= slot_to_row[t, j] < R of topk_weights[t, j] *
// expert_out[slot_to_row[t, j], :], accumulated in fp32 in the order j = 0, 1, ... and rounded
// once. A row index outside [0, R) (-1: an id outside [0, E); anything at or past R: garbage)
// contributes nothing and is never read; a token without a valid row gets zeros. Every element
// of out's T x H is written, its row padding never. Deterministic (no atomics), capturable in a
// CUDA graph; T = 0: OK, nothing launched. out must not overlap the inputs.
//
// ---- fused_moe ----
//
//   x             [T, H]      bf16 or fp16: the tokens' hidden states; last dim stride 1, rows
//                             may be padded; H a multiple of 8
//   w13           [E, 2I, H]  x's dtype: each expert's gate rows (I) then its up rows (I), as
//                             F.linear stores them; I a multiple of 8; 1 <= E <= 256
//   w2            [E, H, I]   x's dtype: each expert's down projection
//   topk_ids      [T, top_k]  int32 (moe_route's output); ids outside [0, E) are dropped
//   topk_weights  [T, top_k]  fp32 (moe_route's output); 1 <= top_k <= min(E, 16)
//   workspace     [bytes]     uint8, at least fused_moe_workspace_bytes(T, top_k, E, H, I),
//                             256-byte aligned; its contents are scratch
//   out           [T, H]      x's dtype, written; may be x itself (in place), else no overlap
// out[t] = sum over j of topk_weights[t, j] * expert(topk_ids[t, j])(x[t]), expert(e)(v) =
// w2[e] . (silu(w13[e, :I] . v) * (w13[e, I:] . v)). Two paths, chosen from the shapes alone:
// for few tokens (T * top_k <= E, at most 1024), two GEMVs over each chosen expert's slots
// (gate and up with silu_and_mul, then down) and moe_unpermute, three launches (two with
// KILN_FUSED_MOE_FOLD=1: the down GEMV's last block at each column block combines); otherwise
// moe_permute -> grouped GEMM with w13 reading x's rows by the permutation's row map, whose epilogue
// applies silu_and_mul in fp32 -> grouped GEMM with w2 -> moe_unpermute, four launches (five where
// x's rows are not 16-byte aligned: the permutation then gathers x into the workspace first).
// All on the caller's stream, no host sync, no data-dependent host work (capturable in a CUDA
// graph). Only the experts some token chose are read from memory. The activation
// silu(gate) * up and each expert's output row are rounded to x's dtype, as a layer of separate
// calls stores them. T = 0: OK, nothing launched. Deterministic: no atomic adds of values (the
// folded combine counts arrivals atomically; the order of its sums is fixed).
//
// ---- fused_moe_fp8 ----
//
// fused_moe on block-scaled fp8 experts (DeepSeek-V3's recipe, as grouped_fp8_gemm takes it):
//   x             [T, H]      bf16; H a multiple of 16 (16-byte fp8 rows for TMA)
//   w13           [E, 2I, H]  fp8_e4m3: gate rows then up rows; I a multiple of 16; 1 <= E <= 256
//   w13_scales    [E, ceil(2I / 128), ceil(H / 128)]  fp32: one per 128 x 128 block of w13[e]
//   w2            [E, H, I]   fp8_e4m3
//   w2_scales     [E, ceil(H / 128), ceil(I / 128)]   fp32
//   topk_ids, topk_weights    as fused_moe's
//   workspace     [bytes]     uint8, at least fused_moe_fp8_workspace_bytes(T, top_k, E, H, I),
//                             256-byte aligned; scratch
//   out           [T, H]      bf16, written; may be x itself, else no overlap
// Each routed row of x is quantized to e4m3 per 128 columns (scale = max|v| / 448, at least
// 1e-10 / 448), multiplied with w13 (bf16 rows), silu(gate) * up is computed in fp32 from those
// rows and quantized the same way, multiplied with w2 (bf16 rows), and moe_unpermute weights and
// sums each token's rows in fp32. Two paths compute it (the same quantization; only the order of
// the products' sums differs): a grouped path of five steps (moe_permute, x quantized by token,
// two grouped_fp8_gemm, the first reading x's codes by the permutation's row map and quantizing
// silu(gate) * up in its epilogue where I is a multiple of 128, else followed by a
// silu-and-quantize step, the combine), or a decode path of five
// (x quantized by token, two GEMVs on fp8 tensor cores over each chosen expert's slots with the
// silu-and-quantize between, the combine) for few tokens (docs/kernels-moe.md, "The fp8 decode
// path"). Either: no host sync (capturable in a CUDA graph),
// only the chosen experts' weights read, deterministic. T = 0: OK, nothing launched.
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_MOE_H_
#define KILN_OPS_MOE_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include <cstdint>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

enum class MoeScoring : int32_t {
  kSoftmax = 0,  // softmax over the row (Mixtral, Qwen3-MoE)
  kSigmoid = 1,  // elementwise sigmoid (DeepSeek-V3)
};

struct MoeRouteOptions {
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool renormalize = true;             // weights divided by their sum (over the chosen)
  int64_t n_group = 1;                 // 1: no group limit; else 2..32, dividing E
  int64_t topk_group = 1;              // groups kept, 1..n_group (1 when n_group is 1)
  double routed_scaling_factor = 1.0;  // finite, > 0
};

// top_k is topk_ids' dim 1 (topk_weights' too). Refused (INVALID_ARGUMENT naming the argument):
// other dtypes or ranks, mismatched shapes, top_k > E or > 16, E > 256, a group limit that
// does not divide E or keeps fewer than top_k experts (top_k <= topk_group * E / n_group).
KILN_API Status moe_route(const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& logits,
                          const TensorView* correction_bias, const MoeRouteOptions& options, void* stream = nullptr);

// The rows row_to_slot (and permuted_x) must have: T * top_k, plus E * (align - 1) when align >
// 1 (each group adds at most align - 1 padding rows). Known on the host before any routing.
constexpr int64_t moe_permute_rows(int64_t tokens, int64_t top_k, int64_t experts, int64_t align) {
  return tokens * top_k + (align > 1 ? experts * (align - 1) : 0);
}

// Refused (INVALID_ARGUMENT naming the argument): other dtypes, ranks or shapes, E outside
// 1..256, top_k outside 1..16, align not a power of two in 1..256, row_to_slot or permuted_x
// shorter than moe_permute_rows(...), x without permuted_x (or the reverse), overlaps.
KILN_API Status moe_permute(const TensorView& expert_counts, const TensorView& m_indptr, const TensorView& row_to_slot,
                            const TensorView& slot_to_row, const TensorView* permuted_x, const TensorView& topk_ids,
                            const TensorView* x, int64_t align, void* stream = nullptr);

// Refused (INVALID_ARGUMENT naming the argument): other dtypes, ranks or shapes (T and top_k
// of slot_to_row and topk_weights, H of expert_out and out), top_k outside 1..16, out
// overlapping an input.
KILN_API Status moe_unpermute(const TensorView& out, const TensorView& expert_out, const TensorView& slot_to_row,
                              const TensorView& topk_weights, void* stream = nullptr);

// The bytes fused_moe's workspace must have for T tokens, top_k choices, E experts, hidden size
// H and expert width I in a 2-byte dtype (bf16, fp16): the permutation's tables, the gathered
// rows (reused for the experts' outputs), the activations and the decode path's counters (one
// per 32 columns of H), each region 256-byte aligned.
constexpr int64_t fused_moe_workspace_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                            int64_t intermediate) {
  const int64_t rows = tokens * top_k;
  const auto region = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  return region(4 * experts) + region(4 * (experts + 1)) + region(4 * rows) + region(4 * rows) +
         region(2 * rows * hidden) + region(2 * rows * intermediate) + region(4 * ((hidden + 31) / 32));
}

// Refused (INVALID_ARGUMENT naming the argument): other dtypes, ranks or shapes, E outside
// 1..256, top_k outside 1..min(E, 16), H or I not a multiple of 8, a workspace smaller than
// fused_moe_workspace_bytes(...) or misaligned, out overlapping anything but x itself.
KILN_API Status fused_moe(const TensorView& out, const TensorView& x, const TensorView& w13, const TensorView& w2,
                          const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& workspace,
                          void* stream = nullptr);

// The bytes fused_moe_fp8's workspace must have: the permutation's tables, then one region that
// holds the quantized gathered rows, their scales and the w13 GEMM's bf16 rows [rows, 2I] and
// later, over them, the w2 GEMM's bf16 rows [rows, H], then the quantized activations and their
// scales (rows = T * top_k), each region 256-byte aligned.
constexpr int64_t fused_moe_fp8_workspace_bytes(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                                int64_t intermediate) {
  const int64_t rows = tokens * top_k;
  const auto region = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t first = region(rows * hidden) + region(4 * rows * ((hidden + 127) / 128)) +
                        region(2 * rows * 2 * intermediate);
  const int64_t shared = first > region(2 * rows * hidden) ? first : region(2 * rows * hidden);
  return region(4 * experts) + region(4 * (experts + 1)) + region(4 * rows) + region(4 * rows) + shared +
         region(rows * intermediate) + region(4 * rows * ((intermediate + 127) / 128));
}

// Refused (INVALID_ARGUMENT naming the argument): other dtypes, ranks or shapes (the scales'
// included), E outside 1..256, top_k outside 1..min(E, 16), H or I not a multiple of 16, x's rows
// not 16-byte aligned, a workspace smaller than fused_moe_fp8_workspace_bytes(...) or misaligned,
// out overlapping anything but x itself, a GPU other than sm_90a (the kernels').
KILN_API Status fused_moe_fp8(const TensorView& out, const TensorView& x, const TensorView& w13,
                              const TensorView& w13_scales, const TensorView& w2, const TensorView& w2_scales,
                              const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& workspace,
                              void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* ---- Mixture of experts (kiln/ops/moe.h, docs/kernels-moe.md) ----
 * kiln_moe_route: logits [T, E] fp32/fp16/bf16 (last dim stride 1, 1 <= E <= 256) -> topk_ids
 * [T, top_k] int32 and topk_weights [T, top_k] fp32 (1 <= top_k <= min(E, 16)), best first,
 * ties: the lower id. scoring: KILN_MOE_SCORING_SOFTMAX or KILN_MOE_SCORING_SIGMOID;
 * correction_bias [E] fp32 or NULL, added for the choice only; n_group 1 (no group limit) or
 * 2..32 dividing E, keeping topk_group groups (the largest sums of their two largest keys);
 * renormalize != 0 divides the weights by their sum (+ 1e-20); then times
 * routed_scaling_factor (finite, > 0). T = 0: KILN_OK without a launch. */
typedef enum kiln_moe_scoring {
  KILN_MOE_SCORING_SOFTMAX = 0,
  KILN_MOE_SCORING_SIGMOID = 1,
} kiln_moe_scoring;

KILN_API kiln_status kiln_moe_route(DLTensor* topk_ids, DLTensor* topk_weights, const DLTensor* logits,
                                    const DLTensor* correction_bias /* NULL: none */, kiln_moe_scoring scoring,
                                    int renormalize, int64_t n_group, int64_t topk_group, double routed_scaling_factor,
                                    void* stream);

/* kiln_moe_permute: topk_ids [T, top_k] int32 -> expert_counts [E], m_indptr [E + 1] (groups
 * padded to a multiple of align: 1 or a power of two <= 256), row_to_slot [R] (-1: padding, and
 * every row from m_indptr[E] on) and slot_to_row [T, top_k], all int32; stable, ids outside
 * [0, E) get no row (slot_to_row -1). x [T, H] bf16/fp16 and permuted_x [R', H], both or NULL:
 * gathers x's rows into the layout (padding rows zeroed). R and R' at least
 * KILN_MOE_PERMUTE_ROWS(T, top_k, E, align). T = 0: m_indptr all 0. */
#define KILN_MOE_PERMUTE_ROWS(tokens, top_k, experts, align) \
  ((int64_t)(tokens) * (int64_t)(top_k) + ((align) > 1 ? (int64_t)(experts) * ((int64_t)(align)-1) : 0))

KILN_API kiln_status kiln_moe_permute(DLTensor* expert_counts, DLTensor* m_indptr, DLTensor* row_to_slot,
                                      DLTensor* slot_to_row, DLTensor* permuted_x /* NULL: no gather */,
                                      const DLTensor* topk_ids, const DLTensor* x /* NULL: no gather */, int64_t align,
                                      void* stream);

/* kiln_moe_unpermute: expert_out [R, H] bf16/fp16 (moe_permute's layout), slot_to_row [T, top_k]
 * int32, topk_weights [T, top_k] fp32 (1 <= top_k <= 16) -> out [T, H] of expert_out's dtype:
 * out[t] = sum over j of topk_weights[t, j] * expert_out[slot_to_row[t, j]] in fp32, in the order
 * of j, rounded once; indices outside [0, R) (-1) contribute nothing and are never read; a token
 * without a valid row gets zeros. T = 0: KILN_OK without a launch. */
KILN_API kiln_status kiln_moe_unpermute(DLTensor* out, const DLTensor* expert_out, const DLTensor* slot_to_row,
                                        const DLTensor* topk_weights, void* stream);

/* kiln_fused_moe: a whole expert layer on routed tokens: x [T, H] bf16/fp16, w13 [E, 2I, H] (gate
 * rows then up rows), w2 [E, H, I], topk_ids [T, top_k] int32, topk_weights [T, top_k] fp32 ->
 * out [T, H] (may be x itself): out[t] = sum_j w[t, j] * w2[e] . (silu(gate_e . x[t]) * (up_e .
 * x[t])), e = topk_ids[t, j]. workspace: uint8 [bytes], bytes >= KILN_FUSED_MOE_WORKSPACE_BYTES(T,
 * top_k, E, H, I), 256-byte aligned. No host sync (capturable in a CUDA graph). */
#define KILN_FUSED_MOE_REGION_(bytes) ((((int64_t)(bytes)) + 255) / 256 * 256)
#define KILN_FUSED_MOE_WORKSPACE_BYTES(tokens, top_k, experts, hidden, intermediate)                       \
  (KILN_FUSED_MOE_REGION_(4 * (int64_t)(experts)) + KILN_FUSED_MOE_REGION_(4 * ((int64_t)(experts) + 1)) + \
   2 * KILN_FUSED_MOE_REGION_(4 * (int64_t)(tokens) * (int64_t)(top_k)) +                                  \
   KILN_FUSED_MOE_REGION_(2 * (int64_t)(tokens) * (int64_t)(top_k) * (int64_t)(hidden)) +                  \
   KILN_FUSED_MOE_REGION_(2 * (int64_t)(tokens) * (int64_t)(top_k) * (int64_t)(intermediate)) +            \
   KILN_FUSED_MOE_REGION_(4 * (((int64_t)(hidden) + 31) / 32)))

KILN_API kiln_status kiln_fused_moe(DLTensor* out, const DLTensor* x, const DLTensor* w13, const DLTensor* w2,
                                    const DLTensor* topk_ids, const DLTensor* topk_weights, DLTensor* workspace,
                                    void* stream);

/* kiln_fused_moe_fp8: kiln_fused_moe on block-scaled fp8 experts: x [T, H] bf16 (H a multiple of
 * 16), w13 [E, 2I, H] and w2 [E, H, I] fp8_e4m3 (I a multiple of 16) with fp32 w13_scales [E,
 * ceil(2I/128), ceil(H/128)] and w2_scales [E, ceil(H/128), ceil(I/128)], topk_ids/topk_weights as
 * kiln_fused_moe's -> out [T, H] bf16 (may be x itself). Activations quantized to e4m3 per token and
 * 128 columns. workspace: uint8 [bytes], bytes >= KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(T, top_k, E, H,
 * I), 256-byte aligned. No host sync (capturable in a CUDA graph). */
#define KILN_FUSED_MOE_FP8_FIRST_(rows, hidden, intermediate)                                                  \
  (KILN_FUSED_MOE_REGION_((rows) * (hidden)) + KILN_FUSED_MOE_REGION_(4 * (rows) * (((hidden) + 127) / 128)) + \
   KILN_FUSED_MOE_REGION_(4 * (rows) * (intermediate)))
#define KILN_FUSED_MOE_FP8_SHARED_(rows, hidden, intermediate)                                           \
  (KILN_FUSED_MOE_FP8_FIRST_(rows, hidden, intermediate) > KILN_FUSED_MOE_REGION_(2 * (rows) * (hidden)) \
       ? KILN_FUSED_MOE_FP8_FIRST_(rows, hidden, intermediate)                                           \
       : KILN_FUSED_MOE_REGION_(2 * (rows) * (hidden)))
#define KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(tokens, top_k, experts, hidden, intermediate)                          \
  (KILN_FUSED_MOE_REGION_(4 * (int64_t)(experts)) + KILN_FUSED_MOE_REGION_(4 * ((int64_t)(experts) + 1)) +        \
   2 * KILN_FUSED_MOE_REGION_(4 * (int64_t)(tokens) * (int64_t)(top_k)) +                                         \
   KILN_FUSED_MOE_FP8_SHARED_((int64_t)(tokens) * (int64_t)(top_k), (int64_t)(hidden), (int64_t)(intermediate)) + \
   KILN_FUSED_MOE_REGION_((int64_t)(tokens) * (int64_t)(top_k) * (int64_t)(intermediate)) +                       \
   KILN_FUSED_MOE_REGION_(4 * (int64_t)(tokens) * (int64_t)(top_k) * ((((int64_t)(intermediate)) + 127) / 128)))

KILN_API kiln_status kiln_fused_moe_fp8(DLTensor* out, const DLTensor* x, const DLTensor* w13,
                                        const DLTensor* w13_scales, const DLTensor* w2, const DLTensor* w2_scales,
                                        const DLTensor* topk_ids, const DLTensor* topk_weights, DLTensor* workspace,
                                        void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_MOE_H_ */
