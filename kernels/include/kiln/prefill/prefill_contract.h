// The op contract of the prefill family (kiln/common/op_contract.h says what a contract is):
//
//   batch_prefill_ragged  attention of a batch's queries over its keys/values, both ragged
//                         (requests concatenated; qo_indptr, kv_indptr in tokens)
//   batch_prefill_paged   the same queries over the paged KV cache of the decode family
//                         (kiln/decode/decode_contract.h: kv_indptr in pages, kv_indices,
//                         kv_last_page_len)
//
// Both: causal aligned to the end (query i of a request with q_len queries and kv_len keys sees
// positions <= kv_len - q_len + i), GQA (group = num_qo_heads / num_kv_heads), optional soft cap
// and sliding window (the last window_left + 1 positions up to the causal limit), lse in natural
// log. Entries: kiln_batch_prefill (the attention) and kiln_batch_prefill_merge (split-KV chunks
// combined by log-sum-exp).
//
// Params: dtype (fp16, bf16), head_dim (64, 128, 256), group (1, 2, 4, 8), causal (0, 1),
// soft_cap (0, 1: the cap itself is a launch argument), tile_rows (64, 128; auto:
// DefaultTileRows); paged only: page_size (a power of two up
// to decode::kMaxPageSize). The window and sm_scale are launch arguments.
//
// Rows: a block covers one kv head and tile_rows rows of one request, row r of request
// b being query position r / group with query head kv_head * group + r % group — the query heads
// that share a kv head share its K/V tiles. A request has q_len * group rows, so ceil(q_len *
// group / tile_rows) row tiles per kv head.
//
// Two kernels serve the family, chosen by the tile_rows param: 128 runs the Hopper kernel
// (kiln/prefill/batch_prefill_sm90.cuh: wgmma, a producer and two consumer warpgroups, 128-row
// tiles, 128-position K/V tiles; head_dim 64 and 128 only); 64 runs the mma.sync kernel
// (kiln/prefill/batch_prefill.cuh: 4 warps, 64-row tiles, K/V tiles of 64 positions, 32 at
// head_dim 256). The default (DefaultTileRows) is 128 where the Hopper kernel serves the
// head_dim; the host plan asks for 64 when every request has few rows (speculative
// verification: 8 queries x group 4 would fill a quarter of a 128-row tile). TileKv,
// PrefillThreads and PrefillSmemBytes below size the launch for the plan and the generator.
//
// Launch, each entry with the block and dynamic shared memory its hint names:
//   kiln_batch_prefill        grid = (schedule.num_items, num_kv_heads)
//   kiln_batch_prefill_merge  split schedules only, after it on the same stream:
//                             grid = (batch, ceil(schedule.merge_max_q_len / items_per_block)),
//                             items_per_block = query positions per block (all query heads)
// Every entry takes the one parameter struct below, by value.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace prefill {

constexpr const char* kBatchPrefillRaggedOp = "batch_prefill_ragged";
constexpr const char* kBatchPrefillPagedOp = "batch_prefill_paged";
constexpr const char* kBatchPrefillEntry = "kiln_batch_prefill";
constexpr const char* kBatchPrefillMergeEntry = "kiln_batch_prefill_merge";

constexpr const char* kParamHeadDim = "head_dim";    // 64, 128 or 256
constexpr const char* kParamGroup = "group";         // 1, 2, 4 or 8
constexpr const char* kParamCausal = "causal";       // 0 or 1
constexpr const char* kParamSoftCap = "soft_cap";    // 0 or 1
constexpr const char* kParamPageSize = "page_size";  // paged: a power of two, 1..kMaxPageSize
constexpr const char* kParamTileRows = "tile_rows";  // 64 (mma.sync kernel) or 128 (Hopper kernel)
constexpr int kMaxPageSize = 256;
constexpr int kMaxGroup = 8;

// The mma.sync kernel's tile: 4 warps of 16 rows each (a tile of at most 32 rows: two warps a
// row slice, each on half of every K/V tile); K/V tiles of kv positions in a ring of MmaStages
// stages. Three at head_dim <= 128, so that two tiles are in flight while one is computed:
// speculative verification streams a long KV for few rows and waited on the load latency with
// one; 112 KiB a block at head_dim 128, and two blocks still fit an SM (PrefillBlocksPerSm). Two
// at head_dim 256, where a third stage would leave one block an SM.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16 * kWarps;
KILN_CONTRACT_FUNCTION int MmaTileKv(int head_dim) { return head_dim <= 128 ? 64 : 32; }
KILN_CONTRACT_FUNCTION int MmaStages(int head_dim) { return head_dim <= 128 ? 3 : 2; }
// Q tile + MmaStages stages of a K tile and a V tile, 2-byte elements.
KILN_CONTRACT_FUNCTION int MmaSmemBytes(int head_dim) {
  return (kTileRows + 2 * MmaStages(head_dim) * MmaTileKv(head_dim)) * head_dim * 2;
}

