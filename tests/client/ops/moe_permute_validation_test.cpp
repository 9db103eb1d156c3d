// moe_permute (kiln/ops/moe.h) and its C ABI refuse every bad argument before touching the
// driver, with a message naming the argument, what was expected and what was found; accepted
// calls plan the specialization (max_experts), the kernels' parameters and the gather's copy
// unit. No GPU: the pointers are fake and never dereferenced (validation fails, or only the
// pure planning step runs).
#include <catch2/catch.hpp>

#include <climits>
#include <string>

#include "client/ops/moe/moe_plan.h"
#include "kiln/c_abi.h"
#include "kiln/ops/moe.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::TensorView;
using kiln::client::MoePermuteArgs;
using kiln::client::PlanMoePermute;
using kiln::testing::FakeDeviceAddress;
using kiln::testing::RequireInvalid;

// One 4 GiB slot per tensor: tensors in different slots never overlap.
enum Slot { kIdsSlot, kCountsSlot, kIndptrSlot, kRowToSlotSlot, kSlotToRowSlot, kXSlot, kPermutedSlot };

TensorView Vec(Slot slot, int64_t n, DType dtype = DType::kInt32) {
  return TensorView::Contiguous(FakeDeviceAddress(slot), dtype, {n});
}
TensorView Mat(Slot slot, int64_t rows, int64_t cols, DType dtype = DType::kInt32) {
  return TensorView::Contiguous(FakeDeviceAddress(slot), dtype, {rows, cols});
}

// A good call of T tokens, top_k, E experts, align; tensors replaced one at a time by the tests.
struct Call {
  int64_t tokens = 7, top_k = 2, experts = 8, align = 1;
  TensorView ids, counts, indptr, row_to_slot, slot_to_row, x, permuted_x;
  bool gather = false;
  Call(int64_t t = 7, int64_t k = 2, int64_t e = 8, int64_t a = 1, int64_t hidden = 64)
      : tokens(t), top_k(k), experts(e), align(a) {
    const int64_t rows = kiln::ops::moe_permute_rows(t, k, e, a);
    ids = Mat(kIdsSlot, t, k);
    counts = Vec(kCountsSlot, e);
    indptr = Vec(kIndptrSlot, e + 1);
    row_to_slot = Vec(kRowToSlotSlot, rows);
    slot_to_row = Mat(kSlotToRowSlot, t, k);
    x = Mat(kXSlot, t, hidden, DType::kBFloat16);
    permuted_x = Mat(kPermutedSlot, rows, hidden, DType::kBFloat16);
  }
  kiln::Status Run() const {
    return kiln::ops::moe_permute(counts, indptr, row_to_slot, slot_to_row, gather ? &permuted_x : nullptr, ids,
                                  gather ? &x : nullptr, align);
  }
  MoePermuteArgs Args() const {
    MoePermuteArgs a;
    a.expert_counts = &counts;
    a.m_indptr = &indptr;
    a.row_to_slot = &row_to_slot;
    a.slot_to_row = &slot_to_row;
    a.topk_ids = &ids;
    if (gather) {
      a.x = &x;
      a.permuted_x = &permuted_x;
    }
    a.align = align;
    return a;
  }
};

TEST_CASE("moe_permute refuses topk_ids that are not 2-D int32 with top_k 1 to 16", "[client][ops][validation][moe]") {
  Call c;
  c.ids = Mat(kIdsSlot, 7, 2, DType::kInt64);
  RequireInvalid(c.Run(), "kiln::ops::moe_permute: topk_ids: expected dtype int32, found int64");
  c.ids = Vec(kIdsSlot, 14);
  RequireInvalid(c.Run(), "kiln::ops::moe_permute: topk_ids: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  Call wide(7, 17, 256);
  RequireInvalid(wide.Run(), "topk_ids: top_k (dim 1) must be 1 to 16, found 17");
  Call none(7, 0);
  RequireInvalid(none.Run(), "topk_ids: top_k (dim 1) must be 1 to 16, found 0");
  c = Call();
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kInt32, {7, 2}, {4, 2});
  RequireInvalid(c.Run(), "topk_ids: the last dim must be contiguous (stride 1)");
  c.ids = TensorView::Contiguous(FakeDeviceAddress(kIdsSlot), DType::kInt32, {7, 2}, Device::CPU());
  RequireInvalid(c.Run(), "topk_ids: expected a CUDA device tensor, found one on cpu");
  c.ids = TensorView::Contiguous(FakeDeviceAddress(kIdsSlot, 2), DType::kInt32, {7, 2});
  RequireInvalid(c.Run(), "topk_ids: data pointer 0x7f0000000002 is not aligned to 4 bytes");
}

