// What one block of either prefill kernel (batch_prefill.cuh, batch_prefill_sm90.cuh) works on,
// found the same way by both from the contract's KilnPrefillSchedule: its request, row tile and
// kv chunk; the request's queries and kv positions (clamped to the tensors the plan named); and
// the kv range its rows see, in K/V tiles. Also the per-row helpers both kernels share: where a
// request's kv lives, a position's page, a row's visible range.
#pragma once

#include "kiln/decode/attention_math.cuh"
#include "kiln/prefill/prefill_contract.h"

namespace kiln {
namespace prefill {
namespace detail {

// Where a request's kv positions live.
struct KvSource {
  long long begin;  // ragged: the first k/v row; paged: the first kv_indices entry
  int len;          // kv_len
};

// The kv_indices entry of kv position `pos` (paged) as stored, or -1 past the table. Split from
// its check (ValidPage) so that a caller can issue the load early and check it when it needs
// the page, with the load's latency in between.
template <class Shape>
__device__ __forceinline__ int PageEntry(const KilnBatchPrefillParams& p, long long page_begin, int pos) {
  const long long entry = page_begin + pos / Shape::kPageSize;
  return entry >= 0 && entry < p.num_indices ? __ldg(p.kv_indices + entry) : -1;
}

// A page-table entry as a page id of the cache, or -1 where it names none.
__device__ __forceinline__ int ValidPage(const KilnBatchPrefillParams& p, int entry) {
  return entry >= 0 && entry < p.total_kv ? entry : -1;
}

// The page id of kv position `pos` (paged), or -1 where the table has no valid entry.
template <class Shape>
__device__ __forceinline__ int PageOf(const KilnBatchPrefillParams& p, long long page_begin, int pos) {
  return ValidPage(p, PageEntry<Shape>(p, page_begin, pos));
}

// The visible kv positions [lo, hi] (inclusive; empty when lo > hi) of request row r.
struct RowRange {
  int lo, hi;
};

template <class Shape>
__device__ __forceinline__ RowRange VisibleRange(int r, int kv_len, int q_len, int window_left) {
  const int pos = kv_len - q_len + r / Shape::kGroup;
  RowRange range{0, kv_len - 1};
  if constexpr (Shape::kCausal) range.hi = min(range.hi, pos);
  if (window_left >= 0) range.lo = max(0, pos - window_left);
  return range;
}

struct PrefillBlock {
  int request;
  int tile;    // row tile of the request
  int chunk;   // kv chunk of the request (0 unless split)
  int chunks;  // the request's kv chunks (1: not split; its rows go to out directly)
  long long q_begin;
  int q_len;
  KvSource kv;
  int rows;        // the request's rows: q_len * group
  int row_begin;   // the tile's first row
  int row_last;    // its last row below `rows`
  int first_tile;  // the first K/V tile the block loads (a multiple of kTileKv)
  int num_tiles;   // K/V tiles over [lo, hi): the union of its rows' visible positions, cut to its chunk
};

// Fills `b` for grid item `item`; false when the item has nothing to do (past the schedule's
// items, or a row tile past its request's rows): the block returns at once.
template <class Shape, int kTileRows, int kTileKv>
__device__ __forceinline__ bool LocatePrefillBlock(const KilnBatchPrefillParams& p, int item, PrefillBlock& b) {
  const KilnPrefillSchedule& schedule = p.schedule;
  b.chunk = 0;
  b.chunks = 1;
  if (schedule.listed) {
    const int batch = min(schedule.batch, kMaxListedBatch);
    if (batch <= 0 || item < schedule.item_begin[0] || item >= schedule.item_begin[batch]) return false;
    int lo = 0, hi = batch;  // item_begin[lo] <= item < item_begin[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (schedule.item_begin[mid] <= item) lo = mid;
      else hi = mid;
    }
    b.request = lo;
    b.chunks = max(static_cast<int>(schedule.kv_chunks[b.request]), 1);
    const int j = item - schedule.item_begin[b.request];
    b.tile = j / b.chunks;
    b.chunk = j % b.chunks;
  } else {
    if (schedule.tiles_per_request <= 0) return false;
    b.request = item / schedule.tiles_per_request;
    b.tile = item % schedule.tiles_per_request;
    if (b.request >= schedule.batch) return false;
  }

  // The request's queries (clamped to q's rows) and kv positions.
  const int request = b.request;
  b.q_begin = min(max(static_cast<long long>(p.qo_indptr[request]), 0ll), p.total_q);
  const long long q_end = min(max(static_cast<long long>(p.qo_indptr[request + 1]), b.q_begin), p.total_q);
  b.q_len = static_cast<int>(q_end - b.q_begin);
  if constexpr (Shape::kPaged) {
    const int pages = p.kv_indptr[request + 1] - p.kv_indptr[request];
    const int last_page_len = min(max(p.kv_last_page_len[request], 0), Shape::kPageSize);
    b.kv.begin = p.kv_indptr[request];
    b.kv.len = pages > 0 ? (pages - 1) * Shape::kPageSize + last_page_len : 0;
  } else {
    const long long kv_begin = min(max(static_cast<long long>(p.kv_indptr[request]), 0ll), p.total_kv);
    const long long kv_end = min(max(static_cast<long long>(p.kv_indptr[request + 1]), kv_begin), p.total_kv);
    b.kv.begin = kv_begin;
    b.kv.len = static_cast<int>(kv_end - kv_begin);
  }
  b.rows = b.q_len * Shape::kGroup;
  b.row_begin = b.tile * kTileRows;
  if (b.row_begin >= b.rows) return false;
  b.row_last = min(b.row_begin + kTileRows, b.rows) - 1;

  // The block's kv range [lo, hi): the union of its rows' visible positions, cut to its chunk.
  const int window_left = p.window_left;
  int lo = VisibleRange<Shape>(b.row_begin, b.kv.len, b.q_len, window_left).lo;
  int hi = VisibleRange<Shape>(b.row_last, b.kv.len, b.q_len, window_left).hi + 1;
  if (b.chunks > 1) {
    const long long base = KvBase(b.kv.len, b.q_len, window_left, kTileKv);
    const long long chunk_lo = base + static_cast<long long>(b.chunk) * schedule.chunk_tokens;
    const long long chunk_hi = chunk_lo + schedule.chunk_tokens;
    lo = static_cast<int>(max(static_cast<long long>(lo), min(chunk_lo, static_cast<long long>(b.kv.len))));
    hi = static_cast<int>(min(static_cast<long long>(hi), chunk_hi));
  }
  b.first_tile = lo - lo % kTileKv;  // lo >= 0
  b.num_tiles = hi > lo ? (hi - b.first_tile + kTileKv - 1) / kTileKv : 0;
  return true;
}

// The end of a row tile's online softmax in both kernels, for a lane's two rows: the row's sum
// over its quad (the 4 lanes that share a row of the C fragment), the factor that normalizes O,
// and the log2-sum-exp (a factor of 0 and -inf for a row that saw nothing).
__device__ __forceinline__ void FinishRows(const float (&m)[2], const float (&l)[2], float (&inv)[2],
                                           float (&lse2)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[i] = sum > 0.f ? 1.f / sum : 0.f;
    lse2[i] = sum > 0.f ? m[i] + log2f(sum) : attention::NegativeInfinity();
  }
}

}  // namespace detail
}  // namespace prefill
}  // namespace kiln
