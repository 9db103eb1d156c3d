// The decode family's host side without a GPU: BatchDecodePlan's argument checks and its
// split-KV schedule (ScheduleBatchDecode for chosen SM counts), batch_decode's and
// append_paged_kv's tensor checks with their exact messages, the vector width append chooses,
// and the C ABI's refusals. Fake device addresses, never dereferenced: validation fails, or
// only the pure checking step runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "client/ops/decode/decode_call.h"
#include "client/ops/decode/decode_plan.h"
#include "client/ops/decode/decode_schedule.h"
#include "kiln/ops/decode.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::ScheduleBatchDecode;
using kiln::ops::BatchDecodePlan;
using kiln::ops::DecodeOptions;

constexpr uintptr_t kBase = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kSpan = uintptr_t{1} << 32;
void* At(int slot, uintptr_t offset = 0) { return reinterpret_cast<void*>(kBase + slot * kSpan + offset); }

using kiln::testing::RequireInvalid;

// A page table of requests with these KV lengths: pages in order, page size `page`.
struct Table {
  std::vector<int32_t> indptr{0}, last;
  Table(const std::vector<int64_t>& lens, int64_t page) {
    for (int64_t len : lens) {
      indptr.push_back(indptr.back() + static_cast<int32_t>((len + page - 1) / page));
      last.push_back(static_cast<int32_t>(len - (len - 1) / page * page));
    }
  }
};

kiln::StatusOr<BatchDecodePlan> Plan(const Table& t, int64_t qo, int64_t kv, int64_t dim, int64_t page,
                                     DType dtype = DType::kBFloat16, DecodeOptions options = {}, int sms = 132) {
  return kiln::client::PlanBatchDecode(t.indptr.data(), t.last.data(), static_cast<int64_t>(t.last.size()), qo, kv, dim,
                                       page, dtype, options, 0, sms, "plan");
}

