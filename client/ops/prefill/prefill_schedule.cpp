#include "client/ops/prefill/prefill_schedule.h"

#include <algorithm>
#include <cmath>

#include "kiln/prefill/prefill_contract.h"

namespace kiln::client {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The KV positions a block of the rows [row0, row1) of a request loops over: the union of its
// queries' visible ranges.
int64_t TileSpan(const PrefillRequest& r, int64_t group, int64_t row0, int64_t row1, bool causal, int64_t window_left) {
  const int64_t first_query = row0 / group, last_query = (row1 - 1) / group;
  int64_t hi = r.kv_len;
  if (causal) hi = std::min(hi, r.kv_len - r.q_len + last_query + 1);
  int64_t lo = 0;
  if (window_left >= 0) lo = std::max<int64_t>(0, r.kv_len - r.q_len + first_query - window_left);
  return std::max<int64_t>(0, hi - lo);
}

}  // namespace

int64_t ChoosePrefillTileRows(const std::vector<PrefillRequest>& requests, int64_t group, int64_t head_dim) {
  const int64_t preferred = prefill::DefaultTileRows(static_cast<int>(head_dim));
  if (preferred == prefill::kTileRows) return preferred;
  for (const PrefillRequest& r : requests)
    if (r.q_len * group > prefill::kTileRows) return preferred;
  return prefill::kTileRows;
}

PrefillSchedule SchedulePrefill(const std::vector<PrefillRequest>& requests, int64_t group, int64_t num_kv_heads,
                                int64_t head_dim, bool causal, int64_t window_left, int num_sms) {
  PrefillSchedule s;
  const int64_t batch = static_cast<int64_t>(requests.size());
  const int64_t tile_rows = ChoosePrefillTileRows(requests, group, head_dim);
  const int64_t tile_kv = prefill::TileKv(static_cast<int>(head_dim), static_cast<int>(tile_rows));
  s.tile_rows = tile_rows;
  s.slots = static_cast<int64_t>(PrefillBlocksPerSm(tile_rows)) * std::max(num_sms, 1);
  std::vector<int64_t> tiles(requests.size());
  int64_t longest_kv = 0;
  for (size_t b = 0; b < requests.size(); ++b) {
    const PrefillRequest& r = requests[b];
    const int64_t rows = r.q_len * group;
    tiles[b] = CeilDiv(rows, tile_rows);
    s.row_tiles += tiles[b];
    s.tiles_per_request = std::max(s.tiles_per_request, tiles[b]);
    for (int64_t t = 0; t < tiles[b]; ++t)
      s.tile_pairs += static_cast<double>(
          TileSpan(r, group, t * tile_rows, std::min(rows, (t + 1) * tile_rows), causal, window_left));
    if (tiles[b] > 0) longest_kv = std::max(longest_kv, r.kv_len);
  }

  // No two items of one head share K/V rows when no request has two row tiles (its items are
  // then KV chunks, disjoint): the blocks in flight had better read all heads of the same rows.
  // Only the mma.sync kernel (64-row tiles) reads it; the Hopper kernel keeps blockIdx.y.
  s.heads_fastest = s.tiles_per_request <= 1 && tile_rows == prefill::kTileRows;

  if (batch > prefill::kMaxListedBatch) {
    s.listed = false;
    s.num_items = batch * s.tiles_per_request;
    return s;
  }

  // The chunk: none unless the tiles leave the GPU short and some KV is long enough to cut.
  int64_t chunk = 0;
  if (s.row_tiles * num_kv_heads < s.slots && longest_kv >= 2 * kPrefillMinChunkTokens) {
    const double share = s.tile_pairs * static_cast<double>(num_kv_heads) / static_cast<double>(s.slots);
    chunk = std::max<int64_t>(kPrefillMinChunkTokens,
                              CeilDiv(static_cast<int64_t>(std::ceil(share)), tile_kv) * tile_kv);
    // kv_chunks is 16-bit.
    chunk = std::max(chunk, CeilDiv(CeilDiv(longest_kv, 65535), tile_kv) * tile_kv);
  }

  s.item_begin.assign(static_cast<size_t>(batch) + 1, 0);
  s.kv_chunks.assign(static_cast<size_t>(batch), 1);
  int64_t items = 0;
  for (size_t b = 0; b < requests.size(); ++b) {
    const PrefillRequest& r = requests[b];
    int64_t chunks = 1;
    if (chunk > 0 && tiles[b] > 0) {
      const int64_t base = prefill::KvBase(r.kv_len, r.q_len, static_cast<int>(window_left), static_cast<int>(tile_kv));
      chunks = std::max<int64_t>(1, CeilDiv(r.kv_len - base, chunk));
    }
    s.kv_chunks[b] = static_cast<uint16_t>(chunks);
    if (chunks > 1) {
      s.split = true;
      s.merge_max_q_len = std::max(s.merge_max_q_len, r.q_len);
    }
    s.item_begin[b] = static_cast<int32_t>(items);
    items += tiles[b] * chunks;
  }
  s.item_begin[static_cast<size_t>(batch)] = static_cast<int32_t>(items);
  s.num_items = items;
  s.chunk_tokens = s.split ? chunk : 0;
  if (!s.split) std::fill(s.kv_chunks.begin(), s.kv_chunks.end(), 1);
  return s;
}

std::string DescribePrefillSchedule(const PrefillSchedule& s, int64_t batch) {
  std::string text = "batch " + std::to_string(batch) + ", " + std::to_string(s.row_tiles) + " row tiles of " +
                     std::to_string(s.tile_rows) + " rows on " + std::to_string(s.slots) + " slots: ";
  if (!s.listed)
    text += "dense mapping (" + std::to_string(s.num_items) + " items, " + std::to_string(s.tiles_per_request) +
            " per request), not split";
  else if (!s.split) text += std::to_string(s.num_items) + " items, not split";
  else
    text += "split into " + std::to_string(s.num_items) + " items (KV chunks of " + std::to_string(s.chunk_tokens) +
            " positions)";
  if (s.heads_fastest) text += "; blocks kv-head-fastest";
  return text;
}

}  // namespace kiln::client
