// fused_moe (kiln/ops/moe.h) and its C ABI refuse every bad argument before touching the driver,
// with a message naming the argument, what was expected and what was found; accepted calls plan
// the workspace layout (FusedMoeWorkspaceOf, the public fused_moe_workspace_bytes and
// KILN_FUSED_MOE_WORKSPACE_BYTES) and the steps' plans over views of it: moe_permute with the
// gather, the grouped GEMM with w13 and the silu_and_mul epilogue, the grouped GEMM with w2 and
// moe_unpermute. No GPU: the pointers are fake and never dereferenced (validation fails, only the
// pure planning step runs, or there are no tokens and nothing is launched).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "client/ops/moe/fused_moe_plan.h"
#include "client/ops/op_table.h"
#include "kiln/c_abi.h"
#include "kiln/ops/moe.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::TensorView;
using kiln::client::FusedMoeArgs;
using kiln::client::FusedMoePlan;
using kiln::client::FusedMoeWorkspace;
using kiln::client::FusedMoeWorkspaceOf;
using kiln::client::PlanFusedMoe;
using kiln::testing::FakeDeviceAddress;
using kiln::testing::RequireInvalid;

// One 4 GiB slot per tensor: tensors in different slots never overlap. The weights get room for
// several slots (Mixtral's w13 is 1.9 GB; a slot holds 4 GiB).
enum Slot { kXSlot = 0, kOutSlot = 1, kIdsSlot = 2, kWeightsSlot = 3, kWorkspaceSlot = 4, kW2Slot = 8, kW13Slot = 16 };

TensorView Contig(Slot slot, DType dtype, std::initializer_list<int64_t> shape, uintptr_t offset = 0) {
  return TensorView::Contiguous(FakeDeviceAddress(slot, offset), dtype, shape);
}

// A good call: T tokens, top_k, E experts, hidden size H, expert width I, the smallest workspace;
// tensors replaced one at a time by the tests.
struct Call {
  TensorView out, x, w13, w2, ids, weights, workspace;
  Call(int64_t tokens = 7, int64_t top_k = 2, int64_t experts = 8, int64_t hidden = 64, int64_t inter = 128,
       DType dtype = DType::kBFloat16) {
    x = Contig(kXSlot, dtype, {tokens, hidden});
    out = Contig(kOutSlot, dtype, {tokens, hidden});
    w13 = Contig(kW13Slot, dtype, {experts, 2 * inter, hidden});
    w2 = Contig(kW2Slot, dtype, {experts, hidden, inter});
    ids = Contig(kIdsSlot, DType::kInt32, {tokens, top_k});
    weights = Contig(kWeightsSlot, DType::kFloat32, {tokens, top_k});
    workspace = Contig(kWorkspaceSlot, DType::kUInt8,
                       {kiln::ops::fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter)});
  }
  kiln::Status Run() const { return kiln::ops::fused_moe(out, x, w13, w2, ids, weights, workspace); }
  FusedMoeArgs Args() const { return {&out, &x, &w13, &w2, &ids, &weights, &workspace}; }
};

// The default call's workspace: 256 (counts) + 256 (m_indptr) + 256 + 256 (the maps of 14 rows)
// + 1792 (14 x 64 bf16) + 3584 (14 x 128 bf16) + 256 (2 counters: one per 32 columns of H 64).
constexpr int64_t kDefaultWorkspace = 6656;
static_assert(kiln::ops::fused_moe_workspace_bytes(7, 2, 8, 64, 128) == kDefaultWorkspace);

