// The prefill family's host side without a GPU: BatchPrefillPlan's argument checks and its
// schedule (SchedulePrefill for chosen SM counts: row tiles, split-KV chunks, the dense mapping
// of large batches), the ragged and paged calls' tensor checks with their exact messages, and
// the C ABI's refusals. Fake device addresses, never dereferenced: validation fails, or only the
// pure checking step runs.
#include <catch2/catch.hpp>

#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "client/ops/prefill/prefill_call.h"
#include "client/ops/prefill/prefill_plan.h"
#include "client/ops/prefill/prefill_schedule.h"
#include "kiln/ops/prefill.h"
#include "kiln/prefill/prefill_contract.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::client::PrefillRequest;
using kiln::client::SchedulePrefill;
using kiln::ops::BatchPrefillPlan;
using kiln::ops::PrefillOptions;
using kiln::testing::RequireInvalid;

void* At(int slot, uintptr_t offset = 0) { return kiln::testing::FakeDeviceAddress(slot, offset); }

// Host index arrays of requests with these (q_len, kv_len); paged with pages in order.
struct Batch {
  std::vector<int32_t> qo{0}, kv{0}, pages{0}, last;
  Batch(const std::vector<PrefillRequest>& requests, int64_t page = 16) {
    for (const PrefillRequest& r : requests) {
      qo.push_back(qo.back() + static_cast<int32_t>(r.q_len));
      kv.push_back(kv.back() + static_cast<int32_t>(r.kv_len));
      pages.push_back(pages.back() + static_cast<int32_t>((r.kv_len + page - 1) / page));
      last.push_back(r.kv_len == 0 ? 0 : static_cast<int32_t>(r.kv_len - (r.kv_len - 1) / page * page));
    }
  }
  int64_t size() const { return static_cast<int64_t>(last.size()); }
};

kiln::StatusOr<BatchPrefillPlan> Ragged(const Batch& b, int64_t qo_heads = 32, int64_t kv_heads = 8, int64_t dim = 128,
                                        PrefillOptions options = {}, int sms = 132) {
  kiln::client::PrefillPlanRequest r;
  r.qo_indptr_host = b.qo.data();
  r.kv_indptr_host = b.kv.data();
  r.batch_size = b.size();
  r.num_qo_heads = qo_heads;
  r.num_kv_heads = kv_heads;
  r.head_dim = dim;
  r.options = options;
  return kiln::client::PlanBatchPrefill(r, 0, sms, "plan");
}

kiln::StatusOr<BatchPrefillPlan> Paged(const Batch& b, int64_t page = 16, PrefillOptions options = {}, int sms = 132) {
  kiln::client::PrefillPlanRequest r;
  r.qo_indptr_host = b.qo.data();
  r.kv_indptr_host = b.pages.data();
  r.kv_last_page_len_host = b.last.data();
  r.paged = true;
  r.batch_size = b.size();
  r.num_qo_heads = 32;
  r.num_kv_heads = 8;
  r.head_dim = 128;
  r.page_size = page;
  r.options = options;
  return kiln::client::PlanBatchPrefill(r, 0, sms, "plan");
}

