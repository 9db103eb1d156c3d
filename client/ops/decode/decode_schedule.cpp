#include "client/ops/decode/decode_schedule.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "client/core/api/auto_number_control.h"
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

// Calls f(positions) for each item of a schedule with chunk `chunk` (0: one item per request),
// in grid order.
template <typename F>
void ForEachItem(const std::vector<int64_t>& kv_len, const std::vector<int64_t>& begin, int64_t chunk, F f) {
  for (size_t b = 0; b < kv_len.size(); ++b) {
    if (chunk == 0) {
      f(kv_len[b] - begin[b]);
      continue;
    }
    for (int64_t c = begin[b] / chunk; c * chunk < kv_len[b]; ++c)
      f(std::min(kv_len[b], (c + 1) * chunk) - std::max(begin[b], c * chunk));
  }
}

int64_t Span(const std::vector<int64_t>& kv_len, const std::vector<int64_t>& begin, int64_t num_kv_heads, int64_t chunk,
             int64_t slots) {
  // An item's kv heads are consecutive blocks: with slots a multiple of the heads (8 on 264),
  // groups of num_kv_heads slots start and finish together, so items are simulated per group.
  const int64_t groups = std::max<int64_t>(1, slots / num_kv_heads);
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at;
  for (int64_t g = 0; g < groups; ++g) free_at.push(0);
  int64_t span = 0;
  ForEachItem(kv_len, begin, chunk, [&](int64_t positions) {
    const int64_t end = free_at.top() + positions + kDecodeBlockOverheadTokens;
    free_at.pop();
    free_at.push(end);
    span = std::max(span, end);
  });
  return span;
}

// Whether chunks of `chunk` positions make a split the kernels can run: they cut some request
// (fewer items would mean none is cut) and the items fit the schedule's uint16 table.
bool CutsWithin(const std::vector<int64_t>& kv_len, const std::vector<int64_t>& begin, int64_t max_len, int64_t chunk,
                int64_t* items) {
  if (chunk >= max_len) return false;
  *items = CountItems(kv_len, begin, chunk);
  return *items != static_cast<int64_t>(kv_len.size()) && *items <= 65535;
}

// The rule (ScheduleBatchDecode's comment): the candidate chunk of least estimated span, 0 for no
// split.
int64_t ChooseChunk(const std::vector<int64_t>& kv_len, const std::vector<int64_t>& begin, int64_t num_kv_heads,
                    const DecodeSchedule& s, int64_t granule, int64_t max_len) {
  const int64_t batch = static_cast<int64_t>(kv_len.size());
  const int64_t min_chunk = CeilDiv(kDecodeMinChunkTokens, granule) * granule;
  const int64_t whole = CeilDiv(max_len, granule);  // in granules: no request is cut
  const int64_t balanced = CeilDiv(s.total_kv_tokens * num_kv_heads, s.slots);

  std::vector<int64_t> candidates;  // chunk sizes, each a multiple of granule and >= min_chunk
  if (batch * num_kv_heads < s.slots) {
    // The smallest chunk (in granules) whose items fit one wave; `whole` always does here.
    int64_t lo = min_chunk / granule, hi = std::max(whole, lo);
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (CountItems(kv_len, begin, mid * granule) * num_kv_heads <= s.slots) hi = mid;
      else lo = mid + 1;
    }
    candidates.push_back(lo * granule);
  }
  for (int64_t share = balanced, i = 0; i < 4; share /= 2, ++i)
    candidates.push_back(std::max(min_chunk, CeilDiv(share, granule) * granule));
  std::sort(candidates.begin(), candidates.end(), std::greater<>());  // ties go to the larger chunk
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  const int64_t groups = std::max<int64_t>(1, s.slots / num_kv_heads);  // as Span simulates them
  const int64_t unsplit = Span(kv_len, begin, num_kv_heads, 0, s.slots);
  int64_t chunk = 0, best = unsplit * (100 - kDecodeSplitGainPercent) / 100;
  for (int64_t c : candidates) {
    int64_t items = 0;
    if (!CutsWithin(kv_len, begin, max_len, c, &items)) continue;
    // No span is below the groups' even share of the work: skip the simulation when that
    // cannot beat the best so far.
    const int64_t floor = CeilDiv(s.total_kv_tokens + items * kDecodeBlockOverheadTokens, groups);
    if (floor + kDecodeMergeOverheadTokens >= best) continue;
    const int64_t cost = Span(kv_len, begin, num_kv_heads, c, s.slots) + kDecodeMergeOverheadTokens;
    if (cost < best) {
      best = cost;
      chunk = c;
    }
  }
  return chunk;
}

}  // namespace

int64_t WindowBegin(int64_t kv_len, int64_t window_left) {
  return window_left >= 0 ? std::max<int64_t>(0, kv_len - 1 - window_left) : 0;
}

int64_t EstimateDecodeSpan(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads, int64_t chunk,
                           int64_t slots) {
  std::vector<int64_t> begin(kv_len.size());
  for (size_t b = 0; b < kv_len.size(); ++b) begin[b] = WindowBegin(kv_len[b], window_left);
  return Span(kv_len, begin, num_kv_heads, chunk, slots);
}

DecodeSchedule ScheduleBatchDecode(const std::vector<int64_t>& kv_len, int64_t window_left, int64_t num_kv_heads,
                                   int64_t page_size, int num_sms, int64_t forced_chunk) {
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
  const int64_t max_len = *std::max_element(kv_len.begin(), kv_len.end());
  int64_t chunk = 0;
  if (forced_chunk > 0) {
    int64_t items = 0;
    const int64_t c = CeilDiv(forced_chunk, granule) * granule;
    if (CutsWithin(kv_len, begin, max_len, c, &items)) chunk = c;
  } else {
    chunk = ChooseChunk(kv_len, begin, num_kv_heads, s, granule, max_len);
  }
  if (chunk == 0) return s;

  s.split = true;
  s.num_items = CountItems(kv_len, begin, chunk);
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

int64_t DecodeChunkFromEnvironment() {
  static const int64_t value = AutoNumberFromEnvironment(
      {"KILN_DECODE_CHUNK", kDecodeTileTokens, 1 << 20, "auto or a number of positions from 64 to 1048576"});
  return value;
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