TEST_CASE("fused_moe refuses an x that is not 2-D bf16 or fp16 with H a multiple of 8",
          "[client][ops][validation][moe]") {
  Call c;
  c.x = Contig(kXSlot, DType::kBFloat16, {7, 2, 32});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: x: expected a 2-D tensor [T, H], found rank 3 [7, 2, 32]");
  c.x = Contig(kXSlot, DType::kBFloat16, {448});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: x: expected a 2-D tensor [T, H], found rank 1 [448]");
  c.x = Contig(kXSlot, DType::kFloat32, {7, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: x: expected dtype bf16 or fp16, found fp32");
  c.x = Contig(kXSlot, DType::kInt32, {7, 64});
  RequireInvalid(c.Run(), "x: expected dtype bf16 or fp16, found int32");
  c.x = Contig(kXSlot, DType::kBFloat16, {7, 60});
  RequireInvalid(c.Run(),
                 "kiln::ops::fused_moe: x: H (dim 1) must be a positive multiple of 8 (16-byte rows for TMA), found "
                 "[7, 60]");
  c.x = Contig(kXSlot, DType::kBFloat16, {7, 0});
  RequireInvalid(c.Run(), "x: H (dim 1) must be a positive multiple of 8 (16-byte rows for TMA), found [7, 0]");
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 64}, {128, 2});
  RequireInvalid(c.Run(), "x: the last dim must be contiguous (stride 1)");
  c.x = TensorView::Contiguous(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 64}, Device::CPU());
  RequireInvalid(c.Run(), "x: expected a CUDA device tensor, found one on cpu");
  c.x = Contig(kXSlot, DType::kBFloat16, {7, 64}, 1);
  RequireInvalid(c.Run(), "x: data pointer 0x7f0000000001 is not aligned to 2 bytes");
  c.x = TensorView::Contiguous(nullptr, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "x: data is NULL, but the tensor [7, 64] is not empty");
  // x's dtype is the call's: fp16 x with bf16 weights names the first weight.
  c.x = Contig(kXSlot, DType::kFloat16, {7, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w13: expected dtype fp16, found bf16");
}

TEST_CASE("fused_moe refuses a w13 that is not [E, 2I, H] of x's dtype with E 1 to 256 and I a multiple of 8",
          "[client][ops][validation][moe]") {
  Call c;
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {8 * 256, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w13: expected a 3-D tensor [E, 2I, H], found rank 2 [2048, 64]");
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {1, 8, 256, 64});
  RequireInvalid(c.Run(), "w13: expected a 3-D tensor [E, 2I, H], found rank 4 [1, 8, 256, 64]");
  c.w13 = Contig(kW13Slot, DType::kFloat16, {8, 256, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w13: expected dtype bf16, found fp16");
  c.w13 = Contig(kW13Slot, DType::kFloat32, {8, 256, 64});
  RequireInvalid(c.Run(), "w13: expected dtype bf16, found fp32");
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {257, 256, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w13: E (dim 0) must be 1 to 256, found shape [257, 256, 64]");
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {0, 256, 64});
  RequireInvalid(c.Run(), "w13: E (dim 0) must be 1 to 256, found shape [0, 256, 64]");
  // dim 1 is 2I with I a multiple of 8: a multiple of 16.
  for (int64_t gate_up : {40, 24, 8, 255, 0}) {
    c.w13 = Contig(kW13Slot, DType::kBFloat16, {8, gate_up, 64});
    RequireInvalid(c.Run(),
                   "kiln::ops::fused_moe: w13: dim 1 is the gate rows then the up rows, 2I with I a positive multiple "
                   "of 8, found shape [8, " +
                       std::to_string(gate_up) + ", 64]");
  }
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {8, 256, 32});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w13: expected shape [E, 2I, 64] (H = x's dim 1), found [8, 256, 32]");
  c.w13 = TensorView::Strided(FakeDeviceAddress(kW13Slot), DType::kBFloat16, {8, 256, 64}, {256 * 64, 64, 2});
  RequireInvalid(c.Run(), "w13: the last dim must be contiguous (stride 1)");
  // Experts that are not one block of rows: the GEMM reads w13 as E * 2I rows.
  c.w13 = TensorView::Strided(FakeDeviceAddress(kW13Slot), DType::kBFloat16, {8, 256, 64}, {256 * 64 + 64, 64, 1});
  RequireInvalid(c.Run(),
                 "w13: leading dims [8, 256, 64] with strides [16448, 64, 1] cannot be flattened into rows: dim 0 has "
                 "stride 16448, flattening needs 16384; make the tensor contiguous");
  c.w13 = TensorView::Contiguous(FakeDeviceAddress(kW13Slot), DType::kBFloat16, {8, 256, 64}, Device::CPU());
  RequireInvalid(c.Run(), "w13: expected a CUDA device tensor, found one on cpu");
}

TEST_CASE("fused_moe refuses a w2 that is not [E, H, I] of x's dtype", "[client][ops][validation][moe]") {
  Call c;
  c.w2 = Contig(kW2Slot, DType::kBFloat16, {8 * 64, 128});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w2: expected a 3-D tensor [E, H, I], found rank 2 [512, 128]");
  c.w2 = Contig(kW2Slot, DType::kFloat16, {8, 64, 128});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w2: expected dtype bf16, found fp16");
  // Transposed (w13's layout), another E, another I, another H.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{8, 128, 64}, {4, 64, 128}, {8, 64, 256}, {8, 72, 128}}) {
    c.w2 = Contig(kW2Slot, DType::kBFloat16, {shape[0], shape[1], shape[2]});
    RequireInvalid(c.Run(), "kiln::ops::fused_moe: w2: expected shape [8, 64, 128] (w13's E, x's H, w13's I), found [" +
                                std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " +
                                std::to_string(shape[2]) + "]");
  }
  c.w2 = TensorView::Strided(FakeDeviceAddress(kW2Slot), DType::kBFloat16, {8, 64, 128}, {64 * 128, 128, 2});
  RequireInvalid(c.Run(), "w2: the last dim must be contiguous (stride 1)");
}

TEST_CASE("fused_moe refuses topk_ids that are not [T, top_k] int32 with top_k 1 to min(E, 16)",
          "[client][ops][validation][moe]") {
  Call c;
  c.ids = Contig(kIdsSlot, DType::kInt32, {14});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: topk_ids: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  c.ids = Contig(kIdsSlot, DType::kInt64, {7, 2});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: topk_ids: expected dtype int32, found int64");
  c.ids = Contig(kIdsSlot, DType::kInt32, {6, 2});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: topk_ids: expected 7 rows (x's T), found shape [6, 2]");
  c.ids = Contig(kIdsSlot, DType::kInt32, {8, 2});
  RequireInvalid(c.Run(), "topk_ids: expected 7 rows (x's T), found shape [8, 2]");
  Call none(7, 0);
  RequireInvalid(none.Run(), "kiln::ops::fused_moe: topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 8, found [7, 0]");
  Call wide(7, 17, 256);
  RequireInvalid(wide.Run(), "topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 16, found [7, 17]");
  Call above_e(7, 5, 4);
  RequireInvalid(above_e.Run(), "topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 4, found [7, 5]");
  // The bounds themselves are fine: top_k 16 of 256, top_k E of E.
  for (const Call& ok : {Call(7, 16, 256), Call(7, 4, 4), Call(3, 1, 1, 8, 8)}) {
    auto plan = PlanFusedMoe(ok.Args(), "test");
    INFO(plan.status().ToString());
    CHECK(plan.ok());
  }
  c = Call();
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kInt32, {7, 2}, {4, 2});
  RequireInvalid(c.Run(), "topk_ids: the last dim must be contiguous (stride 1)");
  c.ids = Contig(kIdsSlot, DType::kInt32, {7, 2}, 2);
  RequireInvalid(c.Run(), "topk_ids: data pointer 0x7f0200000002 is not aligned to 4 bytes");
}

TEST_CASE("fused_moe refuses topk_weights unlike topk_ids or not fp32", "[client][ops][validation][moe]") {
  Call c;
  c.weights = Contig(kWeightsSlot, DType::kFloat32, {7, 3});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: topk_weights: expected shape [7, 2] (topk_ids'), found [7, 3]");
  c.weights = Contig(kWeightsSlot, DType::kFloat32, {6, 2});
  RequireInvalid(c.Run(), "topk_weights: expected shape [7, 2] (topk_ids'), found [6, 2]");
  c.weights = Contig(kWeightsSlot, DType::kBFloat16, {7, 2});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: topk_weights: expected dtype fp32, found bf16");
  c.weights = Contig(kWeightsSlot, DType::kFloat32, {14});
  RequireInvalid(c.Run(), "topk_weights: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  c.weights = TensorView::Strided(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {7, 2}, {2, 7});
  RequireInvalid(c.Run(), "topk_weights: the last dim must be contiguous (stride 1)");
}

TEST_CASE("fused_moe refuses an out that is not [T, H] of x's dtype", "[client][ops][validation][moe]") {
  Call c;
  c.out = Contig(kOutSlot, DType::kBFloat16, {7, 32});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: out: expected shape [7, 64] (x's), found [7, 32]");
  c.out = Contig(kOutSlot, DType::kBFloat16, {8, 64});
  RequireInvalid(c.Run(), "out: expected shape [7, 64] (x's), found [8, 64]");
  c.out = Contig(kOutSlot, DType::kFloat16, {7, 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: out: expected dtype bf16, found fp16");
  c.out = Contig(kOutSlot, DType::kFloat32, {7, 64});
  RequireInvalid(c.Run(), "out: expected dtype bf16, found fp32");
  c.out = Contig(kOutSlot, DType::kBFloat16, {7 * 64});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: out: expected a 2-D tensor [T, H], found rank 1 [448]");
  c.out = TensorView::Contiguous(nullptr, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out: data is NULL, but the tensor [7, 64] is not empty");
  c.out = TensorView::Strided(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {7, 64}, {64, 64});
  RequireInvalid(c.Run(), "out: the last dim must be contiguous (stride 1)");
}

TEST_CASE("fused_moe refuses a workspace that is not 1-D uint8, too small, strided, NULL or misaligned",
          "[client][ops][validation][moe]") {
  Call c;
  c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {2, kDefaultWorkspace / 2});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: expected a 1-D tensor [bytes], found rank 2 [2, 3328]");
  c.workspace = Contig(kWorkspaceSlot, DType::kInt32, {kDefaultWorkspace / 4});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: expected dtype uint8, found int32");
  c.workspace = Contig(kWorkspaceSlot, DType::kInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "workspace: expected dtype uint8, found int8");
  c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {kDefaultWorkspace - 1});
  RequireInvalid(
      c.Run(), "kiln::ops::fused_moe: workspace: expected at least fused_moe_workspace_bytes(T 7, top_k 2, E 8, H 64, "
               "I 128) = 6656 bytes, found [6655]");
  c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {0});
  RequireInvalid(c.Run(), "workspace: expected at least fused_moe_workspace_bytes(T 7, top_k 2, E 8, H 64, I 128) = "
                          "6656 bytes, found [0]");
  c.workspace = TensorView::Strided(FakeDeviceAddress(kWorkspaceSlot), DType::kUInt8, {kDefaultWorkspace}, {2});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: must be contiguous (stride 1), found stride 2");
  c.workspace = TensorView::Contiguous(nullptr, DType::kUInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: data pointer is NULL");
  for (uintptr_t offset : {1, 16, 128, 255}) {
    c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {kDefaultWorkspace}, offset);
    char address[32];
    std::snprintf(
        address, sizeof(address), "0x%llx",
        static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(FakeDeviceAddress(kWorkspaceSlot, offset))));
    RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: data pointer " + std::string(address) +
                                " is not 256-byte aligned");
  }
  c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {kDefaultWorkspace}, 128);
  RequireInvalid(c.Run(), "workspace: data pointer 0x7f0400000080 is not 256-byte aligned");
  c.workspace = TensorView::Contiguous(FakeDeviceAddress(kWorkspaceSlot), DType::kUInt8, {kDefaultWorkspace},
                                       Device::CPU());
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace: expected a CUDA device tensor, found one on cpu");
  // The figure is the call's: Mixtral at one token.
  Call mixtral(1, 2, 8, 4096, 14336);
  mixtral.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {75263});
  RequireInvalid(mixtral.Run(), "workspace: expected at least fused_moe_workspace_bytes(T 1, top_k 2, E 8, H 4096, I "
                                "14336) = 75264 bytes, found [75263]");
  // Exactly the bytes, or more, are fine.
  for (int64_t bytes : {kDefaultWorkspace, kDefaultWorkspace + 1, int64_t{1} << 20}) {
    c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {bytes});
    auto plan = PlanFusedMoe(c.Args(), "test");
    INFO(bytes << ": " << plan.status().ToString());
    CHECK(plan.ok());
  }
}