TEST_CASE("BatchPrefillPlan refuses unsupported shapes, dtypes and index arrays by name",
          "[client][prefill][validation]") {
  const Batch b({{100, 100}, {17, 200}});
  auto ragged = [&](int64_t batch, int64_t qo, int64_t kv, int64_t dim, DType dtype, PrefillOptions o = {}) {
    return BatchPrefillPlan::CreateRagged(b.qo.data(), b.kv.data(), batch, qo, kv, dim, dtype, o).status();
  };
  RequireInvalid(ragged(2, 32, 8, 96, DType::kBFloat16),
                 "kiln::ops::BatchPrefillPlan::CreateRagged: head_dim: 96 is not supported; supported: 64, 128, 256");
  RequireInvalid(ragged(2, 32, 8, 128, DType::kFloat32), "dtype: fp32 is not supported; supported: fp16, bf16");
  RequireInvalid(ragged(2, 24, 8, 128, DType::kBFloat16),
                 "num_qo_heads: 24 query heads over 8 kv heads is a group of 3; supported groups "
                 "(num_qo_heads / num_kv_heads): 1, 2, 4, 8");
  RequireInvalid(ragged(0, 32, 8, 128, DType::kBFloat16), "batch_size: expected at least 1 request, found 0");
  RequireInvalid(ragged(2, 32, 8, 128, DType::kBFloat16, {.window_left = -2}),
                 "options.window_left: expected -1 (no window) or >= 0, found -2");
  RequireInvalid(ragged(2, 32, 8, 128, DType::kBFloat16, {.sm_scale = -1}), "options.sm_scale");
  RequireInvalid(BatchPrefillPlan::CreateRagged(nullptr, b.kv.data(), 2, 32, 8, 128, DType::kBFloat16).status(),
                 "qo_indptr_host: NULL");
  RequireInvalid(BatchPrefillPlan::CreateRagged(b.qo.data(), nullptr, 2, 32, 8, 128, DType::kBFloat16).status(),
                 "kv_indptr_host: NULL");
  RequireInvalid(
      BatchPrefillPlan::CreatePaged(b.qo.data(), b.pages.data(), nullptr, 2, 32, 8, 128, 16, DType::kBFloat16).status(),
      "kv_last_page_len_host: NULL");
  RequireInvalid(BatchPrefillPlan::CreatePaged(b.qo.data(), b.pages.data(), b.last.data(), 2, 32, 8, 128, 24,
                                               DType::kBFloat16)
                     .status(),
                 "kiln::ops::BatchPrefillPlan::CreatePaged: page_size: 24 is not supported; supported: a power of "
                 "two, 1 to 256");

  std::vector<int32_t> qo = {0, 7, 5}, kv = {0, 10, 20};
  RequireInvalid(BatchPrefillPlan::CreateRagged(qo.data(), kv.data(), 2, 32, 8, 128, DType::kBFloat16).status(),
                 "qo_indptr_host: not monotonic: qo_indptr_host[2] = 5 < qo_indptr_host[1] = 7 (request 1 would "
                 "have a negative query count)");
  qo = {-1, 7, 8};
  RequireInvalid(BatchPrefillPlan::CreateRagged(qo.data(), kv.data(), 2, 32, 8, 128, DType::kBFloat16).status(),
                 "qo_indptr_host: qo_indptr_host[0] = -1 is negative");
  qo = {0, 7, 8};
  std::vector<int32_t> pages = {0, 1, 2}, last = {17, 1};
  RequireInvalid(
      BatchPrefillPlan::CreatePaged(qo.data(), pages.data(), last.data(), 2, 32, 8, 128, 16, DType::kBFloat16).status(),
      "kv_last_page_len_host: request 0's last page holds 17 tokens; expected 1 to page_size (16)");
  // A request without pages has kv_len 0; its kv_last_page_len is not read.
  Batch no_pages({{7, 0}, {1, 19}});
  no_pages.last[0] = -5;
  auto planned = Paged(no_pages);
  INFO(planned.status().ToString());
  REQUIRE(planned.ok());
}

