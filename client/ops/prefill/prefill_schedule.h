// PrefillSchedule: how batch_prefill cuts a batch into work items — row tiles of 64 or 128 rows
// (query positions x the query heads of one kv head; the row tile picks the kernel) and, when those alone cannot fill
// the GPU and the KV is long, KV chunks merged by log-sum-exp (split-KV, as flash-decoding does for one query). Pure
// arithmetic on the host; the plan keeps the result and every run sends it to the kernels as KilnPrefillSchedule
// (kiln/prefill/prefill_contract.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::client {

// Blocks resident per SM, by kernel: the Hopper kernel (tile_rows 128) takes 165 KiB of shared
// memory at head_dim 128 and 384 threads of up to 224 registers: one block an SM; the mma.sync
// kernel (tile_rows 64) 80 KiB at head_dim 128, 96 KiB at 256: two.
inline int PrefillBlocksPerSm(int64_t tile_rows) { return tile_rows == 128 ? 1 : 2; }
// A chunk shorter than this costs more in its fixed part (Q tile load, partial write, merge)
// than it saves.
inline constexpr int64_t kPrefillMinChunkTokens = 512;

struct PrefillRequest {
  int64_t q_len = 0;
  int64_t kv_len = 0;
};

// The row tile, and so the kernel, of a batch: prefill::DefaultTileRows(head_dim) (128, the
// Hopper kernel, where it serves the head_dim), except 64 (the mma.sync kernel) when no request
// has more than 64 rows (q_len x group): a 128-row tile would be at least half empty and there
// are half the blocks in flight, so a batch of 8-token verifications at group 4 ran 2.1x slower
// on it (bench/results/2026-12-02-prefill-sm90-h200.md).
int64_t ChoosePrefillTileRows(const std::vector<PrefillRequest>& requests, int64_t group, int64_t head_dim);

struct PrefillSchedule {
  bool listed = true;               // item_begin / kv_chunks describe the items (batch <= 512)
  bool split = false;               // some request has more than one chunk
  int64_t num_items = 0;            // grid.x (per kv head)
  int64_t chunk_tokens = 0;         // split: positions per chunk (a multiple of the K/V tile); else 0
  int64_t tiles_per_request = 0;    // not listed: the most row tiles of any request
  int64_t merge_max_q_len = 0;      // split: the longest q_len of a request with several chunks
  bool heads_fastest = false;       // mma.sync kernel, no request has two row tiles: blocks kv-head-fastest
  std::vector<int32_t> item_begin;  // listed: batch + 1 prefix offsets of each request's items
  std::vector<uint16_t> kv_chunks;  // listed: chunks of each request (1: not split)
  int64_t slots = 0;                // blocks the GPU runs at once: PrefillBlocksPerSm * SMs
  int64_t tile_rows = 0;            // rows of a row tile, the kernel's: ChoosePrefillTileRows
  int64_t row_tiles = 0;            // row tiles of the batch (per kv head)
  double tile_pairs = 0;            // sum over row tiles of the KV positions they attend (cost)
};

// Rule (row tiles of ChoosePrefillTileRows rows; tiles = row tiles x kv heads;
// slots = PrefillBlocksPerSm(tile_rows) * num_sms):
//  - more than kMaxListedBatch requests: the dense mapping, never split;
//  - else no split when tiles >= slots (the tiles fill the GPU themselves) or no request's KV
//    reaches twice kPrefillMinChunkTokens;
//  - else a chunk of the balanced share W = (sum over tiles of their attended KV) x kv heads /
//    slots, rounded up to a K/V tile and at least kPrefillMinChunkTokens; a request whose KV
//    (from KvBase) is longer than the chunk is cut into ceil(len / chunk) chunks, the others
//    stay whole. No split if that leaves every request whole.
// requests: q_len >= 0, kv_len >= 0; num_kv_heads >= 1; group 1..8; window_left -1 or 0..2^31-1
// (the kernel's); num_sms >= 1.
PrefillSchedule SchedulePrefill(const std::vector<PrefillRequest>& requests, int64_t group, int64_t num_kv_heads,
                                int64_t head_dim, bool causal, int64_t window_left, int num_sms);

// "batch 2, 2 row tiles of 64 rows on 264 slots: split into 118 items (KV chunks of 1024
// positions)"
std::string DescribePrefillSchedule(const PrefillSchedule& s, int64_t batch);

}  // namespace kiln::client