TEST_CASE("fused_moe refuses tensors on another device than x's", "[client][ops][validation][moe]") {
  const Device other = Device::CUDA(1);
  Call c;
  c.w13 = TensorView::Contiguous(FakeDeviceAddress(kW13Slot), DType::kBFloat16, {8, 256, 64}, other);
  RequireInvalid(c.Run(),
                 "kiln::ops::fused_moe: w13: on cuda:1, but x is on cuda:0; all tensors must be on one device");
  c = Call();
  c.w2 = TensorView::Contiguous(FakeDeviceAddress(kW2Slot), DType::kBFloat16, {8, 64, 128}, other);
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: w2: on cuda:1, but x is on cuda:0; all tensors must be on one device");
  c = Call();
  c.ids = TensorView::Contiguous(FakeDeviceAddress(kIdsSlot), DType::kInt32, {7, 2}, other);
  RequireInvalid(c.Run(), "topk_ids: on cuda:1, but x is on cuda:0; all tensors must be on one device");
  c = Call();
  c.weights = TensorView::Contiguous(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {7, 2}, Device::CUDA(3));
  RequireInvalid(c.Run(), "topk_weights: on cuda:3, but x is on cuda:0; all tensors must be on one device");
  c = Call();
  c.out = TensorView::Contiguous(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {7, 64}, other);
  RequireInvalid(c.Run(), "out: on cuda:1, but x is on cuda:0; all tensors must be on one device");
  c = Call();
  c.workspace = TensorView::Contiguous(FakeDeviceAddress(kWorkspaceSlot), DType::kUInt8, {kDefaultWorkspace}, other);
  RequireInvalid(c.Run(), "workspace: on cuda:1, but x is on cuda:0; all tensors must be on one device");
  // x is the call's device: x elsewhere names the first other tensor.
  c = Call();
  c.x = TensorView::Contiguous(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 64}, Device::CUDA(2));
  RequireInvalid(c.Run(), "w13: on cuda:0, but x is on cuda:2; all tensors must be on one device");
  // Host memory is no device.
  c = Call();
  c.ids = TensorView::Contiguous(FakeDeviceAddress(kIdsSlot), DType::kInt32, {7, 2}, Device::CPU());
  RequireInvalid(c.Run(), "topk_ids: expected a CUDA device tensor, found one on cpu");
  c = Call();
  c.weights = TensorView::Contiguous(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {7, 2}, Device::CPU());
  RequireInvalid(c.Run(), "topk_weights: expected a CUDA device tensor, found one on cpu");
}

TEST_CASE("fused_moe refuses an out overlapping anything but x itself, and a workspace overlapping any argument",
          "[client][ops][validation][moe]") {
  Call c;
  c.out = Contig(kW13Slot, DType::kBFloat16, {7, 64}, 4096);
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: out and w13 overlap in memory");
  c = Call();
  c.out = Contig(kW2Slot, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out and w2 overlap in memory");
  c = Call();
  c.out = Contig(kIdsSlot, DType::kBFloat16, {7, 64}, 8);
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: out and topk_ids overlap in memory");
  c = Call();
  c.out = Contig(kWeightsSlot, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out and topk_weights overlap in memory");
  // Part of x: refused, byte for byte (x is [7, 64] bf16: 896 bytes).
  c = Call();
  c.out = Contig(kXSlot, DType::kBFloat16, {7, 64}, 128);
  RequireInvalid(
      c.Run(), "kiln::ops::fused_moe: out and x overlap in memory (out 0x7f0000000080...0x7f0000000400, x "
               "0x7f0000000000...0x7f0000000380); out must be x itself (same pointer and strides) or separate memory");
  // x's pointer with other strides is not x itself.
  c = Call();
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 64}, {72, 1});
  c.out = Contig(kXSlot, DType::kBFloat16, {7, 64});
  RequireInvalid(c.Run(), "out and x overlap in memory");
  c.out = c.x;  // in place, padded rows and all: accepted
  auto padded_in_place = PlanFusedMoe(c.Args(), "test");
  INFO(padded_in_place.status().ToString());
  CHECK(padded_in_place.ok());
  // x itself: accepted (x is read by the gate-and-up GEMM, or gathered by the permutation, out
  // written by the last launch).
  c = Call();
  c.out = c.x;
  auto in_place = PlanFusedMoe(c.Args(), "test");
  INFO(in_place.status().ToString());
  REQUIRE(in_place.ok());
  CHECK(in_place->unpermute.params.out == FakeDeviceAddress(kXSlot));
  CHECK(in_place->gate_up.a == FakeDeviceAddress(kXSlot));
  CHECK(!in_place->permute.gather);
  kiln::client::SetFusedMoeGatherXForTesting(0);
  auto copied = kiln::client::PlanFusedMoeFully(c.Args(), "test");
  kiln::client::SetFusedMoeGatherXForTesting(-1);
  REQUIRE(copied.ok());
  CHECK(copied->permute.gather_params.x == FakeDeviceAddress(kXSlot));
  // The two halves of one [T, 2H] buffer share no element: accepted.
  c = Call();
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 64}, {128, 1});
  c.out = TensorView::Strided(FakeDeviceAddress(kXSlot, 128), DType::kBFloat16, {7, 64}, {128, 1});
  auto halves = PlanFusedMoe(c.Args(), "test");
  INFO(halves.status().ToString());
  CHECK(halves.ok());

  // The workspace is written from the first launch on: it shares no byte with any argument.
  c = Call();
  c.workspace = Contig(kXSlot, DType::kUInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "kiln::ops::fused_moe: workspace and x overlap in memory");
  c = Call();
  c.workspace = Contig(kW13Slot, DType::kUInt8, {kDefaultWorkspace}, 1024);
  RequireInvalid(c.Run(), "workspace and w13 overlap in memory");
  c = Call();
  c.workspace = Contig(kW2Slot, DType::kUInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "workspace and w2 overlap in memory");
  c = Call();
  c.workspace = Contig(kIdsSlot, DType::kUInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "workspace and topk_ids overlap in memory");
  c = Call();
  c.workspace = Contig(kWeightsSlot, DType::kUInt8, {kDefaultWorkspace});
  RequireInvalid(c.Run(), "workspace and topk_weights overlap in memory");
  c = Call();
  c.out = Contig(kWorkspaceSlot, DType::kBFloat16, {7, 64}, 512);
  RequireInvalid(c.Run(), "workspace and out overlap in memory");
  // x inside the workspace's used bytes, byte for byte (6656 = 0x1a00 bytes used).
  c = Call();
  c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {int64_t{1} << 20});
  c.x = Contig(kWorkspaceSlot, DType::kBFloat16, {7, 64}, 6144);
  RequireInvalid(
      c.Run(), "kiln::ops::fused_moe: workspace and x overlap in memory (workspace 0x7f0400000000...0x7f0400001a00, x "
               "0x7f0400001800...0x7f0400001b80); they must be separate memory");
  // Only the bytes the layout uses count: x past them, inside a larger buffer, is not touched.
  c.x = Contig(kWorkspaceSlot, DType::kBFloat16, {7, 64}, 8192);
  auto past = PlanFusedMoe(c.Args(), "test");
  INFO(past.status().ToString());
  CHECK(past.ok());
  // Read-only inputs may share memory (indices and weights packed in one buffer).
  c = Call();
  c.weights = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kFloat32, {7, 2}, {4, 1});
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot, 8), DType::kInt32, {7, 2}, {4, 1});
  auto packed = PlanFusedMoe(c.Args(), "test");
  INFO(packed.status().ToString());
  CHECK(packed.ok());
}

