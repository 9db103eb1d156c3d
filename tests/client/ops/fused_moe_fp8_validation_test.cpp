// fused_moe_fp8 (kiln/ops/moe.h) refuses every bad argument before touching the driver, naming it;
// an accepted call plans the workspace layout (FusedMoeFp8WorkspaceOf, the public
// fused_moe_fp8_workspace_bytes and KILN_FUSED_MOE_FP8_WORKSPACE_BYTES: the down GEMM's rows over the
// regions dead by then, never over the activations it reads) and its steps over views of it: the
// grouped path's six, the decode path's five (by token and by slot), and the rule between them. No
// GPU: the pointers are fake and never dereferenced (the generic refusals of every op, a dtype the
// definition does not allow, a null, host or misaligned pointer, are every_op_validation_test's).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/moe/fused_moe_fp8_plan.h"
#include "kiln/ops/moe.h"
#include "tests/support/fake_device.h"
#include "tests/support/subprocess.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::client::FusedMoeFp8Args;
using kiln::client::FusedMoeFp8WorkspaceOf;
using kiln::client::FusedMoePath;
using kiln::client::PlanFusedMoeFp8;
using kiln::testing::FakeDeviceAddress;

enum Slot {
  kXSlot = 0,
  kOutSlot = 1,
  kIdsSlot = 2,
  kWeightsSlot = 3,
  kWorkspaceSlot = 4,
  kScalesSlot = 5,
  kW2Slot = 8,
  kW13Slot = 16
};

TensorView Contig(int slot, DType dtype, std::initializer_list<int64_t> shape, uintptr_t offset = 0) {
  return TensorView::Contiguous(FakeDeviceAddress(slot, offset), dtype, shape);
}

int64_t Blocks(int64_t n) { return (n + 127) / 128; }

struct Call {
  TensorView out, x, w13, w13_scales, w2, w2_scales, ids, weights, workspace;
  Call(int64_t tokens = 7, int64_t top_k = 2, int64_t experts = 8, int64_t hidden = 272, int64_t inter = 208) {
    x = Contig(kXSlot, DType::kBFloat16, {tokens, hidden});
    out = Contig(kOutSlot, DType::kBFloat16, {tokens, hidden});
    w13 = Contig(kW13Slot, DType::kFloat8E4M3, {experts, 2 * inter, hidden});
    w13_scales = Contig(kScalesSlot, DType::kFloat32, {experts, Blocks(2 * inter), Blocks(hidden)});
    w2 = Contig(kW2Slot, DType::kFloat8E4M3, {experts, hidden, inter});
    w2_scales = Contig(kScalesSlot, DType::kFloat32, {experts, Blocks(hidden), Blocks(inter)}, 1 << 20);
    ids = Contig(kIdsSlot, DType::kInt32, {tokens, top_k});
    weights = Contig(kWeightsSlot, DType::kFloat32, {tokens, top_k});
    workspace = Contig(kWorkspaceSlot, DType::kUInt8,
                       {kiln::ops::fused_moe_fp8_workspace_bytes(tokens, top_k, experts, hidden, inter)});
  }
  FusedMoeFp8Args Args() const { return {&out, &x, &w13, &w13_scales, &w2, &w2_scales, &ids, &weights, &workspace}; }
  std::string Refusal() const {
    auto plan = PlanFusedMoeFp8(Args(), "kiln::ops::fused_moe_fp8");
    REQUIRE(!plan.ok());
    CHECK(plan.status().code() == kiln::StatusCode::kInvalidArgument);
    return plan.status().message();
  }
};

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("fused_moe_fp8's workspace: regions in order, the down GEMM's rows over dead ones only",
          "[client][ops][validation][moe]") {
  for (const auto& [t, k, e, h, i] : {std::tuple{7, 2, 8, 272, 208},
                                      {4096, 8, 256, 7168, 2048},
                                      {1, 8, 128, 2048, 768},
                                      {3, 1, 1, 16, 16},
                                      {64, 8, 8, 4096, 14336}}) {
    INFO("T " << t << " top_k " << k << " E " << e << " H " << h << " I " << i);
    const auto w = FusedMoeFp8WorkspaceOf(t, k, e, h, i);
    const int64_t rows = int64_t{t} * k;
    CHECK(w.bytes == kiln::ops::fused_moe_fp8_workspace_bytes(t, k, e, h, i));
    CHECK(w.bytes == KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(t, k, e, h, i));
    for (int64_t offset :
         {w.m_indptr, w.row_to_slot, w.slot_to_row, w.x_q, w.x_scales, w.gate_up, w.act_q, w.act_scales})
      CHECK(offset % 256 == 0);
    CHECK(w.x_q >= w.slot_to_row + 4 * rows);
    CHECK(w.x_scales >= w.x_q + rows * h);
    CHECK(w.gate_up >= w.x_scales + 4 * rows * Blocks(h));
    CHECK(w.expert_out == w.x_q);
    // The activations the down GEMM reads lie past both what it writes and gate_up.
    CHECK(w.act_q >= w.expert_out + 2 * rows * h);
    CHECK(w.act_q >= w.gate_up + 2 * rows * 2 * i);
    CHECK(w.act_scales >= w.act_q + rows * i);
    CHECK(w.bytes >= w.act_scales + 4 * rows * Blocks(i));
  }
}