TEST_CASE("prefill tiles fill the GPU, and few queries over a long KV are split", "[client][prefill][schedule]") {
  // Llama-3.1-8B (32 / 8 heads, group 4) on an H200 (132 SMs: 132 block slots of the Hopper
  // kernel, which takes head_dim 128 in row tiles of 128).
  auto prefill = SchedulePrefill(std::vector<PrefillRequest>(16, {1024, 1024}), 4, 8, 128, true, -1, 132);
  CHECK(prefill.listed);
  CHECK(!prefill.split);
  CHECK(prefill.slots == 132);
  CHECK(prefill.tile_rows == 128);
  CHECK(prefill.row_tiles == 16 * 1024 * 4 / 128);
  CHECK(prefill.num_items == prefill.row_tiles);
  CHECK(prefill.item_begin[1] == 32);
  CHECK(!prefill.heads_fastest);  // 32 row tiles a request read the same K/V: item-fastest

  // Speculative verification: 64 requests x 8 queries (32 rows each) over 8k. No request has
  // more than 64 rows: the mma.sync kernel's 64-row tiles, two blocks an SM.
  auto verify = SchedulePrefill(std::vector<PrefillRequest>(64, {8, 8192}), 4, 8, 128, true, -1, 132);
  CHECK(verify.tile_rows == 64);
  CHECK(verify.slots == 264);
  CHECK(!verify.split);  // 64 tiles x 8 kv heads = 512 blocks fill 264 slots
  CHECK(verify.num_items == 64);
  CHECK(verify.heads_fastest);  // one row tile a request: the blocks in flight read whole K/V rows

  // One request of 8 queries over 100 000 positions: one tile (of 64 rows), its KV cut into
  // chunks whose blocks (x 8 kv heads) make about one wave (the chunk is rounded up to a tile:
  // at most one item's kv heads more).
  auto one_long = SchedulePrefill({{8, 100000}}, 4, 8, 128, true, -1, 132);
  CHECK(one_long.split);
  CHECK(one_long.tile_rows == 64);
  CHECK(one_long.chunk_tokens == 3072);  // ceil(100000 * 8 / 264) rounded up to the 64-position K/V tile
  CHECK(one_long.kv_chunks == std::vector<uint16_t>{33});
  CHECK(one_long.item_begin == std::vector<int32_t>{0, 33});
  CHECK(one_long.num_items * 8 <= 264 + 8);
  CHECK(one_long.merge_max_q_len == 8);
  CHECK(one_long.heads_fastest);  // its items are disjoint KV chunks

  // A short KV is never split; an empty request has no item; a window shortens what is split.
  CHECK(!SchedulePrefill({{8, 900}}, 4, 8, 128, true, -1, 132).split);
  auto with_empty = SchedulePrefill({{0, 0}, {5, 5}, {0, 40}}, 1, 8, 64, true, -1, 132);
  CHECK(with_empty.item_begin == std::vector<int32_t>{0, 0, 1, 1});
  CHECK(with_empty.num_items == 1);
  auto windowed = SchedulePrefill({{8, 100000}}, 4, 8, 128, true, 4095, 132);
  CHECK(windowed.split);
  CHECK(windowed.kv_chunks[0] < one_long.kv_chunks[0]);
  // Head dim 256 (the mma.sync kernel): rows of 64, K/V tiles of 32 positions, chunks a multiple
  // of them, two blocks an SM.
  auto d256 = SchedulePrefill({{8, 100000}}, 4, 8, 256, true, -1, 132);
  CHECK(d256.chunk_tokens % 32 == 0);
  CHECK(d256.tile_rows == 64);
  CHECK(d256.slots == 264);

  // One request over 64 rows is enough for the Hopper kernel's 128-row tiles.
  std::vector<PrefillRequest> mixed(10, {16, 4096});
  CHECK(ChoosePrefillTileRows(mixed, 4, 128) == 64);  // 64 rows each
  CHECK(ChoosePrefillTileRows(mixed, 4, 64) == 64);
  mixed[9] = {17, 4096};
  CHECK(ChoosePrefillTileRows(mixed, 4, 128) == 128);  // 68 rows
  CHECK(ChoosePrefillTileRows(mixed, 4, 256) == 64);   // no Hopper kernel at head_dim 256
  CHECK(ChoosePrefillTileRows(std::vector<PrefillRequest>{}, 4, 128) == 64);
  CHECK(SchedulePrefill(mixed, 4, 8, 128, true, -1, 132).tile_rows == 128);

  // More requests than a schedule lists: one item per (request, row tile of the longest), not split.
  std::vector<PrefillRequest> many(600, {1, 2000});
  many[3] = {200, 2000};
  auto dense = SchedulePrefill(many, 1, 8, 128, true, -1, 132);
  CHECK(!dense.listed);
  CHECK(!dense.split);
  CHECK(dense.tiles_per_request == 2);  // 200 rows in tiles of 128
  CHECK(dense.num_items == 1200);
  CHECK(!dense.heads_fastest);  // two row tiles a request share their K/V

  // One 128-row tile a request runs on the Hopper kernel, which keeps blockIdx.y: not set.
  const auto hopper = SchedulePrefill({{16, 4096}, {16, 4096}}, 8, 8, 128, true, -1, 132);
  CHECK(hopper.tile_rows == 128);
  CHECK(hopper.tiles_per_request == 1);
  CHECK(!hopper.heads_fastest);
}

