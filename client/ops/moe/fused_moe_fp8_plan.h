// FusedMoeFp8Plan: the arguments of fused_moe_fp8 (kiln/ops/moe.h) validated and turned into the
// steps of one of two paths. The grouped path's six: moe_permute (the tables, no gather), x
// quantized (fused_moe_fp8's own kernel: once a token where the next GEMM gathers its rows,
// FusedMoeGatherX, else once a row of the grouped layout), grouped_fp8_gemm with w13 into bf16
// rows (or, where I is a multiple of 128, into the activations' codes: its silu_and_mul epilogue),
// the silu-and-quantize (its other kernel; not where the GEMM quantized), grouped_fp8_gemm with w2
// into bf16 rows, and moe_unpermute.
// The decode path's five: x quantized by token, the gate-up GEMV by slot, the silu-and-quantize by
// slot, the down GEMV by slot, and moe_unpermute. The intermediate tensors are views of
// the caller's workspace (FusedMoeFp8Workspace). Pure: no driver call, so every check runs, and is
// tested, without a GPU.
#pragma once

#include <cstdint>

#include "client/ops/gemm/grouped_gemm_plan.h"
#include "client/ops/moe/fused_moe_plan.h"
#include "client/ops/moe/moe_plan.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The steps' names, as their plans' messages (and launch errors) begin: string literals, since a
// plan keeps its api pointer.
inline constexpr const char* kFusedMoeFp8PermuteStep = "fused_moe_fp8: the permutation (moe_permute of topk_ids)";
inline constexpr const char* kFusedMoeFp8QuantizeStep =
    "fused_moe_fp8: x quantized to e4m3 (kiln_fused_moe_fp8_quantize)";
inline constexpr const char* kFusedMoeFp8GateUpStep = "fused_moe_fp8: the gate-and-up GEMM (grouped_fp8_gemm, b = w13)";
inline constexpr const char* kFusedMoeFp8SiluStep =
    "fused_moe_fp8: silu(gate) * up quantized to e4m3 (kiln_fused_moe_fp8_silu_and_mul_quantize)";
inline constexpr const char* kFusedMoeFp8DownStep = "fused_moe_fp8: the down GEMM (grouped_fp8_gemm, b = w2)";
inline constexpr const char* kFusedMoeFp8CombineStep = "fused_moe_fp8: the combine (moe_unpermute into out)";
inline constexpr const char* kFusedMoeFp8GateUpGemvStep =
    "fused_moe_fp8: the gate-and-up GEMV (kiln_fused_moe_fp8_gate_up, w13)";
inline constexpr const char* kFusedMoeFp8DownGemvStep = "fused_moe_fp8: the down GEMV (kiln_fused_moe_fp8_down, w2)";

// The arguments as the API receives them.
struct FusedMoeFp8Args {
  const TensorView* out = nullptr;
  const TensorView* x = nullptr;
  const TensorView* w13 = nullptr;
  const TensorView* w13_scales = nullptr;
  const TensorView* w2 = nullptr;
  const TensorView* w2_scales = nullptr;
  const TensorView* topk_ids = nullptr;
  const TensorView* topk_weights = nullptr;
  const TensorView* workspace = nullptr;
};

// Where the intermediate tensors lie in the workspace: byte offsets of 256-byte aligned regions, in
// the order kiln::ops::fused_moe_fp8_workspace_bytes adds them up. rows = T * top_k (moe_permute's
// layout with align 1). x_q, x_scales and gate_up are dead once the silu-and-quantize has read
// gate_up, so the down GEMM writes its rows (expert_out) from x_q's offset on, over them.
struct FusedMoeFp8Workspace {
  int64_t rows = 0;
  int64_t expert_counts = 0;  // int32 [E]
  int64_t m_indptr = 0;       // int32 [E + 1]
  int64_t row_to_slot = 0;    // int32 [rows]
  int64_t slot_to_row = 0;    // int32 [T, top_k]
  int64_t x_q = 0;            // e4m3 [rows, H]: x by row of the grouped layout, or its first T rows by token
  int64_t x_scales = 0;       // fp32 [rows, ceil(H / 128)]
  int64_t gate_up = 0;        // bf16 [rows, 2I]: the w13 GEMM's rows
  int64_t expert_out = 0;     // bf16 [rows, H]: the w2 GEMM's rows, at x_q's offset
  int64_t act_q = 0;          // e4m3 [rows, I]: silu(gate) * up
  int64_t act_scales = 0;     // fp32 [rows, ceil(I / 128)]
  int64_t bytes = 0;          // the end of the last region
};
FusedMoeFp8Workspace FusedMoeFp8WorkspaceOf(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                            int64_t intermediate);

// One launch of a quantizing kernel: grid.x = blocks of kFp8QuantBlock threads.
struct FusedMoeFp8QuantizePlan {
  unsigned blocks = 0;
  moe::FusedMoeFp8QuantParams params = {};
};

// The decode path's two GEMVs (fused_moe_fp8's own kernels, kiln/moe/moe_contract.h): w13's rows
// by slot into gate_up, then w2's by slot into expert_out, which the combine reads as the grouped
// path's rows (slot_to_row is s or -1).
struct FusedMoeFp8GemvPlan {
  // grid.x is the launch's: ceil(n / moe::FusedMoeFp8GemvRows(k parts)), the parts chosen for the
  // device's SMs (FusedMoeFp8GemvKPartsFor).
  unsigned expert_blocks = 0;  // grid.y: moe::FusedMoeGemvExpertBlocks(E, slots)
  moe::FusedMoeGemvParams gate_up = {};
  moe::FusedMoeFp8GemvScales gate_up_scales = {};
  moe::FusedMoeGemvParams down = {};
  moe::FusedMoeFp8GemvScales down_scales = {};
};