TEST_CASE("fused_moe refusals of a step name the step and its argument", "[client][ops][validation][moe]") {
  // TMA reads the weights: 16-byte aligned, rows a multiple of 16 bytes apart. The layer's own
  // checks leave these to the GEMMs, whose messages name the step.
  Call c;
  c.w13 = Contig(kW13Slot, DType::kBFloat16, {8, 256, 64}, 2);
  RequireInvalid(c.Run(),
                 "kiln::ops::fused_moe: fused_moe: the gate-and-up GEMM (grouped_gemm, b = w13, silu_and_mul): b: data "
                 "pointer 0x7f1000000002 is not 16-byte aligned (TMA reads it)");
  c = Call();
  c.w2 = TensorView::Strided(FakeDeviceAddress(kW2Slot), DType::kBFloat16, {8, 64, 128}, {64 * 132, 132, 1});
  RequireInvalid(c.Run(),
                 "kiln::ops::fused_moe: fused_moe: the down GEMM (grouped_gemm, b = w2): b: row stride 132 is not a "
                 "multiple of 8 elements (16 bytes, for TMA)");
  // Padded rows a multiple of 8 elements apart are fine, and reach the GEMMs' plans.
  c = Call();
  c.w13 = TensorView::Strided(FakeDeviceAddress(kW13Slot), DType::kBFloat16, {8, 256, 64}, {256 * 72, 72, 1});
  c.w2 = TensorView::Strided(FakeDeviceAddress(kW2Slot), DType::kBFloat16, {8, 64, 128}, {64 * 136, 136, 1});
  auto plan = PlanFusedMoe(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->gate_up.b_row_stride == 72);
  CHECK(plan->down.b_row_stride == 136);
}

// A recorded call as `kiln replay` gives it to the op's invoker: its tensors, no workspace
// tensor (the record describes it as a param), and scratch memory on request.
class RecordedArgs final : public kiln::client::NamedArgs {
 public:
  explicit RecordedArgs(const Call& c) : c_(c) {}
  const TensorView* Tensor(std::string_view name) const override {
    for (const auto& [n, t] : {std::pair{"out", &c_.out},
                               {"x", &c_.x},
                               {"w13", &c_.w13},
                               {"w2", &c_.w2},
                               {"topk_ids", &c_.ids},
                               {"topk_weights", &c_.weights}})
      if (name == n) return t;
    return nullptr;
  }
  const std::string* Param(std::string_view) const override { return nullptr; }
  int device() const override { return 0; }
  kiln::StatusOr<void*> Scratch(size_t bytes) override {
    scratch_bytes.push_back(bytes);
    return const_cast<void*>(FakeDeviceAddress(kWorkspaceSlot));
  }
  std::vector<size_t> scratch_bytes;

 private:
  const Call& c_;
};

TEST_CASE("a recorded fused_moe call is replayed on fresh workspace memory of the size it needs",
          "[client][ops][validation][moe]") {
  const kiln::client::OpDescriptor* op = kiln::client::FindOp("fused_moe");
  REQUIRE(op != nullptr);
  // out overlaps x without being it: refused by the checks after the workspace's, so the
  // refusal shows the scratch passed those (size, alignment, device), and nothing launches.
  Call c;
  c.out = Contig(kXSlot, DType::kBFloat16, {7, 64}, 2);
  RecordedArgs recorded(c);
  RequireInvalid(op->invoke(*op, recorded, nullptr), "out and x overlap in memory");
  REQUIRE(recorded.scratch_bytes.size() == 1);
  CHECK(recorded.scratch_bytes[0] == static_cast<size_t>(kDefaultWorkspace));

  // Arguments of the wrong rank get the smallest scratch; the plan names the argument.
  Call bad;
  bad.w13 = Contig(kW13Slot, DType::kBFloat16, {8 * 256, 64});
  RecordedArgs wrong_rank(bad);
  RequireInvalid(op->invoke(*op, wrong_rank, nullptr), "w13: expected a 3-D tensor");
  REQUIRE(wrong_rank.scratch_bytes.size() == 1);
  CHECK(wrong_rank.scratch_bytes[0] == 256);
}

// ---- The plan of a valid call ----

// The byte address `offset` into the fake workspace.
const void* WorkspaceAt(int64_t offset) { return static_cast<const char*>(FakeDeviceAddress(kWorkspaceSlot)) + offset; }