TEST_CASE("fused_moe_fp8 plans the grouped path's six steps over the workspace", "[client][ops][validation][moe]") {
  const Call c;
  auto plan = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(!plan->gemv);
  const char* base = static_cast<const char*>(c.workspace.data);
  const auto& w = plan->workspace;
  CHECK(plan->permute.gather == false);
  // x quantized once a token (7 rows), the gate-and-up GEMM gathering the codes by the row map.
  CHECK(plan->quantize.params.q == base + w.x_q);
  CHECK(plan->quantize.params.columns == 272);
  CHECK(plan->quantize.params.scale_stride == 3);
  CHECK(plan->quantize.params.row_to_slot == nullptr);
  CHECK(plan->quantize.params.m_indptr == nullptr);
  CHECK(plan->quantize.params.rows == 7);
  CHECK(plan->quantize.params.passes == 2);  // 272 columns: two passes of 256
  CHECK(plan->quantize.blocks == 1);         // 7 rows of 1 chunk, 8 warps a block
  CHECK(plan->gate_up.a == base + w.x_q);
  CHECK(plan->gate_up.a_scales == reinterpret_cast<const float*>(base + w.x_scales));
  CHECK(plan->gate_up.a_rows == reinterpret_cast<const int32_t*>(base + w.row_to_slot));
  CHECK(plan->gate_up.a_row_divisor == 2);
  CHECK(plan->gate_up.a_source_rows == 7);
  CHECK(plan->gate_up.rows == 14);
  // KILN_FUSED_MOE_GATHER=0: a quantized copy of x per row of the grouped layout (14 rows).
  kiln::client::SetFusedMoeGatherXForTesting(0);
  auto copied = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  kiln::client::SetFusedMoeGatherXForTesting(-1);
  REQUIRE(copied.ok());
  CHECK(copied->quantize.params.row_to_slot == reinterpret_cast<const int*>(base + w.row_to_slot));
  CHECK(copied->quantize.params.m_indptr == reinterpret_cast<const int*>(base + w.m_indptr));
  CHECK(copied->quantize.params.rows == 14);
  CHECK(copied->quantize.blocks == 2);  // 14 rows of 1 chunk
  CHECK(copied->gate_up.a_rows == nullptr);
  CHECK(copied->gate_up.rows == 14);
  // The rule: no gather where 2I passes kFusedMoeGatherMaxGateUp (8192): I 4608 copies.
  const Call wide(7, 2, 8, 272, 4608);
  auto wide_plan = PlanFusedMoeFp8(wide.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  REQUIRE(wide_plan.ok());
  CHECK(wide_plan->gate_up.a_rows == nullptr);
  CHECK(wide_plan->quantize.params.rows == 14);
  CHECK(plan->gate_up.dtype == DType::kFloat8E4M3);
  CHECK(plan->gate_up.out_dtype == DType::kBFloat16);
  CHECK(plan->gate_up.n == 416);
  CHECK(plan->gate_up.d == base + w.gate_up);
  CHECK(plan->silu.params.in == base + w.gate_up);
  CHECK(plan->silu.params.in_stride == 416);
  CHECK(plan->silu.params.columns == 208);
  CHECK(plan->silu.params.row_to_slot == nullptr);
  CHECK(plan->silu.params.passes == 1);
  CHECK(plan->silu.blocks == 2);  // 14 rows of 1 chunk (208 columns)
  CHECK(plan->down.a == base + w.act_q);
  CHECK(plan->down.d == base + w.expert_out);
  CHECK(plan->down.k == 208);
  CHECK(plan->unpermute.params.expert_out == base + w.expert_out);
  CHECK(!plan->silu_in_gate_up);  // I 208: a tile of the e4m3 epilogue would cross scale groups
}

TEST_CASE("fused_moe_fp8's grouped path quantizes silu(gate) * up in the gate-and-up GEMM where I is a multiple of "
          "128, unless KILN_FUSED_MOE_FP8_SILU_EPILOGUE turns it off",
          "[client][ops][validation][moe]") {
  // Qwen3-30B-A3B's prefill (4096 tokens, 128 experts, top 8, H 2048, I 768) and DeepSeek-V3's.
  for (const Call& big : {Call(4096, 8, 128, 2048, 768), Call(4096, 8, 256, 7168, 2048)}) {
    auto p = PlanFusedMoeFp8(big.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    CHECK(p->silu_in_gate_up);
  }
  const Call c(100, 8, 16, 512, 384);
  auto plan = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  const char* base = static_cast<const char*>(c.workspace.data);
  const auto& w = plan->workspace;
  CHECK(plan->silu_in_gate_up);
  CHECK(plan->gate_up.silu_and_mul);
  CHECK(plan->gate_up.out_dtype == DType::kFloat8E4M3);
  CHECK(plan->gate_up.n == 768);
  CHECK(plan->gate_up.d == base + w.act_q);
  CHECK(plan->gate_up.d_row_stride == 384);
  CHECK(plan->gate_up.d_scales == reinterpret_cast<const float*>(base + w.act_scales));
  CHECK(plan->gate_up.d_scale_stride == 3);
  CHECK(plan->down.a == base + w.act_q);
  CHECK(plan->down.a_scales == reinterpret_cast<const float*>(base + w.act_scales));
  // Off: the bf16 rows and the silu-and-quantize, as for any I.
  kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(0);
  auto separate = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(-1);
  REQUIRE(separate.ok());
  CHECK(!separate->silu_in_gate_up);
  CHECK(!separate->gate_up.silu_and_mul);
  CHECK(separate->gate_up.out_dtype == DType::kBFloat16);
  CHECK(separate->gate_up.d == base + w.gate_up);
  CHECK(separate->silu.params.in == base + w.gate_up);
}

// Run only as the child of the test below ([.] keeps it out of a plain run): Qwen3-30B-A3B's
// prefill planned under the tactic controls the parent set.
TEST_CASE("child: fused_moe_fp8's grouped plan under the process's tactic controls", "[.fused-moe-fp8-force-child]") {
  const Call qwen3(4096, 8, 128, 2048, 768);
  auto p = PlanFusedMoeFp8(qwen3.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  if (!p.ok()) {
    std::printf("status: %s\n", p.status().ToString().c_str());
    return;
  }
  std::printf("codes tile allowed: %d\n", kiln::client::GroupedFp8CodesTileAllowed() ? 1 : 0);
  std::printf("silu in gate_up: %d, gate_up out %s\n", p->silu_in_gate_up ? 1 : 0,
              p->gate_up.out_dtype == DType::kFloat8E4M3 ? "e4m3" : "bf16");
}

TEST_CASE("fused_moe_fp8 quantizes silu(gate) * up in its own kernel where KILN_FORCE_TACTIC forces the grouped fp8 "
          "GEMM to a tile the epilogue cannot take",
          "[client][ops][validation][moe]") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  struct Case {
    const char* force;  // KILN_FORCE_TACTIC, null: unset
    const char* want;
  };
  const Case cases[] = {
      {nullptr, "codes tile allowed: 1\nsilu in gate_up: 1, gate_up out e4m3\n"},
      // 256 wide: the epilogue's own width, any tile_m
      {"grouped_fp8_gemm:t64x256x128s4g8", "codes tile allowed: 1\nsilu in gate_up: 1, gate_up out e4m3\n"},
      // narrower: both GEMMs take the forced tile, the silu has its kernel
      {"grouped_fp8_gemm:t128x128x128s6g8", "codes tile allowed: 0\nsilu in gate_up: 0, gate_up out bf16\n"},
      // another op's tactic changes nothing here
      {"fp8_gemm:t128x128x128s6g8,grouped_fp8_gemm_masked:t64x128x128s4g8",
       "codes tile allowed: 1\nsilu in gate_up: 1, gate_up out e4m3\n"},
      // a bad value: the plan keeps the epilogue; the GEMM's call reports the variable (gemm's test)
      {"grouped_fp8_gemm:t128x100x128s4g8", "codes tile allowed: 1\nsilu in gate_up: 1, gate_up out e4m3\n"},
  };
  for (const Case& c : cases) {
    INFO("KILN_FORCE_TACTIC=" << (c.force ? c.force : "(unset)"));
    kiln::testing::SubprocessOptions options;
    options.argv = {self, "child: fused_moe_fp8's grouped plan under the process's tactic controls"};
    options.unset_env = {"KILN_TACTIC_BLOCKLIST", "KILN_FUSED_MOE_FP8_SILU_EPILOGUE"};
    if (c.force != nullptr) options.set_env["KILN_FORCE_TACTIC"] = c.force;
    else options.unset_env.push_back("KILN_FORCE_TACTIC");
    kiln::testing::Subprocess child(options);
    REQUIRE(child.Wait() == 0);
    INFO(child.Output());
    CHECK(child.Output().find(c.want) != std::string::npos);
  }
}

TEST_CASE("fused_moe_fp8 plans the decode path's five steps by token and by slot", "[client][ops][validation][moe]") {
  const Call c;  // T 7, top_k 2, E 8, H 272, I 208: 14 slots <= 4 E
  {
    auto plan = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGemv);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    REQUIRE(plan->gemv);
    const char* base = static_cast<const char*>(c.workspace.data);
    const auto& w = plan->workspace;
    const auto& q = plan->quantize;  // x by token
    CHECK(q.params.passes == 1);     // the decode path: a pass a warp
    CHECK(q.blocks == 2);            // 7 rows of 2 chunks (272 columns, 256 a warp), 8 warps a block
    CHECK(q.params.rows == 7);
    CHECK(q.params.row_to_slot == nullptr);
    CHECK(q.params.m_indptr == nullptr);
    CHECK(q.params.in == c.x.data);
    CHECK(q.params.q == base + w.x_q);
    const auto& g = plan->gemvs;
    CHECK(g.expert_blocks == 8);  // min(E, 14 slots)
    CHECK(g.gate_up.in == base + w.x_q);
    CHECK(g.gate_up.in_stride == 272);
    CHECK(g.gate_up.out == base + w.gate_up);
    CHECK(g.gate_up.out_stride == 416);
    CHECK(g.gate_up.slot_to_row == reinterpret_cast<const int*>(base + w.slot_to_row));
    CHECK(g.gate_up.weight == c.w13.data);
    CHECK(g.gate_up.weight_row_stride == 272);
    CHECK(g.gate_up.weight_expert_stride == 416 * 272);
    CHECK(g.gate_up.k == 272);
    CHECK(g.gate_up.n == 416);
    CHECK(g.gate_up.top_k == 2);
    CHECK(g.gate_up.tokens == 7);
    CHECK(g.gate_up_scales.in_scales == reinterpret_cast<const float*>(base + w.x_scales));
    CHECK(g.gate_up_scales.in_scale_stride == 3);
    CHECK(g.gate_up_scales.weight_scales == c.w13_scales.data);
    CHECK(g.gate_up_scales.weight_scale_row_stride == 3);
    CHECK(g.gate_up_scales.weight_scale_expert_stride == 4 * 3);
    // The silu by slot, skipping dropped ids' rows.
    CHECK(plan->silu.params.rows == 14);
    CHECK(plan->silu.blocks == 2);  // 14 slots of 1 chunk (208 columns)
    CHECK(plan->silu.params.in == base + w.gate_up);
    CHECK(plan->silu.params.row_to_slot == reinterpret_cast<const int*>(base + w.slot_to_row));
    CHECK(plan->silu.params.m_indptr == nullptr);
    CHECK(g.down.in == base + w.act_q);
    CHECK(g.down.in_stride == 208);
    CHECK(g.down.out == base + w.expert_out);
    CHECK(g.down.out_stride == 272);
    CHECK(g.down.slot_to_row == nullptr);
    CHECK(g.down.weight == c.w2.data);
    CHECK(g.down.weight_expert_stride == 272 * 208);
    CHECK(g.down.k == 208);
    CHECK(g.down.n == 272);
    CHECK(g.down_scales.in_scales == reinterpret_cast<const float*>(base + w.act_scales));
    CHECK(g.down_scales.in_scale_stride == 2);
    CHECK(g.down_scales.weight_scales == c.w2_scales.data);
    CHECK(g.down_scales.weight_scale_row_stride == 2);
    CHECK(g.down_scales.weight_scale_expert_stride == 3 * 2);
    CHECK(plan->unpermute.params.expert_out == base + w.expert_out);
    CHECK(plan->unpermute.params.slot_to_row == reinterpret_cast<const int*>(base + w.slot_to_row));
  }
}

TEST_CASE("fused_moe_fp8's path rule: the decode path up to four slots an expert, 1024 slots and 2 GiB of weights",
          "[client][ops][validation][moe]") {
  using kiln::client::FusedMoeFp8GemvSuits;
  CHECK(FusedMoeFp8GemvSuits(1, 8, 128, 2048, 768));    // Qwen3-30B-A3B-FP8, one token
  CHECK(FusedMoeFp8GemvSuits(64, 8, 128, 2048, 768));   // 512 slots = 4 E
  CHECK(!FusedMoeFp8GemvSuits(65, 8, 128, 2048, 768));  // 520
  CHECK(FusedMoeFp8GemvSuits(128, 8, 256, 64, 64));     // 1024 slots, small experts
  CHECK(!FusedMoeFp8GemvSuits(129, 8, 256, 64, 64));    // past 1024 slots
  CHECK(FusedMoeFp8GemvSuits(16, 2, 8, 4096, 14336));   // Mixtral: 32 slots, 1.4 GB
  CHECK(!FusedMoeFp8GemvSuits(17, 2, 8, 4096, 14336));
  CHECK(FusedMoeFp8GemvSuits(1, 8, 256, 7168, 2048));    // DeepSeek-V3: 8 experts, 352 MB
  CHECK(FusedMoeFp8GemvSuits(4, 8, 256, 7168, 2048));    // 32 experts, 1.41 GB
  CHECK(!FusedMoeFp8GemvSuits(8, 8, 256, 7168, 2048));   // 64 experts, 2.82 GB
  CHECK(!FusedMoeFp8GemvSuits(32, 8, 256, 7168, 2048));  // measured behind the grouped path
  // The rule is the default (kAuto): the plans below follow it.
  CHECK(FusedMoeFp8GemvSuits(1, 8, 128, 2048, 768));
  CHECK(!FusedMoeFp8GemvSuits(65, 8, 128, 2048, 768));
  {
    const Call c;
    auto plan = PlanFusedMoeFp8(c.Args(), "kiln::ops::fused_moe_fp8");
    REQUIRE(plan.ok());
    CHECK(plan->gemv);
  }
  {
    const Call wide(300, 8, 64, 272, 208);  // 2400 slots
    auto plan = PlanFusedMoeFp8(wide.Args(), "kiln::ops::fused_moe_fp8");
    REQUIRE(plan.ok());
    CHECK(!plan->gemv);
  }
  // Past 1024 slots even forced: the grouped path runs.
  const Call big(129, 8, 256, 272, 208);
  auto plan = PlanFusedMoeFp8(big.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGemv);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(!plan->gemv);
  // The grouped path where the rule picks the decode path, when asked.
  const Call small;
  auto grouped = PlanFusedMoeFp8(small.Args(), "kiln::ops::fused_moe_fp8", FusedMoePath::kGrouped);
  REQUIRE(grouped.ok());
  CHECK(!grouped->gemv);
}

TEST_CASE("fused_moe_fp8's decode GEMVs split k over more warps where their grid would leave SMs without a block",
          "[client][ops][validation][moe]") {
  using kiln::moe::FusedMoeFp8GemvKParts;
  using kiln::moe::FusedMoeFp8GemvRows;
  CHECK(FusedMoeFp8GemvRows(2) == 64);
  CHECK(FusedMoeFp8GemvRows(4) == 32);
  CHECK(FusedMoeFp8GemvRows(8) == 16);
  // 132 SMs (an H100 or H200).
  CHECK(FusedMoeFp8GemvKParts(1536, 8, 132) == 2);   // Qwen3-30B-A3B-FP8 gate-up, one token: 192 blocks
  CHECK(FusedMoeFp8GemvKParts(2048, 8, 132) == 2);   // its down: 256
  CHECK(FusedMoeFp8GemvKParts(28672, 2, 132) == 2);  // Mixtral gate-up, one token: 896
  CHECK(FusedMoeFp8GemvKParts(4096, 2, 132) == 4);   // Mixtral down: 128 at 2 parts, 256 at 4
  CHECK(FusedMoeFp8GemvKParts(4096, 8, 132) == 2);   // Mixtral down, eight experts: 512
  CHECK(FusedMoeFp8GemvKParts(4224, 2, 132) == 2);   // 66 row blocks x 2: exactly one block an SM
  CHECK(FusedMoeFp8GemvKParts(4160, 2, 132) == 4);   // 65 x 2 = 130: two SMs short
  CHECK(FusedMoeFp8GemvKParts(1024, 2, 132) == 8);   // 128 at 8 parts, still short: the most parts
  CHECK(FusedMoeFp8GemvKParts(272, 8, 132) == 8);    // the tests' small layers
  CHECK(FusedMoeFp8GemvKParts(272, 8, 20) == 2);     // on a 20-SM part: 5 x 8 = 40 blocks
}

TEST_CASE("fused_moe_fp8 refuses what its steps cannot take, naming the argument", "[client][ops][validation][moe]") {
  {
    Call c;
    c.x = Contig(kXSlot, DType::kBFloat16, {7, 264});
    c.out = Contig(kOutSlot, DType::kBFloat16, {7, 264});
    CHECK(Contains(c.Refusal(), "x: H (dim 1) must be a positive multiple of 16"));
  }
  {
    Call c;  // rows 276 bf16 apart: 552 bytes, not a multiple of 16
    c.x = TensorView::Strided(FakeDeviceAddress(kXSlot), DType::kBFloat16, {7, 272}, {276, 1});
    CHECK(Contains(c.Refusal(), "x: rows must start 16-byte aligned"));
  }
  {
    Call c;
    c.w13 = Contig(kW13Slot, DType::kBFloat16, {8, 416, 272});
    CHECK(Contains(c.Refusal(), "w13: expected dtype fp8_e4m3, found bf16"));
  }
  {
    Call c;
    c.w13 = Contig(kW13Slot, DType::kFloat8E4M3, {8, 400, 272});  // I 200: not a multiple of 16
    CHECK(Contains(c.Refusal(), "w13: dim 1 is the gate rows then the up rows, 2I with I a positive multiple of 16"));
  }
  {
    Call c;
    c.w13_scales = Contig(kScalesSlot, DType::kFloat32, {8, 3, 3});
    CHECK(Contains(c.Refusal(), "w13_scales: expected shape [8, 4, 3] (one per 128 x 128 block of w13[e]), found "
                                "[8, 3, 3]"));
  }
  {
    Call c;
    c.w2_scales = Contig(kScalesSlot, DType::kFloat32, {8, 3}, 1 << 20);
    CHECK(Contains(c.Refusal(), "w2_scales: expected a 3-D tensor [8, 3, 2]"));
  }
  {
    Call c;
    c.w2 = Contig(kW2Slot, DType::kFloat8E4M3, {8, 272, 200});
    CHECK(Contains(c.Refusal(), "w2: expected shape [8, 272, 208] (w13's E, x's H, w13's I), found [8, 272, 200]"));
  }
  {
    Call c;
    c.out = Contig(kScalesSlot, DType::kBFloat16, {7, 272});  // over w13_scales
    CHECK(Contains(c.Refusal(), "overlap"));
  }
  {
    Call c;
    c.workspace = Contig(kWorkspaceSlot, DType::kUInt8, {c.workspace.shape[0] - 256});
    CHECK(Contains(c.Refusal(), "workspace: expected at least fused_moe_fp8_workspace_bytes(T 7, top_k 2, E 8, H 272, "
                                "I 208)"));
  }
  {
    Call c;
    c.out = Contig(kOutSlot, DType::kFloat16, {7, 272});
    CHECK(Contains(c.Refusal(), "out: expected dtype bf16, found fp16"));
  }
  {
    // 4.8 M rows of 4096 warps' columns at a pass a warp: 2.46e9 blocks of 8 warps, past the grid's
    // 2^31 - 1.
    const Call c(600000, 8, 8, 1 << 20, 208);
    CHECK(Contains(c.Refusal(), "topk_ids: T 600000 x top_k 8 rows of up to 1048576 columns exceed the quantizing "
                                "kernels' grid (2^31 - 1 blocks of 8 x 256 columns); split the call"));
  }
}

}  // namespace