TEST_CASE("moe_permute refuses counts and m_indptr of the wrong dtype, rank or size, and E outside 1..256",
          "[client][ops][validation][moe]") {
  Call c;
  c.counts = Vec(kCountsSlot, 8, DType::kInt64);
  RequireInvalid(c.Run(), "kiln::ops::moe_permute: expert_counts: expected dtype int32, found int64");
  c.counts = Mat(kCountsSlot, 1, 8);
  RequireInvalid(c.Run(), "expert_counts: expected a 1-D tensor [E], found rank 2 [1, 8]");
  c.counts = Vec(kCountsSlot, 257);
  RequireInvalid(c.Run(), "expert_counts: the number of experts (dim 0) must be 1 to 256, found 257");
  c.counts = Vec(kCountsSlot, 0);
  RequireInvalid(c.Run(), "expert_counts: the number of experts (dim 0) must be 1 to 256, found 0");
  c = Call();
  c.indptr = Vec(kIndptrSlot, 8);
  RequireInvalid(c.Run(), "m_indptr: expected shape [9] (expert_counts' experts + 1), found [8]");
  c.indptr = Vec(kIndptrSlot, 9, DType::kInt64);
  RequireInvalid(c.Run(), "m_indptr: expected dtype int32, found int64");
  c.indptr = Mat(kIndptrSlot, 9, 1);
  RequireInvalid(c.Run(), "m_indptr: expected a 1-D tensor [E + 1], found rank 2 [9, 1]");
  c.indptr = TensorView::Contiguous(FakeDeviceAddress(kIndptrSlot), DType::kInt32, {9}, Device::CUDA(1));
  RequireInvalid(c.Run(), "m_indptr: on cuda:1, but topk_ids is on cuda:0; all tensors must be on one device");
}

TEST_CASE("moe_permute refuses slot_to_row unlike topk_ids", "[client][ops][validation][moe]") {
  Call c;
  c.slot_to_row = Mat(kSlotToRowSlot, 7, 3);
  RequireInvalid(c.Run(), "kiln::ops::moe_permute: slot_to_row: expected shape [7, 2] (topk_ids'), found [7, 3]");
  c.slot_to_row = Mat(kSlotToRowSlot, 6, 2);
  RequireInvalid(c.Run(), "slot_to_row: expected shape [7, 2] (topk_ids'), found [6, 2]");
  c.slot_to_row = Mat(kSlotToRowSlot, 7, 2, DType::kFloat32);
  RequireInvalid(c.Run(), "slot_to_row: expected dtype int32, found fp32");
  c.slot_to_row = Vec(kSlotToRowSlot, 14);
  RequireInvalid(c.Run(), "slot_to_row: expected a 2-D tensor [T, top_k], found rank 1 [14]");
}

TEST_CASE("moe_permute refuses an align that is not a power of two up to 256", "[client][ops][validation][moe]") {
  for (int64_t align : {0, -64, 3, 48, 512, 1000}) {
    Call c;
    c.align = align;
    RequireInvalid(c.Run(),
                   "kiln::ops::moe_permute: align: expected a power of two from 1 (no padding) to 256, found " +
                       std::to_string(align));
  }
}

TEST_CASE("moe_permute refuses a row_to_slot shorter than the row bound", "[client][ops][validation][moe]") {
  Call c;
  c.row_to_slot = Vec(kRowToSlotSlot, 13);
  RequireInvalid(
      c.Run(), "kiln::ops::moe_permute: row_to_slot: expected at least 14 rows (T * top_k = 7 * 2), found shape [13]");
  Call padded(7, 2, 8, 64);
  padded.row_to_slot = Vec(kRowToSlotSlot, 14 + 8 * 63 - 1);
  RequireInvalid(padded.Run(),
                 "row_to_slot: expected at least 518 rows (T * top_k + E * (align - 1) = 7 * 2 + 8 * 63), found shape "
                 "[517]");
  padded.row_to_slot = Vec(kRowToSlotSlot, 518, DType::kInt64);
  RequireInvalid(padded.Run(), "row_to_slot: expected dtype int32, found int64");
  padded.row_to_slot = Mat(kRowToSlotSlot, 518, 1);
  RequireInvalid(padded.Run(), "row_to_slot: expected a 1-D tensor [rows], found rank 2 [518, 1]");
  // More rows than the bound are fine (a buffer sized for the largest batch).
  padded.row_to_slot = Vec(kRowToSlotSlot, 100000);
  auto plan = PlanMoePermute(padded.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->params.rows == 100000);
  // Rows past int32: refused before anything else of row_to_slot is looked at.
  Call huge(300000000, 8, 256, 1);
  RequireInvalid(huge.Run(), "topk_ids: T * top_k = 300000000 * 8 = 2400000000 rows exceed 2^31 - 1 (int32 row "
                             "indices); split the call");
}

