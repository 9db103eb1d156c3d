// moe_unpermute (kiln/ops/moe.h) and its C ABI refuse every bad argument before touching the
// driver, with a message naming the argument, what was expected and what was found; accepted
// calls plan the specialization (dtype), the kernel's parameters, the copy unit and the grid.
// No GPU: the pointers are fake and never dereferenced (validation fails, only the pure planning
// step runs, or there are no tokens and nothing is launched).
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
using kiln::client::MoeUnpermuteArgs;
using kiln::client::PlanMoeUnpermute;
using kiln::testing::FakeDeviceAddress;
using kiln::testing::RequireInvalid;

// One 4 GiB slot per tensor: tensors in different slots never overlap.
enum Slot { kOutSlot, kExpertSlot, kSlotToRowSlot, kWeightsSlot };

TensorView Mat(Slot slot, int64_t rows, int64_t cols, DType dtype) {
  return TensorView::Contiguous(FakeDeviceAddress(slot), dtype, {rows, cols});
}

// A good call: T tokens, top_k, R rows of H; tensors replaced one at a time by the tests.
struct Call {
  TensorView out, expert_out, slot_to_row, topk_weights;
  Call(int64_t tokens = 7, int64_t top_k = 2, int64_t hidden = 64, int64_t rows = 14, DType dtype = DType::kBFloat16) {
    out = Mat(kOutSlot, tokens, hidden, dtype);
    expert_out = Mat(kExpertSlot, rows, hidden, dtype);
    slot_to_row = Mat(kSlotToRowSlot, tokens, top_k, DType::kInt32);
    topk_weights = Mat(kWeightsSlot, tokens, top_k, DType::kFloat32);
  }
  kiln::Status Run() const { return kiln::ops::moe_unpermute(out, expert_out, slot_to_row, topk_weights); }
  MoeUnpermuteArgs Args() const { return {&out, &expert_out, &slot_to_row, &topk_weights}; }
};

TEST_CASE("moe_unpermute refuses an expert_out that is not 2-D bf16 or fp16 with rows of at least one element",
          "[client][ops][validation][moe]") {
  Call c;
  c.expert_out = Mat(kExpertSlot, 14, 64, DType::kFloat32);
  RequireInvalid(c.Run(), "kiln::ops::moe_unpermute: expert_out: expected dtype bf16 or fp16, found fp32");
  c.expert_out = TensorView::Contiguous(FakeDeviceAddress(kExpertSlot), DType::kBFloat16, {14, 2, 32});
  RequireInvalid(c.Run(), "expert_out: expected a 2-D tensor [R, H], found rank 3 [14, 2, 32]");
  c.expert_out = Mat(kExpertSlot, 14, 0, DType::kBFloat16);
  RequireInvalid(c.Run(), "expert_out: expected a hidden size (dim 1) of at least 1, found shape [14, 0]");
  c.expert_out = TensorView::Strided(FakeDeviceAddress(kExpertSlot), DType::kBFloat16, {14, 64}, {128, 2});
  RequireInvalid(c.Run(), "expert_out: the last dim must be contiguous (stride 1)");
  c.expert_out = TensorView::Contiguous(FakeDeviceAddress(kExpertSlot), DType::kBFloat16, {14, 64}, Device::CPU());
  RequireInvalid(c.Run(), "expert_out: expected a CUDA device tensor, found one on cpu");
  c.expert_out = TensorView::Contiguous(FakeDeviceAddress(kExpertSlot, 1), DType::kBFloat16, {14, 64});
  RequireInvalid(c.Run(), "expert_out: data pointer 0x7f0100000001 is not aligned to 2 bytes");
}