// The layout's regions, in order: [offset, offset + bytes of the tensor it holds).
void CheckLayout(const FusedMoeWorkspace& w, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                 int64_t inter) {
  INFO("T " << tokens << " top_k " << top_k << " E " << experts << " H " << hidden << " I " << inter);
  const int64_t rows = tokens * top_k;
  CHECK(w.rows == rows);
  CHECK(w.bytes == kiln::ops::fused_moe_workspace_bytes(tokens, top_k, experts, hidden, inter));
  CHECK(w.bytes == KILN_FUSED_MOE_WORKSPACE_BYTES(tokens, top_k, experts, hidden, inter));
  const std::pair<int64_t, int64_t> regions[] = {{w.expert_counts, 4 * experts},
                                                 {w.m_indptr, 4 * (experts + 1)},
                                                 {w.row_to_slot, 4 * rows},
                                                 {w.slot_to_row, 4 * rows},
                                                 {w.permuted_x, 2 * rows * hidden},
                                                 {w.activation, 2 * rows * inter},
                                                 {w.arrivals, 4 * ((hidden + 31) / 32)}};
  CHECK(w.expert_counts == 0);
  int64_t end = 0;
  for (const auto& [offset, bytes] : regions) {
    CHECK(offset % 256 == 0);
    CHECK(offset >= end);       // disjoint, in this order
    CHECK(offset - end < 256);  // no gap beyond the alignment
    end = offset + bytes;
  }
  CHECK(w.bytes >= end);
  CHECK(w.bytes - end < 256);
  CHECK(w.bytes % 256 == 0);
}

TEST_CASE("fused_moe's workspace layout is the public size: 256-byte aligned, disjoint regions", "[client][ops][moe]") {
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(1, 2, 8, 4096, 14336) == 75264);
  STATIC_REQUIRE(KILN_FUSED_MOE_WORKSPACE_BYTES(1, 2, 8, 4096, 14336) == 75264);
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(64, 2, 8, 4096, 14336) == 4720640);
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(1, 8, 128, 2048, 768) == 47104);
  STATIC_REQUIRE(KILN_FUSED_MOE_WORKSPACE_BYTES(64, 8, 128, 2048, 768) == 2889216);
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(0, 8, 128, 2048, 768) == 512 + 768 + 256);
  // The trace's examples: kernels/traces/fused_moe.json's workspace_bytes.
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(4096, 2, 8, 4096, 14336) == 302056448);
  STATIC_REQUIRE(kiln::ops::fused_moe_workspace_bytes(4096, 8, 256, 7168, 2048) == 604245248);
  for (int64_t tokens : {0, 1, 3, 64, 1000, 4096})
    for (int64_t top_k : {1, 2, 8, 16})
      for (int64_t experts : {1, 8, 33, 128, 256})
        for (auto [hidden, inter] : {std::pair<int64_t, int64_t>{8, 8}, {136, 200}, {4096, 14336}, {2048, 768}})
          CheckLayout(FusedMoeWorkspaceOf(tokens, top_k, experts, hidden, inter), tokens, top_k, experts, hidden,
                      inter);
}

TEST_CASE("fused_moe plans its steps over the workspace: Mixtral and Qwen3 at 1 and 64 tokens", "[client][ops][moe]") {
  struct Model {
    const char* name;
    int64_t experts, top_k, hidden, inter;
    int max_experts;  // moe_permute's specialization
  };
  for (const Model& m :
       {Model{"Mixtral-8x7B", 8, 2, 4096, 14336, 32}, Model{"Qwen3-30B-A3B", 128, 8, 2048, 768, 128}}) {
    for (int64_t tokens : {1, 64}) {
      for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
        INFO(m.name << " T " << tokens << " " << kiln::DTypeName(dtype));
        Call c(tokens, m.top_k, m.experts, m.hidden, m.inter, dtype);
        auto planned = PlanFusedMoe(c.Args(), "test");
        INFO(planned.status().ToString());
        REQUIRE(planned.ok());
        const FusedMoePlan& plan = *planned;
        const int64_t rows = tokens * m.top_k;
        CHECK(plan.tokens == tokens);
        const FusedMoeWorkspace& w = plan.workspace;
        const FusedMoeWorkspace want = FusedMoeWorkspaceOf(tokens, m.top_k, m.experts, m.hidden, m.inter);
        CHECK(w.rows == want.rows);
        CHECK(w.expert_counts == want.expert_counts);
        CHECK(w.m_indptr == want.m_indptr);
        CHECK(w.row_to_slot == want.row_to_slot);
        CHECK(w.slot_to_row == want.slot_to_row);
        CHECK(w.permuted_x == want.permuted_x);
        CHECK(w.activation == want.activation);
        CHECK(w.bytes == want.bytes);
        CheckLayout(w, tokens, m.top_k, m.experts, m.hidden, m.inter);

        // 1. moe_permute, gathering x, align 1, over the workspace's tables.
        const auto& p = plan.permute;
        CHECK(p.max_experts == m.max_experts);
        CHECK(p.device == 0);
        CHECK(p.params.expert_counts == WorkspaceAt(w.expert_counts));
        CHECK(p.params.m_indptr == WorkspaceAt(w.m_indptr));
        CHECK(p.params.row_to_slot == WorkspaceAt(w.row_to_slot));
        CHECK(p.params.slot_to_row == WorkspaceAt(w.slot_to_row));
        CHECK(p.params.topk_ids == FakeDeviceAddress(kIdsSlot));
        CHECK(p.params.tokens == tokens);
        CHECK(p.params.top_k == m.top_k);
        CHECK(p.params.experts == m.experts);
        CHECK(p.params.align == 1);
        CHECK(p.params.rows == rows);
        CHECK(p.params.ids_stride == m.top_k);
        CHECK(p.params.slot_to_row_stride == m.top_k);
        // The rule: the next GEMM reads x's rows by the row map at Qwen3's 2I 1536, the
        // permutation copies them at Mixtral's 28672.
        const bool gathers = 2 * m.inter <= kiln::client::kFusedMoeGatherMaxGateUp;
        CHECK(p.gather == !gathers);
        // Forced: KILN_FUSED_MOE_GATHER=0 copies them into permuted_x, which that GEMM reads; 1 has
        // the GEMM gather them.
        kiln::client::SetFusedMoeGatherXForTesting(0);
        auto copied = kiln::client::PlanFusedMoeFully(c.Args(), "test");
        kiln::client::SetFusedMoeGatherXForTesting(1);
        auto gathered = kiln::client::PlanFusedMoeFully(c.Args(), "test");
        kiln::client::SetFusedMoeGatherXForTesting(-1);
        REQUIRE(copied.ok());
        REQUIRE(gathered.ok());
        CHECK_FALSE(gathered->permute.gather);
        CHECK(gathered->gate_up.a == FakeDeviceAddress(kXSlot));
        CHECK(gathered->gate_up.a_rows == WorkspaceAt(w.row_to_slot));
        CHECK(gathered->gate_up.a_row_divisor == m.top_k);
        CHECK(gathered->gate_up.a_source_rows == tokens);
        CHECK(gathered->gate_up.rows == rows);
        const auto& cp = copied->permute;
        REQUIRE(cp.gather);
        CHECK(cp.gather_params.permuted_x == WorkspaceAt(w.permuted_x));
        CHECK(cp.gather_params.x == FakeDeviceAddress(kXSlot));
        CHECK(cp.gather_params.row_to_slot == cp.params.row_to_slot);
        CHECK(cp.gather_params.m_indptr == cp.params.m_indptr);
        CHECK(cp.gather_params.rows == rows);
        CHECK(cp.gather_params.row_bytes == 2 * m.hidden);
        CHECK(cp.gather_params.x_stride_bytes == 2 * m.hidden);
        CHECK(cp.gather_params.out_stride_bytes == 2 * m.hidden);
        CHECK(cp.gather_params.unit_bytes == 16);
        CHECK(copied->gate_up.a == WorkspaceAt(w.permuted_x));
        CHECK(copied->gate_up.a_rows == nullptr);

        // 2. The gate-and-up GEMM: x's rows (by row_to_slot, slot / top_k, or copied) . w13 ->
        // [rows, I], silu_and_mul.
        const auto& g = plan.gate_up;
        CHECK(g.silu_and_mul);
        CHECK_FALSE(g.masked);
        CHECK(g.dtype == dtype);
        CHECK(g.out_dtype == dtype);
        CHECK(g.groups == m.experts);
        CHECK(g.rows == rows);
        CHECK(g.n == 2 * m.inter);
        CHECK(g.k == m.hidden);
        CHECK(g.a == (gathers ? FakeDeviceAddress(kXSlot) : WorkspaceAt(w.permuted_x)));
        CHECK(g.a_rows == (gathers ? WorkspaceAt(w.row_to_slot) : nullptr));
        CHECK(g.b == FakeDeviceAddress(kW13Slot));
        CHECK(g.d == WorkspaceAt(w.activation));
        CHECK(g.group_rows == WorkspaceAt(w.m_indptr));
        CHECK(g.a_row_stride == m.hidden);
        CHECK(g.b_row_stride == m.hidden);
        CHECK(g.d_row_stride == m.inter);
        CHECK(std::string(g.api) == kiln::client::kFusedMoeGateUpStep);

        // 3. The down GEMM: [rows, I] . w2 -> [rows, H], over the gathered rows.
        const auto& d = plan.down;
        CHECK_FALSE(d.silu_and_mul);
        CHECK_FALSE(d.masked);
        CHECK(d.dtype == dtype);
        CHECK(d.out_dtype == dtype);
        CHECK(d.groups == m.experts);
        CHECK(d.rows == rows);
        CHECK(d.n == m.hidden);
        CHECK(d.k == m.inter);
        CHECK(d.a == WorkspaceAt(w.activation));
        CHECK(d.b == FakeDeviceAddress(kW2Slot));
        CHECK(d.d == WorkspaceAt(w.permuted_x));
        CHECK(d.group_rows == WorkspaceAt(w.m_indptr));
        CHECK(d.a_row_stride == m.inter);
        CHECK(d.b_row_stride == m.inter);
        CHECK(d.d_row_stride == m.hidden);
        CHECK(std::string(d.api) == kiln::client::kFusedMoeDownStep);

        // 4. The combine into out.
        const auto& u = plan.unpermute;
        CHECK(u.dtype == dtype);
        CHECK(u.params.out == FakeDeviceAddress(kOutSlot));
        CHECK(u.params.expert_out == WorkspaceAt(w.permuted_x));
        CHECK(u.params.slot_to_row == WorkspaceAt(w.slot_to_row));
        CHECK(u.params.topk_weights == FakeDeviceAddress(kWeightsSlot));
        CHECK(u.params.tokens == tokens);
        CHECK(u.params.rows == rows);
        CHECK(u.params.top_k == m.top_k);
        CHECK(u.params.out_stride_bytes == 2 * m.hidden);
        CHECK(u.params.expert_stride_bytes == 2 * m.hidden);
        CHECK(u.params.slot_to_row_stride == m.top_k);
        CHECK(u.params.weights_stride == m.top_k);
        CHECK(u.params.unit_bytes == 16);
      }
    }
  }
}