TEST_CASE("BatchDecodePlan refuses unsupported shapes, dtypes and page tables by name",
          "[client][decode][validation]") {
  const Table t({100, 17}, 16);
  const int32_t* ip = t.indptr.data();
  const int32_t* lp = t.last.data();
  auto create = [&](int64_t batch, int64_t qo, int64_t kv, int64_t dim, int64_t page, DType dtype,
                    DecodeOptions options = {}) {
    return BatchDecodePlan::Create(ip, lp, batch, qo, kv, dim, page, dtype, options).status();
  };
  RequireInvalid(create(2, 32, 8, 96, 16, DType::kBFloat16),
                 "kiln::ops::BatchDecodePlan::Create: head_dim: 96 is not supported; supported: 64, 128, 256");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kFloat32), "dtype: fp32 is not supported; supported: fp16, bf16");
  RequireInvalid(create(2, 24, 8, 128, 16, DType::kBFloat16),
                 "num_qo_heads: 24 query heads over 8 kv heads is a group of 3; supported groups "
                 "(num_qo_heads / num_kv_heads): 1, 2, 4, 8");
  RequireInvalid(create(2, 128, 8, 128, 16, DType::kBFloat16), "is a group of 16");
  RequireInvalid(create(2, 30, 8, 128, 16, DType::kBFloat16),
                 "num_qo_heads: 30 is not a positive multiple of num_kv_heads (8)");
  RequireInvalid(create(2, 32, 0, 128, 16, DType::kBFloat16), "num_kv_heads: expected 1 to 8192, found 0");
  RequireInvalid(create(2, 32, 8, 128, 24, DType::kBFloat16),
                 "page_size: 24 is not supported; supported: a power of two, 1 to 256");
  RequireInvalid(create(0, 32, 8, 128, 16, DType::kBFloat16),
                 "batch_size: expected at least 1 request, found 0 (an empty batch has nothing to decode");
  RequireInvalid(BatchDecodePlan::Create(nullptr, lp, 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "kv_indptr_host: NULL");
  RequireInvalid(BatchDecodePlan::Create(ip, nullptr, 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "kv_last_page_len_host: NULL");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kBFloat16, {.sm_scale = -1}),
                 "options.sm_scale: expected 0 (1/sqrt(head_dim)) or a finite value > 0, found -1");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kBFloat16, {.sm_scale = NAN}), "options.sm_scale");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kBFloat16, {.logits_soft_cap = -30}),
                 "options.logits_soft_cap: expected 0 (off) or a finite value > 0, found -30");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kBFloat16, {.logits_soft_cap = 1e-300}),
                 "is not a positive finite float");
  RequireInvalid(create(2, 32, 8, 128, 16, DType::kBFloat16, {.window_left = -2}),
                 "options.window_left: expected -1 (no window) or >= 0, found -2");

  std::vector<int32_t> indptr = {0, 7, 7}, last = {16, 1};
  RequireInvalid(BatchDecodePlan::Create(indptr.data(), last.data(), 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "kv_indptr_host: request 1 has 0 pages (kv_indptr[1] = 7, kv_indptr[2] = 7); every request needs "
                 "at least one page");
  indptr = {0, 7, 8};
  last = {17, 1};
  RequireInvalid(BatchDecodePlan::Create(indptr.data(), last.data(), 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "kv_last_page_len_host: request 0's last page holds 17 tokens; expected 1 to page_size (16)");
  last = {0, 1};
  RequireInvalid(BatchDecodePlan::Create(indptr.data(), last.data(), 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "request 0's last page holds 0 tokens");
  indptr = {-1, 7, 8};
  last = {1, 1};
  RequireInvalid(BatchDecodePlan::Create(indptr.data(), last.data(), 2, 32, 8, 128, 16, DType::kBFloat16).status(),
                 "kv_indptr_host: kv_indptr[0] = -1 is negative");
}

TEST_CASE("a single long request is split across the GPU, many short ones are not", "[client][decode][schedule]") {
  // Llama-3.1-8B (8 kv heads) on an H200 (132 SMs: 264 block slots).
  auto one_long = ScheduleBatchDecode({100000}, -1, 8, 16, 132);
  CHECK(one_long.split);
  CHECK(one_long.slots == 264);
  CHECK(one_long.chunk_tokens == 3072);  // the smallest multiple of 64 with 8 * ceil(100000 / C) <= 264
  CHECK(one_long.num_items == 33);
  CHECK(one_long.num_items * 8 <= 264);
  CHECK(one_long.item_begin == std::vector<uint16_t>{0, 33});

  auto batch64 = ScheduleBatchDecode(std::vector<int64_t>(64, 8192), -1, 8, 16, 132);
  CHECK(!batch64.split);  // 512 (request, kv head) pairs already fill 264 slots
  CHECK(batch64.num_items == 64);
  CHECK(batch64.item_begin.empty());
  CHECK(!ScheduleBatchDecode(std::vector<int64_t>(256, 100), -1, 8, 16, 132).split);
  CHECK(!ScheduleBatchDecode(std::vector<int64_t>(8, 200), -1, 8, 16, 132).split);  // shorter than a chunk

  // 16 long requests (128 pairs): two chunks each fill one wave.
  auto batch16 = ScheduleBatchDecode(std::vector<int64_t>(16, 32768), -1, 8, 16, 132);
  CHECK(batch16.split);
  CHECK(batch16.chunk_tokens == 16384);
  CHECK(batch16.num_items == 32);
  auto batch1 = ScheduleBatchDecode({32768}, -1, 8, 16, 132);
  CHECK(batch1.split);
  CHECK(batch1.num_items * 8 <= 264);
  CHECK(batch1.num_items >= 28);
}

TEST_CASE("a skewed batch cuts its long requests to the balanced share", "[client][decode][schedule]") {
  std::vector<int64_t> lens(31, 2048);
  lens.insert(lens.begin() + 5, 32768);
  auto s = ScheduleBatchDecode(lens, -1, 8, 16, 132);
  REQUIRE(s.split);
  CHECK(s.chunk_tokens <= 4096);  // not 16384: one wave would leave the long request on 2 items
  CHECK(s.item_begin[6] - s.item_begin[5] == (32768 + s.chunk_tokens - 1) / s.chunk_tokens);
  CHECK(s.item_begin[1] - s.item_begin[0] == (2048 + s.chunk_tokens - 1) / s.chunk_tokens);
  // Many requests and one very long one: more pairs than slots, still split.
  std::vector<int64_t> many(300, 64);
  many.push_back(100000);
  auto t = ScheduleBatchDecode(many, -1, 8, 16, 132);
  CHECK(t.split);
  CHECK(t.item_begin[301] - t.item_begin[300] > 10);
  // Past kMaxSplitBatch requests nothing is split.
  std::vector<int64_t> huge(600, 64);
  huge.push_back(100000);
  CHECK(!ScheduleBatchDecode(huge, -1, 8, 16, 132).split);
}

TEST_CASE("a ragged batch is cut into items fine enough to even out its tail", "[client][decode][schedule]") {
  // 32 requests of 1..16384 positions (a fixed spread, longest 16000): the GPU's share per slot
  // is about half the longest request, so one item per request (or items of the balanced share,
  // which leave a second partial wave) would take about twice the balanced time.
  std::vector<int64_t> lens;
  for (int b = 0; b < 32; ++b) lens.push_back(1 + (b * 7919 + 355) % 16000);
  const int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  const int64_t slots = 264, heads = 8, balanced = (total * heads + slots - 1) / slots;
  auto s = ScheduleBatchDecode(lens, -1, heads, 16, 132);
  REQUIRE(s.split);
  INFO("chunk " << s.chunk_tokens << ", items " << s.num_items << ", balanced share " << balanced);
  CHECK(s.chunk_tokens <= balanced / 2);
  CHECK(s.num_items * heads > slots);  // several waves of small items, not one of large ones
  const int64_t chosen = kiln::client::EstimateDecodeSpan(lens, -1, heads, s.chunk_tokens, slots);
  CHECK(chosen < kiln::client::EstimateDecodeSpan(lens, -1, heads, 0, slots) * 7 / 10);
  CHECK(chosen < balanced * 5 / 4);
  // The estimate: one item per group of 8 slots, in order; the longest item bounds it below.
  CHECK(kiln::client::EstimateDecodeSpan({1000, 200}, -1, 8, 0, 264) ==
        1000 + kiln::client::kDecodeBlockOverheadTokens);
  CHECK(kiln::client::EstimateDecodeSpan({1000, 200}, -1, 8, 0, 8) ==
        1200 + 2 * kiln::client::kDecodeBlockOverheadTokens);  // one group: the items run one after the other
  CHECK(kiln::client::EstimateDecodeSpan({1000}, 499, 8, 256, 264) == 256 + kiln::client::kDecodeBlockOverheadTokens);
}

TEST_CASE("chunks are whole pages and tiles, cover the window only, and items add up", "[client][decode][schedule]") {
  for (int64_t page : {1, 16, 64, 128, 256}) {
    for (int64_t window : {-1, 0, 999, 50000}) {
      const std::vector<int64_t> lens = {1, 17, 1000, 100000, 64, 300};
      auto s = ScheduleBatchDecode(lens, window, 2, page, 132);
      INFO("page " << page << " window " << window);
      if (!s.split) {
        CHECK(s.num_items == 6);
        continue;
      }
      CHECK(s.chunk_tokens % std::max<int64_t>(64, page) == 0);
      CHECK(s.chunk_tokens >= kiln::client::kDecodeMinChunkTokens);
      REQUIRE(s.item_begin.size() == lens.size() + 1);
      CHECK(s.item_begin[0] == 0);
      CHECK(s.item_begin.back() == s.num_items);
      for (size_t b = 0; b < lens.size(); ++b) {
        const int64_t begin = kiln::client::WindowBegin(lens[b], window);
        const int64_t items = (lens[b] + s.chunk_tokens - 1) / s.chunk_tokens - begin / s.chunk_tokens;
        CHECK(s.item_begin[b + 1] - s.item_begin[b] == items);
        CHECK(items >= 1);
      }
    }
  }
  // A window of 1000 positions over 100000: only the window is scheduled.
  auto windowed = ScheduleBatchDecode({100000}, 999, 8, 16, 132);
  CHECK(windowed.max_kv_tokens == 1000);
  CHECK(windowed.total_kv_tokens == 1000);
}

TEST_CASE("a forced chunk (KILN_DECODE_CHUNK) replaces the choice where it can cut", "[client][decode][schedule]") {
  auto forced = ScheduleBatchDecode({32768}, -1, 8, 16, 132, 500);
  CHECK(forced.split);
  CHECK(forced.chunk_tokens == 512);  // rounded up to whole tiles
  CHECK(forced.num_items == 64);
  auto pages = ScheduleBatchDecode({32768}, -1, 8, 128, 132, 200);
  CHECK(pages.chunk_tokens == 256);  // whole pages of 128
  // Below the schedule's smallest chunk too: a diagnostic control may ask for it.
  CHECK(ScheduleBatchDecode({32768}, -1, 8, 16, 132, 64).num_items == 512);
  // Not split where the chunk cuts nothing, or where the items pass the table's range.
  CHECK(!ScheduleBatchDecode({32768}, -1, 8, 16, 132, 32768).split);
  CHECK(!ScheduleBatchDecode(std::vector<int64_t>(64, 8192), -1, 8, 16, 132, 8192).split);
  CHECK(!ScheduleBatchDecode({10000000}, -1, 8, 16, 132, 64).split);
  // A batch the rule leaves whole is split when forced.
  auto batch64 = ScheduleBatchDecode(std::vector<int64_t>(64, 8192), -1, 8, 16, 132, 4096);
  CHECK(batch64.split);
  CHECK(batch64.num_items == 128);
}

TEST_CASE("a plan sizes its workspace from its schedule and describes itself", "[client][decode][schedule]") {
  auto split = Plan(Table({100000}, 16), 32, 8, 128, 16);
  REQUIRE(split.ok());
  CHECK(split->split());
  CHECK(split->num_items() == 33);
  CHECK(split->chunk_pages() == 3072 / 16);
  // partial outputs fp32 [33, 32, 128], then partial lse fp32 [33, 32], each 256-byte aligned.
  CHECK(split->workspace_bytes() == 33 * 32 * 128 * 4 + 33 * 32 * 4 + 128);
  CHECK(split->Describe().find("split into 33 items of up to 3072 positions (192 pages)") != std::string::npos);
  auto whole = Plan(Table(std::vector<int64_t>(64, 8192), 16), 32, 8, 128, 16);
  REQUIRE(whole.ok());
  CHECK(!whole->split());
  CHECK(whole->workspace_bytes() == 0);
  CHECK(whole->chunk_pages() == 0);
  CHECK(whole->Describe().find("not split") != std::string::npos);
  const auto* state = kiln::client::DecodePlanAccess::Get(*whole);
  REQUIRE(state != nullptr);
  CHECK(state->logit_scale == Approx(1.0 / std::sqrt(128.0) * 1.4426950408889634));
  auto capped = Plan(Table({10}, 16), 8, 8, 64, 16, DType::kFloat16, {.sm_scale = 0.5, .logits_soft_cap = 30});
  REQUIRE(capped.ok());
  const auto* c = kiln::client::DecodePlanAccess::Get(*capped);
  CHECK(c->logit_scale == Approx(0.5 / 30));
  CHECK(c->cap_scale == Approx(30 * 1.4426950408889634));
}

// Valid arguments of batch_decode for a plan of `batch` requests of 100 positions, 32 / 8 heads,
// head_dim 128, page 16, bf16; tests break one thing at a time.
struct DecodeArgs {
  static constexpr int64_t kBatch = 4, kQo = 32, kKv = 8, kDim = 128, kPage = 16, kPages = 64;
  BatchDecodePlan plan;
  TensorView out = TensorView::Contiguous(At(1), DType::kBFloat16, {kBatch, kQo, kDim});
  TensorView lse = TensorView::Contiguous(At(2), DType::kFloat32, {kBatch, kQo});
  TensorView q = TensorView::Contiguous(At(3), DType::kBFloat16, {kBatch, kQo, kDim});
  TensorView k_cache = TensorView::Contiguous(At(4), DType::kBFloat16, {kPages, kPage, kKv, kDim});
  TensorView v_cache = TensorView::Contiguous(At(5), DType::kBFloat16, {kPages, kPage, kKv, kDim});
  TensorView indptr = TensorView::Contiguous(At(6), DType::kInt32, {kBatch + 1});
  TensorView indices = TensorView::Contiguous(At(7), DType::kInt32, {kBatch * 7});
  TensorView last = TensorView::Contiguous(At(8), DType::kInt32, {kBatch});
  void* workspace = At(9);
  size_t workspace_bytes = 0;

  explicit DecodeArgs(const std::vector<int64_t>& lens = std::vector<int64_t>(kBatch, 100))
      : plan(*Plan(Table(lens, kPage), kQo, kKv, kDim, kPage)) {
    workspace_bytes = plan.workspace_bytes();
  }
  kiln::Status Check() const {
    return kiln::client::CheckBatchDecode(plan, out, &lse, q, k_cache, v_cache, indptr, indices, last, workspace,
                                          workspace_bytes, "kiln::ops::batch_decode")
        .status();
  }
  kiln::Status Run() const {
    return kiln::ops::batch_decode(plan, out, &lse, q, k_cache, v_cache, indptr, indices, last, workspace,
                                   workspace_bytes);
  }
};

TEST_CASE("batch_decode accepts a valid call and passes the schedule to the kernel", "[client][decode][validation]") {
  DecodeArgs a;
  REQUIRE(a.Check().ok());
  auto call = kiln::client::CheckBatchDecode(a.plan, a.out, nullptr, a.q, a.k_cache, a.v_cache, a.indptr, a.indices,
                                             a.last, nullptr, 0, "api");
  REQUIRE(call.ok());
  CHECK(call->params.lse == nullptr);
  CHECK(call->params.k_page_stride == 16 * 8 * 128);
  CHECK(call->params.num_pages == 64);
  CHECK(call->params.num_qo_heads == 32);
  CHECK(call->params.window_left == -1);
  CHECK(call->params.num_indices == 28);
  CHECK(call->params.schedule.split == 0);
  CHECK(call->params.schedule.num_items == 4);

  DecodeArgs split({5000});  // one request: split, with a workspace
  split.out = TensorView::Contiguous(At(1), DType::kBFloat16, {1, 32, 128});
  split.q = TensorView::Contiguous(At(3), DType::kBFloat16, {1, 32, 128});
  split.lse = TensorView::Contiguous(At(2), DType::kFloat32, {1, 32});
  split.indptr = TensorView::Contiguous(At(6), DType::kInt32, {2});
  split.last = TensorView::Contiguous(At(8), DType::kInt32, {1});
  split.indices = TensorView::Contiguous(At(7), DType::kInt32, {313});
  REQUIRE(split.plan.split());
  auto split_call = kiln::client::CheckBatchDecode(split.plan, split.out, &split.lse, split.q, split.k_cache,
                                                   split.v_cache, split.indptr, split.indices, split.last,
                                                   split.workspace, split.workspace_bytes, "api");
  INFO(split_call.status().ToString());
  REQUIRE(split_call.ok());
  CHECK(split_call->params.schedule.split == 1);
  CHECK(split_call->params.schedule.item_begin[1] == split.plan.num_items());
  CHECK(split_call->params.partial_out == static_cast<float*>(split.workspace));
}

TEST_CASE("batch_decode refuses mismatched shapes, dtypes and layouts by name", "[client][decode][validation]") {
  {
    DecodeArgs a;
    a.q = TensorView::Contiguous(At(3), DType::kBFloat16, {4, 32, 64});
    RequireInvalid(a.Run(), "kiln::ops::batch_decode: q: expected shape [4, 32, 128] (the plan's batch_size, "
                            "num_qo_heads, head_dim), found [4, 32, 64]");
  }
  {
    DecodeArgs a;
    a.out = TensorView::Contiguous(At(1), DType::kFloat16, {4, 32, 128});
    RequireInvalid(a.Run(), "out: expected dtype bf16 (the plan's), found fp16");
  }
  {
    DecodeArgs a;
    a.q = TensorView::Strided(At(3), DType::kBFloat16, {4, 32, 128}, {4097, 128, 1});
    RequireInvalid(a.Run(), "q: the batch and head strides must be even (it is accessed as element pairs), found "
                            "strides [4097, 128, 1]");
  }
  {
    DecodeArgs a;
    a.q = TensorView::Strided(At(3), DType::kBFloat16, {4, 32, 128}, {4096, 128, 2});
    RequireInvalid(a.Run(), "q: the last dim (head_dim) must be contiguous (stride 1)");
  }
  {
    DecodeArgs a;
    a.out = TensorView::Contiguous(At(1, 2), DType::kBFloat16, {4, 32, 128});
    RequireInvalid(a.Run(), "out: data pointer 0x7f0100000002 is not 4-byte aligned");
  }
  {
    DecodeArgs a;
    a.k_cache = TensorView::Contiguous(At(4), DType::kBFloat16, {64, 32, 8, 128});
    a.v_cache = a.k_cache;
    RequireInvalid(a.Run(), "k_cache: expected shape [num_pages, 16, 8, 128] (the plan's page_size, num_kv_heads, "
                            "head_dim), found [64, 32, 8, 128]");
  }
  {
    DecodeArgs a;
    a.v_cache = TensorView::Contiguous(At(5), DType::kBFloat16, {63, 16, 8, 128});
    RequireInvalid(a.Run(), "v_cache: expected shape [64, 16, 8, 128] (k_cache's), found [63, 16, 8, 128]");
  }
  {
    DecodeArgs a;
    a.k_cache = TensorView::Contiguous(At(4, 8), DType::kBFloat16, {64, 16, 8, 128});
    RequireInvalid(a.Run(), "k_cache: data pointer 0x7f0400000008 is not 16-byte aligned");
  }
  {
    DecodeArgs a;  // K and V pages interleaved in one pool: page stride 2 * 16 * 8 * 128 is fine
    a.k_cache = TensorView::Strided(At(4), DType::kBFloat16, {64, 16, 8, 128}, {32768, 1024, 128, 1});
    a.v_cache = TensorView::Strided(At(4, 32768), DType::kBFloat16, {64, 16, 8, 128}, {32768, 1024, 128, 1});
    CHECK(a.Check().ok());
    a.k_cache = TensorView::Strided(At(4), DType::kBFloat16, {64, 16, 8, 128}, {16384, 128, 1024, 1});
    RequireInvalid(a.Run(), "k_cache: a page must be dense [page_size, num_kv_heads, head_dim]: expected strides "
                            "[*, 1024, 128, 1], found [16384, 128, 1024, 1]");
    a.k_cache = TensorView::Strided(At(4), DType::kBFloat16, {64, 16, 8, 128}, {16388, 1024, 128, 1});
    RequireInvalid(a.Run(), "k_cache: the page stride must be a multiple of 8 elements (16 bytes), found 16388");
    a.k_cache = TensorView::Strided(At(4), DType::kBFloat16, {64, 16, 8, 128}, {8192, 1024, 128, 1});
    RequireInvalid(a.Run(), "k_cache: pages overlap: page stride 8192 < 16384 elements per page");
  }
  {
    DecodeArgs a;
    a.indices = TensorView::Contiguous(At(7), DType::kInt32, {27});
    RequireInvalid(a.Run(),
                   "kv_indices: the plan's page table addresses 28 entries (kv_indptr[batch]), found shape [27]");
  }
  {
    DecodeArgs a;
    a.indptr = TensorView::Contiguous(At(6), DType::kInt64, {5});
    RequireInvalid(a.Run(), "kv_indptr: expected dtype int32, found int64");
    a.indptr = TensorView::Contiguous(At(6), DType::kInt32, {4});
    RequireInvalid(a.Run(), "kv_indptr: expected shape [5] (batch + 1), found [4]");
  }
  {
    DecodeArgs a;
    a.lse = TensorView::Contiguous(At(2), DType::kFloat32, {4, 8});
    RequireInvalid(a.Run(), "lse: expected shape [4, 32] (the plan's batch_size, num_qo_heads), found [4, 8]");
    a.lse = TensorView::Contiguous(At(2), DType::kBFloat16, {4, 32});
    RequireInvalid(a.Run(), "lse: expected dtype fp32 (log-sum-exp is fp32), found bf16");
  }
  {
    DecodeArgs a;
    a.out = a.q;
    RequireInvalid(a.Run(), "out and q overlap in memory");
  }
  {
    DecodeArgs a;
    a.k_cache = TensorView::Contiguous(At(4), DType::kBFloat16, {64, 16, 8, 128}, kiln::Device::CUDA(1));
    RequireInvalid(a.Run(), "v_cache: on cuda:0, but k_cache is on cuda:1");
    a.k_cache = TensorView::Contiguous(At(4), DType::kBFloat16, {64, 16, 8, 128}, kiln::Device::CPU());
    RequireInvalid(a.Run(), "k_cache: expected a CUDA device tensor, found one on cpu");
    DecodeArgs b;
    b.q = TensorView::Contiguous(At(3), DType::kBFloat16, {4, 32, 128}, kiln::Device::CUDA(1));
    b.out = TensorView::Contiguous(At(1), DType::kBFloat16, {4, 32, 128}, kiln::Device::CUDA(1));
    RequireInvalid(b.Run(), "q: on cuda:1, but the plan was made for cuda:0");
  }
  {
    DecodeArgs a({5000, 100, 100, 100});
    REQUIRE(a.plan.split());
    a.indices = TensorView::Contiguous(At(7), DType::kInt32, {313 + 21});
    a.workspace_bytes = a.plan.workspace_bytes() - 4;
    RequireInvalid(a.Run(), "workspace_bytes: the plan needs " + std::to_string(a.plan.workspace_bytes()) +
                                " bytes, found " + std::to_string(a.plan.workspace_bytes() - 4));
    a.workspace_bytes = a.plan.workspace_bytes();
    a.workspace = nullptr;
    RequireInvalid(a.Run(), "workspace: NULL, but the plan splits the KV and needs");
    a.workspace = At(9, 8);
    RequireInvalid(a.Run(), "workspace: pointer 0x7f0900000008 is not 16-byte aligned");
    a.workspace = At(1);
    RequireInvalid(a.Run(), "workspace and out overlap in memory");
    a.workspace = At(9);
    CHECK(a.Check().ok());
  }
  {
    DecodeArgs a;
    BatchDecodePlan moved = std::move(a.plan);
    RequireInvalid(a.Run(), "plan: empty (moved from)");
  }
}

// Valid arguments of append_paged_kv: 5 tokens into a cache of 8 pages of 16, 2 kv heads of 64.
struct AppendArgs {
  TensorView k_cache = TensorView::Contiguous(At(1), DType::kFloat16, {8, 16, 2, 64});
  TensorView v_cache = TensorView::Contiguous(At(2), DType::kFloat16, {8, 16, 2, 64});
  TensorView k = TensorView::Contiguous(At(3), DType::kFloat16, {5, 2, 64});
  TensorView v = TensorView::Contiguous(At(4), DType::kFloat16, {5, 2, 64});
  TensorView batch_indices = TensorView::Contiguous(At(5), DType::kInt32, {5});
  TensorView positions = TensorView::Contiguous(At(6), DType::kInt32, {5});
  TensorView indptr = TensorView::Contiguous(At(7), DType::kInt32, {3});
  TensorView indices = TensorView::Contiguous(At(8), DType::kInt32, {8});
  TensorView last = TensorView::Contiguous(At(9), DType::kInt32, {2});
  kiln::StatusOr<kiln::client::AppendPagedKvCall> Check() const {
    return kiln::client::CheckAppendPagedKv(k_cache, v_cache, k, v, batch_indices, positions, indptr, indices, last,
                                            "kiln::ops::append_paged_kv");
  }
  kiln::Status Run() const {
    return kiln::ops::append_paged_kv(k_cache, v_cache, k, v, batch_indices, positions, indptr, indices, last);
  }
};

TEST_CASE("append_paged_kv chooses the widest vector the layout allows", "[client][decode][validation]") {
  AppendArgs a;
  auto call = a.Check();
  REQUIRE(call.ok());
  CHECK(call->vec == 8);
  CHECK(call->params.batch == 2);
  CHECK(call->params.page_size == 16);
  CHECK(call->params.num_indices == 8);
  // k and v as views into a fused qkv buffer [5, (4 + 2 + 2) heads, 64]: strides 512, 64.
  a.k = TensorView::Strided(At(3, 4 * 64 * 2), DType::kFloat16, {5, 2, 64}, {512, 64, 1});
  a.v = TensorView::Strided(At(3, 6 * 64 * 2), DType::kFloat16, {5, 2, 64}, {512, 64, 1});
  CHECK(a.Check()->vec == 8);
  a.k = TensorView::Strided(At(3), DType::kFloat16, {5, 2, 64}, {130, 65, 1});  // odd head stride
  CHECK(a.Check()->vec == 1);
  a.k = TensorView::Strided(At(3, 4), DType::kFloat16, {5, 2, 64}, {128, 64, 1});  // 4-byte aligned
  CHECK(a.Check()->vec == 2);
}

TEST_CASE("append_paged_kv refuses bad arguments by name, nothing to append is OK", "[client][decode][validation]") {
  {
    AppendArgs a;
    a.k = TensorView::Contiguous(At(3), DType::kFloat16, {5, 4, 64});
    RequireInvalid(a.Run(), "kiln::ops::append_paged_kv: k: expected shape [5, 2, 64] (nnz, the caches' "
                            "num_kv_heads, head_dim), found [5, 4, 64]");
  }
  {
    AppendArgs a;
    a.v = TensorView::Contiguous(At(4), DType::kFloat16, {4, 2, 64});
    RequireInvalid(a.Run(), "v: expected shape [5, 2, 64]");
  }
  {
    AppendArgs a;
    a.k = TensorView::Contiguous(At(3), DType::kBFloat16, {5, 2, 64});
    RequireInvalid(a.Run(), "k: expected dtype fp16 (k_cache's), found bf16");
  }
  {
    AppendArgs a;
    a.k_cache = TensorView::Contiguous(At(1), DType::kFloat32, {8, 16, 2, 64});
    RequireInvalid(a.Run(), "k_cache: dtype fp32 is not supported; expected fp16 or bf16");
  }
  {
    AppendArgs a;
    a.k_cache = TensorView::Contiguous(At(1), DType::kFloat16, {8, 16, 2, 96});
    a.v_cache = TensorView::Contiguous(At(2), DType::kFloat16, {8, 16, 2, 96});
    RequireInvalid(a.Run(), "k_cache: head_dim 96 is not supported; supported: 64, 128, 256");
  }
  {
    AppendArgs a;
    a.positions = TensorView::Contiguous(At(6), DType::kInt64, {5});
    RequireInvalid(a.Run(), "positions: expected dtype int32, found int64");
    a.positions = TensorView::Contiguous(At(6), DType::kInt32, {4});
    RequireInvalid(a.Run(), "positions: expected shape [5] (nnz, k's first dim), found [4]");
  }
  {
    AppendArgs a;
    a.last = TensorView::Contiguous(At(9), DType::kInt32, {3});
    RequireInvalid(a.Run(), "kv_indptr: expected shape [4] (batch + 1), found [3]");
    a.last = TensorView::Contiguous(At(9), DType::kInt32, {0});
    a.indptr = TensorView::Contiguous(At(7), DType::kInt32, {1});
    RequireInvalid(a.Run(), "kv_last_page_len: expected at least one request");
  }
  {
    AppendArgs a;
    a.k = TensorView::Contiguous(At(1, 64), DType::kFloat16, {5, 2, 64});
    RequireInvalid(a.Run(), "k_cache and k overlap in memory");
  }
  {
    AppendArgs a;
    a.k = TensorView::Contiguous(At(3), DType::kFloat16, {0, 2, 64});
    a.v = TensorView::Contiguous(At(4), DType::kFloat16, {0, 2, 64});
    a.batch_indices = TensorView::Contiguous(At(5), DType::kInt32, {0});
    a.positions = TensorView::Contiguous(At(6), DType::kInt32, {0});
    CHECK(a.Run().ok());  // no driver touched: there is nothing to write
  }
}

TEST_CASE("the decode C ABI refuses bad arguments with the C names", "[client][decode][capi]") {
  const Table t({100, 17}, 16);
  kiln_batch_decode_plan* plan = reinterpret_cast<kiln_batch_decode_plan*>(0x1);
  kiln_status s = kiln_batch_decode_plan_create(t.indptr.data(), t.last.data(), 2, 32, 8, 128, 16,
                                                DLDataType{kDLFloat, 32, 1}, 0, 0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(std::string(kiln_last_error()).find("kiln_batch_decode_plan_create: dtype: fp32 is not supported") !=
        std::string::npos);
  s = kiln_batch_decode_plan_create(t.indptr.data(), t.last.data(), 2, 32, 8, 96, 16, DLDataType{kDLBfloat, 16, 1}, 0,
                                    0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()) ==
        "kiln_batch_decode_plan_create: head_dim: 96 is not supported; supported: 64, 128, 256");
  s = kiln_batch_decode_plan_create(t.indptr.data(), t.last.data(), 0, 32, 8, 128, 16, DLDataType{kDLBfloat, 16, 1}, 0,
                                    0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("batch_size: expected at least 1 request, found 0") != std::string::npos);
  s = kiln_batch_decode_plan_create(t.indptr.data(), t.last.data(), 2, 32, 8, 128, 16, DLDataType{kDLBfloat, 16, 1}, 0,
                                    0, -1, -1, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("plan (the result pointer) is NULL") != std::string::npos);
  CHECK(kiln_batch_decode_plan_workspace_bytes(nullptr) == 0);
  kiln_batch_decode_plan_destroy(nullptr);

  int64_t shape[3] = {2, 32, 128};
  DLTensor q{};
  q.data = At(3);
  q.device = {kDLCUDA, 0};
  q.ndim = 3;
  q.dtype = {kDLBfloat, 16, 1};
  q.shape = shape;
  s = kiln_batch_decode(nullptr, &q, nullptr, &q, &q, &q, &q, &q, &q, nullptr, 0, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("kiln_batch_decode: plan is NULL") != std::string::npos);
  s = kiln_append_paged_kv(&q, &q, nullptr, &q, &q, &q, &q, &q, &q, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()) == "kiln_append_paged_kv: k: the DLTensor pointer is NULL");
  s = kiln_append_paged_kv(&q, &q, &q, &q, &q, &q, &q, &q, &q, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error())
            .find("kiln_append_paged_kv: k_cache: expected a 4-D tensor [num_pages, "
                  "page_size, num_kv_heads, head_dim], found rank 3") != std::string::npos);
}

}  // namespace
