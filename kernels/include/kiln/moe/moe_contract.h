// The op contract of the moe family (kiln/common/op_contract.h says what a contract is).
//
//   moe_route   router logits [T, E] -> per token, the top_k experts (topk_ids [T, top_k] int32)
//               and their weights (topk_weights [T, top_k] fp32), docs/kernels-moe.md
//   moe_permute topk_ids [T, top_k] -> the contiguous grouped layout grouped_gemm takes: counts,
//               m_indptr [E + 1] (groups padded to `align` rows), the row map and its inverse;
//               optionally the gather of x's rows into that layout
//   moe_unpermute the combine: expert_out [R, H] (the grouped GEMM's output rows in that layout)
//               -> out [T, H], each token's rows weighted by topk_weights and summed in fp32
//   fused_moe   the whole layer; its own kernels are the decode path's GEMVs (below)
//   fused_moe_fp8 the whole layer on block-scaled fp8 experts; its own kernels quantize the
//               activations (below)
//
// moe_route's params: dtype (fp32, fp16, bf16: logits' type), scoring ("softmax" or "sigmoid": the scores
// the experts are ranked by), max_experts (32, 64, 128 or 256: the E range one kernel holds,
// max_experts / 32 values per lane). T, E, top_k, the group limit, the bias, renormalization and
// the scaling factor are launch arguments (MoeRouteParams): one cubin per (dtype, scoring,
// max_experts) serves every model of that size class.
// Its launch (its only entry): one warp per token, kWarpsPerBlock tokens per block
// (items_per_block = kWarpsPerBlock: tokens), grid.x = ceil(T / items_per_block), block as
// hinted (kBlock threads), no dynamic shared memory.
//
// moe_permute's params: max_experts (32, 64, 128 or 256: the E range one kernel's shared
// tables hold). Everything else is a launch argument. Launch, in stream order:
//   kiln_moe_permute         below kPermuteMultiBlockMinSlots slots (MoePermuteMultiBlock
//                            false): one block of kPermuteBlock threads (items_per_block 0:
//                            the grid is 1 whatever T is), no dynamic shared memory;
//   kiln_moe_permute_count,  from kPermuteMultiBlockMinSlots slots on, instead: grid.x =
//   kiln_moe_permute_rank    MoePermuteChunks(T * top_k) blocks of kPermuteBlock threads each;
//   kiln_moe_permute_invert  then ceil(rows / kInvertBlock) blocks of kInvertBlock threads
//                            (rows: row_to_slot's length); none uses dynamic shared memory;
//   kiln_moe_permute_gather  only with x: one warp per permuted row, kGatherWarps rows per
//                            block (items_per_block = kGatherWarps: rows), grid.x =
//                            ceil(MoePermuteRows(...) / items_per_block).
//
// moe_unpermute's params: dtype (bf16 or fp16: expert_out's and out's type). The copy unit (16,
// 8, 4 or 2 bytes), T, top_k, R and H are launch arguments. Its launch (its only entry): one
// thread per unit of one token's row; block.x = MoeUnpermuteThreads(units) (at most the hinted
// block, kUnpermuteBlock: items_per_block = kUnpermuteBlock units), grid.x = T (tokens: up to
// 2^31 - 1), grid.y = MoeUnpermuteBlocksPerRow(units) (at most 65535), no dynamic shared memory.
#pragma once

