// FusedMoePlan: the arguments of fused_moe (kiln/ops/moe.h) validated and turned into its steps.
// The grouped path's steps are plans of ops the library already has: moe_permute (the tables; with
// the gather of x into the grouped layout only where the next GEMM cannot gather x's rows itself,
// FusedMoeGatherX), the grouped GEMM with w13 and the silu_and_mul epilogue,
// the grouped GEMM with w2, and moe_unpermute; the decode path's are fused_moe's own two GEMVs,
// then the same moe_unpermute. Their intermediate tensors are views of the caller's workspace
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
inline constexpr const char* kFusedMoePermuteStep = "fused_moe: the permutation (moe_permute of topk_ids)";
inline constexpr const char* kFusedMoeGateUpStep =
    "fused_moe: the gate-and-up GEMM (grouped_gemm, b = w13, silu_and_mul)";
inline constexpr const char* kFusedMoeDownStep = "fused_moe: the down GEMM (grouped_gemm, b = w2)";
inline constexpr const char* kFusedMoeCombineStep = "fused_moe: the combine (moe_unpermute into out)";
inline constexpr const char* kFusedMoeGateUpGemvStep =
    "fused_moe: the gate-and-up GEMV (kiln_fused_moe_gate_up, w13, silu_and_mul)";
inline constexpr const char* kFusedMoeDownGemvStep = "fused_moe: the down GEMV (kiln_fused_moe_down, w2)";
inline constexpr const char* kFusedMoeOneGridStep =
    "fused_moe: the two GEMVs in one grid (kiln_fused_moe_one_grid_prepare, kiln_fused_moe_one_grid)";

// Which of the two ways a call runs (docs/kernels-moe.md): the grouped path (moe_permute, two
// grouped GEMMs, the first gathering x's rows, the combine) or the decode path (two GEMVs over each chosen
// expert's slots, the combine). kAuto: FusedMoeGemvByDefault decides, where the decode path can
// take the call (FusedMoeGemvPossible).
enum class FusedMoePath { kAuto, kGemv, kGrouped };

// Whether the decode path takes T x top_k slots: at most moe::kMaxGemvSlots, and x, w13 and w2
// with 16-byte aligned pointers and row strides (the GEMVs' loads).
bool FusedMoeGemvSlotsFit(int64_t tokens, int64_t top_k);
// The default choice where both paths can run: the decode path while the slots are at most the
// experts (T x top_k <= E: about one slot per chosen expert, so one pass of the GEMVs over its
// weights; measured on the H200: docs/kernels-moe.md, "Choosing the path").
bool FusedMoeGemvByDefault(int64_t tokens, int64_t top_k, int64_t experts);

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
// second GEMM writes the experts' outputs over them. The last region is the decode path's folded
// combine's: one counter per kGemvDownColumns columns of H.
struct FusedMoeWorkspace {
  int64_t rows = 0;
  int64_t expert_counts = 0;  // int32 [E]
  int64_t m_indptr = 0;       // int32 [E + 1]
  int64_t row_to_slot = 0;    // int32 [rows]
  int64_t slot_to_row = 0;    // int32 [T, top_k]
  int64_t permuted_x = 0;     // [rows, H]: the gathered x (when copied), then the experts' outputs
  int64_t activation = 0;     // [rows, I]: silu(gate) * up
  int64_t arrivals = 0;       // uint32 [ceil(H / kGemvDownColumns)]: the folded combine's counters
  int64_t bytes = 0;          // the end of the last region
};
FusedMoeWorkspace FusedMoeWorkspaceOf(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                      int64_t intermediate);