TEST_CASE("moe_unpermute refuses a slot_to_row that is not 2-D int32 with top_k 1 to 16",
          "[client][ops][validation][moe]") {
  Call c;
  c.slot_to_row = Mat(kSlotToRowSlot, 7, 2, DType::kInt64);
  RequireInvalid(c.Run(), "kiln::ops::moe_unpermute: slot_to_row: expected dtype int32, found int64");
  c.slot_to_row = TensorView::Contiguous(FakeDeviceAddress(kSlotToRowSlot), DType::kInt32, {14});
  RequireInvalid(c.Run(), "slot_to_row: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  Call wide(7, 17);
  RequireInvalid(wide.Run(), "slot_to_row: top_k (dim 1) must be 1 to 16, found 17");
  Call none(7, 0);
  RequireInvalid(none.Run(), "slot_to_row: top_k (dim 1) must be 1 to 16, found 0");
  c = Call();
  c.slot_to_row = TensorView::Contiguous(FakeDeviceAddress(kSlotToRowSlot), DType::kInt32, {7, 2}, Device::CUDA(1));
  RequireInvalid(c.Run(), "slot_to_row: on cuda:1, but expert_out is on cuda:0; all tensors must be on one device");
}

TEST_CASE("moe_unpermute refuses topk_weights unlike slot_to_row or not fp32", "[client][ops][validation][moe]") {
  Call c;
  c.topk_weights = Mat(kWeightsSlot, 7, 3, DType::kFloat32);
  RequireInvalid(c.Run(),
                 "kiln::ops::moe_unpermute: topk_weights: expected shape [7, 2] (slot_to_row's), found [7, 3]");
  c.topk_weights = Mat(kWeightsSlot, 6, 2, DType::kFloat32);
  RequireInvalid(c.Run(), "topk_weights: expected shape [7, 2] (slot_to_row's), found [6, 2]");
  c.topk_weights = Mat(kWeightsSlot, 7, 2, DType::kBFloat16);
  RequireInvalid(c.Run(), "topk_weights: expected dtype fp32, found bf16");
  c.topk_weights = TensorView::Contiguous(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {14});
  RequireInvalid(c.Run(), "topk_weights: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  c.topk_weights = TensorView::Strided(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {7, 2}, {2, 7});
  RequireInvalid(c.Run(), "topk_weights: the last dim must be contiguous (stride 1)");
  c.topk_weights = TensorView::Contiguous(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {7, 2}, Device::CUDA(3));
  RequireInvalid(c.Run(), "topk_weights: on cuda:3, but expert_out is on cuda:0; all tensors must be on one device");
}

TEST_CASE("moe_unpermute refuses an out of another dtype or shape than [T, H] of expert_out's dtype",
          "[client][ops][validation][moe]") {
  Call c;
  c.out = Mat(kOutSlot, 7, 64, DType::kFloat16);
  RequireInvalid(c.Run(), "kiln::ops::moe_unpermute: out: expected dtype bf16 (expert_out's), found fp16");
  c.out = Mat(kOutSlot, 7, 64, DType::kFloat32);
  RequireInvalid(c.Run(), "out: expected dtype bf16 (expert_out's), found fp32");
  c.out = Mat(kOutSlot, 8, 64, DType::kBFloat16);
  RequireInvalid(c.Run(),
                 "out: expected shape [7, 64] (slot_to_row's tokens, expert_out's hidden size), found [8, 64]");
  c.out = Mat(kOutSlot, 7, 32, DType::kBFloat16);
  RequireInvalid(c.Run(),
                 "out: expected shape [7, 64] (slot_to_row's tokens, expert_out's hidden size), found [7, 32]");
  c.out = TensorView::Contiguous(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {7 * 64});
  RequireInvalid(c.Run(), "out: expected a 2-D tensor [T, H], found rank 1 [448]");
  c.out = TensorView::Contiguous(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {7, 64}, Device::CUDA(1));
  RequireInvalid(c.Run(), "out: on cuda:1, but expert_out is on cuda:0; all tensors must be on one device");
  c.out = TensorView::Contiguous(nullptr, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out: data is NULL, but the tensor [7, 64] is not empty");
}

TEST_CASE("moe_unpermute refuses an out overlapping an input, and allows inputs sharing memory",
          "[client][ops][validation][moe]") {
  Call c;
  c.out = Mat(kExpertSlot, 7, 64, DType::kBFloat16);  // in place is not possible: rows are read by other tokens
  RequireInvalid(c.Run(), "out and expert_out overlap in memory");
  c = Call();
  c.out = TensorView::Contiguous(FakeDeviceAddress(kSlotToRowSlot, 8), DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out and slot_to_row overlap in memory");
  c = Call();
  c.out = TensorView::Contiguous(FakeDeviceAddress(kWeightsSlot), DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out and topk_weights overlap in memory");
  // Read-only inputs may overlap each other (a caller packing indices and weights together).
  c = Call();
  c.topk_weights = TensorView::Strided(FakeDeviceAddress(kSlotToRowSlot), DType::kFloat32, {7, 2}, {4, 1});
  c.slot_to_row = TensorView::Strided(FakeDeviceAddress(kSlotToRowSlot, 8), DType::kInt32, {7, 2}, {4, 1});
  auto plan = PlanMoeUnpermute(c.Args(), "test");
  INFO(plan.status().ToString());
  CHECK(plan.ok());
}

TEST_CASE("moe_unpermute plans the dtype, the parameters, the copy unit and the grid", "[client][ops][moe]") {
  // DeepSeek-V3 at decode: padded rows of the index and weight tensors, 16-byte units.
  Call c(5, 8, 7168, 40);
  c.slot_to_row = TensorView::Strided(FakeDeviceAddress(kSlotToRowSlot), DType::kInt32, {5, 8}, {16, 1});
  c.topk_weights = TensorView::Strided(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {5, 8}, {12, 1});
  auto plan = PlanMoeUnpermute(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->dtype == DType::kBFloat16);
  CHECK(plan->device == 0);
  const kiln::moe::MoeUnpermuteParams& p = plan->params;
  CHECK(p.out == FakeDeviceAddress(kOutSlot));
  CHECK(p.expert_out == FakeDeviceAddress(kExpertSlot));
  CHECK(p.slot_to_row == FakeDeviceAddress(kSlotToRowSlot));
  CHECK(p.topk_weights == FakeDeviceAddress(kWeightsSlot));
  CHECK(p.tokens == 5);
  CHECK(p.rows == 40);
  CHECK(p.top_k == 8);
  CHECK(p.slot_to_row_stride == 16);
  CHECK(p.weights_stride == 12);
  CHECK(p.out_stride_bytes == 7168 * 2);
  CHECK(p.expert_stride_bytes == 7168 * 2);
  CHECK(p.unit_bytes == 16);
  CHECK(p.units == 896);
  CHECK(p.reserved == 0);
  CHECK(plan->blocks_per_row == 4);
  CHECK(plan->threads == 224);

  // Qwen3 in fp16: one block of 256 per token.
  Call q(64, 8, 2048, 512, DType::kFloat16);
  auto qplan = PlanMoeUnpermute(q.Args(), "test");
  REQUIRE(qplan.ok());
  CHECK(qplan->dtype == DType::kFloat16);
  CHECK(qplan->params.unit_bytes == 16);
  CHECK(qplan->blocks_per_row == 1);
  CHECK(qplan->threads == 256);

  // Awkward hidden sizes and paddings pick narrower units: 136 bf16 = 272 bytes (16), padded
  // rows of 138 (276 bytes: 4), 2050 (4100 bytes: 4), 2049 (2), an out 8 bytes off (8).
  struct Unit {
    int64_t hidden, out_stride, expert_stride;
    uintptr_t out_offset;
    int want;
  };
  for (const Unit& u :
       {Unit{8, 8, 8, 0, 16}, Unit{136, 136, 136, 0, 16}, Unit{136, 138, 136, 0, 4}, Unit{2050, 2050, 2050, 0, 4},
        Unit{2049, 2049, 2049, 0, 2}, Unit{64, 64, 64, 8, 8}, Unit{64, 64, 65, 0, 2}, Unit{4, 4, 4, 0, 8}}) {
    Call w(3, 2, u.hidden, 6);
    w.out = TensorView::Strided(FakeDeviceAddress(kOutSlot, u.out_offset), DType::kBFloat16, {3, u.hidden},
                                {u.out_stride, 1});
    w.expert_out = TensorView::Strided(FakeDeviceAddress(kExpertSlot), DType::kBFloat16, {6, u.hidden},
                                       {u.expert_stride, 1});
    auto wplan = PlanMoeUnpermute(w.Args(), "test");
    INFO("hidden " << u.hidden << " strides " << u.out_stride << "/" << u.expert_stride << ": "
                   << wplan.status().ToString());
    REQUIRE(wplan.ok());
    CHECK(wplan->params.unit_bytes == u.want);
    CHECK(wplan->params.units == u.hidden * 2 / u.want);
    CHECK(wplan->params.out_stride_bytes == u.out_stride * 2);
    CHECK(wplan->params.expert_stride_bytes == u.expert_stride * 2);
    CHECK(wplan->threads % 32 == 0);
    CHECK(static_cast<int64_t>(wplan->threads) * wplan->blocks_per_row >= wplan->params.units);
  }
}

TEST_CASE("moe_unpermute refuses a row wider than grid.y's blocks and tokens past grid.x",
          "[client][ops][validation][moe]") {
  // 2-byte units (an odd hidden size): 65535 blocks of 256 cover 16 776 960 elements.
  Call wide(1, 1, 16776961, 1);
  RequireInvalid(wide.Run(), "expert_out: a row of 16776961 elements is 16776961 units of 2 bytes, more than "
                             "16776960 (65535 blocks of 256)");
  Call widest_ok(1, 1, 16776960 * 8, 1);  // 16-byte units: fine
  CHECK(PlanMoeUnpermute(widest_ok.Args(), "test").ok());
  Call many(int64_t{INT_MAX} + 1, 1, 8, 1);
  // 32 GiB of out: far past the other tensors' slots, so that nothing overlaps.
  many.out = TensorView::Contiguous(FakeDeviceAddress(64), DType::kBFloat16, {int64_t{INT_MAX} + 1, 8});
  RequireInvalid(many.Run(), "slot_to_row: 2147483648 tokens exceed 2^31 - 1 (one block column per token); split "
                             "the call");
}

TEST_CASE("moe_unpermute with no tokens or no rows is validated like any call", "[client][ops][moe]") {
  Call none(0, 8, 4096, 0);
  none.out = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 4096});
  none.slot_to_row = TensorView::Contiguous(nullptr, DType::kInt32, {0, 8});
  none.topk_weights = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 8});
  none.expert_out = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 4096});
  CHECK(none.Run().ok());  // nothing launched: no GPU needed
  auto plan = PlanMoeUnpermute(none.Args(), "test");
  REQUIRE(plan.ok());
  CHECK(plan->params.tokens == 0);
  none.topk_weights = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 4});
  RequireInvalid(none.Run(), "topk_weights: expected shape [0, 8] (slot_to_row's), found [0, 4]");
  // No expert rows at all (every choice dropped): valid, every token gets zeros.
  Call empty(3, 2, 64, 0);
  empty.expert_out = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 64});
  auto eplan = PlanMoeUnpermute(empty.Args(), "test");
  INFO(eplan.status().ToString());
  REQUIRE(eplan.ok());
  CHECK(eplan->params.rows == 0);
}

