#include "bench/op/paged_kv_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "bench/op/host_parallel.h"
#include "client/core/api/invalid_argument.h"

namespace kiln::bench {

using client::InvalidArgument;

StatusOr<PagedKvShape> PagedKvShapeOf(const ShapeAxes& shape, std::string_view routine) {
  for (const char* axis : {"batch", "kv_len", "page_size", "num_pages", "nnz_pages", "indptr_len"})
    if (AxisValue(shape, axis) < 1) return InvalidArgument(routine, std::string("the case has no axis ") + axis);
  PagedKvShape s;
  s.batch = AxisValue(shape, "batch");
  s.kv_len = AxisValue(shape, "kv_len");
  s.page_size = AxisValue(shape, "page_size");
  s.num_pages = AxisValue(shape, "num_pages");
  s.nnz_pages = AxisValue(shape, "nnz_pages");
  const int64_t indptr_len = AxisValue(shape, "indptr_len");
  if (indptr_len != s.batch + 1)
    return InvalidArgument(routine, "indptr_len=" + std::to_string(indptr_len) +
                                        " must be batch + 1 = " + std::to_string(s.batch + 1));
  constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
  if (s.kv_len > kMaxId)
    return InvalidArgument(routine, "kv_len=" + std::to_string(s.kv_len) + ": positions must fit int32");
  s.pages_per_request = (s.kv_len + s.page_size - 1) / s.page_size;
  s.last_page_len = s.kv_len - (s.pages_per_request - 1) * s.page_size;
  if (s.pages_per_request > kMaxId / s.batch)
    return InvalidArgument(routine, "batch=" + std::to_string(s.batch) + " requests of " +
                                        std::to_string(s.pages_per_request) +
                                        " pages do not fit int32 page table entries");
  if (s.nnz_pages != s.batch * s.pages_per_request)
    return InvalidArgument(
        routine, "nnz_pages=" + std::to_string(s.nnz_pages) +
                     " must be batch * ceil(kv_len / page_size) = " + std::to_string(s.batch * s.pages_per_request));
  if (s.num_pages < s.nnz_pages)
    return InvalidArgument(routine, "num_pages=" + std::to_string(s.num_pages) +
                                        " must be at least nnz_pages=" + std::to_string(s.nnz_pages));
  if (s.num_pages > kMaxId)
    return InvalidArgument(routine, "num_pages=" + std::to_string(s.num_pages) + ": page ids must fit int32");
  return s;
}

std::vector<int32_t> KvIndptr(const PagedKvShape& s) {
  std::vector<int32_t> indptr(static_cast<size_t>(s.batch + 1));
  for (int64_t b = 0; b <= s.batch; ++b) indptr[static_cast<size_t>(b)] = static_cast<int32_t>(b * s.pages_per_request);
  return indptr;
}

std::vector<int32_t> KvLastPageLen(const PagedKvShape& s) {
  return std::vector<int32_t>(static_cast<size_t>(s.batch), static_cast<int32_t>(s.last_page_len));
}

std::vector<int32_t> KvIndices(const PagedKvShape& s, uint64_t seed) {
  std::vector<int32_t> pool(static_cast<size_t>(s.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(static_cast<size_t>(s.nnz_pages));
  return pool;
}

int64_t CacheRow(const PagedKvShape& s, const std::vector<int32_t>& indices, int64_t b, int64_t pos) {
  const int64_t page = indices[static_cast<size_t>(b * s.pages_per_request + pos / s.page_size)];
  return page * s.page_size + pos % s.page_size;
}

StatusOr<AppendTokens> AppendTokensFor(const PagedKvShape& s, int64_t nnz, std::string_view routine) {
  if (nnz < 1 || nnz % s.batch != 0)
    return InvalidArgument(routine, "nnz=" + std::to_string(nnz) +
                                        " must be a positive multiple of batch=" + std::to_string(s.batch));
  const int64_t per = nnz / s.batch;
  if (per > s.kv_len)
    return InvalidArgument(routine, "nnz / batch = " + std::to_string(per) +
                                        " new tokens per request exceed kv_len=" + std::to_string(s.kv_len));
  AppendTokens t;
  t.batch_indices.resize(static_cast<size_t>(nnz));
  t.positions.resize(static_cast<size_t>(nnz));
  for (int64_t i = 0; i < nnz; ++i) {
    t.batch_indices[static_cast<size_t>(i)] = static_cast<int32_t>(i / per);
    t.positions[static_cast<size_t>(i)] = static_cast<int32_t>(s.kv_len - per + i % per);
  }
  return t;
}

double RegionSign(int64_t b, int64_t region, int64_t h, int64_t d) {
  uint64_t x = static_cast<uint64_t>((((b * 1000003 + region) * 1009 + h) * 1013 + d));
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (x & 1) ? 1.0 : -1.0;
}

void FillPagedKv(const PagedKvShape& table, int64_t kv_heads, int64_t head_dim, std::mt19937_64& rng,
                 HostTensor* indptr_t, HostTensor* indices_t, HostTensor* last_t, HostTensor* k, HostTensor* v) {
  const std::vector<int32_t> indptr = KvIndptr(table), last = KvLastPageLen(table);
  const std::vector<int32_t> indices = KvIndices(table, rng());
  for (size_t i = 0; i < indptr.size(); ++i) indptr_t->Set(i, indptr[i]);
  for (size_t i = 0; i < indices.size(); ++i) indices_t->Set(i, indices[i]);
  for (size_t i = 0; i < last.size(); ++i) last_t->Set(i, last[i]);

  const int64_t row = kv_heads * head_dim;  // elements of one cache slot
  std::vector<uint64_t> seeds(static_cast<size_t>(table.nnz_pages));
  for (auto& seed : seeds) seed = rng();
  ForEachChunk(static_cast<size_t>(table.nnz_pages), 64, [&](size_t, size_t begin, size_t end) {
    for (size_t e = begin; e < end; ++e) {
      std::mt19937_64 gen(seeds[e]);
      std::uniform_real_distribution<double> noise(-0.5, 0.5);
      const int64_t b = static_cast<int64_t>(e) / table.pages_per_request;
      const int64_t logical = static_cast<int64_t>(e) % table.pages_per_request;
      const int64_t page = indices[e];
      for (int64_t slot = 0; slot < table.page_size; ++slot) {
        const int64_t pos = logical * table.page_size + slot;
        const size_t base = static_cast<size_t>((page * table.page_size + slot) * row);
        for (int64_t h = 0; h < kv_heads; ++h)
          for (int64_t d = 0; d < head_dim; ++d) {
            const size_t i = base + static_cast<size_t>(h * head_dim + d);
            if (pos >= table.kv_len) {
              k->Set(i, NAN);
              v->Set(i, NAN);
            } else {
              v->Set(i, noise(gen) + RegionSign(b, pos / kVRegion, h, d));
            }
          }
      }
    }
  });
  std::vector<bool> owned(static_cast<size_t>(table.num_pages), false);
  for (int32_t page : indices) owned[static_cast<size_t>(page)] = true;
  const size_t page_elements = static_cast<size_t>(table.page_size * row);
  for (int64_t page = 0; page < table.num_pages; ++page) {
    if (owned[static_cast<size_t>(page)]) continue;
    const size_t base = static_cast<size_t>(page) * page_elements;
    for (size_t i = base; i < base + page_elements; ++i) {
      k->Set(i, NAN);
      v->Set(i, NAN);
    }
  }
}

}  // namespace kiln::bench
