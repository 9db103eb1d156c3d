// FusedMoePlan: the arguments of fused_moe (kiln/ops/moe.h) validated and turned into its steps,
// each the plan of an op the library already has: moe_permute with the gather (x into the
// grouped layout), the grouped GEMM with w13 and the silu_and_mul epilogue, the grouped GEMM
// with w2, and moe_unpermute. Their intermediate tensors are views of the caller's workspace
// (FusedMoeWorkspace). Pure: no driver call, so every check runs, and is tested, without a GPU.
#pragma once

#include <cstdint>

#include "client/ops/gemm/grouped_gemm_plan.h"
#include "client/ops/moe/moe_plan.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The steps' names, as their plans' messages (and launch errors) begin: string literals, since
// a plan keeps its api pointer.
inline constexpr const char* kFusedMoePermuteStep = "fused_moe: the permutation (moe_permute of topk_ids, gathering x)";
inline constexpr const char* kFusedMoeGateUpStep =
    "fused_moe: the gate-and-up GEMM (grouped_gemm, b = w13, silu_and_mul)";
inline constexpr const char* kFusedMoeDownStep = "fused_moe: the down GEMM (grouped_gemm, b = w2)";
inline constexpr const char* kFusedMoeCombineStep = "fused_moe: the combine (moe_unpermute into out)";

// The arguments as the API receives them.
struct FusedMoeArgs {
  const TensorView* out = nullptr;
  const TensorView* x = nullptr;
  const TensorView* w13 = nullptr;
  const TensorView* w2 = nullptr;
  const TensorView* topk_ids = nullptr;
  const TensorView* topk_weights = nullptr;
  const TensorView* workspace = nullptr;
};

// Where the intermediate tensors lie in the workspace: byte offsets of 256-byte aligned regions,
// in this order (what kiln::ops::fused_moe_workspace_bytes adds up). `rows` is T * top_k: one row
// per (token, choice), moe_permute's layout without padding (align 1: Kiln's grouped GEMM walks
// partial tiles itself). The gathered rows are dead once the first GEMM has read them, so the
// second GEMM writes the experts' outputs over them.
struct FusedMoeWorkspace {
  int64_t rows = 0;
  int64_t expert_counts = 0;  // int32 [E]
  int64_t m_indptr = 0;       // int32 [E + 1]
  int64_t row_to_slot = 0;    // int32 [rows]
  int64_t slot_to_row = 0;    // int32 [T, top_k]
  int64_t permuted_x = 0;     // [rows, H]: the gathered x, then the experts' outputs
  int64_t activation = 0;     // [rows, I]: silu(gate) * up
  int64_t bytes = 0;          // the end of the last region
};
FusedMoeWorkspace FusedMoeWorkspaceOf(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                      int64_t intermediate);

struct FusedMoePlan {
  int64_t tokens = 0;  // T = 0: nothing to launch
  FusedMoeWorkspace workspace;
  MoePermutePlan permute;
  GroupedGemmPlan gate_up;  // silu_and_mul: [rows, H] . w13 -> [rows, I]
  GroupedGemmPlan down;     // [rows, I] . w2 -> [rows, H]
  MoeUnpermutePlan unpermute;
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<FusedMoePlan> PlanFusedMoe(const FusedMoeArgs& args, const char* api);

}  // namespace kiln::client
