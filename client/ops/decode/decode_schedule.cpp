#include "client/ops/decode/decode_schedule.h"

#include <algorithm>

#include "kiln/decode/decode_contract.h"

namespace kiln::client {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Items of a chunk size: request b covers chunks floor(begin_b / C) .. ceil(len_b / C) - 1.
int64_t CountItems(const std::vector<int64_t>& kv_len, const std::vector<int64_t>& begin, int64_t chunk) {
  int64_t items = 0;
  for (size_t b = 0; b < kv_len.size(); ++b) items += CeilDiv(kv_len[b], chunk) - begin[b] / chunk;
  return items;
}

}  // namespace

int64_t WindowBegin(int64_t kv_len, int64_t window_left) {
  return window_left >= 0 ? std::max<int64_t>(0, kv_len - 1 - window_left) : 0;
}

DecodeSchedule ScheduleBatchDecode(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads,
                                   int64_t page_size, int num_sms) {
  DecodeSchedule s;
  const int64_t batch = static_cast<int64_t>(kv_len.size());
  s.num_items = batch;
  s.slots = static_cast<int64_t>(kDecodeBlocksPerSm) * std::max(num_sms, 1);
  std::vector<int64_t> begin(kv_len.size());
  for (size_t b = 0; b < kv_len.size(); ++b) {
    begin[b] = WindowBegin(kv_len[b], window_left);
    s.max_kv_tokens = std::max(s.max_kv_tokens, kv_len[b] - begin[b]);
    s.total_kv_tokens += kv_len[b] - begin[b];
  }
  if (batch == 0 || batch > decode::kMaxSplitBatch) return s;

  const int64_t granule = std::max(kDecodeTileTokens, page_size);
  const int64_t min_chunk = CeilDiv(kDecodeMinChunkTokens, granule) * granule;
  const int64_t max_len = *std::max_element(kv_len.begin(), kv_len.end());
  const int64_t whole = CeilDiv(max_len, granule);  // in granules: no request is cut
  const int64_t balanced = CeilDiv(s.total_kv_tokens * num_kv_heads, s.slots);

  int64_t chunk = 0;
  if (batch * num_kv_heads < s.slots) {
    // The smallest chunk (in granules) whose items fit one wave; `whole` always does here.
    int64_t lo = min_chunk / granule, hi = std::max(whole, lo);
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (CountItems(kv_len, begin, mid * granule) * num_kv_heads <= s.slots) hi = mid;
      else lo = mid + 1;
    }
    chunk = lo * granule;
    if (chunk > 2 * std::max(balanced, kDecodeMinChunkTokens)) chunk = 0;  // skewed: rule 2
  }
  if (chunk == 0) chunk = std::max(min_chunk, CeilDiv(balanced, granule) * granule);
  if (chunk >= max_len) return s;
  const int64_t items = CountItems(kv_len, begin, chunk);
  if (items == batch || items > 65535) return s;  // nothing cut; or beyond the table's range

  s.split = true;
  s.num_items = items;
  s.chunk_tokens = chunk;
  s.item_begin.resize(kv_len.size() + 1);
  int64_t offset = 0;
  for (size_t b = 0; b < kv_len.size(); ++b) {
    s.item_begin[b] = static_cast<uint16_t>(offset);
    offset += CeilDiv(kv_len[b], chunk) - begin[b] / chunk;
  }
  s.item_begin[kv_len.size()] = static_cast<uint16_t>(offset);
  return s;
}

std::string DescribeSchedule(const DecodeSchedule& s, int64_t batch, int64_t page_size) {
  std::string text = "batch " + std::to_string(batch) + ", " + std::to_string(s.total_kv_tokens) +
                     " attended positions (longest " + std::to_string(s.max_kv_tokens) + ") on " +
                     std::to_string(s.slots) + " block slots: ";
  if (!s.split) return text + "not split (one item per request)";
  return text + "split into " + std::to_string(s.num_items) + " items of up to " + std::to_string(s.chunk_tokens) +
         " positions (" + std::to_string(s.chunk_tokens / page_size) + " pages)";
}

}  // namespace kiln::client