// The decode path's two launches (fused_moe's own kernels, kiln/moe/moe_contract.h): act by slot
// into the workspace's activation region (and slot_to_row), then y by slot into its permuted_x
// region, which the combine reads as the grouped path's expert outputs. Folded (the *_folded
// entries with `fold`, where `foldable` and FusedMoeFoldedCombine() say so): the same two
// launches, the down GEMV's last block at each column block writing out, and no combine launch;
// the launch sets fold.column_groups (FusedMoeDownColumnGroups of the device's SMs) and
// fold.arrival_count (the down grid.x it gives).
struct FusedMoeGemvPlan {
  DType dtype = DType::kBFloat16;
  int device = 0;
  unsigned gate_up_blocks = 0;  // grid.x: ceil(I / kGemvGateUpColumns)
  unsigned down_blocks = 0;     // grid.x: ceil(H / kGemvDownColumns) (folded: divided by the column groups, up)
  unsigned expert_blocks = 0;   // grid.y: moe::FusedMoeGemvExpertBlocks(E, slots)
  moe::FusedMoeGemvParams gate_up = {};
  moe::FusedMoeGemvParams down = {};
  bool foldable = false;  // out's rows 16-byte aligned (the folded combine's stores)
  moe::FusedMoeFoldParams fold = {};
  // The one-grid form (FusedMoeOneGrid()): the prepare launch, then one grid of
  // (gate_up_blocks + down_blocks) x expert_blocks blocks with gate_up, down and these; its
  // counters in the workspace's m_indptr region (unused by the decode path otherwise).
  moe::FusedMoeOneGridParams one_grid = {};
};

struct FusedMoePlan {
  int64_t tokens = 0;  // T = 0: nothing to launch
  FusedMoeWorkspace workspace;
  bool gemv = false;  // the decode path: `gemvs`, then `unpermute`; else the grouped path
  // The grouped path's steps (empty in a decode-path plan from the memo: PlanFusedMoe).
  MoePermutePlan permute;
  GroupedGemmPlan gate_up;  // silu_and_mul: [rows, H] . w13 -> [rows, I]
  GroupedGemmPlan down;     // [rows, I] . w2 -> [rows, H]
  FusedMoeGemvPlan gemvs;
  MoeUnpermutePlan unpermute;  // both paths: rows by slot (decode) or permuted (grouped)
};

// The path calls ask for: KILN_FUSED_MOE_PATH (auto, gemv or grouped; read once per process,
// said once on stderr unless auto; another value is reported and auto used), unless a test set
// it: SetFusedMoePathForTesting(static_cast<int>(FusedMoePath::...)), -1 returns to the variable.
FusedMoePath FusedMoePathInUse();
void SetFusedMoePathForTesting(int path);

// Whether the decode path folds the combine into its down GEMV (two launches instead of three,
// the same bits): on with KILN_FUSED_MOE_FOLD=1 (read once per process; said once on stderr;
// off by default: slower on an H100, docs/kernels-moe.md). SetFusedMoeFoldedCombineForTesting(1
// / 0) overrides the environment, -1 returns to it. SetFusedMoeDownColumnGroupsForTesting(g) makes the folded
// down GEMV take g column groups a block (1 .. moe::kMaxFoldedColumnGroups) instead of
// KILN_FUSED_MOE_DOWN_COLUMN_GROUPS' (a diagnostic control, read once) or, unset,
// moe::FusedMoeDownColumnGroups' choice; 0 returns to those.
bool FusedMoeFoldedCombine();
void SetFusedMoeFoldedCombineForTesting(int on);
void SetFusedMoeDownColumnGroupsForTesting(int groups);
// The folded down GEMV's column groups a block, for `column_blocks` (ceil(H / 32)) by
// `expert_blocks` on a device of `sms` SMs, as the launch takes them (the order above).
int FusedMoeDownColumnGroupsFor(int64_t column_blocks, int64_t expert_blocks, int sms);