TEST_CASE("BatchPrefillPlan keeps the lengths, the scalars and the workspace of a split", "[client][prefill]") {
  auto plan = Ragged(Batch({{8, 100000}}));
  REQUIRE(plan.ok());
  CHECK(plan->split());
  CHECK(plan->total_q() == 8);
  CHECK(plan->chunk_tokens() == 3072);
  const auto* s = kiln::client::PrefillPlanAccess::Get(*plan);
  CHECK(s->partial_rows == 33 * 8 * 64);
  CHECK(plan->workspace_bytes() >= static_cast<size_t>(33 * 8 * 64) * (128 + 1) * 4);
  CHECK(s->logit_scale == Approx(1.0 / std::sqrt(128.0) * 1.4426950408889634));
  CHECK(plan->Describe().find(
            "1 row tiles of 64 rows on 264 slots: split into 33 items (KV chunks of 3072 positions); blocks "
            "kv-head-fastest") != std::string::npos);
  // A window past 2^31-1 is the kernel's 2^31-1: the same chunks as no window.
  auto far = Ragged(Batch({{8, 100000}}), 32, 8, 128, {.window_left = int64_t{1} << 40});
  REQUIRE(far.ok());
  CHECK(far->chunk_tokens() == 3072);
  CHECK(kiln::client::PrefillPlanAccess::Get(*far)->schedule.kv_chunks == std::vector<uint16_t>{33});
  CHECK(kiln::client::PrefillPlanAccess::Get(*far)->window_left == INT32_MAX);
  auto whole = Ragged(Batch({{1000, 1000}, {0, 10}}));
  REQUIRE(whole.ok());
  CHECK(!whole->split());
  CHECK(whole->workspace_bytes() == 0);
  CHECK(whole->Describe().find("ragged, bf16, 32 query / 8 kv heads (group 4), head_dim 128, causal") == 0);
}

// Valid ragged arguments for 4 requests of 100 queries over 100 positions, 32 / 8 heads,
// head_dim 128, bf16; tests break one thing at a time.
struct RaggedArgs {
  static constexpr int64_t kQ = 400, kKv = 400, kQo = 32, kKvHeads = 8, kDim = 128;
  BatchPrefillPlan plan = *Ragged(Batch(std::vector<PrefillRequest>(4, {100, 100})));
  TensorView out = TensorView::Contiguous(At(1), DType::kBFloat16, {kQ, kQo, kDim});
  TensorView lse = TensorView::Contiguous(At(2), DType::kFloat32, {kQ, kQo});
  TensorView q = TensorView::Contiguous(At(3), DType::kBFloat16, {kQ, kQo, kDim});
  TensorView k = TensorView::Contiguous(At(4), DType::kBFloat16, {kKv, kKvHeads, kDim});
  TensorView v = TensorView::Contiguous(At(5), DType::kBFloat16, {kKv, kKvHeads, kDim});
  TensorView qo_indptr = TensorView::Contiguous(At(6), DType::kInt32, {5});
  TensorView kv_indptr = TensorView::Contiguous(At(7), DType::kInt32, {5});