// --- The C ABI ---

struct DLCall {
  int64_t out_shape[2] = {7, 64};
  int64_t expert_shape[2] = {14, 64};
  int64_t index_shape[2] = {7, 2};
  DLTensor out{}, expert_out{}, slot_to_row{}, topk_weights{};
  DLCall() {
    auto make = [](DLTensor& t, Slot slot, int64_t* shape, DLDataType dtype) {
      t.data = FakeDeviceAddress(slot);
      t.device = {kDLCUDA, 0};
      t.ndim = 2;
      t.dtype = dtype;
      t.shape = shape;
    };
    make(out, kOutSlot, out_shape, {kDLBfloat, 16, 1});
    make(expert_out, kExpertSlot, expert_shape, {kDLBfloat, 16, 1});
    make(slot_to_row, kSlotToRowSlot, index_shape, {kDLInt, 32, 1});
    make(topk_weights, kWeightsSlot, index_shape, {kDLFloat, 32, 1});
  }
};

void RequireInvalidC(kiln_status status, const std::string& fragment) {
  const std::string error = kiln_last_error();
  INFO(error);
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(error.rfind("kiln_moe_unpermute: ", 0) == 0);
  CHECK(error.find(fragment) != std::string::npos);
}

TEST_CASE("the moe_unpermute C ABI checks DLTensors like the C++ API", "[client][capi][moe]") {
  DLCall t;
  RequireInvalidC(kiln_moe_unpermute(nullptr, &t.expert_out, &t.slot_to_row, &t.topk_weights, nullptr),
                  "out: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_unpermute(&t.out, nullptr, &t.slot_to_row, &t.topk_weights, nullptr),
                  "expert_out: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_unpermute(&t.out, &t.expert_out, nullptr, &t.topk_weights, nullptr),
                  "slot_to_row: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_unpermute(&t.out, &t.expert_out, &t.slot_to_row, nullptr, nullptr),
                  "topk_weights: the DLTensor pointer is NULL");
  DLCall wide;
  wide.expert_out.dtype = {kDLFloat, 32, 1};
  RequireInvalidC(kiln_moe_unpermute(&wide.out, &wide.expert_out, &wide.slot_to_row, &wide.topk_weights, nullptr),
                  "expert_out: expected dtype bf16 or fp16, found fp32");
  DLCall half;
  half.out.dtype = {kDLFloat, 16, 1};
  RequireInvalidC(kiln_moe_unpermute(&half.out, &half.expert_out, &half.slot_to_row, &half.topk_weights, nullptr),
                  "out: expected dtype bf16 (expert_out's), found fp16");
  DLCall k;
  int64_t other[2] = {7, 3};
  k.topk_weights.shape = other;
  RequireInvalidC(kiln_moe_unpermute(&k.out, &k.expert_out, &k.slot_to_row, &k.topk_weights, nullptr),
                  "topk_weights: expected shape [7, 2] (slot_to_row's), found [7, 3]");
  DLCall host;
  host.slot_to_row.device = {kDLCPU, 0};
  RequireInvalidC(kiln_moe_unpermute(&host.out, &host.expert_out, &host.slot_to_row, &host.topk_weights, nullptr),
                  "slot_to_row: expected a CUDA device tensor, found one on cpu");
  DLCall fp64;
  fp64.topk_weights.dtype = {kDLFloat, 64, 1};
  RequireInvalidC(kiln_moe_unpermute(&fp64.out, &fp64.expert_out, &fp64.slot_to_row, &fp64.topk_weights, nullptr),
                  "dtype code 2 (kDLFloat) with 64 bits is not supported");
  DLCall none;
  int64_t no_tokens[2] = {0, 64}, no_slots[2] = {0, 2};
  none.out.shape = no_tokens;
  none.slot_to_row.shape = no_slots;
  none.topk_weights.shape = no_slots;
  CHECK(kiln_moe_unpermute(&none.out, &none.expert_out, &none.slot_to_row, &none.topk_weights, nullptr) == KILN_OK);
}

}  // namespace