TEST_CASE("fused_moe picks its decode path for few slots per expert and plans its GEMVs over the workspace",
          "[client][ops][moe]") {
  using kiln::client::FusedMoePath;
  // The default rule: at most 1024 slots, and at most one per expert.
  CHECK(kiln::client::FusedMoeGemvByDefault(1, 2, 8));  // Mixtral at 1 token
  CHECK(kiln::client::FusedMoeGemvByDefault(4, 2, 8));  // Mixtral at 4: 8 slots, 8 experts
  CHECK_FALSE(kiln::client::FusedMoeGemvByDefault(8, 2, 8));
  CHECK(kiln::client::FusedMoeGemvByDefault(8, 8, 128));  // Qwen3-30B-A3B at 8 tokens
  CHECK(kiln::client::FusedMoeGemvByDefault(16, 8, 128));
  CHECK_FALSE(kiln::client::FusedMoeGemvByDefault(17, 8, 128));
  CHECK(kiln::client::FusedMoeGemvByDefault(32, 8, 256));  // DeepSeek-V3 at 32: 256 slots
  CHECK_FALSE(kiln::client::FusedMoeGemvByDefault(64, 8, 256));
  CHECK_FALSE(kiln::client::FusedMoeGemvByDefault(0, 8, 256));
  CHECK(kiln::client::FusedMoeGemvSlotsFit(128, 8));
  CHECK_FALSE(kiln::client::FusedMoeGemvSlotsFit(129, 8));

  // Qwen3-30B-A3B at 8 tokens, x rows padded to 2056 elements (16-byte aligned), ids padded.
  Call c(8, 8, 128, 2048, 768);
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {8, 2048}, {2056, 1});
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kInt32, {8, 8}, {12, 1});
  auto plan = PlanFusedMoe(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  REQUIRE(plan->gemv);
  const FusedMoeWorkspace& w = plan->workspace;
  const auto& g = plan->gemvs;
  CHECK(g.dtype == DType::kBFloat16);
  CHECK(g.gate_up_blocks == 768 / kiln::moe::kGemvGateUpColumns);
  CHECK(g.down_blocks == 2048 / kiln::moe::kGemvDownColumns);
  CHECK(g.expert_blocks == 64);  // min(E 128, 64 slots)
  for (const auto* p : {&g.gate_up, &g.down}) {
    CHECK(p->topk_ids == FakeDeviceAddress(kIdsSlot));
    CHECK(p->ids_stride == 12);
    CHECK(p->tokens == 8);
    CHECK(p->top_k == 8);
    CHECK(p->experts == 128);
  }
  CHECK(g.gate_up.in == FakeDeviceAddress(kXSlot));
  CHECK(g.gate_up.in_stride == 2056);
  CHECK(g.gate_up.weight == FakeDeviceAddress(kW13Slot));
  CHECK(g.gate_up.weight_row_stride == 2048);
  CHECK(g.gate_up.weight_expert_stride == 2 * 768 * 2048);
  CHECK(g.gate_up.out == WorkspaceAt(w.activation));
  CHECK(g.gate_up.out_stride == 768);
  CHECK(g.gate_up.slot_to_row == WorkspaceAt(w.slot_to_row));
  CHECK(g.gate_up.k == 2048);
  CHECK(g.gate_up.n == 768);
  CHECK(g.down.in == WorkspaceAt(w.activation));
  CHECK(g.down.in_stride == 768);
  CHECK(g.down.weight == FakeDeviceAddress(kW2Slot));
  CHECK(g.down.weight_row_stride == 768);
  CHECK(g.down.weight_expert_stride == 2048 * 768);
  CHECK(g.down.out == WorkspaceAt(w.permuted_x));
  CHECK(g.down.out_stride == 2048);
  CHECK(g.down.slot_to_row == nullptr);
  CHECK(g.down.k == 768);
  CHECK(g.down.n == 2048);
  // The same combine as the grouped path: rows by slot, from the map the gate-up GEMV writes.
  CHECK(plan->unpermute.params.expert_out == WorkspaceAt(w.permuted_x));
  CHECK(plan->unpermute.params.slot_to_row == WorkspaceAt(w.slot_to_row));
  CHECK(plan->unpermute.params.rows == 64);
  // The folded combine: the workspace's counters, the layer's out and weights; one column group
  // and a counter per down block until the launch knows the device.
  CHECK(g.foldable);
  CHECK(g.fold.arrivals == WorkspaceAt(w.arrivals));
  CHECK(g.fold.out == FakeDeviceAddress(kOutSlot));
  CHECK(g.fold.out_stride == 2048);
  CHECK(g.fold.topk_weights == FakeDeviceAddress(kWeightsSlot));
  CHECK(g.fold.weights_stride == 8);
  CHECK(g.fold.column_groups == 1);
  CHECK(g.fold.arrival_count == static_cast<int>(g.down_blocks));
  CHECK(w.bytes - w.arrivals >= 4 * static_cast<int64_t>(g.down_blocks));
  // out rows 8 bytes off 16: the separate combine (moe_unpermute takes any unit).
  Call odd = c;
  odd.out = TensorView::Strided(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {8, 2048}, {2052, 1});
  plan = PlanFusedMoe(odd.Args(), "test");
  REQUIRE(plan.ok());
  REQUIRE(plan->gemv);
  CHECK_FALSE(plan->gemvs.foldable);
  CHECK(plan->gemvs.fold.out_stride == 2052);

  // Forced either way; the decode path cannot take x rows 8 bytes off 16, nor 1032 slots.
  plan = PlanFusedMoe(c.Args(), "test", FusedMoePath::kGrouped);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->gemv);
  Call many(64, 8, 128, 2048, 768);
  plan = PlanFusedMoe(many.Args(), "test");
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->gemv);
  plan = PlanFusedMoe(many.Args(), "test", FusedMoePath::kGemv);
  REQUIRE(plan.ok());
  CHECK(plan->gemv);
  CHECK(plan->gemvs.expert_blocks == 128);
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {8, 2048}, {2052, 1});
  plan = PlanFusedMoe(c.Args(), "test", FusedMoePath::kGemv);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->gemv);
  Call over(129, 8, 256, 256, 128);
  plan = PlanFusedMoe(over.Args(), "test", FusedMoePath::kGemv);
  REQUIRE(plan.ok());
  CHECK_FALSE(plan->gemv);
}