  kiln::StatusOr<kiln::client::BatchPrefillCall> Check() const {
    return kiln::client::CheckBatchPrefill(plan, false, out, &lse, q, qo_indptr, {&k, &v, &kv_indptr}, nullptr, 0,
                                           "kiln::ops::batch_prefill_ragged");
  }
  kiln::Status Run() const {
    return kiln::ops::batch_prefill_ragged(plan, out, &lse, q, k, v, qo_indptr, kv_indptr, nullptr, 0);
  }
};

TEST_CASE("batch_prefill_ragged accepts a valid call and passes the schedule to the kernel",
          "[client][prefill][validation]") {
  RaggedArgs a;
  auto call = a.Check();
  INFO(call.status().ToString());
  REQUIRE(call.ok());
  const kiln::prefill::KilnBatchPrefillParams& p = call->params;
  CHECK(p.q_stride_token == 32 * 128);
  CHECK(p.q_stride_head == 128);
  CHECK(p.k_stride_token == 8 * 128);
  CHECK(p.total_q == 400);
  CHECK(p.total_kv == 400);
  CHECK(p.kv_indices == nullptr);
  CHECK(p.num_qo_heads == 32);
  CHECK(p.window_left == -1);
  CHECK(p.lse_stride_token == 32);
  CHECK(p.schedule.listed == 1);
  CHECK(p.schedule.split == 0);
  CHECK(p.schedule.batch == 4);
  CHECK(p.schedule.num_items == 4 * 4);  // 100 queries x 4 heads = 400 rows: 4 tiles of 128
  CHECK(p.schedule.item_begin[4] == 16);
  CHECK(p.schedule.kv_chunks[3] == 1);

  // A fused qkv buffer: q, k and v are views with a token stride of (32 + 2 * 8) * 128.
  RaggedArgs fused;
  const int64_t token = (32 + 16) * 128;
  fused.q = TensorView::Strided(At(3), DType::kBFloat16, {400, 32, 128}, {token, 128, 1});
  fused.k = TensorView::Strided(At(3, 32 * 128 * 2), DType::kBFloat16, {400, 8, 128}, {token, 128, 1});
  fused.v = TensorView::Strided(At(3, 40 * 128 * 2), DType::kBFloat16, {400, 8, 128}, {token, 128, 1});
  auto fused_call = fused.Check();
  INFO(fused_call.status().ToString());
  REQUIRE(fused_call.ok());
  CHECK(fused_call->params.k_stride_token == token);
}