struct FusedMoeFp8Plan {
  int64_t tokens = 0;  // T = 0: nothing to launch
  int device = 0;
  // The decode path: quantize (x by token), gemvs.gate_up, silu (by slot), gemvs.down, unpermute;
  // else the grouped path's six steps. The grouped steps are planned either way (their checks are
  // the call's), launched only on the grouped path.
  bool gemv = false;
  FusedMoeFp8Workspace workspace;
  MoePermutePlan permute;            // the tables only
  FusedMoeFp8QuantizePlan quantize;  // x -> x_q, x_scales (by token; grouped without the gather: by row)
  GroupedGemmPlan gate_up;           // x_q . w13 -> gate_up [rows, 2I] bf16 (or act_q, act_scales)
  FusedMoeFp8QuantizePlan silu;      // gate_up -> act_q, act_scales
  // The grouped path's gate-and-up GEMM writes act_q and act_scales itself (its silu_and_mul
  // epilogue into e4m3: I a multiple of 128, FusedMoeFp8SiluEpilogue, no KILN_FORCE_TACTIC of
  // another tile width: GroupedFp8CodesTileAllowed), and the silu-and-quantize
  // is not launched there; the decode path launches it either way.
  bool silu_in_gate_up = false;
  GroupedGemmPlan down;       // act_q . w2 -> expert_out [rows, H] bf16
  FusedMoeFp8GemvPlan gemvs;  // the decode path's products
  MoeUnpermutePlan unpermute;
};

// Where the decode path should run: T x top_k <= 4 E (about four slots an expert; a GEMV pass
// takes eight, so few experts need a second pass over their weights), at most moe::kMaxGemvSlots
// slots, and at most 2 GiB of expert weights read (min(T x top_k, E) experts of 3 H I bytes), past
// which the grouped GEMMs stream them faster. Measured on an H100 (fused_moe_fp8_plan.cpp;
// docs/kernels-moe.md, "The fp8 decode path").
// The default choice (kAuto); KILN_FUSED_MOE_PATH forces either path.
bool FusedMoeFp8GemvSuits(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t intermediate);

// Whether the grouped path may quantize silu(gate) * up in the gate-and-up GEMM's epilogue (on
// unless KILN_FUSED_MOE_FP8_SILU_EPILOGUE=0, a diagnostic control to measure the separate
// silu-and-quantize against it; read once per process, said once on stderr).
// SetFusedMoeFp8SiluEpilogueForTesting(0 / 1) overrides the environment, -1 returns to it.
bool FusedMoeFp8SiluEpilogue();
void SetFusedMoeFp8SiluEpilogueForTesting(int on);

// How many k blocks ahead of their register loads the decode GEMVs ask L2 for their weight rows
// (FusedMoeFp8GemvScales::prefetch_blocks): 0 (none) unless KILN_FUSED_MOE_FP8_PREFETCH=1..8 (a
// diagnostic control to measure it with; read once per process, said once on stderr; another
// value is reported and auto used). SetFusedMoeFp8PrefetchBlocksForTesting(n >= 0) overrides the
// environment, -1 returns to it.
int FusedMoeFp8PrefetchBlocks();
void SetFusedMoeFp8PrefetchBlocksForTesting(int blocks);

// The warps that share each group of 16 weight rows of a decode GEMV over `rows` (its n) by
// `expert_blocks` on a device of `sms` SMs (FusedMoeFp8GemvScales::k_parts): 2, 4 or 8, as
// SetFusedMoeFp8GemvKPartsForTesting(2 / 4 / 8) or KILN_FUSED_MOE_FP8_K_PARTS (a diagnostic
// control: read once per process, said once on stderr; another value is reported and auto used)
// force it, else moe::FusedMoeFp8GemvKParts' choice. Another value in the setter returns to those.
int FusedMoeFp8GemvKPartsFor(int64_t rows, int64_t expert_blocks, int sms);
void SetFusedMoeFp8GemvKPartsForTesting(int parts);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem. `path`
// as fused_moe's (FusedMoePath, fused_moe_plan.h: KILN_FUSED_MOE_PATH serves both layers); every
// argument is checked the same way whichever path runs. A call with the layouts and path of a
// decode-path call the thread accepted recently reruns only the checks that read pointers
// (plan_memo.h, as PlanFusedMoe): the answer is the same, but its plan leaves the grouped path's
// steps (permute, gate_up, down), which that path does not launch, empty.
StatusOr<FusedMoeFp8Plan> PlanFusedMoeFp8(const FusedMoeFp8Args& args, const char* api,
                                          FusedMoePath path = FusedMoePath::kAuto);
// The same with every check run and every step planned, nothing remembered: what the tests
// compare the memo with.
StatusOr<FusedMoeFp8Plan> PlanFusedMoeFp8Fully(const FusedMoeFp8Args& args, const char* api,
                                               FusedMoePath path = FusedMoePath::kAuto);

}  // namespace kiln::client
