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
// Rule (slots = kDecodeBlocksPerSm * num_sms, W = attended positions * kv heads / slots, the
// balanced share of one slot; chunks are multiples of max(64, page_size), at least 256):
//  1. When batch * kv_heads < slots, the smallest chunk whose items fill at most one wave
//     (items * kv_heads <= slots). Taken when it is at most twice max(W, 256): a near-uniform
//     batch then runs as one even wave.
//  2. Otherwise (a skewed batch, or more pairs than slots) a chunk of W rounded up: requests
//     longer than the balanced share are cut to it, the others stay whole.
// No split when the chunk is no shorter than the longest request, when no request gets two
// items, or when the batch exceeds decode::kMaxSplitBatch requests.
DecodeSchedule ScheduleBatchDecode(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads,
                                   int64_t page_size, int num_sms);

// The positions request b attends: [window_begin, kv_len).
int64_t WindowBegin(int64_t kv_len, int64_t window_left);

// "batch 1, 100000 positions (longest 100000) on 264 slots: split into 33 items of 3072 positions"
std::string DescribeSchedule(const DecodeSchedule& s, int64_t batch, int64_t page_size);

}  // namespace kiln::client