#include "kiln/common/op_contract.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln {
namespace moe {

constexpr const char* kMoeRouteOp = "moe_route";
constexpr const char* kMoeRouteEntry = "kiln_moe_route";

constexpr const char* kParamScoring = "scoring";         // "softmax" or "sigmoid"
constexpr const char* kParamMaxExperts = "max_experts";  // 32, 64, 128 or 256
constexpr const char* kScoringSoftmax = "softmax";
constexpr const char* kScoringSigmoid = "sigmoid";

// The largest E: eight values per lane of one warp.
constexpr int kMaxExperts = 256;
// The largest top_k: lane k of the token's warp holds the k-th choice; 16 covers every
// published router (DeepSeek-V3, Qwen3: 8) with room.
constexpr int kMaxTopK = 16;
// The largest n_group: lane g of the warp scores group g.
constexpr int kMaxGroups = 32;
// One warp per token, this many tokens per block.
constexpr int kWarpsPerBlock = 4;
constexpr int kBlock = 32 * kWarpsPerBlock;

// The one entry's parameter, by value. Strides count elements between row starts (the last
// dims are contiguous). correction_bias null: no bias. n_group 1: no group limit.
struct MoeRouteParams {
  int* topk_ids;
  float* topk_weights;
  const void* logits;
  const float* correction_bias;
  long long tokens;
  long long logits_stride;
  long long ids_stride;
  long long weights_stride;
  int experts;
  int top_k;
  int n_group;
  int topk_group;
  int renormalize;  // 0 or 1
  double routed_scaling_factor;
};
static_assert(sizeof(MoeRouteParams) == 96, "MoeRouteParams: 4 pointers, 4 strides, 5 ints (padded), 1 double");

constexpr const char* kMoePermuteOp = "moe_permute";
constexpr const char* kMoePermuteEntry = "kiln_moe_permute";
constexpr const char* kMoePermuteGatherEntry = "kiln_moe_permute_gather";
constexpr const char* kMoePermuteCountEntry = "kiln_moe_permute_count";
constexpr const char* kMoePermuteRankEntry = "kiln_moe_permute_rank";
constexpr const char* kMoePermuteInvertEntry = "kiln_moe_permute_invert";

// The largest group alignment (a power of two): grouped GEMM tiles are at most 256 rows.
constexpr int kMaxAlign = 256;
// The permutation is one block of 32 warps: the most threads a block may have (1024), so a
// round ranks as many slots as one block can hold at once.
constexpr int kPermuteWarps = 32;
constexpr int kPermuteBlock = 32 * kPermuteWarps;
// The multi-block permutation: a block of kPermuteBlock threads per chunk of this many slots.
constexpr long long kPermuteChunk = kPermuteBlock;
// Its inversion: a thread per row of row_to_slot, this many a block.
constexpr int kInvertBlock = 256;
// The gather: one warp per permuted row, this many rows per block.
constexpr int kGatherWarps = 8;
constexpr int kGatherBlock = 32 * kGatherWarps;

// The rows the permuted layout may need at most, which row_to_slot (and permuted_x) must have:
// every group rounded up to a multiple of `align` adds at most align - 1 rows, so
// sum_e roundup(count_e, align) <= tokens * top_k + experts * (align - 1). align 1: no padding.
KILN_CONTRACT_FUNCTION long long MoePermuteRows(long long tokens, long long top_k, long long experts, long long align) {
  return tokens * top_k + (align > 1 ? experts * (align - 1) : 0);
}

// Which permutation runs: the single block up to kPermuteMultiBlockMinSlots - 1 slots (a few
// rounds of it cost less than two more launches), the three multi-block launches from there.
constexpr long long kPermuteMultiBlockMinSlots = 2 * kPermuteChunk + 1;
KILN_CONTRACT_FUNCTION bool MoePermuteMultiBlock(long long slots) { return slots >= kPermuteMultiBlockMinSlots; }
KILN_CONTRACT_FUNCTION long long MoePermuteChunks(long long slots) {
  return (slots + kPermuteChunk - 1) / kPermuteChunk;
}
// The multi-block count launch keeps each chunk's per-expert counts in row_to_slot until the
// inversion overwrites them: MoePermuteChunks(slots) * E entries, which fit in the rows any
// call has (rows >= slots): from kPermuteMultiBlockMinSlots slots on, chunks * 256 <=
// (slots / kPermuteChunk + 1) * 256 < slots.
static_assert((kPermuteMultiBlockMinSlots / kPermuteChunk + 1) * kMaxExperts < kPermuteMultiBlockMinSlots,
              "the multi-block permutation's counts must fit in row_to_slot");

// kiln_moe_permute's parameter (every entry of the permutation takes it). Strides count elements between row starts
// (last dims are contiguous). A slot is s = t * top_k + j (token t's j-th choice), whatever the strides.
struct MoePermuteParams {
  int* expert_counts;   // [experts]
  int* m_indptr;        // [experts + 1]
  int* row_to_slot;     // [rows]
  int* slot_to_row;     // [tokens, top_k], rows slot_to_row_stride apart
  const int* topk_ids;  // [tokens, top_k], rows ids_stride apart
  long long tokens;
  long long ids_stride;
  long long slot_to_row_stride;
  long long rows;  // row_to_slot's length: every row from m_indptr[experts] on is -1
  int experts;     // 1 .. max_experts of the specialization
  int top_k;       // 1 .. kMaxTopK
  int align;       // a power of two, 1 .. kMaxAlign
  int reserved;    // 0
};
static_assert(sizeof(MoePermuteParams) == 88, "MoePermuteParams: 5 pointers, 4 longs, 4 ints");

// kiln_moe_permute_gather's parameter: permuted_x[r] = x[row_to_slot[r] / top_k] for the rows
// r < m_indptr[experts] (zeros where row_to_slot[r] is -1: padding); rows from
// m_indptr[experts] on are not written. A row is row_bytes bytes, copied in units of
// unit_bytes (16, 8, 4 or 2: the widest dividing row_bytes, both row strides in bytes and
// both pointers).
struct MoePermuteGatherParams {
  void* permuted_x;
  const void* x;
  const int* row_to_slot;
  const int* m_indptr;
  long long rows;              // MoePermuteRows(...): the grid's rows
  long long x_stride_bytes;    // between x's row starts
  long long out_stride_bytes;  // between permuted_x's row starts
  long long row_bytes;         // H * element size
  int experts;
  int top_k;
  int unit_bytes;
  int reserved;  // 0
};
static_assert(sizeof(MoePermuteGatherParams) == 80, "MoePermuteGatherParams: 4 pointers, 4 longs, 4 ints");

// fused_moe: a whole layer on routed tokens. Its grouped path launches moe_permute's,
// grouped_gemm's (with the silu_and_mul epilogue, then plain) and moe_unpermute's kernels; its
// decode path (few tokens: FusedMoeDecodeSlots) launches its own two GEMVs, then moe_unpermute's.
// The name is its generator's, its trace definition's and its kiln-bench routine's.
constexpr const char* kFusedMoeOp = "fused_moe";

// fused_moe's params: dtype (bf16 or fp16: x's, the weights' and out's type). Everything else
// is a launch argument. Its two GEMV entries, in stream order, then moe_unpermute's (or their
// folded forms below, without it):
//   kiln_fused_moe_gate_up  act[s, c] = silu(w13[e, c] . in(s)) * (w13[e, c + I] . in(s)), c < I
//   kiln_fused_moe_down     y[s, h] = w2[e, h] . act[s], h < H
// for every slot s = t * top_k + j whose id e = topk_ids[t, j] lies in [0, E); in(s) is x's row t.
// A block serves one expert that some slot chose (grid.y = FusedMoeGemvExpertBlocks: a block
// whose rank is past the chosen experts' count returns at once) and `items_per_block` output
// columns (kGemvGateUpColumns of act, kGemvDownColumns of y: grid.x = ceil(columns /
// items_per_block)), for every slot of its expert in turn: each weight byte a call needs is read
// from memory once. block = kGemvBlock threads, no dynamic shared memory.
constexpr const char* kFusedMoeGateUpEntry = "kiln_fused_moe_gate_up";
constexpr const char* kFusedMoeDownEntry = "kiln_fused_moe_down";
// The same two with the combine folded into the down GEMV (a second parameter, FusedMoeFoldParams):
//   kiln_fused_moe_gate_up_folded  act as above; zeroes arrivals[0 .. arrival_count) (no slot_to_row)
//   kiln_fused_moe_down_folded     y as above, column_groups groups of kGemvDownColumns columns a
//                                  block (grid.x = ceil(ceil(H / kGemvDownColumns) / column_groups));
//                                  the block that arrives last at its columns (arrivals[blockIdx.x]
//                                  reaching grid.y) writes out[t, those columns] = sum over j of
//                                  topk_weights[t, j] * y[t * top_k + j, ...] for every token,
//                                  moe_unpermute's arithmetic; no third launch.
constexpr const char* kFusedMoeGateUpFoldedEntry = "kiln_fused_moe_gate_up_folded";
constexpr const char* kFusedMoeDownFoldedEntry = "kiln_fused_moe_down_folded";
// The same two products in one grid (FusedMoeOneGridParams, a third parameter; docs/kernels-moe.md,
// "One grid"), after a one-block launch that prepares it, then moe_unpermute's:
//   kiln_fused_moe_one_grid_prepare  one block: zeroes counters[0 .. 1 + expert_blocks) and writes
//                                    slot_to_row (the gate-up parameter's), as gate_up's first block does
//   kiln_fused_moe_one_grid          (gate_up_blocks + down_blocks) x expert_blocks blocks in one
//                                    dimension: a block takes a ticket (counters[0]) and the ticket
//                                    its work (OneGridWork): the tickets run through the experts by
//                                    rank, each expert's gate-up blocks (kiln_fused_moe_gate_up's of
//                                    each x), then the down blocks (kiln_fused_moe_down's) of the
//                                    expert down_lag ranks before (0: its own); a gate-up block
//                                    counts itself in counters[1 + rank] once its act is visible; a
//                                    down block waits there for gate_up_blocks.
// The tickets, not blockIdx, give the order, so a down block only runs once every gate-up block of
// its expert has been taken by a running block: it cannot wait for one that never starts.
constexpr const char* kFusedMoeOneGridPrepareEntry = "kiln_fused_moe_one_grid_prepare";
constexpr const char* kFusedMoeOneGridEntry = "kiln_fused_moe_one_grid";
constexpr int kGemvWarps = 8;
constexpr int kGemvBlock = 32 * kGemvWarps;
// The blocks an SM holds at once (the entries' __launch_bounds__ minimum): at most 85 registers a
// thread, so that while one block finds its expert the others stream.
constexpr int kGemvBlocksPerSm = 3;
// A warp reads this many weight rows at once: gate_up's two columns (their gate and up rows),
// down's four.
constexpr int kGemvWeightRows = 4;
constexpr int kGemvGateUpColumns = kGemvWarps * kGemvWeightRows / 2;
constexpr int kGemvDownColumns = kGemvWarps * kGemvWeightRows;
// The most slots (T * top_k) the decode path takes: a block holds every slot's id in shared memory.
constexpr int kMaxGemvSlots = 1024;

// grid.y of both GEMVs: one block per expert that may be chosen (min(E, slots)).
KILN_CONTRACT_FUNCTION long long FusedMoeGemvExpertBlocks(long long experts, long long slots) {
  return experts < slots ? experts : slots;
}

// The folded down GEMV's column groups a block takes: the fewest (at most
// kMaxFoldedColumnGroups) that let every block of the grid be resident at once
// (kGemvBlocksPerSm an SM), so that all of them prefetch their weight rows while the gate-up
// GEMV ends; 1 where none does (a grid of many waves keeps its narrow blocks). Qwen3-30B-A3B at
// one token: 64 column blocks x 8 experts = 512 blocks > 396 resident on 132 SMs; two groups: 256.
constexpr int kMaxFoldedColumnGroups = 2;
KILN_CONTRACT_FUNCTION int FusedMoeDownColumnGroups(long long column_blocks, long long expert_blocks, long long sms) {
  for (int groups = 1; groups <= kMaxFoldedColumnGroups; ++groups)
    if ((column_blocks + groups - 1) / groups * expert_blocks <= kGemvBlocksPerSm * sms) return groups;
  return 1;
}

// The parameter of both GEMVs. Strides count elements between row starts; every pointer and
// stride times the element size is a multiple of 16 bytes (the host checks it: 16-byte loads).
struct FusedMoeGemvParams {
  void* out;            // [slots, n]: slot s's row at s (rows out_stride apart)
  int* slot_to_row;     // gate_up: [tokens, top_k] contiguous, s for a slot with a row, -1 else; down: null
  const void* in;       // gate_up: x [tokens, k] (slot s reads row s / top_k); down: act [slots, k]
  const void* weight;   // [experts, rows, k]: w13 (rows 2n) or w2 (rows n)
  const int* topk_ids;  // [tokens, top_k], rows ids_stride apart
  long long tokens;     // 1 .. kMaxGemvSlots / top_k
  long long ids_stride;
  long long in_stride;
  long long out_stride;
  long long weight_expert_stride;
  long long weight_row_stride;
  int k;  // the dot products' length: H (gate_up) or I (down), a multiple of 8
  int n;  // output columns: I (gate_up) or H (down), a multiple of 8
  int experts;
  int top_k;
};
static_assert(sizeof(FusedMoeGemvParams) == 104, "FusedMoeGemvParams: 5 pointers, 6 longs, 4 ints");

// The *_folded entries' second parameter (a kernel parameter of its own: one struct of 152 bytes
// made NVRTC address the parameter through memory instead of keeping its fields in registers,
// even in the entries that did not read the new fields; two structs keep each in registers).
// arrivals: one counter per down block column (blockIdx.x); the gate-up GEMV zeroes the first
// arrival_count, each down block adds one once its y is written. out: the layer's [tokens, H],
// 16-byte aligned rows out_stride elements apart; topk_weights [tokens, top_k], rows
// weights_stride apart.
struct FusedMoeFoldParams {
  unsigned* arrivals;
  void* out;
  const float* topk_weights;
  long long out_stride;
  long long weights_stride;
  int arrival_count;  // gate-up: down's grid.x
  int column_groups;  // down: groups of kGemvDownColumns columns a block, 1 .. kMaxFoldedColumnGroups
};
static_assert(sizeof(FusedMoeFoldParams) == 48, "FusedMoeFoldParams: 3 pointers, 2 longs, 2 ints");

// kiln_fused_moe_one_grid's third parameter and kiln_fused_moe_one_grid_prepare's second.
// counters: 1 + expert_blocks uint32 (the ticket, then one arrival count per expert rank), which
// the prepare launch zeroes every call (the workspace holds anything before it).
struct FusedMoeOneGridParams {
  unsigned* counters;
  int gate_up_blocks;  // kiln_fused_moe_gate_up's grid.x: ceil(I / kGemvGateUpColumns)
  int down_blocks;     // kiln_fused_moe_down's grid.x: ceil(H / kGemvDownColumns)
  int expert_blocks;   // FusedMoeGemvExpertBlocks(E, slots)
  int down_lag;        // 0 .. expert_blocks: how many experts' gate-up blocks an expert's down blocks trail
};

// What ticket t of the one grid does (g: gate_up_blocks, d: down_blocks, r: expert_blocks, lag:
// down_lag, at most r): step k = 0, 1, .. r + lag - 1 holds the gate-up blocks of rank k (k < r),
// then the down blocks of rank k - lag (k >= lag). *gate_up says which; *rank and *block_x the
// expert's rank and the block's column block. Every down ticket of a rank comes after all of its
// gate-up tickets.
KILN_CONTRACT_FUNCTION void OneGridWork(long long t, long long g, long long d, long long r, long long lag,
                                        bool* gate_up, int* rank, int* block_x) {
  const long long lead = lag * g;  // steps 0 .. lag - 1: gate-up blocks only
  if (t < lead) {
    *gate_up = true;
    *rank = static_cast<int>(t / g);
    *block_x = static_cast<int>(t % g);
    return;
  }
  t -= lead;
  const long long both = (r - lag) * (g + d);  // steps lag .. r - 1: gate-up, then down blocks
  if (t < both) {
    const long long k = lag + t / (g + d), within = t % (g + d);
    *gate_up = within < g;
    *rank = static_cast<int>(*gate_up ? k : k - lag);
    *block_x = static_cast<int>(*gate_up ? within : within - g);
    return;
  }
  t -= both;  // steps r .. r + lag - 1: down blocks only
  *gate_up = false;
  *rank = static_cast<int>(r - lag + t / d);
  *block_x = static_cast<int>(t % d);
}
static_assert(sizeof(FusedMoeOneGridParams) == 24, "FusedMoeOneGridParams: a pointer, 4 ints");

// fused_moe_fp8: fused_moe on block-scaled fp8 experts (DeepSeek-V3's recipe: e4m3 weights with
// an fp32 scale per 128 x 128 block, activations quantized per token and 128 columns). Its steps:
// moe_permute (no gather) -> kiln_fused_moe_fp8_quantize (gather x's rows into the grouped layout,
// quantized) -> grouped_fp8_gemm with w13 (bf16 gate and up rows) ->
// kiln_fused_moe_fp8_silu_and_mul_quantize (silu(gate) * up in fp32, quantized) ->
// grouped_fp8_gemm with w2 (bf16 rows) -> moe_unpermute. Its own generator builds the two
// quantizing kernels; the name is also its trace definition's and its kiln-bench routine's.
constexpr const char* kFusedMoeFp8Op = "fused_moe_fp8";

// fused_moe_fp8's params: dtype (bf16: x's and out's type; grouped_fp8_gemm writes bf16 or fp32).
// Its two entries, one warp per item: `passes` x kFp8QuantPassColumns columns of one row of the
// grouped layout (passes a launch argument, 1..kFp8QuantPasses), items row-major (row r's chunk
// j is item r * ceil(columns / (passes * kFp8QuantPassColumns)) + j), kFp8QuantWarps items a
// block (items_per_block = kFp8QuantWarps), grid.x = ceil(items / items_per_block) =
// FusedMoeFp8QuantBlocks, block kFp8QuantBlock threads, no dynamic shared memory; rows from
// m_indptr[experts] on are not written:
//   kiln_fused_moe_fp8_quantize                v = x[row_to_slot[r] / top_k, :]
//   kiln_fused_moe_fp8_silu_and_mul_quantize   v = silu(in[r, :I]) * in[r, I:] in fp32
// then per group g of kFp8QuantGroup columns: scale[r, g] = max(amax |v| over the group,
// kFp8MinAmax) / kFp8E4M3Max (an IEEE division in fp32), q[r, c] = e4m3(v[c] / scale[r, g])
// rounded to nearest even, saturated to +-448 (cvt.rn.satfinite). A lower bound on amax keeps an
// all-zero group's scale finite and its codes zero (DeepSeek-V3's and vLLM's quantizers do the same).
constexpr const char* kFusedMoeFp8QuantizeEntry = "kiln_fused_moe_fp8_quantize";
constexpr const char* kFusedMoeFp8SiluAndMulQuantizeEntry = "kiln_fused_moe_fp8_silu_and_mul_quantize";
constexpr int kFp8QuantWarps = 8;
constexpr int kFp8QuantBlock = 32 * kFp8QuantWarps;
// Columns per activation scale: grouped_fp8_gemm's a_scales block (gemm::kFp8ScaleBlock).
constexpr int kFp8QuantGroup = 128;
// A warp's columns: `passes` passes (at most kFp8QuantPasses) of two scale groups, 8 columns (16
// bytes of bf16) a lane in each, every pass's loads issued before the first conversion.
constexpr int kFp8QuantPassColumns = 2 * kFp8QuantGroup;
constexpr int kFp8QuantPasses = 4;
// The passes a warp takes: one for the decode path's few rows (its warps side by side: at one
// token four passes a warp made Qwen3-30B-A3B's layer 1.4 us slower on an H100), as many as a row
// has up to kFp8QuantPasses for the grouped path's thousands (a warp's fixed instructions spread
// over more columns: the gather-and-quantize of 32768 rows of 2048 took 64 us instead of 85).
KILN_CONTRACT_FUNCTION int FusedMoeFp8QuantPasses(bool decode_path, long long columns) {
  if (decode_path) return 1;
  const long long passes = (columns + kFp8QuantPassColumns - 1) / kFp8QuantPassColumns;
  return passes < 1 ? 1 : (passes > kFp8QuantPasses ? kFp8QuantPasses : static_cast<int>(passes));
}
// The quantizing entries' grid.x for `rows` rows of `columns` columns, `passes` a warp (int64:
// the caller refuses a count past 2^31 - 1, the grid's limit).
KILN_CONTRACT_FUNCTION long long FusedMoeFp8QuantBlocks(long long rows, long long columns, int passes) {
  const long long warp_columns = static_cast<long long>(passes) * kFp8QuantPassColumns;
  const long long chunks = (columns + warp_columns - 1) / warp_columns;
  return (rows * chunks + kFp8QuantWarps - 1) / kFp8QuantWarps;
}
constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8MinAmax = 1e-10f;

// The quantizers' quotient v / scale (kiln/moe/fused_moe_fp8.cuh), from a reciprocal of the
// scale computed once per scale group, with the IEEE division's bits: the device's codes and the
// host reference's agree through it, so it is part of the contract.
//
// An fp32 division compiles to a fast path and a guarded slow one. The fast path refines
// r0 = rcp.approx(s) once, r = r0 + r0 (1 - s r0), then takes q0 = v r, e = v - s q0 and
// q = q0 + r e, all as fused multiply-adds. FCHK sends an operand pair whose exponents the fast
// path cannot serve to the slow path: denormals, infinities, quotients near the ends of the
// range. Each division in the quantizers compiled to about ten instructions: the reciprocal
// again, the check, a branch and the guard's reconvergence. Across a row's values the divisor is
// one scale, so here the reciprocal is refined once and each value costs the last three steps,
// the same operations in the same order (bit for bit the fast path's quotient).
//
// What the check guarded cannot happen where it matters. A quantizer's scale is
// max(amax, 1e-10) / 448, finite and normal when amax is finite, so s and r are normal (an
// infinite amax gives an infinite scale, which the kernels take as v · rcp(+inf) = v · +0: the
// division's own results there, a zero of v's sign, or NaN for an infinite or NaN v). A
// quotient that can become a nonzero e4m3 code is at least 2^-10 (half the smallest subnormal,
// 2^-9, rounds to even: 0). Then |v| >= 2^-10 s, over 2^-53, and v, q0 and the residual e
// (about 2^-24 |v|) are all normal: the fast path is exact there. A smaller quotient gives the
// code 0 either way: the computed q is within a few ulps of the true one (a subnormal v only
// loses bits below 2^-126) and cannot cross 2^-10. The sign is v's: the sequence runs on |v|
// and copies v's sign back, since the fast path turns -0 into +0 (q0 = -0 · r + 0), which
// would change -0's code (0x80) to 0x00.
//
// tests/client/ops/fused_moe_fp8_quotient_test.cpp checks these functions on the host against
// IEEE division (r0 anywhere within an ulp of 1 / s, as rcp.approx's error allows), and
// tests/client/ops/gpu_fused_moe_fp8_quantize_test.cpp the kernels' codes against it. Plain C++
// like the rest of the contract: the compiler's builtins on the host, CUDA's functions on the
// device (a contract includes nothing).
#if defined(__CUDACC__)
#define KILN_FP8_QUOTIENT_FUNCTION __host__ __device__ inline
#define KILN_FP8_FMA fmaf
#define KILN_FP8_ABS fabsf
#define KILN_FP8_COPYSIGN copysignf
#else
#define KILN_FP8_QUOTIENT_FUNCTION inline
#define KILN_FP8_FMA __builtin_fmaf
#define KILN_FP8_ABS __builtin_fabsf
#define KILN_FP8_COPYSIGN __builtin_copysignf
#endif

// 1 / scale from an approximation r0 within an ulp of it: one Newton step, as the division's fast
// path takes it.
KILN_FP8_QUOTIENT_FUNCTION float RefinedReciprocal(float scale, float r0) {
  return KILN_FP8_FMA(r0, KILN_FP8_FMA(-scale, r0, 1.0f), r0);
}

// v / scale from r = RefinedReciprocal(scale, ...): the fast path's last three steps on |v|, v's
// sign copied back. The IEEE quotient wherever it can round to a nonzero e4m3 code (above).
KILN_FP8_QUOTIENT_FUNCTION float QuotientByScale(float v, float scale, float r) {
  const float a = KILN_FP8_ABS(v);
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(a, r);  // not contracted into the next step
#else
  const float q0 = a * r;
#endif
  return KILN_FP8_COPYSIGN(KILN_FP8_FMA(r, KILN_FP8_FMA(-scale, q0, a), q0), v);
}

#undef KILN_FP8_QUOTIENT_FUNCTION
#undef KILN_FP8_FMA
#undef KILN_FP8_ABS
#undef KILN_FP8_COPYSIGN

// The parameter of both quantizing entries. q's and scales' rows are the grouped layout's (r <
// rows); `in`'s are x's tokens (quantize: row r reads token row_to_slot[r] / top_k, a row without
// a slot (-1) is zeros) or the w13 GEMM's bf16 rows [gate (columns) | up (columns)] (silu). The
// decode path's forms: quantize with row_to_slot null reads token r (x by token, rows = T); silu
// with row_to_slot given (the gate-up GEMV's slot_to_row) skips a row whose entry is -1 (a
// dropped id: its gate and up rows were never written); m_indptr null bounds nothing but rows.
struct FusedMoeFp8QuantParams {
  void* q;                 // [rows, columns] e4m3, rows q_stride bytes apart
  float* scales;           // [rows, ceil(columns / kFp8QuantGroup)], rows scale_stride apart
  const void* in;          // rows in_stride elements apart, 16-byte aligned
  const int* row_to_slot;  // quantize: moe_permute's [rows] or null; silu: null or slot_to_row
  const int* m_indptr;     // [experts + 1] or null: rows from m_indptr[experts] on are not written
  long long rows;          // the grid's rows
  long long in_stride;
  long long q_stride;
  long long scale_stride;
  int columns;  // H (quantize) or I (silu): a multiple of 8
  int top_k;    // quantize: slot s is token s / top_k
  int experts;
  int passes;  // a warp's passes, 1..kFp8QuantPasses (FusedMoeFp8QuantPasses)
};
static_assert(sizeof(FusedMoeFp8QuantParams) == 88, "FusedMoeFp8QuantParams: 5 pointers, 4 longs, 4 ints");

// fused_moe_fp8's decode path (docs/kernels-moe.md, "fp8 experts", "The decode path"): five launches,
// no permutation: kiln_fused_moe_fp8_quantize of x by token -> kiln_fused_moe_fp8_gate_up (w13's
// 2I rows by slot, bf16) -> kiln_fused_moe_fp8_silu_and_mul_quantize by slot -> kiln_fused_moe_fp8_down
// (y by slot, bf16) -> moe_unpermute by slot_to_row. The GEMVs, for every slot s = t * top_k + j with
// a valid id e = topk_ids[t, j]:
//   out[s, c] = sum over k blocks b of weight_scales[e, c / 128, b] * in_scales[in row, b] *
//               (weight[e, c, :] . in[in row, :] over block b)      in row: t (gate_up) or s (down)
// with fp8 tensor-core MMAs, each 128-column k block summed apart and then promoted into fp32; out
// rounded once to bf16. FusedMoeGemvParams as fused_moe's decode path, but for e4m3: `in` and
// `weight` are codes and their strides count bytes (in_stride, weight_row_stride,
// weight_expert_stride); out's count bf16; k is a multiple of 16, n of 16. A block is kGemvBlock
// threads (fused_moe's prologue) over FusedMoeFp8GemvRows(k_parts) weight rows (grid.x = ceil(n /
// those rows); at most kFp8GemvColumns, the entries' items_per_block) of one chosen expert (grid.y
// = FusedMoeGemvExpertBlocks), no dynamic shared memory; gate_up's first block writes slot_to_row
// (s, or -1 for a dropped id).
constexpr const char* kFusedMoeFp8GateUpEntry = "kiln_fused_moe_fp8_gate_up";
constexpr const char* kFusedMoeFp8DownEntry = "kiln_fused_moe_fp8_down";
constexpr int kFp8GemvColumns = 64;
// The blocks an SM holds at once (the entries' __launch_bounds__ minimum), the k parts and a
// block's rows: fp8_gemm's small-M kernel's (kiln/gemm/gemm_contract.h), whose k-block code these
// GEMVs share. Two operand sets of a k block in registers (one loading while the other
// multiplies) need more than fused_moe's 85, so 2 blocks an SM. A block's warps take 16 weight
// rows each (the MMA's m); k_parts warps share a group of 16 rows, each summing its share of the
// k blocks (FusedMoeFp8GemvScales::k_parts: 2, 4 or 8), so that a block takes 8 / k_parts row
// groups: 64, 32 or 16 rows. More parts, more blocks: a GEMV whose grid would leave SMs idle
// (Mixtral's down at one token: 64 row blocks x 2 experts on 132 SMs) spreads its weight bytes
// over more of them, each warp streaming fewer k blocks.
static_assert(kGemvWarps == gemm::kGemvWarps, "fused_moe's GEMV blocks are the gemm GEMVs' 8 warps");
constexpr int kFp8GemvBlocksPerSm = gemm::kFp8GemvBlocksPerSm;
constexpr int kFp8GemvMinKParts = gemm::kFp8GemvMinKParts;
constexpr int kFp8GemvMaxKParts = gemm::kFp8GemvMaxKParts;
KILN_CONTRACT_FUNCTION int FusedMoeFp8GemvRows(int k_parts) { return gemm::Fp8GemvBlockRows(k_parts); }
// The fewest parts whose grid gives every SM a block (`rows` = n, `expert_blocks` = grid.y, on
// `sms` SMs); the most parts where none does: gemm::Fp8GemvKParts with grid.y.
KILN_CONTRACT_FUNCTION int FusedMoeFp8GemvKParts(long long rows, long long expert_blocks, long long sms) {
  return gemm::Fp8GemvKParts(rows, sms, expert_blocks);
}
// The most k blocks ahead the GEMVs ask L2 for (FusedMoeFp8GemvScales::prefetch_blocks).
constexpr int kMaxFp8GemvPrefetchBlocks = 8;

// The decode GEMVs' second parameter: the scales of `in` and of the weights.
struct FusedMoeFp8GemvScales {
  const float* in_scales;                // [in rows, ceil(k / 128)], rows in_scale_stride apart
  const float* weight_scales;            // [experts, ceil(n / 128), ceil(k / 128)]
  long long in_scale_stride;             // floats between in rows' scales
  long long weight_scale_expert_stride;  // floats between experts' scales: ceil(n / 128) * ceil(k / 128)
  int weight_scale_row_stride;           // ceil(k / 128)
  // How many k blocks ahead of its register loads each weight row's blocks are asked of L2
  // (cp.async.bulk.prefetch.L2; KILN_FUSED_MOE_FP8_PREFETCH, a diagnostic control): 0, none.
  int prefetch_blocks;
  // Warps that share a group of 16 weight rows, each over its share of the k blocks: 2, 4 or 8
  // (FusedMoeFp8GemvKParts, or KILN_FUSED_MOE_FP8_K_PARTS); the block's rows FusedMoeFp8GemvRows.
  int k_parts;
};
static_assert(sizeof(FusedMoeFp8GemvScales) == 48, "FusedMoeFp8GemvScales: 2 pointers, 2 longs, 3 ints");

constexpr const char* kMoeUnpermuteOp = "moe_unpermute";
constexpr const char* kMoeUnpermuteEntry = "kiln_moe_unpermute";

// The combine: the most threads of a block, each one unit of a row (8 bf16 in a 16-byte unit:
// 2048 elements, Qwen3-30B-A3B's hidden size, per block).
constexpr int kUnpermuteBlock = 256;
// grid.y's limit: the blocks of one row.
constexpr long long kMaxUnpermuteBlocksPerRow = 65535;

// The blocks over one row of `units` copy units: as few as kUnpermuteBlock threads allow.
KILN_CONTRACT_FUNCTION long long MoeUnpermuteBlocksPerRow(long long units) {
  return (units + kUnpermuteBlock - 1) / kUnpermuteBlock;
}

// The threads of each of those blocks: the units split evenly, rounded up to whole warps, so
// that a row that needs two blocks does not leave most of the second one idle (DeepSeek-V3's
// 7168 bf16 are 896 units: 4 blocks of 224 threads, not 3.5 blocks of 256).
KILN_CONTRACT_FUNCTION int MoeUnpermuteThreads(long long units) {
  const long long blocks = MoeUnpermuteBlocksPerRow(units);
  const long long per_block = blocks > 0 ? (units + blocks - 1) / blocks : 1;
  return static_cast<int>((per_block + 31) / 32 * 32);
}

// kiln_moe_unpermute's parameter:
//   out[t, :] = sum over j < top_k with 0 <= slot_to_row[t, j] < rows of
//               topk_weights[t, j] * expert_out[slot_to_row[t, j], :]
// in fp32, in the order of j, rounded once to the output type; a token without such a row gets
// zeros. A row index outside [0, rows) is never read (no row, as -1). Strides of the index and
// weight tensors count elements between row starts, those of out and expert_out bytes; a row is
// `units` units of unit_bytes (16, 8, 4 or 2: the widest dividing the row's bytes, both row
// strides and both pointers).
struct MoeUnpermuteParams {
  void* out;                  // [tokens, H]
  const void* expert_out;     // [rows, H]
  const int* slot_to_row;     // [tokens, top_k]
  const float* topk_weights;  // [tokens, top_k]
  long long tokens;
  long long rows;                 // expert_out's rows: an index at or past it is no row
  long long out_stride_bytes;     // between out's row starts
  long long expert_stride_bytes;  // between expert_out's row starts
  long long slot_to_row_stride;
  long long weights_stride;
  int units;  // per row: H * element size / unit_bytes
  int unit_bytes;
  int top_k;     // 1 .. kMaxTopK
  int reserved;  // 0
};
static_assert(sizeof(MoeUnpermuteParams) == 96, "MoeUnpermuteParams: 4 pointers, 6 longs, 4 ints");

}  // namespace moe
}  // namespace kiln