// Whether the decode path runs its two GEMVs as one grid (kiln_fused_moe_one_grid, after the
// one-block kiln_fused_moe_one_grid_prepare; docs/kernels-moe.md, "One grid"): down blocks stream
// w2 while other experts' gate-up blocks stream w13, the same bits. On with
// KILN_FUSED_MOE_ONE_GRID=1 (read once per process; said once on stderr; off by default: slower
// on an H100, docs/kernels-moe.md); it takes precedence over the folded combine.
// SetFusedMoeOneGridForTesting(1 / 0) overrides the environment, -1 returns to it.
bool FusedMoeOneGrid();
void SetFusedMoeOneGridForTesting(int on);
// The one grid's down_lag for `expert_blocks` chosen-expert ranks (FusedMoeOneGridParams):
// KILN_FUSED_MOE_ONE_GRID_LAG's (a diagnostic control, read once; 1 .. 256) capped at
// expert_blocks, or 0 (each expert's down blocks right after its gate-up blocks) where unset;
// SetFusedMoeOneGridLagForTesting(n > 0) forces n, 0 returns to the environment.
int FusedMoeOneGridLagFor(int64_t expert_blocks);
void SetFusedMoeOneGridLagForTesting(int lag);

// Whether the decode path's three launches are programmatic dependents (the down GEMV prefetches
// its weights while the gate-up GEMV ends; the kernels wait with griddepcontrol.wait either way),
// and fused_moe_fp8's decode path's five:
// on unless KILN_FUSED_MOE_PDL=0 (read once per process; said once on stderr; another value is
// reported and ignored). SetFusedMoeProgrammaticLaunchForTesting(1 / 0) overrides the
// environment, -1 returns to it.
bool FusedMoeProgrammaticLaunch();
void SetFusedMoeProgrammaticLaunchForTesting(int on);

// Whether the grouped paths' gate-and-up GEMMs gather x's rows by moe_permute's row_to_slot
// (a_gather, gemm_contract.h): fused_moe's reads x in place (where its rows are 16-byte aligned)
// instead of the permutation copying them into the grouped layout, and fused_moe_fp8 quantizes x
// once a token instead of once a row of that layout. The rule (FusedMoeGatherSuits): where the
// GEMM's N, 2I, is at most kFusedMoeGatherMaxGateUp. Measured on an H100 (docs/kernels-moe.md,
// "Gathering x"): the gathering GEMM is slower than the one that reads copied rows with TMA (10 %
// at Qwen3-30B-A3B's 2I 1536, 35 % at Mixtral-8x7B's 28672, where it is compute-bound for long),
// which the copy (and fp8's quantization of top_k copies) pays for only at small 2I: Qwen3 4-5 %
// faster with the gather, DeepSeek-V3 fp8 (2I 4096) 6 %, Mixtral 20 % slower.
// KILN_FUSED_MOE_GATHER (auto, 0 never, 1 wherever x's rows allow; read once per process, said
// once on stderr unless auto; another value is reported and auto used) overrides the rule;
// SetFusedMoeGatherXForTesting(0 / 1, or 2 for the rule) overrides both, -1 returns to the
// environment.
inline constexpr int64_t kFusedMoeGatherMaxGateUp = 8192;
bool FusedMoeGatherSuits(int64_t intermediate);
bool FusedMoeGatherX(int64_t intermediate);
void SetFusedMoeGatherXForTesting(int gather);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem. Every
// argument is checked the same way whichever path `path` (or kAuto's rule) picks; kGemv where
// the decode path cannot take the call runs the grouped path. A call with the layouts and path
// of a decode-path call the thread accepted recently reruns only the checks that read pointers
// (plan_memo.h; a decode step calls fused_moe once a layer with one set of layouts): the answer
// is the same, but its plan leaves the grouped path's steps (permute, gate_up, down), which that
// path does not launch, empty.
StatusOr<FusedMoePlan> PlanFusedMoe(const FusedMoeArgs& args, const char* api, FusedMoePath path = FusedMoePath::kAuto);
// The same with every check run and every step planned, nothing remembered: what the tests
// compare the memo with.
StatusOr<FusedMoePlan> PlanFusedMoeFully(const FusedMoeArgs& args, const char* api,
                                         FusedMoePath path = FusedMoePath::kAuto);

}  // namespace kiln::client