// The Hopper kernel's tile: 128 rows (two consumer warpgroups of 64), K/V tiles of 128
// positions in kSm90Stages stages, 384 threads (one producer warpgroup).
constexpr int kSm90TileRows = 128;
constexpr int kSm90TileKv = 128;
constexpr int kSm90Threads = 384;
constexpr int kSm90Stages = 2;
// 1 KiB of alignment slack + the Q tile + the K and V stages + 256 bytes of mbarriers + a page
// id per position of each stage (paged, pages smaller than a tile).
KILN_CONTRACT_FUNCTION int Sm90SmemBytes(int head_dim) {
  return 1024 + (kSm90TileRows + 2 * kSm90Stages * kSm90TileKv) * head_dim * 2 + 256 + kSm90Stages * kSm90TileKv * 4;
}

// Which kernel a tile_rows runs, which tile_rows a head_dim allows, and what the host plans and
// launches with.
KILN_CONTRACT_FUNCTION bool UsesSm90Kernel(int tile_rows) { return tile_rows == kSm90TileRows; }
KILN_CONTRACT_FUNCTION bool Sm90ServesHeadDim(int head_dim) { return head_dim <= 128; }
KILN_CONTRACT_FUNCTION int DefaultTileRows(int head_dim) {
  return Sm90ServesHeadDim(head_dim) ? kSm90TileRows : kTileRows;
}
KILN_CONTRACT_FUNCTION bool ValidTileRows(int head_dim, int tile_rows) {
  return tile_rows == kTileRows || (tile_rows == kSm90TileRows && Sm90ServesHeadDim(head_dim));
}
KILN_CONTRACT_FUNCTION int TileKv(int head_dim, int tile_rows) {
  return UsesSm90Kernel(tile_rows) ? kSm90TileKv : MmaTileKv(head_dim);
}
KILN_CONTRACT_FUNCTION int PrefillThreads(int tile_rows) { return UsesSm90Kernel(tile_rows) ? kSm90Threads : kThreads; }
KILN_CONTRACT_FUNCTION int PrefillSmemBytes(int head_dim, int tile_rows) {
  return UsesSm90Kernel(tile_rows) ? Sm90SmemBytes(head_dim) : MmaSmemBytes(head_dim);
}
// Query positions per merge block (each over all query heads of the position).
constexpr int kMergePositions = 4;
constexpr int kMergeThreads = 128;

// Requests a listed schedule can describe; larger batches use the dense mapping, never split.
constexpr int kMaxListedBatch = 512;

// The first kv position any query of a request may see: with a window, that of its first
// query (rounded down to a K/V tile so that chunks start on tiles); else 0. Split chunks are
// counted from here.
KILN_CONTRACT_FUNCTION long long KvBase(long long kv_len, long long q_len, int window_left, int tile_kv) {
  if (window_left < 0) return 0;
  long long first = kv_len - q_len - window_left;
  if (first < 0) first = 0;
  return first / tile_kv * tile_kv;
}

// How blocks map to (request, row tile, kv chunk); grid.x = num_items.
// Row tiles are of tile_rows rows and K/V tiles of TileKv(head_dim, tile_rows) positions.
//  listed == 1 (batch <= kMaxListedBatch): request b owns items item_begin[b] ..
//    item_begin[b+1]; its item item_begin[b] + t * chunks + c is row tile t, kv chunk c, with
//    chunks = kv_chunks[b]. Chunk c covers kv positions [base + c * chunk_tokens,
//    base + (c + 1) * chunk_tokens), base = KvBase(...); chunks == 1 is the whole range. A
//    request with one chunk is written to out directly; one with more goes through the
//    workspace and the merge entry.
//  listed == 0: item x is request x / tiles_per_request, row tile x % tiles_per_request (items
//    past a request's row tiles return at once); never split.
// heads_fastest (read by the mma.sync kernel; the Hopper kernel keeps blockIdx.y): 1 numbers the
// blocks kv-head-fastest (linear = blockIdx.y * gridDim.x + blockIdx.x; item = linear /
// gridDim.y, kv head = linear % gridDim.y), 0 uses item = blockIdx.x, kv head = blockIdx.y. The
// plan sets it where no request has two row tiles, so no two items share K/V rows: blocks in
// flight together then read every head of the same positions (adjacent in the paged layout)
// instead of one head of twice as many requests. Where requests have several row tiles, the
// items of one head read the same K/V and item-fastest keeps them in L2 together.
struct KilnPrefillSchedule {
  int num_items;
  int listed;
  int split;         // any request with more than one chunk
  int chunk_tokens;  // split: a multiple of the K/V tile
  int batch;
  int tiles_per_request;  // listed == 0
  int merge_max_q_len;    // split: the longest q_len among the requests with several chunks
  int partial_rows;       // split: rows of the workspace (items * num_kv_heads * tile_rows)
  int heads_fastest;      // 1: blocks numbered kv-head-fastest (above)
  int item_begin[kMaxListedBatch + 1];
  unsigned short kv_chunks[kMaxListedBatch];
};
static_assert(sizeof(KilnPrefillSchedule) == 3112, "KilnPrefillSchedule is 3112 bytes");

