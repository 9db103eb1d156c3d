#include "bench/op/paged_kv_table.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <string>

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

}  // namespace kiln::bench