TEST_CASE("moe_permute refuses a gather of the wrong dtypes or shapes, or half a gather",
          "[client][ops][validation][moe]") {
  Call c(7, 2, 8, 4, 64);
  const TensorView x = c.x, out = c.permuted_x;
  RequireInvalid(kiln::ops::moe_permute(c.counts, c.indptr, c.row_to_slot, c.slot_to_row, nullptr, c.ids, &x, 4),
                 "kiln::ops::moe_permute: permuted_x: x and permuted_x go together (the gather), found x without "
                 "permuted_x");
  RequireInvalid(kiln::ops::moe_permute(c.counts, c.indptr, c.row_to_slot, c.slot_to_row, &out, c.ids, nullptr, 4),
                 "x: x and permuted_x go together (the gather), found permuted_x without x");
  c.gather = true;
  c.x = Mat(kXSlot, 7, 64, DType::kFloat32);
  RequireInvalid(c.Run(), "x: expected dtype bf16 or fp16, found fp32");
  c.x = Mat(kXSlot, 6, 64, DType::kBFloat16);
  RequireInvalid(c.Run(), "x: expected 7 rows (topk_ids' tokens), found shape [6, 64]");
  c.x = Mat(kXSlot, 7, 0, DType::kBFloat16);
  RequireInvalid(c.Run(), "x: expected a hidden size (dim 1) of at least 1, found shape [7, 0]");
  c.x = TensorView::Contiguous(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 2, 32});
  RequireInvalid(c.Run(), "x: expected a 2-D tensor [T, H], found rank 3 [7, 2, 32]");
  c.x = x;
  c.permuted_x = Mat(kPermutedSlot, 42, 64, DType::kFloat16);
  RequireInvalid(c.Run(), "permuted_x: expected dtype bf16 (x's), found fp16");
  c.permuted_x = Mat(kPermutedSlot, 42, 32, DType::kBFloat16);
  RequireInvalid(c.Run(), "permuted_x: expected 64 columns (x's hidden size), found shape [42, 32]");
  c.permuted_x = Mat(kPermutedSlot, 14 + 8 * 3 - 1, 64, DType::kBFloat16);
  RequireInvalid(c.Run(),
                 "permuted_x: expected at least 38 rows (T * top_k + E * (align - 1) = 7 * 2 + 8 * 3), found shape "
                 "[37, 64]");
  c.permuted_x = Vec(kPermutedSlot, 38 * 64, DType::kBFloat16);
  RequireInvalid(c.Run(), "permuted_x: expected a 2-D tensor [rows, H], found rank 1 [2432]");
  c.permuted_x = TensorView::Contiguous(FakeDeviceAddress(kPermutedSlot), DType::kBFloat16, {38, 64}, Device::CUDA(2));
  RequireInvalid(c.Run(), "permuted_x: on cuda:2, but topk_ids is on cuda:0; all tensors must be on one device");
}

TEST_CASE("moe_permute refuses outputs overlapping the inputs or each other", "[client][ops][validation][moe]") {
  Call c;
  c.counts = Vec(kIdsSlot, 8);
  RequireInvalid(c.Run(), "expert_counts and topk_ids overlap in memory");
  c = Call();
  c.slot_to_row = c.ids;  // in place is not possible: the ranks read the ids of every round
  RequireInvalid(c.Run(), "slot_to_row and topk_ids overlap in memory");
  c = Call();
  c.indptr = TensorView::Contiguous(FakeDeviceAddress(kCountsSlot, 16), DType::kInt32, {9});
  RequireInvalid(c.Run(), "expert_counts and m_indptr overlap in memory");
  c = Call();
  c.row_to_slot = TensorView::Contiguous(FakeDeviceAddress(kSlotToRowSlot, 4), DType::kInt32, {14});
  RequireInvalid(c.Run(), "row_to_slot and slot_to_row overlap in memory");
  c = Call(7, 2, 8, 1, 64);
  c.gather = true;
  c.permuted_x = Mat(kXSlot, 14, 64, DType::kBFloat16);
  RequireInvalid(c.Run(), "permuted_x and x overlap in memory");
  c.permuted_x = Mat(kRowToSlotSlot, 14, 64, DType::kBFloat16);
  RequireInvalid(c.Run(), "row_to_slot and permuted_x overlap in memory");
}