// A CUtensorMap (cuda.h): 128 opaque bytes, 64-byte aligned, encoded on the host with
// cuTensorMapEncodeTiled and read by TMA from the kernel's parameter space (__grid_constant__).
struct alignas(64) KilnPrefillTensorMap {
  unsigned long long opaque[16];
};
static_assert(sizeof(KilnPrefillTensorMap) == 128, "KilnPrefillTensorMap: a CUtensorMap");

// The Hopper kernel's K and V through TMA (kv_tma 1), in the 128-byte swizzle, a box being one
// 64-column block (128-byte rows):
//   ragged: k_map and v_map are 3-D maps of [rows][num_kv_heads][head_dim] with the tensors'
//           strides, box kPrefillTmaBoxColumns x 1 x kSm90TileKv;
//   paged (page_size >= kMinTmaPage): 4-D maps of the caches [num_pages][page_size]
//           [num_kv_heads][head_dim] (the page stride k_stride_token / v_stride_token), box
//           kPrefillTmaBoxColumns x 1 x min(page_size, kSm90TileKv) x 1.
constexpr int kPrefillTmaBoxColumns = 64;
// Pages of 8 positions and up: a page's box is whole 1024-byte swizzle atoms, and a tile's
// loads (16 pages x 2 column blocks at most) one per lane of a warp.
constexpr int kMinTmaPage = 8;
// Rows of one TMA box of K or V: a K/V tile's (ragged: page_size 0), or a page's, at most a
// tile's (paged). The host's tensor maps and the kernel's loads both take it from here.
KILN_CONTRACT_FUNCTION int PrefillTmaBoxRows(int page_size) {
  return page_size > 0 && page_size < kSm90TileKv ? page_size : kSm90TileKv;
}

struct KilnBatchPrefillParams {
  KilnPrefillTensorMap k_map;                   // kv_tma 1: ragged k (above); else unused
  KilnPrefillTensorMap v_map;                   // kv_tma 1: ragged v
  void* out;                                    // [total_q, num_qo_heads, head_dim] of T
  float* lse;                                   // [total_q, num_qo_heads], natural log; null: not written
  const void* q;                                // [total_q, num_qo_heads, head_dim] of T
  const void* k;                                // ragged: [total_kv, num_kv_heads, head_dim]; paged: the K cache
  const void* v;                                // ragged: like k; paged: the V cache
  const int* qo_indptr;                         // [batch + 1], tokens
  const int* kv_indptr;                         // [batch + 1]: ragged in tokens, paged in pages
  const int* kv_indices;                        // paged: [kv_indptr[batch]] page ids; ragged: null
  const int* kv_last_page_len;                  // paged: [batch]; ragged: null
  float* partial_out;                           // split: [partial_rows, head_dim]
  float* partial_lse;                           // split: [partial_rows], log2
  long long q_stride_token, q_stride_head;      // elements; multiples of 8
  long long out_stride_token, out_stride_head;  // elements; multiples of 8
  long long lse_stride_token;                   // elements (heads are contiguous)
  // Ragged: strides of k and v (multiples of 8). Paged: the page strides (multiples of 8; inside
  // a page [page_size, num_kv_heads, head_dim] is dense) in k_stride_token / v_stride_token,
  // k_stride_head / v_stride_head unused.
  long long k_stride_token, k_stride_head;
  long long v_stride_token, v_stride_head;
  long long total_q;      // rows of q and out: larger qo_indptr values are clamped
  long long total_kv;     // ragged: rows of k and v; paged: pages of the cache
  long long num_indices;  // paged: entries of kv_indices (larger offsets read as empty)
  int num_qo_heads;       // num_kv_heads * group
  int num_kv_heads;
  float logit_scale;  // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale;    // soft cap on: cap * log2(e); off: unused
  int window_left;    // < 0: no window; else a query at kv position p sees [p - window_left, p]
  int kv_tma;         // 1: the Hopper kernel loads K/V tiles with TMA (k_map, v_map); 0: cp.async
  KilnPrefillSchedule schedule;
};
// Under the 4 KiB of kernel parameters every CUDA 12 driver takes (two tensor maps, then 3324
// bytes, padded to the maps' 64-byte alignment).
static_assert(sizeof(KilnBatchPrefillParams) == 3584, "KilnBatchPrefillParams is 3584 bytes");

}  // namespace prefill
}  // namespace kiln