TEST_CASE("the folded down GEMV takes two column groups where that makes its grid one wave", "[client][ops][moe]") {
  using kiln::moe::FusedMoeDownColumnGroups;
  // H200: 132 SMs, kGemvBlocksPerSm 3 blocks each = 396 resident blocks.
  static_assert(kiln::moe::kGemvBlocksPerSm == 3);
  CHECK(FusedMoeDownColumnGroups(2048 / 32, 8, 132) == 2);   // Qwen3-30B-A3B at 1 token: 512 -> 256 blocks
  CHECK(FusedMoeDownColumnGroups(4096 / 32, 2, 132) == 1);   // Mixtral at 1 token: 256 blocks fit already
  CHECK(FusedMoeDownColumnGroups(7168 / 32, 8, 132) == 1);   // DeepSeek-V3 at 1: 1792, still 896 at two
  CHECK(FusedMoeDownColumnGroups(2048 / 32, 64, 132) == 1);  // Qwen3 at 8 tokens: many waves either way
  CHECK(FusedMoeDownColumnGroups(99, 4, 132) == 1);          // 396: exactly one wave
  CHECK(FusedMoeDownColumnGroups(100, 4, 132) == 2);         // 400 -> 200
  CHECK(FusedMoeDownColumnGroups(199, 4, 132) == 1);         // 796 -> 400: not one wave at two groups either
  CHECK(FusedMoeDownColumnGroups(2048 / 32, 8, 78) == 1);    // 234 resident: 512 -> 256 does not fit
}

TEST_CASE("fused_moe plans padded rows of x, out and the routing", "[client][ops][moe]") {
  Call c(64, 8, 128, 2048, 768);
  c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {64, 2048}, {2056, 1});
  c.out = TensorView::Strided(FakeDeviceAddress(kOutSlot), DType::kBFloat16, {64, 2048}, {2080, 1});
  c.ids = TensorView::Strided(FakeDeviceAddress(kIdsSlot), DType::kInt32, {64, 8}, {12, 1});
  c.weights = TensorView::Strided(FakeDeviceAddress(kWeightsSlot), DType::kFloat32, {64, 8}, {16, 1});
  auto plan = PlanFusedMoe(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  // The gate-and-up GEMM gathers x's padded rows (4112 bytes apart: 16-byte copies) by the row map.
  const char* base = static_cast<const char*>(c.workspace.data);
  CHECK(!plan->permute.gather);
  CHECK(plan->gate_up.a == FakeDeviceAddress(kXSlot));
  CHECK(plan->gate_up.a_row_stride == 2056);
  CHECK(plan->gate_up.a_source_rows == 64);
  CHECK(plan->gate_up.rows == 64 * 8);
  CHECK(plan->gate_up.a_rows == reinterpret_cast<const int32_t*>(base + plan->workspace.row_to_slot));
  CHECK(plan->gate_up.a_row_divisor == 8);
  // KILN_FUSED_MOE_GATHER=0: the permutation copies them into the grouped layout instead.
  kiln::client::SetFusedMoeGatherXForTesting(0);
  auto copied = kiln::client::PlanFusedMoeFully(c.Args(), "test");
  kiln::client::SetFusedMoeGatherXForTesting(-1);
  REQUIRE(copied.ok());
  CHECK(copied->permute.gather);
  CHECK(copied->gate_up.a_rows == nullptr);
  CHECK(copied->gate_up.a == base + copied->workspace.permuted_x);
  CHECK(copied->permute.gather_params.x_stride_bytes == 2056 * 2);
  CHECK(copied->permute.gather_params.out_stride_bytes == 2048 * 2);  // the workspace's rows are dense
  // Rows 16-byte copies cannot read (2052 elements apart): the permutation copies them.
  Call odd = c;
  odd.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {64, 2048}, {2052, 1});
  odd.out = c.out;
  auto misaligned = PlanFusedMoe(odd.Args(), "test");
  REQUIRE(misaligned.ok());
  CHECK(misaligned->permute.gather);
  CHECK(misaligned->gate_up.a_rows == nullptr);
  CHECK(plan->permute.params.ids_stride == 12);
  CHECK(plan->unpermute.params.out_stride_bytes == 2080 * 2);
  CHECK(plan->unpermute.params.weights_stride == 16);
  CHECK(plan->unpermute.params.slot_to_row_stride == 8);  // the workspace's map
  // In place on the padded x.
  c.out = c.x;
  plan = PlanFusedMoe(c.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->unpermute.params.out == FakeDeviceAddress(kXSlot));
  CHECK(plan->unpermute.params.out_stride_bytes == 2056 * 2);
}

