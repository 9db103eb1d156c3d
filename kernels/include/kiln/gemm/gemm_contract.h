// The op contract of the gemm family (kiln/common/op_contract.h says what a contract is):
// matrix multiplication on Hopper tensor cores (sm_90a only: TMA, mbarrier, wgmma),
// docs/kernels-gemm.md.
//
//   gemm          D[M, N] = A[M, K] · B[N, K]^T (+ bias[N]) (+ beta · C[M, N]), fp32 accumulation
//   grouped_gemm         E independent products sharing N and K: D_e = A_e · B[e]^T, B [E, N, K],
//                        the rows of A and D of all groups concatenated, group e's rows
//                        m_indptr[e] .. m_indptr[e + 1] - 1 (m_indptr [E + 1] on the device)
//   grouped_gemm_masked  the same with A [E, M_max, K], D [E, M_max, N] and masked_m [E] valid
//                        rows a group (on the device: CUDA-graph decode)
//   fp8_gemm             D = A · B^T on e4m3 A and B with fp32 block scales (A per 1 x 128 of
//                        K, B per 128 x 128: DeepSeek-V3's), each 128-wide K block's sum promoted
//                        into fp32 times its scales; grouped_fp8_gemm and grouped_fp8_gemm_masked
//                        the grouped ops on the same inputs (b_scales per group)
//
// A and B are K-major (rows of K contiguous elements, as torch.nn.functional.linear stores a
// weight), read through TMA tensor maps the client encodes (GemmTensorMap below); D and C are
// row-major of the output dtype; bias has A's dtype.
//
// Params: dtype (fp16, bf16: A and B), out_dtype (fp16, bf16, fp32: D and C), and the tactic:
// tile_m (kTileMChoices: 64 rows per consumer warp-group), tile_n (kTileNChoices), stages
// (kMinStages..kMaxStages, bounded by shared memory), group_m (tile rows per raster group) and
// split_k (kSplitKChoices: the blocks of a thread-block cluster that share one tile, each
// multiplying a slice of K; they add their partial sums through distributed shared memory) and
// multicast (gemm and fp8_gemm: 2 pairs the blocks of two vertically adjacent tiles in a cluster, which
// share their tile of B: each block loads half of it with TMA multicast into both, halving the
// L2 reads of B).
// M, N and K are launch arguments: one cubin per (dtype, out_dtype, tactic) serves every shape.
// Launch (the only entry): persistent: grid.x = GemmClusterBlocks * min(GemmClusterUnits(...),
// the clusters that fit at once), the kernel's cluster shape (GemmClusterBlocks, 1, 1) compiled in; block and dynamic
// shared memory as hinted (GemmThreads, GemmSmemBytes); items_per_block is the tile (tile_m *
// tile_n elements of D). The tensor maps must describe A and B with the box tile_m (A) or
// tile_n / multicast (B) rows x kTileK and the 128-byte swizzle.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace gemm {

