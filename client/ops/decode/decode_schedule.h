// DecodeSchedule: how batch_decode cuts a batch's KV into work items (split-KV, as in
// flash-decoding), from the requests' KV lengths, the window, the kv heads and the SM count.
// Pure arithmetic on the host; the plan (BatchDecodePlan) keeps the result and every run
// sends it to the kernels as KilnDecodeSchedule (kiln/decode/decode_contract.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::client {

// Blocks the schedule aims to keep resident per SM: the kernel's shared memory (64-96 KiB)
// lets two blocks share an sm_90 SM, and two blocks with 2-3 tiles each in flight keep more
// bytes moving than an SM's share of HBM bandwidth needs.
inline constexpr int kDecodeBlocksPerSm = 2;
// Chunks are whole tiles of the kernel (64 positions) and whole pages.
inline constexpr int64_t kDecodeTileTokens = 64;
// A chunk shorter than this costs more in its fixed part (pipeline fill, partial write, merge)
// than it saves.
inline constexpr int64_t kDecodeMinChunkTokens = 256;
// The schedule's cost model, in positions of one (position, kv head) block's streaming time: a
// block's fixed part (launch, pipeline fill, partial write) and a split's merge launch.
inline constexpr int64_t kDecodeBlockOverheadTokens = 64;
inline constexpr int64_t kDecodeMergeOverheadTokens = 128;
// A split must beat the unsplit schedule's estimate by this fraction (in percent) to be taken: the
// model is coarse, and an unsplit batch that fills the GPU already streams near its read ceiling.
inline constexpr int64_t kDecodeSplitGainPercent = 10;

struct DecodeSchedule {
  bool split = false;
  int64_t num_items = 0;             // grid.x; the batch size when not split
  int64_t chunk_tokens = 0;          // split: positions per chunk (a multiple of max(64, page_size)); else 0
  std::vector<uint16_t> item_begin;  // split: batch + 1 prefix offsets of each request's items
  int64_t slots = 0;                 // blocks the GPU runs at once: kDecodeBlocksPerSm * SMs
  int64_t max_kv_tokens = 0;         // the longest request's attended positions
  int64_t total_kv_tokens = 0;       // attended positions, summed over requests
};

// kv_len[b] >= 1 (checked by the caller), window_left >= -1, page_size a power of two,
// num_kv_heads >= 1, num_sms >= 1.
//
// Rule (slots = kDecodeBlocksPerSm * num_sms; chunks are multiples of max(64, page_size), at
// least 256): of the candidate chunk sizes
//   - none (one item per request),
//   - the smallest chunk whose items fill at most one wave (items * kv_heads <= slots), when
//     batch * kv_heads < slots (a near-uniform batch then runs as one even wave),
//   - the balanced share W = attended positions * kv heads / slots, rounded up, and W/2, W/4,
//     W/8 (finer items even out a skewed batch's tail, at a fixed cost per item),
// take the one whose estimated span is least (EstimateDecodeSpan), a split only when it beats
// the unsplit estimate by kDecodeSplitGainPercent; ties go to the larger chunk. No split when no
// request gets two items, or when the batch exceeds decode::kMaxSplitBatch requests.
// `forced_chunk` > 0 (KILN_DECODE_CHUNK, a diagnostic control) replaces the choice: that many
// positions rounded up to a multiple of max(64, page_size), a split wherever it cuts a request and
// the batch allows one (at most decode::kMaxSplitBatch requests and 65535 items), else none.
DecodeSchedule ScheduleBatchDecode(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads,
                                   int64_t page_size, int num_sms, int64_t forced_chunk = 0);

// KILN_DECODE_CHUNK, read once: 0 when unset or "auto", else a chunk of positions (64 to 2^20).
// Any other value is said once on stderr and reads as "auto".
int64_t DecodeChunkFromEnvironment();

// The estimated span of a schedule with chunk `chunk` (0: one item per request), in positions:
// the items in grid order, each to the group of num_kv_heads slots that frees first (a block of
// every kv head of an item starts together, as the GPU dispatches blockIdx in order), each
// costing its positions plus kDecodeBlockOverheadTokens.
int64_t EstimateDecodeSpan(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads, int64_t chunk,
                           int64_t slots);

// The positions request b attends: [window_begin, kv_len).
int64_t WindowBegin(int64_t kv_len, int64_t window_left);

// "batch 1, 100000 positions (longest 100000) on 264 slots: split into 33 items of 3072 positions"
std::string DescribeSchedule(const DecodeSchedule& s, int64_t batch, int64_t page_size);

}  // namespace kiln::client