TEST_CASE("moe_permute plans the smallest specialization, the parameters and the gather's unit", "[client][ops][moe]") {
  // DeepSeek-V3 sizes with padded rows of topk_ids and slot_to_row, align 128, a gather.
  Call c(5, 8, 256, 128, 7168);
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kInt32, {5, 8}, {16, 1});
  c.slot_to_row = TensorView::Strided(FakeDeviceAddress(kSlotToRowSlot), DType::kInt32, {5, 8}, {12, 1});
  c.gather = true;
  auto plan = PlanMoePermute(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->max_experts == 256);
  CHECK(plan->device == 0);
  CHECK(plan->params.tokens == 5);
  CHECK(plan->params.top_k == 8);
  CHECK(plan->params.experts == 256);
  CHECK(plan->params.align == 128);
  CHECK(plan->params.ids_stride == 16);
  CHECK(plan->params.slot_to_row_stride == 12);
  CHECK(plan->params.rows == 40 + 256 * 127);
  CHECK(plan->params.topk_ids == FakeDeviceAddress(kIdsSlot));
  CHECK(plan->params.row_to_slot == FakeDeviceAddress(kRowToSlotSlot));
  REQUIRE(plan->gather);
  CHECK(plan->gather_params.rows == 40 + 256 * 127);
  CHECK(plan->gather_params.row_bytes == 7168 * 2);
  CHECK(plan->gather_params.x_stride_bytes == 7168 * 2);
  CHECK(plan->gather_params.out_stride_bytes == 7168 * 2);
  CHECK(plan->gather_params.unit_bytes == 16);
  CHECK(plan->gather_params.top_k == 8);
  CHECK(plan->gather_params.experts == 256);
  CHECK(plan->gather_params.m_indptr == plan->params.m_indptr);
  CHECK(plan->gather_params.row_to_slot == plan->params.row_to_slot);

  // Mixtral: E = 8 in the smallest class, no gather; a hidden size of 4 bf16 (8 bytes) and an
  // odd one (2 bytes) pick narrower units.
  Call m(3, 2, 8, 1, 4);
  auto mplan = PlanMoePermute(m.Args(), "test");
  REQUIRE(mplan.ok());
  CHECK(mplan->max_experts == 32);
  CHECK(!mplan->gather);
  m.gather = true;
  mplan = PlanMoePermute(m.Args(), "test");
  REQUIRE(mplan.ok());
  CHECK(mplan->gather_params.unit_bytes == 8);
  Call odd(3, 2, 8, 1, 7);
  odd.gather = true;
  auto oplan = PlanMoePermute(odd.Args(), "test");
  REQUIRE(oplan.ok());
  CHECK(oplan->gather_params.unit_bytes == 2);
  CHECK(kiln::client::WidestUnit({32, 48, 0x1000}) == 16);
  CHECK(kiln::client::WidestUnit({32, 48, 0x1004}) == 4);
  CHECK(kiln::client::WidestUnit({6}) == 2);
}

TEST_CASE("moe_permute's public row bound is the contract's", "[client][ops][moe]") {
  STATIC_REQUIRE(kiln::ops::moe_permute_rows(4096, 8, 256, 1) == 32768);
  STATIC_REQUIRE(kiln::ops::moe_permute_rows(4096, 8, 256, 128) == 32768 + 256 * 127);
  STATIC_REQUIRE(KILN_MOE_PERMUTE_ROWS(4096, 8, 256, 128) == 32768 + 256 * 127);
  STATIC_REQUIRE(KILN_MOE_PERMUTE_ROWS(3, 2, 8, 1) == 6);
}

TEST_CASE("moe_permute with no tokens is validated like any call", "[client][ops][moe]") {
  Call none(0, 8, 256, 64);
  auto plan = PlanMoePermute(none.Args(), "test");
  REQUIRE(plan.ok());
  CHECK(plan->params.tokens == 0);
  CHECK(plan->params.rows == 256 * 63);  // still written: -1 everywhere
  none.align = 5;
  RequireInvalid(none.Run(), "align: expected a power of two");
}

// --- The C ABI ---