constexpr const char* kGemmOp = "gemm";
constexpr const char* kGemmEntry = "kiln_gemm";
constexpr const char* kGroupedGemmOp = "grouped_gemm";
constexpr const char* kGroupedGemmMaskedOp = "grouped_gemm_masked";
constexpr const char* kGroupedGemmEntry = "kiln_grouped_gemm";  // both grouped ops' entry
constexpr const char* kFp8GemmOp = "fp8_gemm";
constexpr const char* kFp8GemmEntry = "kiln_fp8_gemm";
// The grouped ops on block-scaled fp8 (entry kGroupedGemmEntry): a_scales a row per row of A,
// b_scales [E, ceil(N / 128), ceil(K / 128)].
constexpr const char* kGroupedFp8GemmOp = "grouped_fp8_gemm";
constexpr const char* kGroupedFp8GemmMaskedOp = "grouped_fp8_gemm_masked";
// fp8_gemm's scale blocks: A per 1 x 128 of K, B per 128 x 128 (DeepSeek-V3's), and its K per
// pipeline stage (128 one-byte elements: one 128-byte swizzle row, one scale block).
constexpr int kFp8ScaleBlock = 128;
// Scale blocks along an extent of K or N: ceil(extent / 128).
KILN_CONTRACT_FUNCTION long long Fp8ScaleBlocks(long long extent) {
  return (extent + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
}

constexpr const char* kParamOutDType = "out_dtype";
constexpr const char* kParamTileM = "tile_m";
constexpr const char* kParamTileN = "tile_n";
constexpr const char* kParamStages = "stages";
constexpr const char* kParamGroupM = "group_m";
constexpr const char* kParamSplitK = "split_k";
constexpr const char* kParamMulticast = "multicast";
constexpr const char* kParamEpilogue = "epilogue";
// The contiguous grouped ops: 1 gathers A's rows through GemmParams::a_rows (cp.async), 0 reads
// them in place (TMA).
constexpr const char* kParamAGather = "a_gather";

// Where the rows of D come from: one matrix (gemm), or groups (grouped_gemm: contiguous;
// grouped_gemm_masked: masked).
enum GemmLayout : int { kDenseLayout = 0, kContiguousLayout = 1, kMaskedLayout = 2 };
// What the epilogue makes of the fp32 product. Plain: D = the product (+ bias, + beta * C).
// SiluAndMul (grouped bf16/fp16 only, fused_moe's gate-and-up GEMM): each group's n rows of B
// are [gate; up], n / 2 of each, and D has n / 2 columns, D[r, c] = silu(P[r, c]) * P[r, n/2 + c]
// in fp32 (silu(x) = x / (1 + exp(-x)), as silu_and_mul computes it), rounded once: a tile's B
// stage holds tile_n / 2 gate rows and the same up rows, so a consumer thread holds both
// factors of each of its outputs (docs/kernels-moe.md, "fused_moe"). The grouped fp8 gemm has it
// with e4m3 output only (out_dtype fp8_e4m3, contiguous, tile_n 256; fused_moe_fp8's gate-and-up
// GEMM): a tile's 128 columns of D are one scale group, quantized by fused_moe_fp8's rule
// (kiln/moe/moe_contract.h) from the fp32 values into codes D and a scale per row in d_scales.
enum GemmEpilogue : int { kPlainEpilogue = 0, kSiluAndMulEpilogue = 1 };
constexpr const char* kGemmEpilogueNames[] = {"none", "silu_and_mul"};
// grouped_gemm: at most this many groups (the block keeps a table of their tile rows in shared
// memory: 4 bytes a group).
constexpr int kMaxGroups = 256;

// K per pipeline stage: 64 16-bit elements are one 128-byte row, the width of the 128-byte
// swizzle that both TMA and wgmma read (PTX ISA, "Tensor-map swizzling" and "Matrix Descriptor
// Format" of the warpgroup-level MMA).
constexpr int kTileK = 64;
// Rows of one consumer warp-group: wgmma's M (m64nNk16).
constexpr int kRowsPerConsumer = 64;
constexpr int kTileMChoices[] = {64, 128};
constexpr int kTileNChoices[] = {64, 128, 192, 256};
// Every tile (kTileMChoices x kTileNChoices) once, in the order a blocklist's fallback and the
// space-wide tuner take them: largest first, the 192-wide ones (no figures yet) last.
struct GemmTile {
  int tile_m;
  int tile_n;
};
constexpr GemmTile kGemmTilesInOrder[] = {{128, 256}, {128, 128}, {64, 256},  {128, 64},
                                          {64, 128},  {64, 64},   {128, 192}, {64, 192}};
constexpr int kMinStages = 2;
constexpr int kMaxStages = 8;
constexpr int kMaxGroupM = 16;
// The version of the tactic space and of what a tactic means to the kernel: a tuning result
// (kiln::tune) is reused only under the version it was measured with. 2: split_k added; 3:
// multicast added; 4: the TMA-store epilogue (the same tactics, other timings); 5: its staging
// swizzled (other timings), tile_n 192 added; 6: the grouped kernels' TMA-store epilogue (their
// tactics, other timings); 7: fp8_gemm's multicast pairs and its consumers' ping-pong at
// 128 x 256.
constexpr int kGemmTacticSpaceVersion = 7;
// Blocks per cluster that split K (1: no split). 8 is the largest portable cluster.
constexpr int kSplitKChoices[] = {1, 2, 4, 8};
// Blocks of a cluster that share B's tile through TMA multicast (1: none). gemm and fp8_gemm, not with
// a split (docs/kernels-gemm.md, "Multicast").
constexpr int kMulticastChoices[] = {1, 2};
// Shared memory one block may have on sm_90 (227 KiB: cudaDevAttrMaxSharedMemoryPerBlockOptin).
constexpr int kMaxSmemBytes = 227 * 1024;
// N and K must be multiples of this (16-byte rows for TMA); A and B rows start 16-byte aligned.
constexpr int kAlignElements = 8;

// Threads of a block: one producer warp-group (TMA) and tile_m / 64 consumer warp-groups.
KILN_CONTRACT_FUNCTION int GemmConsumers(int tile_m) { return tile_m / kRowsPerConsumer; }
KILN_CONTRACT_FUNCTION int GemmThreads(int tile_m) { return 128 * (GemmConsumers(tile_m) + 1); }
// Dynamic shared memory: the stages of A and B tiles (16-bit elements), 1024 bytes to align
// them to the swizzle atom, two mbarriers (8 bytes each) per stage; with split_k > 1 also the
// block's fp32 partial tile (read by the cluster's other blocks) and its two mbarriers; without
// a split, where they fit, the TMA-store epilogue's staging buffers (GemmHasStoreStaging); with
// multicast the mbarrier that says the other block is done with this one (in the same place);
// grouped, the table of the groups' first tile rows (kMaxGroups + 1 ints).
KILN_CONTRACT_FUNCTION int GemmStageBytes(int tile_m, int tile_n) { return (tile_m + tile_n) * kTileK * 2; }
KILN_CONTRACT_FUNCTION int GemmPartialBytes(int tile_m, int tile_n, int split_k) {
  return split_k > 1 ? tile_m * tile_n * 4 + 16 : 0;
}
KILN_CONTRACT_FUNCTION int GemmGroupTableBytes(bool grouped) { return grouped ? (kMaxGroups + 1) * 4 : 0; }
KILN_CONTRACT_FUNCTION int GemmBaseSmemBytes(int tile_m, int tile_n, int stages, int split_k, bool grouped,
                                             int multicast) {
  return stages * GemmStageBytes(tile_m, tile_n) + 1024 + stages * 16 + GemmPartialBytes(tile_m, tile_n, split_k) +
         GemmGroupTableBytes(grouped) + (multicast > 1 ? 16 : 0);
}
// The TMA-store epilogue (docs/kernels-gemm.md, "The epilogue"): each consumer warp-group
// writes its 64 rows of D, converted, into a staging buffer of this many bytes, a chunk of
// columns at a time, and one thread has TMA store the chunk while the warp-group goes on to the
// next tile. A tactic has the buffers when they fit beside its stages (never at the cost of a
// stage) and it does not split K; the launch uses them when D suits TMA and no beta * C is
// added. Grouped, a consumer stores through them only when its 64 rows all belong to the tile's
// group (a box must not cross into the next group's rows, which another tile writes): the
// interior tiles of a group; its last, partial one stores from registers.
constexpr int kStoreStagingBytes = 16 * 1024;
KILN_CONTRACT_FUNCTION bool GemmHasStoreStaging(int tile_m, int tile_n, int stages, int split_k, bool grouped,
                                                int multicast) {
  return split_k == 1 && GemmBaseSmemBytes(tile_m, tile_n, stages, split_k, grouped, multicast) +
                                 GemmConsumers(tile_m) * kStoreStagingBytes <=
                             kMaxSmemBytes;
}
// Columns of one staged chunk: 16 KiB of the output type, at most the tile's width. A chunk is
// stored as boxes of kStoreBoxBytes-wide rows (GemmStoreBoxColumns x 64 rows, D's tensor map):
// the widest rows the 128-byte swizzle takes, which spreads a warp's writes of 8 rows over all
// 32 banks (rows 128 bytes apart unswizzled would put them in the same 4).
constexpr int kStoreBoxBytes = 128;
KILN_CONTRACT_FUNCTION int GemmStoreChunkColumns(int tile_n, int out_bytes) {
  int columns = kStoreStagingBytes / (kRowsPerConsumer * out_bytes);
  if (columns >= tile_n) return tile_n;
  while (tile_n % columns != 0) columns /= 2;  // a tile is whole chunks (192 wide: chunks of 64)
  return columns;
}
KILN_CONTRACT_FUNCTION int GemmStoreBoxColumns(int out_bytes) { return kStoreBoxBytes / out_bytes; }
// Whether a kernel that has the staging buffers stores through them: a tile's out_tile_n
// columns of D (tile_n, or tile_n / 2 with the silu_and_mul epilogue) must be whole boxes (a box
// past the tile's last column would overwrite the next tile's columns with whatever the staging
// buffer holds there); not the grouped fp8 kernels, whose staged path spills registers beside
// the fp8 block accumulators and the group lookup (28 bytes at 128 x 256).
KILN_CONTRACT_FUNCTION bool GemmStagedStoresFit(int out_tile_n, int out_bytes, bool grouped, bool fp8) {
  return out_tile_n % GemmStoreBoxColumns(out_bytes) == 0 && !(grouped && fp8);
}
KILN_CONTRACT_FUNCTION int GemmSmemBytes(int tile_m, int tile_n, int stages, int split_k, bool grouped = false,
                                         int multicast = 1) {
  return GemmBaseSmemBytes(tile_m, tile_n, stages, split_k, grouped, multicast) +
         (GemmHasStoreStaging(tile_m, tile_n, stages, split_k, grouped, multicast)
              ? GemmConsumers(tile_m) * kStoreStagingBytes
              : 0);
}
// Tiles of D: the persistent blocks walk them in raster groups of group_m tile rows.
KILN_CONTRACT_FUNCTION long long GemmTiles(long long m, long long n, int tile_m, int tile_n) {
  return ((m + tile_m - 1) / tile_m) * ((n + tile_n - 1) / tile_n);
}

// A tactic: the compiled choices of one specialization. The space is every tile_m of
// kTileMChoices x tile_n of kTileNChoices x stages kMinStages..kMaxStages x group_m
// 1..kMaxGroupM x split_k of kSplitKChoices x multicast of kMulticastChoices (not both above 1)
// whose stages fit in shared memory (GemmTacticFits); the generator refuses the rest, naming
// the limit.
struct GemmTactic {
  int tile_m;
  int tile_n;
  int stages;
  int group_m;
  int split_k = 1;
  int multicast = 1;
};
KILN_CONTRACT_FUNCTION bool SameGemmTactic(const GemmTactic& x, const GemmTactic& y) {
  return x.tile_m == y.tile_m && x.tile_n == y.tile_n && x.stages == y.stages && x.group_m == y.group_m &&
         x.split_k == y.split_k && x.multicast == y.multicast;
}
// Blocks of one cluster: the blocks that split a tile's K, or that share B's tile.
KILN_CONTRACT_FUNCTION int GemmClusterBlocks(const GemmTactic& t) { return t.split_k * t.multicast; }
// The persistent work units (a cluster takes one at a time): tiles, or with multicast pairs of
// vertically adjacent tiles (the second past M when the tile rows are odd: it loads its half of
// B and stores nothing).
KILN_CONTRACT_FUNCTION long long GemmClusterUnits(long long m, long long n, const GemmTactic& t) {
  const long long tiles_m = (m + t.tile_m - 1) / t.tile_m;
  return ((tiles_m + t.multicast - 1) / t.multicast) * ((n + t.tile_n - 1) / t.tile_n);
}
KILN_CONTRACT_FUNCTION bool GemmTileMAllowed(int tile_m) {
  for (int t : kTileMChoices)
    if (t == tile_m) return true;
  return false;
}
KILN_CONTRACT_FUNCTION bool GemmTileNAllowed(int tile_n) {
  for (int t : kTileNChoices)
    if (t == tile_n) return true;
  return false;
}
KILN_CONTRACT_FUNCTION bool GemmSplitKAllowed(int split_k) {
  for (int s : kSplitKChoices)
    if (s == split_k) return true;
  return false;
}
KILN_CONTRACT_FUNCTION bool GemmMulticastAllowed(int multicast) {
  for (int c : kMulticastChoices)
    if (c == multicast) return true;
  return false;
}
// The most stages of a tile that fit in shared memory (at most kMaxStages; 0 when not even
// kMinStages fit).
KILN_CONTRACT_FUNCTION int GemmMaxStages(int tile_m, int tile_n, int split_k = 1, bool grouped = false,
                                         int multicast = 1) {
  int stages = kMaxStages;
  while (stages >= kMinStages && GemmSmemBytes(tile_m, tile_n, stages, split_k, grouped, multicast) > kMaxSmemBytes)
    --stages;
  return stages >= kMinStages ? stages : 0;
}
// grouped: grouped_gemm's space (no split and no multicast: its groups give the blocks their
// work, and vertically adjacent tiles may be of two groups).
KILN_CONTRACT_FUNCTION bool GemmTacticFits(const GemmTactic& t, bool grouped = false) {
  return GemmTileMAllowed(t.tile_m) && GemmTileNAllowed(t.tile_n) && GemmSplitKAllowed(t.split_k) &&
         GemmMulticastAllowed(t.multicast) && (t.split_k == 1 || t.multicast == 1) &&
         (!grouped || (t.split_k == 1 && t.multicast == 1)) && t.stages >= kMinStages &&
         t.stages <= GemmMaxStages(t.tile_m, t.tile_n, t.split_k, grouped, t.multicast) && t.group_m >= 1 &&
         t.group_m <= kMaxGroupM;
}
// fp8_gemm's space: gemm's, splits and multicast included (a stage holds 128 fp8 elements of
// K: the same bytes, so the same stage limits; tile_n 256 runs as two 128-column halves,
// gemm_sm90.cuh; a split block promotes its own K blocks, then the cluster adds the fp32
// partials as gemm's do; a multicast pair shares B's tile and its scales' column block).
KILN_CONTRACT_FUNCTION bool Fp8GemmTacticFits(const GemmTactic& t) { return GemmTacticFits(t); }

// A CUtensorMap (cuda.h): 128 opaque bytes, 64-byte aligned, encoded by the host with
// cuTensorMapEncodeTiled and read by TMA from the kernel's parameter space (the entry takes
// GemmParams as a __grid_constant__).
struct alignas(64) GemmTensorMap {
  unsigned long long opaque[16];
};
static_assert(sizeof(GemmTensorMap) == 128, "GemmTensorMap: a CUtensorMap");

// kiln_gemm's parameter, by value. Strides in elements. c and bias may be null (not added).
struct GemmParams {
  GemmTensorMap a_map;  // A [m, k], box kTileK x tile_m, bf16/fp16, 128-byte swizzle
  GemmTensorMap b_map;  // B [n, k], box kTileK x tile_n / multicast
  void* d;              // D [m, n], rows d_row_stride apart (even)
  const void* c;        // C [m, n] of D's dtype, rows c_row_stride apart (even), or null
  const void* bias;     // bias [n] of A's dtype, or null
  long long m;
  long long n;
  long long k;
  long long d_row_stride;
  long long c_row_stride;
  float beta;  // D += beta * C when c is set
  // grouped_gemm (null for gemm): the rows of each group, on the device. Contiguous: m_indptr
  // [groups + 1], group e is rows m_indptr[e] .. m_indptr[e + 1] - 1 of A and D (m rows in all);
  // masked: masked_m [groups], group e is rows e * group_stride .. + masked_m[e] - 1. Values
  // outside [0, m] (contiguous) or [0, group_stride] (masked) are clamped: a bad table gives
  // wrong rows, never a write outside D. B is [groups * n, k] (b_map), group e from row e * n.
  const int* group_rows;
  long long group_stride;  // masked: M_max
  int groups;
  // fp8 ops (null otherwise): A's scales [m, ceil(k / 128)] (one a row per 128 elements of K,
  // rows a_scale_stride apart) and B's [ceil(n / 128), ceil(k / 128)] (one a 128 x 128 block,
  // rows b_scale_stride apart; grouped, E such blocks of rows one after another), fp32:
  // D = sum over K blocks of (A_blk . B_blk^T) * sa * sb.
  const float* a_scales;
  const float* b_scales;
  long long a_scale_stride;
  long long b_scale_stride;
  // gemm with the TMA-store epilogue (d_store 1; the tactic has the staging, GemmHasStoreStaging,
  // D is 16-byte aligned with rows a multiple of 16 bytes apart, c is null): D [m, n], box
  // GemmStoreBoxColumns x 64 rows, 128-byte swizzle. d_store 0: the consumers store D themselves.
  GemmTensorMap d_map;
  int d_store;
  // The grouped fp8 silu_and_mul epilogue with e4m3 output (null otherwise): D holds the codes
  // [m, n / 2] (d_row_stride bytes apart) and d_scales their fp32 scales [m, (n / 2) / 128], rows
  // d_scale_stride apart.
  float* d_scales;
  long long d_scale_stride;
  // The contiguous grouped ops with a gathered A (kernel param a_gather 1; null otherwise): row r
  // of the groups' rows is row a_rows[r] / a_row_divisor of `a` (a_row_count rows of k elements,
  // a_row_stride bytes apart, 16-byte aligned), copied into the stage by the producer warp
  // (cp.async) instead of TMA: fused_moe's and fused_moe_fp8's gate-and-up GEMMs read x (or its
  // codes) by moe_permute's row_to_slot (a slot t * top_k + j: divisor top_k), so no gathered copy
  // of x is written. An entry below 0 or at a_row_count * a_row_divisor and beyond reads zeros. fp8:
  // a_scales has a row per row of `a`, found the same way. a_map still describes `a` (unread).
  const void* a;
  const int* a_rows;
  long long a_row_stride;
  int a_row_divisor;
  int a_row_count;
};
static_assert(sizeof(GemmParams) == 576,
              "GemmParams: 3 tensor maps, 9 pointers, 10 long longs, a float, four ints (padded to 64 bytes)");

// gemm's small-M kernels (op kGemmGemvOp, its own generator; docs/kernels-gemm.md, "Small M:
// the GEMV kernels"). For M <= kGemvMaxRows a call's time is B streaming from memory, and a
// tensor-core tile of 64 rows would multiply mostly padding behind a pipeline built for reuse;
// instead B's rows are read once, 16 bytes a lane with several units in flight, by blocks of
// kGemvThreads that each own kGemvColumnsPerBlock columns of D:
//   kGemmGemvEntry     M <= kGemvScalarMaxRows (one row): a warp takes kGemvColumnsPerWarp rows
//                      of B over all of K and multiplies them with A's row in fp32 (a fixed warp
//                      butterfly sums the lanes);
//   kGemmGemvMmaEntry  M above that, up to kGemvMaxRows: the block's 16 rows of B are one
//                      mma.sync m16n8k16 A operand and A's rows (8 per n-tile, zero past M) its B
//                      operand, each warp taking an eighth of K; the warps' partial tiles are
//                      added in shared memory in warp order;
//   kGemmGemvMmaWideEntry  M above kGemvMaxRows, up to kGemvWideMaxRows: the same with four
//                      n-tiles and kGemvWideSteps steps of B in flight a lane (the registers of
//                      kGemvBlocksPerSm blocks an SM hold no more without spills).
// Both: fp32 sums in a fixed order (deterministic), then + bias and + beta * C in fp32 and one
// rounding to D's type, as the tile kernel's epilogue. Entries take GemmGemvParams by value;
// grid.x = ceil(N / kGemvColumnsPerBlock) (items_per_block), block kGemvThreads; they wait for
// the previous kernel first (griddepcontrol), like kiln_gemm.
constexpr const char* kGemmGemvOp = "gemm_gemv";
constexpr const char* kGemmGemvEntry = "kiln_gemm_gemv";
constexpr const char* kGemmGemvMmaEntry = "kiln_gemm_gemv_mma";
constexpr const char* kGemmGemvMmaWideEntry = "kiln_gemm_gemv_mma_wide";
constexpr int kGemvMaxRows = 16;
constexpr int kGemvWideMaxRows = 32;
constexpr int kGemvWideSteps = 2;
constexpr int kGemvScalarMaxRows = 1;
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = 32 * kGemvWarps;
constexpr int kGemvColumnsPerWarp = 2;  // the scalar kernel's
constexpr int kGemvColumnsPerBlock = kGemvWarps * kGemvColumnsPerWarp;
static_assert(kGemvColumnsPerBlock == 16, "the mma kernel's block is one m16 tile of B's rows");
// The blocks an SM holds at once (the entries' __launch_bounds__ minimum).
constexpr int kGemvBlocksPerSm = 3;

// kiln_gemm_gemv's parameter. Strides in elements; A's and B's rows start 16-byte aligned and K
// is a multiple of 8 (gemm's contract), D's and C's pairs aligned (even strides).
struct GemmGemvParams {
  void* d;           // D [m, n], rows d_row_stride apart
  const void* a;     // A [m, k], rows a_row_stride apart
  const void* b;     // B [n, k], rows b_row_stride apart
  const void* c;     // C [m, n] of D's type, rows c_row_stride apart, or null
  const void* bias;  // bias [n] of A's type, or null
  // m: 1 .. kGemvScalarMaxRows (kGemmGemvEntry), .. kGemvMaxRows (kGemmGemvMmaEntry), ..
  // kGemvWideMaxRows (kGemmGemvMmaWideEntry).
  long long m;
  long long n;
  long long k;
  long long a_row_stride;
  long long b_row_stride;
  long long d_row_stride;
  long long c_row_stride;
  float beta;  // D = ... + beta * C when c is set
};

// fp8_gemm's small-M kernel (op kFp8GemmGemvOp, its own generator; docs/kernels-gemm.md, "Small
// M on fp8: the GEMV kernel"). As for gemm, at M <= kFp8GemvMaxRows a call's time is B streaming
// from memory; the tile kernel's 64-row tiles reach about half the copy rate there. The GEMV
// reads each e4m3 row of B once: a block of kGemvThreads takes Fp8GemvBlockRows(k_parts) rows
// of B; its warps take 16 rows each (kFp8GemvRowsPerWarp, the MMA's m), k_parts warps sharing
// a group of 16 rows, each over its share of K's scale blocks, and multiply them with A's rows, 8
// a pass (kFp8GemvInputsPerPass, the MMA's n), on fp8 tensor cores (mma.sync m16n8k32, one scale
// block at a time, promoted into fp32 totals with both scales: fp8_gemm's promotion interval; the
// pieces are fused_moe_fp8's decode GEMVs', kiln/gemm/fp8_gemv_block.cuh). The parts' totals
// are added in part order (deterministic), one rounding to D's type. N must be a multiple of 16
// (a warp's rows all in or all out); the host keeps other N on the tile kernel.
// Fp8GemmGemvParams by value; grid.x = ceil(N / Fp8GemvBlockRows(k_parts)), block kGemvThreads,
// no dynamic shared memory; it waits for the previous kernel first (griddepcontrol).
constexpr const char* kFp8GemmGemvOp = "fp8_gemm_gemv";
constexpr const char* kFp8GemmGemvEntry = "kiln_fp8_gemm_gemv";
// M above kFp8GemvInputsPerPass: the rows of a in one pass, two n-tiles on the same weights.
constexpr const char* kFp8GemmGemvWideEntry = "kiln_fp8_gemm_gemv_wide";
constexpr int kFp8GemvMaxRows = 16;  // the wide entry's two n-tiles of kFp8GemvInputsPerPass
constexpr int kFp8GemvRowsPerWarp = 16;
constexpr int kFp8GemvInputsPerPass = 8;
// The blocks an SM holds at once (the entry's __launch_bounds__ minimum): two k blocks' operands
// in registers (one loading while the other multiplies), as fused_moe_fp8's GEMVs.
constexpr int kFp8GemvBlocksPerSm = 2;
constexpr int kFp8GemvMinKParts = 2;
constexpr int kFp8GemvMaxKParts = 8;
KILN_CONTRACT_FUNCTION int Fp8GemvBlockRows(int k_parts) { return kGemvWarps / k_parts * kFp8GemvRowsPerWarp; }
// The fewest parts whose grid (ceil(n / Fp8GemvBlockRows) x grid_y blocks) gives every one of
// `sms` SMs a block over N = `n` rows of B (more parts, more and shorter blocks: a narrow B spreads
// its bytes over more SMs); the most where none does. grid_y: fused_moe_fp8's expert blocks (its
// decode GEMVs share this kernel's k-block code and rule), 1 for fp8_gemm.
KILN_CONTRACT_FUNCTION int Fp8GemvKParts(long long n, long long sms, long long grid_y = 1) {
  for (int parts = kFp8GemvMinKParts; parts < kFp8GemvMaxKParts; parts *= 2) {
    const long long rows = Fp8GemvBlockRows(parts);
    if ((n + rows - 1) / rows * grid_y >= sms) return parts;
  }
  return kFp8GemvMaxKParts;
}

// kiln_fp8_gemm_gemv's parameter: fp8_gemm's operands (strides in elements; e4m3 rows of A and B
// start 16-byte aligned, K a multiple of 16).
struct Fp8GemmGemvParams {
  void* d;                // D [m, n] bf16 or fp32, rows d_row_stride apart
  const void* a;          // A [m, k] e4m3, rows a_row_stride apart
  const void* b;          // B [n, k] e4m3, rows b_row_stride apart
  const float* a_scales;  // [m, ceil(k / 128)], rows a_scale_stride apart
  const float* b_scales;  // [ceil(n / 128), ceil(k / 128)], rows b_scale_stride apart
  long long m;            // 1 .. kFp8GemvMaxRows
  long long n;            // a multiple of kFp8GemvRowsPerWarp
  long long k;
  long long a_row_stride;
  long long b_row_stride;
  long long d_row_stride;
  long long a_scale_stride;
  long long b_scale_stride;
  int k_parts;  // kFp8GemvMinKParts, 4 or kFp8GemvMaxKParts (Fp8GemvKParts)
};
static_assert(sizeof(Fp8GemmGemvParams) == 112, "Fp8GemmGemvParams: 5 pointers, 8 long longs, an int (padded)");

}  // namespace gemm
}  // namespace kiln
