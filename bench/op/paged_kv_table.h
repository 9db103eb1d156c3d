// The paged KV cache of kiln-bench's decode cases (batch_decode, append_paged_kv), built from
// the axes of their trace definitions as the definitions' notes describe it: every request
// holds kv_len positions in ceil(kv_len / page_size) pages, taken in order from a shuffled
// pool of num_pages page ids (so consecutive pages of a request are scattered through the
// cache, as in a server that has run a while), its last page holding the rest. Pure host
// code, checked on the CPU (tests/bench/op/paged_kv_table_test.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "bench/op/host_tensor.h"
#include "bench/op/test_list.h"
#include "kiln/status.h"

namespace kiln::bench {

struct PagedKvShape {
  int64_t batch = 0;
  int64_t kv_len = 0;  // every request's KV length
  int64_t page_size = 0;
  int64_t num_pages = 0;  // pages in the cache
  int64_t nnz_pages = 0;  // pages the requests own: batch * pages_per_request
  int64_t pages_per_request = 0;
  int64_t last_page_len = 0;  // 1..page_size

  int64_t tokens() const { return batch * kv_len; }
};

// The table axes of a case (batch, kv_len, page_size, num_pages, nnz_pages, indptr_len),
// checked against the definitions' constraints: indptr_len == batch + 1, nnz_pages ==
// batch * ceil(kv_len / page_size), num_pages >= nnz_pages, and page ids that fit int32.
// INVALID_ARGUMENT "<routine>: <axis>=<value> ..." otherwise.
StatusOr<PagedKvShape> PagedKvShapeOf(const ShapeAxes& shape, std::string_view routine);

std::vector<int32_t> KvIndptr(const PagedKvShape& s);       // [batch + 1]: b * pages_per_request
std::vector<int32_t> KvLastPageLen(const PagedKvShape& s);  // [batch]: last_page_len each
// [nnz_pages]: the first nnz_pages ids of a shuffle of [0, num_pages) (all distinct); the same
// seed gives the same table.
std::vector<int32_t> KvIndices(const PagedKvShape& s, uint64_t seed);

// The cache row of position `pos` of request `b`: page * page_size + slot, with page =
// indices[b * pages_per_request + pos / page_size] and slot = pos % page_size. Multiply by
// num_kv_heads * head_dim for the element offset in a dense [num_pages, page_size, heads, dim]
// cache.
int64_t CacheRow(const PagedKvShape& s, const std::vector<int32_t>& indices, int64_t b, int64_t pos);

// append_paged_kv's new tokens, as the definition's note says: the last nnz / batch positions
// of every request (a decode step appends one token per request, a prefill all of them), in
// request order. INVALID_ARGUMENT unless batch divides nnz and 1 <= nnz / batch <= kv_len.
struct AppendTokens {
  std::vector<int32_t> batch_indices;  // [nnz]
  std::vector<int32_t> positions;      // [nnz]
};
StatusOr<AppendTokens> AppendTokensFor(const PagedKvShape& s, int64_t nnz, std::string_view routine);

// The attention routines' V (batch_decode, batch_prefill_*): noise plus +1 or -1 by (request,
// region of kVRegion positions, head, dim), a hash, so that no two regions move the output alike
// and a lost or doubled region (a split-KV chunk) moves it by about 1 / regions.
constexpr int64_t kVRegion = 256;
double RegionSign(int64_t b, int64_t region, int64_t h, int64_t d);

// A paged case's table and cache, K already random: the page table written into indptr, indices
// and last (from KvIndptr, KvIndices(rng()), KvLastPageLen); in the owned slots V = uniform(-0.5,
// 0.5) + RegionSign; every slot no position owns (pages outside the table, the tail of each last
// page) NaN in K and V, so a kernel that reads one fails its check. On all cores.
void FillPagedKv(const PagedKvShape& table, int64_t kv_heads, int64_t head_dim, std::mt19937_64& rng,
                 HostTensor* indptr, HostTensor* indices, HostTensor* last, HostTensor* k, HostTensor* v);

}  // namespace kiln::bench