TEST_CASE("batch_prefill_ragged refuses mismatched shapes, dtypes, layouts and plans by name",
          "[client][prefill][validation]") {
  {
    RaggedArgs a;
    a.q = TensorView::Contiguous(At(3), DType::kBFloat16, {300, 32, 128});
    RequireInvalid(a.Run(), "kiln::ops::batch_prefill_ragged: q: expected shape [total_q >= 400, 32, 128] (the "
                            "plan's qo_indptr[batch_size], num_qo_heads, head_dim), found [300, 32, 128]");
  }
  {
    RaggedArgs a;
    a.k = TensorView::Contiguous(At(4), DType::kBFloat16, {399, 8, 128});
    RequireInvalid(a.Run(), "k: expected shape [total_kv >= 400, 8, 128]");
  }
  {
    RaggedArgs a;
    a.v = TensorView::Contiguous(At(5), DType::kFloat16, {400, 8, 128});
    RequireInvalid(a.Run(), "v: expected dtype bf16 (the plan's), found fp16");
  }
  {
    RaggedArgs a;
    a.out = TensorView::Contiguous(At(1), DType::kBFloat16, {400, 16, 128});
    RequireInvalid(a.Run(), "out: expected shape [400, 32, 128] (q's), found [400, 16, 128]");
  }
  {
    RaggedArgs a;
    a.q = TensorView::Strided(At(3), DType::kBFloat16, {400, 32, 128}, {4100, 128, 1});
    RequireInvalid(a.Run(), "q: the token and head strides must be multiples of 8 elements (it moves in 16-byte "
                            "chunks), found strides [4100, 128, 1]");
  }
  {
    RaggedArgs a;
    a.k = TensorView::Contiguous(At(4, 8), DType::kBFloat16, {400, 8, 128});
    RequireInvalid(a.Run(), "k: data pointer 0x7f0400000008 is not 16-byte aligned");
  }
  {
    RaggedArgs a;
    a.qo_indptr = TensorView::Contiguous(At(6), DType::kInt32, {4});
    RequireInvalid(a.Run(), "qo_indptr: expected shape [5] (the plan's batch_size + 1), found [4]");
  }
  {
    RaggedArgs a;
    a.lse = TensorView::Contiguous(At(2), DType::kFloat32, {400, 8});
    RequireInvalid(a.Run(), "lse: expected shape [400, 32] (q's total_q, num_qo_heads), found [400, 8]");
  }
  {
    RaggedArgs a;
    a.out = a.q;
    RequireInvalid(a.Run(), "out");
  }
  {
    RaggedArgs a;
    a.plan = *Paged(Batch(std::vector<PrefillRequest>(4, {100, 100})));
    RequireInvalid(a.Run(), "plan: made by BatchPrefillPlan::CreatePaged, but this is batch_prefill_ragged");
  }
  {
    RaggedArgs a;
    a.plan = *Ragged(Batch({{8, 100000}}));
    a.q = TensorView::Contiguous(At(3), DType::kBFloat16, {8, 32, 128});
    a.out = TensorView::Contiguous(At(1), DType::kBFloat16, {8, 32, 128});
    a.lse = TensorView::Contiguous(At(2), DType::kFloat32, {8, 32});
    a.k = TensorView::Contiguous(At(4), DType::kBFloat16, {100000, 8, 128});
    a.v = TensorView::Contiguous(At(5), DType::kBFloat16, {100000, 8, 128});
    a.qo_indptr = TensorView::Contiguous(At(6), DType::kInt32, {2});
    a.kv_indptr = TensorView::Contiguous(At(7), DType::kInt32, {2});
    RequireInvalid(a.Run(), "workspace: NULL, but the plan splits the KV and needs");
    auto ok = kiln::client::CheckBatchPrefill(a.plan, false, a.out, &a.lse, a.q, a.qo_indptr,
                                              {&a.k, &a.v, &a.kv_indptr}, At(9), a.plan.workspace_bytes(), "api");
    INFO(ok.status().ToString());
    REQUIRE(ok.ok());
    CHECK(ok->params.schedule.split == 1);
    CHECK(ok->params.partial_out == static_cast<float*>(At(9)));
    CHECK(ok->params.schedule.partial_rows == 33 * 8 * 64);  // 33 chunks x 8 kv heads x 64-row tiles
  }
}