TEST_CASE("fused_moe with no tokens is validated like any call and launches nothing", "[client][ops][moe]") {
  Call none(0, 8, 128, 2048, 768);
  none.x = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 2048});
  none.out = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 2048});
  none.ids = TensorView::Contiguous(nullptr, DType::kInt32, {0, 8});
  none.weights = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 8});
  CHECK(none.workspace.shape[0] == 512 + 768 + 256);  // the tables of 128 experts and H's counters still have a place
  CHECK(none.Run().ok());                             // nothing launched: no GPU needed
  auto plan = PlanFusedMoe(none.Args(), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->tokens == 0);
  CHECK(plan->workspace.rows == 0);
  CHECK(plan->workspace.bytes == 512 + 768 + 256);
  CHECK(plan->workspace.bytes == kiln::ops::fused_moe_workspace_bytes(0, 8, 128, 2048, 768));
  // The checks still apply.
  Call small = none;
  small.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {1535});
  RequireInvalid(small.Run(), "workspace: expected at least fused_moe_workspace_bytes(T 0, top_k 8, E 128, H 2048, I "
                              "768) = 1536 bytes, found [1535]");
  Call no_k = none;
  no_k.ids = TensorView::Contiguous(nullptr, DType::kInt32, {0, 0});
  RequireInvalid(no_k.Run(), "topk_ids: top_k (dim 1) must be 1 to min(E, 16) = 16, found [0, 0]");
  Call narrow = none;
  narrow.weights = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 4});
  RequireInvalid(narrow.Run(), "topk_weights: expected shape [0, 8] (topk_ids'), found [0, 4]");
  Call odd = none;
  odd.x = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 2044});
  RequireInvalid(odd.Run(), "x: H (dim 1) must be a positive multiple of 8 (16-byte rows for TMA), found [0, 2044]");
}

// --- The C ABI ---

struct DLCall {
  int64_t x_shape[2] = {7, 64};
  int64_t w13_shape[3] = {8, 256, 64};
  int64_t w2_shape[3] = {8, 64, 128};
  int64_t index_shape[2] = {7, 2};
  int64_t workspace_shape[1] = {kDefaultWorkspace};
  DLTensor out{}, x{}, w13{}, w2{}, ids{}, weights{}, workspace{};
  DLCall() {
    auto make = [](DLTensor& t, Slot slot, int ndim, int64_t* shape, DLDataType dtype) {
      t.data = FakeDeviceAddress(slot);
      t.device = {kDLCUDA, 0};
      t.ndim = ndim;
      t.dtype = dtype;
      t.shape = shape;
    };
    make(out, kOutSlot, 2, x_shape, {kDLBfloat, 16, 1});
    make(x, kXSlot, 2, x_shape, {kDLBfloat, 16, 1});
    make(w13, kW13Slot, 3, w13_shape, {kDLBfloat, 16, 1});
    make(w2, kW2Slot, 3, w2_shape, {kDLBfloat, 16, 1});
    make(ids, kIdsSlot, 2, index_shape, {kDLInt, 32, 1});
    make(weights, kWeightsSlot, 2, index_shape, {kDLFloat, 32, 1});
    make(workspace, kWorkspaceSlot, 1, workspace_shape, {kDLUInt, 8, 1});
  }
  kiln_status Run() { return kiln_fused_moe(&out, &x, &w13, &w2, &ids, &weights, &workspace, nullptr); }
};

void RequireInvalidC(kiln_status status, const std::string& fragment) {
  const std::string error = kiln_last_error();
  INFO(error);
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(error.rfind("kiln_fused_moe: ", 0) == 0);
  CHECK(error.find(fragment) != std::string::npos);
}

TEST_CASE("the fused_moe C ABI checks DLTensors like the C++ API", "[client][capi][moe]") {
  DLCall t;
  RequireInvalidC(kiln_fused_moe(nullptr, &t.x, &t.w13, &t.w2, &t.ids, &t.weights, &t.workspace, nullptr),
                  "kiln_fused_moe: out: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, nullptr, &t.w13, &t.w2, &t.ids, &t.weights, &t.workspace, nullptr),
                  "kiln_fused_moe: x: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, &t.x, nullptr, &t.w2, &t.ids, &t.weights, &t.workspace, nullptr),
                  "kiln_fused_moe: w13: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, &t.x, &t.w13, nullptr, &t.ids, &t.weights, &t.workspace, nullptr),
                  "kiln_fused_moe: w2: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, &t.x, &t.w13, &t.w2, nullptr, &t.weights, &t.workspace, nullptr),
                  "kiln_fused_moe: topk_ids: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, &t.x, &t.w13, &t.w2, &t.ids, nullptr, &t.workspace, nullptr),
                  "kiln_fused_moe: topk_weights: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_fused_moe(&t.out, &t.x, &t.w13, &t.w2, &t.ids, &t.weights, nullptr, nullptr),
                  "kiln_fused_moe: workspace: the DLTensor pointer is NULL");
  DLCall wide;
  wide.x.dtype = {kDLFloat, 32, 1};
  RequireInvalidC(wide.Run(), "kiln_fused_moe: x: expected dtype bf16 or fp16, found fp32");
  DLCall half;
  half.w2.dtype = {kDLFloat, 16, 1};
  RequireInvalidC(half.Run(), "kiln_fused_moe: w2: expected dtype bf16, found fp16");
  DLCall k;
  int64_t other[2] = {7, 3};
  k.weights.shape = other;
  RequireInvalidC(k.Run(), "kiln_fused_moe: topk_weights: expected shape [7, 2] (topk_ids'), found [7, 3]");
  DLCall signed_bytes;
  signed_bytes.workspace.dtype = {kDLInt, 8, 1};
  RequireInvalidC(signed_bytes.Run(), "kiln_fused_moe: workspace: expected dtype uint8, found int8");
  DLCall small;
  small.workspace_shape[0] = kDefaultWorkspace - 256;
  RequireInvalidC(small.Run(), "kiln_fused_moe: workspace: expected at least fused_moe_workspace_bytes(T 7, top_k 2, E "
                               "8, H 64, I 128) = 6656 bytes, found [6400]");
  DLCall host;
  host.ids.device = {kDLCPU, 0};
  RequireInvalidC(host.Run(), "kiln_fused_moe: topk_ids: expected a CUDA device tensor, found one on cpu");
  DLCall fp64;
  fp64.weights.dtype = {kDLFloat, 64, 1};
  RequireInvalidC(fp64.Run(), "dtype code 2 (kDLFloat) with 64 bits is not supported");
  DLCall in_part;
  in_part.out.data = FakeDeviceAddress(kXSlot, 128);
  RequireInvalidC(in_part.Run(), "kiln_fused_moe: out and x overlap in memory");
  // No tokens: validated, nothing launched.
  DLCall none;
  none.x_shape[0] = 0;
  none.index_shape[0] = 0;
  none.workspace_shape[0] = kiln::ops::fused_moe_workspace_bytes(0, 2, 8, 64, 128);
  const kiln_status status = none.Run();
  INFO(kiln_last_error());
  CHECK(status == KILN_OK);
}

}  // namespace
