// The page tables of kiln-bench's decode cases: the definitions' constraints are enforced with
// messages that name the axis, every request owns its own pages of a shuffled pool, positions
// map to the right cache rows, and append's tokens are the last positions of each request.
#include "bench/op/paged_kv_table.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

namespace kiln::bench {
namespace {

ShapeAxes Table(int64_t batch, int64_t kv_len, int64_t page_size, int64_t num_pages, int64_t nnz_pages,
                int64_t indptr_len) {
  return {{"batch", batch},         {"kv_len", kv_len},       {"page_size", page_size},
          {"num_pages", num_pages}, {"nnz_pages", nnz_pages}, {"indptr_len", indptr_len}};
}

std::string ErrorOf(const ShapeAxes& shape) {
  auto s = PagedKvShapeOf(shape, "batch_decode");
  if (s.ok()) return "(accepted)";
  CHECK(s.status().code() == StatusCode::kInvalidArgument);
  return s.status().message();
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("decode page tables: the definitions' constraints, named when broken", "[bench]") {
  auto s = PagedKvShapeOf(Table(16, 32768, 16, 32768, 32768, 17), "batch_decode");
  REQUIRE(s.ok());
  CHECK(s->pages_per_request == 2048);
  CHECK(s->last_page_len == 16);
  CHECK(s->tokens() == 16 * 32768);

  auto odd = PagedKvShapeOf(Table(3, 37, 4, 40, 30, 4), "x");
  REQUIRE(odd.ok());
  CHECK(odd->pages_per_request == 10);
  CHECK(odd->last_page_len == 1);

  CHECK(Contains(ErrorOf(Table(16, 32768, 16, 32768, 32768, 16)), "indptr_len=16 must be batch + 1 = 17"));
  CHECK(Contains(ErrorOf(Table(16, 32768, 16, 32768, 32767, 17)),
                 "nnz_pages=32767 must be batch * ceil(kv_len / page_size) = 32768"));
  CHECK(Contains(ErrorOf(Table(16, 32768, 16, 1000, 32768, 17)), "num_pages=1000 must be at least nnz_pages=32768"));
  CHECK(Contains(ErrorOf(Table(1, int64_t{1} << 32, 256, 1 << 24, 1 << 24, 2)), "positions must fit int32"));
  CHECK(Contains(ErrorOf({{"batch", 1}}), "batch_decode: the case has no axis kv_len"));
}

TEST_CASE("decode page tables: each request owns distinct pages of a shuffled pool", "[bench]") {
  auto s = PagedKvShapeOf(Table(4, 50, 8, 40, 28, 5), "batch_decode");
  REQUIRE(s.ok());
  const auto indptr = KvIndptr(*s);
  CHECK(indptr == std::vector<int32_t>{0, 7, 14, 21, 28});
  CHECK(KvLastPageLen(*s) == std::vector<int32_t>(4, 2));  // 50 = 6 * 8 + 2

  const auto indices = KvIndices(*s, 7);
  REQUIRE(indices.size() == 28);
  const std::set<int32_t> distinct(indices.begin(), indices.end());
  CHECK(distinct.size() == 28);
  CHECK(*distinct.begin() >= 0);
  CHECK(*distinct.rbegin() < 40);
  CHECK(KvIndices(*s, 7) == indices);  // the seed decides
  CHECK(KvIndices(*s, 8) != indices);
  CHECK(!std::is_sorted(indices.begin(), indices.end()));  // scattered, not in order

  // Position 17 of request 2: its third page (17 / 8), slot 1.
  CHECK(CacheRow(*s, indices, 2, 17) == indices[2 * 7 + 2] * 8 + 1);
  // Every position of every request lands on its own cache row.
  std::set<int64_t> rows;
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t pos = 0; pos < 50; ++pos) rows.insert(CacheRow(*s, indices, b, pos));
  CHECK(rows.size() == 4 * 50);
}

TEST_CASE("append tokens: the last nnz / batch positions of each request", "[bench]") {
  auto s = PagedKvShapeOf(Table(3, 21, 4, 25, 18, 4), "append_paged_kv");
  REQUIRE(s.ok());
  auto t = AppendTokensFor(*s, 6, "append_paged_kv");
  REQUIRE(t.ok());
  CHECK(t->batch_indices == std::vector<int32_t>{0, 0, 1, 1, 2, 2});
  CHECK(t->positions == std::vector<int32_t>{19, 20, 19, 20, 19, 20});

  auto decode = AppendTokensFor(*s, 3, "append_paged_kv");  // one token per request: the last
  REQUIRE(decode.ok());
  CHECK(decode->positions == std::vector<int32_t>{20, 20, 20});

  auto prefill = AppendTokensFor(*s, 63, "append_paged_kv");  // every position
  REQUIRE(prefill.ok());
  CHECK(prefill->positions.front() == 0);
  CHECK(prefill->positions.back() == 20);

  CHECK(AppendTokensFor(*s, 7, "append_paged_kv").status().message() ==
        "append_paged_kv: nnz=7 must be a positive multiple of batch=3");
  CHECK(AppendTokensFor(*s, 66, "append_paged_kv").status().message() ==
        "append_paged_kv: nnz / batch = 22 new tokens per request exceed kv_len=21");
}

}  // namespace
}  // namespace kiln::bench