TEST_CASE("batch_prefill_paged checks the cache and page table against the plan", "[client][prefill][validation]") {
  const Batch b(std::vector<PrefillRequest>(2, {100, 1000}));
  BatchPrefillPlan plan = *Paged(b);
  TensorView out = TensorView::Contiguous(At(1), DType::kBFloat16, {200, 32, 128});
  TensorView q = TensorView::Contiguous(At(3), DType::kBFloat16, {200, 32, 128});
  TensorView kc = TensorView::Contiguous(At(4), DType::kBFloat16, {200, 16, 8, 128});
  TensorView vc = TensorView::Contiguous(At(5), DType::kBFloat16, {200, 16, 8, 128});
  TensorView qo = TensorView::Contiguous(At(6), DType::kInt32, {3});
  TensorView indptr = TensorView::Contiguous(At(7), DType::kInt32, {3});
  TensorView indices = TensorView::Contiguous(At(8), DType::kInt32, {126});
  TensorView last = TensorView::Contiguous(At(9), DType::kInt32, {2});
  auto call = kiln::client::CheckBatchPrefill(plan, true, out, nullptr, q, qo, {&kc, &vc, &indptr, &indices, &last},
                                              nullptr, 0, "api");
  INFO(call.status().ToString());
  REQUIRE(call.ok());
  CHECK(call->params.k_stride_token == 16 * 8 * 128);  // the page stride
  CHECK(call->params.total_kv == 200);                 // pages
  CHECK(call->params.num_indices == 126);
  CHECK(call->params.lse == nullptr);

  auto run = [&]() {
    return kiln::ops::batch_prefill_paged(plan, out, nullptr, q, kc, vc, qo, indptr, indices, last, nullptr, 0);
  };
  TensorView short_indices = TensorView::Contiguous(At(8), DType::kInt32, {125});
  std::swap(indices, short_indices);
  RequireInvalid(run(),
                 "kv_indices: the plan's page table addresses 126 entries (kv_indptr[batch]), found shape [125]");
  std::swap(indices, short_indices);
  TensorView wrong_page = TensorView::Contiguous(At(4), DType::kBFloat16, {200, 32, 8, 128});
  std::swap(kc, wrong_page);
  RequireInvalid(run(), "k_cache: expected shape [num_pages, 16, 8, 128] (the plan's page_size, num_kv_heads, "
                        "head_dim), found [200, 32, 8, 128]");
  std::swap(kc, wrong_page);
  RequireInvalid(kiln::ops::batch_prefill_ragged(plan, out, nullptr, q, kc, vc, qo, indptr, nullptr, 0),
                 "plan: made by BatchPrefillPlan::CreatePaged, but this is batch_prefill_ragged");
}

TEST_CASE("the prefill C ABI refuses bad arguments with the C names", "[client][prefill][capi]") {
  const Batch b({{100, 100}, {17, 200}});
  kiln_batch_prefill_plan* plan = reinterpret_cast<kiln_batch_prefill_plan*>(0x1);
  kiln_status s = kiln_batch_prefill_plan_create_ragged(b.qo.data(), b.kv.data(), 2, 32, 8, 128,
                                                        DLDataType{kDLFloat, 32, 1}, 1, 0, 0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(std::string(kiln_last_error()).find("kiln_batch_prefill_plan_create_ragged: dtype: fp32 is not supported") !=
        std::string::npos);
  s = kiln_batch_prefill_plan_create_ragged(b.qo.data(), b.kv.data(), 2, 32, 8, 128, DLDataType{kDLBfloat, 16, 1}, 2, 0,
                                            0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()) == "kiln_batch_prefill_plan_create_ragged: causal: expected 0 or 1, found 2");
  s = kiln_batch_prefill_plan_create_paged(b.qo.data(), b.pages.data(), b.last.data(), 2, 32, 8, 96, 16,
                                           DLDataType{kDLBfloat, 16, 1}, 1, 0, 0, -1, -1, &plan);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()) ==
        "kiln_batch_prefill_plan_create_paged: head_dim: 96 is not supported; supported: 64, 128, 256");
  s = kiln_batch_prefill_plan_create_ragged(b.qo.data(), b.kv.data(), 2, 32, 8, 128, DLDataType{kDLBfloat, 16, 1}, 1, 0,
                                            0, -1, -1, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("plan (the result pointer) is NULL") != std::string::npos);
  CHECK(kiln_batch_prefill_plan_workspace_bytes(nullptr) == 0);
  kiln_batch_prefill_plan_destroy(nullptr);

  int64_t shape[3] = {2, 32, 128};
  DLTensor q{};
  q.data = At(3);
  q.device = {kDLCUDA, 0};
  q.ndim = 3;
  q.dtype = {kDLBfloat, 16, 1};
  q.shape = shape;
  s = kiln_batch_prefill_ragged(nullptr, &q, nullptr, &q, &q, &q, &q, &q, nullptr, 0, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("kiln_batch_prefill_ragged: plan is NULL") != std::string::npos);
  s = kiln_batch_prefill_paged(nullptr, &q, nullptr, &q, &q, &q, &q, &q, &q, &q, nullptr, 0, nullptr);
  CHECK(s == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("kiln_batch_prefill_paged: plan is NULL") != std::string::npos);
}

}  // namespace