struct DLCall {
  int64_t ids_shape[2] = {7, 2};
  int64_t counts_shape[1] = {8};
  int64_t indptr_shape[1] = {9};
  int64_t rows_shape[1] = {14};
  int64_t x_shape[2] = {7, 64};
  int64_t out_shape[2] = {14, 64};
  DLTensor ids{}, counts{}, indptr{}, row_to_slot{}, slot_to_row{}, x{}, permuted_x{};
  DLCall() {
    auto make = [](DLTensor& t, Slot slot, int ndim, int64_t* shape, DLDataType dtype) {
      t.data = FakeDeviceAddress(slot);
      t.device = {kDLCUDA, 0};
      t.ndim = ndim;
      t.dtype = dtype;
      t.shape = shape;
    };
    make(ids, kIdsSlot, 2, ids_shape, {kDLInt, 32, 1});
    make(counts, kCountsSlot, 1, counts_shape, {kDLInt, 32, 1});
    make(indptr, kIndptrSlot, 1, indptr_shape, {kDLInt, 32, 1});
    make(row_to_slot, kRowToSlotSlot, 1, rows_shape, {kDLInt, 32, 1});
    make(slot_to_row, kSlotToRowSlot, 2, ids_shape, {kDLInt, 32, 1});
    make(x, kXSlot, 2, x_shape, {kDLBfloat, 16, 1});
    make(permuted_x, kPermutedSlot, 2, out_shape, {kDLBfloat, 16, 1});
  }
};

void RequireInvalidC(kiln_status status, const std::string& fragment) {
  const std::string error = kiln_last_error();
  INFO(error);
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(error.rfind("kiln_moe_permute: ", 0) == 0);
  CHECK(error.find(fragment) != std::string::npos);
}

TEST_CASE("the moe_permute C ABI checks DLTensors and align like the C++ API", "[client][capi][moe]") {
  DLCall t;
  RequireInvalidC(kiln_moe_permute(nullptr, &t.indptr, &t.row_to_slot, &t.slot_to_row, nullptr, &t.ids, nullptr, 1,
                                   nullptr),
                  "expert_counts: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_permute(&t.counts, nullptr, &t.row_to_slot, &t.slot_to_row, nullptr, &t.ids, nullptr, 1,
                                   nullptr),
                  "m_indptr: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_permute(&t.counts, &t.indptr, nullptr, &t.slot_to_row, nullptr, &t.ids, nullptr, 1, nullptr),
                  "row_to_slot: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_permute(&t.counts, &t.indptr, &t.row_to_slot, nullptr, nullptr, &t.ids, nullptr, 1, nullptr),
                  "slot_to_row: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_permute(&t.counts, &t.indptr, &t.row_to_slot, &t.slot_to_row, nullptr, nullptr, nullptr, 1,
                                   nullptr),
                  "topk_ids: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_permute(&t.counts, &t.indptr, &t.row_to_slot, &t.slot_to_row, nullptr, &t.ids, nullptr, 6,
                                   nullptr),
                  "align: expected a power of two from 1 (no padding) to 256, found 6");
  RequireInvalidC(kiln_moe_permute(&t.counts, &t.indptr, &t.row_to_slot, &t.slot_to_row, nullptr, &t.ids, &t.x, 1,
                                   nullptr),
                  "permuted_x: x and permuted_x go together (the gather), found x without permuted_x");
  DLCall wide;
  wide.x.dtype = {kDLFloat, 32, 1};
  wide.permuted_x.dtype = {kDLFloat, 32, 1};
  RequireInvalidC(kiln_moe_permute(&wide.counts, &wide.indptr, &wide.row_to_slot, &wide.slot_to_row, &wide.permuted_x,
                                   &wide.ids, &wide.x, 1, nullptr),
                  "x: expected dtype bf16 or fp16, found fp32");
  DLCall host;
  host.ids.device = {kDLCPU, 0};
  RequireInvalidC(kiln_moe_permute(&host.counts, &host.indptr, &host.row_to_slot, &host.slot_to_row, nullptr, &host.ids,
                                   nullptr, 1, nullptr),
                  "topk_ids: expected a CUDA device tensor, found one on cpu");
  DLCall fp64;
  fp64.counts.dtype = {kDLFloat, 64, 1};
  RequireInvalidC(kiln_moe_permute(&fp64.counts, &fp64.indptr, &fp64.row_to_slot, &fp64.slot_to_row, nullptr, &fp64.ids,
                                   nullptr, 1, nullptr),
                  "dtype code 2 (kDLFloat) with 64 bits is not supported");
}

}  // namespace
