// The moe family's fused_moe (kiln/ops/moe.h): a whole expert layer on routed tokens, planned
// from the caller's arguments and workspace (fused_moe_plan.h) as one of two paths: the grouped
// path, five launches of kernels the library already has (moe_permute and its gather, the
// grouped GEMM with the silu_and_mul epilogue, the grouped GEMM, moe_unpermute), or the decode
// path, fused_moe's own two GEMVs and moe_unpermute (or, folded, the two GEMVs alone; or the two
// in one grid after a preparing block, then moe_unpermute). Its entry in the op table, the decode
// path's launches, the KILN_FUSED_MOE_PATH, KILN_FUSED_MOE_PDL, KILN_FUSED_MOE_FOLD,
// KILN_FUSED_MOE_ONE_GRID and KILN_FUSED_MOE_DOWN_COLUMN_GROUPS controls, and its C++ and C APIs.
// docs/kernels-moe.md, "fused_moe".
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/core/api/auto_number_control.h"
#include "client/core/api/binary_switch.h"
#include "client/core/capi/c_status.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/moe/fused_moe_plan.h"
#include "client/ops/moe/moe_launch.h"
#include "client/ops/op_table.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::client {
namespace {

static_assert(ops::fused_moe_workspace_bytes(4096, 8, 128, 2048, 768) ==
                      KILN_FUSED_MOE_WORKSPACE_BYTES(4096, 8, 128, 2048, 768) &&
                  ops::fused_moe_workspace_bytes(1, 2, 8, 4096, 14336) ==
                      KILN_FUSED_MOE_WORKSPACE_BYTES(1, 2, 8, 4096, 14336) &&
                  ops::fused_moe_workspace_bytes(3, 1, 33, 8, 8) == KILN_FUSED_MOE_WORKSPACE_BYTES(3, 1, 33, 8, 8),
              "the C macro is the C++ function");

struct FusedMoeCall {
  FusedMoeArgs a;
  // The call record describes the workspace as a param, not as a tensor: what it holds before
  // the call is scratch the op overwrites, and a dump would copy all of it (~300 MB at a 4096-token
  // Mixtral prefill). A replay gives the call fresh memory of the size it needs
  // (InvokeFusedMoe), as batch_decode's does.
  static void Visit(const FusedMoeCall& c, TraceWriter& v) {
    v.Out("out", c.a.out)
        .In("x", c.a.x)
        .In("w13", c.a.w13)
        .In("w2", c.a.w2)
        .In("topk_ids", c.a.topk_ids)
        .In("topk_weights", c.a.topk_weights);
    if (c.a.workspace != nullptr) v.Param("workspace", c.a.workspace->Describe());
  }
};

// fused_moe's own kernels, one cubin per dtype: the decode path's GEMVs, their folded forms (the
// block and the columns per block are the contract's) and the one-grid form's two entries, in
// the generator's entry order.
struct FusedMoeSpec {
  DType dtype = DType::kBFloat16;
  bool operator==(const FusedMoeSpec&) const = default;
  auto Fields() const { return std::tie(dtype); }
  std::map<std::string, std::string> Params() const { return {{kParamDType, DTypeName(dtype)}}; }
};
const OpKernels kFusedMoeKernels = {
    moe::kFusedMoeOp,
    {{{.name = moe::kFusedMoeGateUpEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeDownEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeGateUpFoldedEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeDownFoldedEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeOneGridPrepareEntry, .min_block = moe::kGemvBlock},
      {.name = moe::kFusedMoeOneGridEntry, .min_block = moe::kGemvBlock}}}};
enum GemvEntry {
  kGateUpEntry = 0,
  kDownEntry = 1,
  kGateUpFoldedEntry = 2,
  kDownFoldedEntry = 3,
  kOneGridPrepareEntry = 4,
  kOneGridEntry = 5
};

// -1: as KILN_FUSED_MOE_PATH says (read once); else a FusedMoePath set by the tests.
std::atomic<int> g_path{-1};

FusedMoePath PathFromEnvironment() {
  static const FusedMoePath path = [] {
    const char* text = std::getenv("KILN_FUSED_MOE_PATH");
    if (text == nullptr || std::string(text) == "auto") return FusedMoePath::kAuto;
    const std::string value(text);
    if (value == "gemv" || value == "grouped") {
      std::fprintf(stderr,
                   "kiln: KILN_FUSED_MOE_PATH=%s: fused_moe and fused_moe_fp8 run their %s path wherever they can "
                   "in this process (docs/kernels-moe.md)\n",
                   text, value == "gemv" ? "decode (GEMV)" : "grouped");
      return value == "gemv" ? FusedMoePath::kGemv : FusedMoePath::kGrouped;
    }
    std::fprintf(
        stderr, "kiln: KILN_FUSED_MOE_PATH='%.64s' is not valid: expected auto, gemv or grouped; auto is used\n", text);
    return FusedMoePath::kAuto;
  }();
  return path;
}

BinarySwitch& FusedMoeOneGridSwitch() {
  static BinarySwitch s("KILN_FUSED_MOE_ONE_GRID", false,
                        "fused_moe's decode path runs its two GEMVs in one grid in this process (docs/kernels-moe.md)");
  return s;
}

BinarySwitch& FusedMoeFoldSwitch() {
  static BinarySwitch s("KILN_FUSED_MOE_FOLD", false,
                        "fused_moe's decode path folds the combine into its down GEMV in this process "
                        "(docs/kernels-moe.md)");
  return s;
}

// KILN_FUSED_MOE_DOWN_COLUMN_GROUPS (a diagnostic control, read once): the folded down GEMV's
// column groups a block, 1 .. moe::kMaxFoldedColumnGroups; 0 (unset or auto): the rule.
static_assert(moe::kMaxFoldedColumnGroups == 2, "KILN_FUSED_MOE_DOWN_COLUMN_GROUPS' refusal says 1 to 2");
constinit AutoNumberSetting g_down_column_groups(
    {"KILN_FUSED_MOE_DOWN_COLUMN_GROUPS", 1, moe::kMaxFoldedColumnGroups, "auto or 1 to 2"},
    "fused_moe's folded down GEMV takes {} column group(s) a block in this process (docs/kernels-moe.md)");

// KILN_FUSED_MOE_ONE_GRID_LAG (a diagnostic control, read once): how many experts' gate-up blocks
// the one grid's down blocks of an expert trail (FusedMoeOneGridParams::down_lag), 1 .. 256
// (capped at the chosen experts: every gate-up block first); 0 (unset or auto): none, each
// expert's down blocks right after its gate-up blocks.
constinit AutoNumberSetting g_one_grid_lag({"KILN_FUSED_MOE_ONE_GRID_LAG", 1, moe::kMaxExperts, "auto or 1 to 256"},
                                           "fused_moe's one grid runs an expert's down blocks {} experts' gate-up "
                                           "blocks later in this process (docs/kernels-moe.md)");
static_assert(moe::kMaxExperts == 256, "KILN_FUSED_MOE_ONE_GRID_LAG's refusal says 1 to 256");

// KILN_FUSED_MOE_GATHER (read once): auto (the rule), 0 never, 1 wherever x's rows allow.
enum class GatherChoice { kAuto, kNever, kAlways };
// A GatherChoice a test set, or -1: the environment's.
std::atomic<int> g_gather{-1};
GatherChoice GatherFromEnvironment() {
  static const GatherChoice gather = [] {
    const char* text = std::getenv("KILN_FUSED_MOE_GATHER");
    if (text == nullptr || std::string(text) == "auto") return GatherChoice::kAuto;
    const std::string value(text);
    if (value == "0" || value == "1") {
      std::fprintf(stderr,
                   value == "0"
                       ? "kiln: KILN_FUSED_MOE_GATHER=0: fused_moe's and fused_moe_fp8's grouped paths copy x's rows "
                         "(fp8: their codes) into the grouped layout for the gate-and-up GEMM in this process "
                         "(docs/kernels-moe.md)\n"
                       : "kiln: KILN_FUSED_MOE_GATHER=1: fused_moe's and fused_moe_fp8's gate-and-up GEMMs gather x's "
                         "rows wherever they can in this process, whatever I (docs/kernels-moe.md)\n");
      return value == "0" ? GatherChoice::kNever : GatherChoice::kAlways;
    }
    std::fprintf(stderr, "kiln: KILN_FUSED_MOE_GATHER='%.64s' is not valid: expected auto, 0 or 1; auto is used\n",
                 text);
    return GatherChoice::kAuto;
  }();
  return gather;
}

BinarySwitch& FusedMoeProgrammaticLaunchSwitch() {
  static BinarySwitch s("KILN_FUSED_MOE_PDL", true,
                        "fused_moe's and fused_moe_fp8's decode paths launch in plain stream order in this process "
                        "(docs/kernels-moe.md)");
  return s;
}

// One GEMV launch of entry `entry` (GemvEntry) with its kernel parameters `args`.
Status LaunchGemv(const PreparedLaunch& ready, GemvEntry entry, unsigned blocks_x, unsigned blocks_y, void** args,
                  bool programmatic, const char* step, void* stream) {
  const EntryLaunchReady& e = ready.launch->entry(entry);
  const char* name = kFusedMoeKernels.entries[entry].name;
  const bool gate_up = entry == kGateUpEntry || entry == kGateUpFoldedEntry;
  const bool one_grid = entry == kOneGridPrepareEntry || entry == kOneGridEntry;
  const int64_t columns = one_grid ? 0 : gate_up ? moe::kGemvGateUpColumns : moe::kGemvDownColumns;
  // The grid comes from the contract's columns (none for the one-grid form's entries, whose
  // blocks take their columns from their tickets); a daemon whose kernels tree says otherwise
  // serves a kernel built for another shape.
  if (e.block != static_cast<unsigned>(moe::kGemvBlock) || e.items_per_block != columns)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(step) + ": the daemon's launch hint for " + name + " is " + std::to_string(e.block) +
                      " threads and " + std::to_string(e.items_per_block) + " columns per block; the kernel needs " +
                      std::to_string(moe::kGemvBlock) + " and " + std::to_string(columns) +
                      " (a kilnd of another version?)");
  LaunchConfig config = EntryLaunchConfig(e, {blocks_x, blocks_y}, stream);
  config.programmatic_dependent_launch = programmatic;  // KILN_FUSED_MOE_PDL, not KILN_PDL
  return LaunchFunction(*ready.driver, e.function, config, args, name, &ready.launch->library->info);
}

// The decode path's two GEMVs; `*programmatic`: whether they (and so the combine after them) are
// launched as programmatic dependents (KILN_FUSED_MOE_PDL; the kernels are sm_90a's, which has
// them); `*folded`: whether the down GEMV combined into out (no combine launch follows).
Status LaunchGemvs(const FusedMoeGemvPlan& g, void* stream, bool* programmatic, bool* folded) {
  int sms = 0;
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunchFor(
                                                        kFusedMoeKernels,
                                                        [&](const ContextInfo& context) {
                                                          sms = context.multiprocessors;
                                                          return FusedMoeSpec{g.dtype};
                                                        },
                                                        g.device, kFusedMoeGateUpGemvStep));
  *programmatic = FusedMoeProgrammaticLaunch();
  moe::FusedMoeGemvParams gate_up = g.gate_up, down = g.down;
  if (FusedMoeOneGrid()) {
    *folded = false;
    moe::FusedMoeOneGridParams one_grid = g.one_grid;
    one_grid.down_lag = FusedMoeOneGridLagFor(g.expert_blocks);
    void* prepare_args[] = {&gate_up, &one_grid};
    KILN_RETURN_IF_ERROR(
        LaunchGemv(ready, kOneGridPrepareEntry, 1, 1, prepare_args, *programmatic, kFusedMoeOneGridStep, stream));
    void* args[] = {&gate_up, &down, &one_grid};
    const unsigned blocks = (g.gate_up_blocks + g.down_blocks) * g.expert_blocks;
    return LaunchGemv(ready, kOneGridEntry, blocks, 1, args, *programmatic, kFusedMoeOneGridStep, stream);
  }
  *folded = g.foldable && FusedMoeFoldedCombine();
  if (!*folded) {
    void* gate_up_args[] = {&gate_up};
    KILN_RETURN_IF_ERROR(LaunchGemv(ready, kGateUpEntry, g.gate_up_blocks, g.expert_blocks, gate_up_args, *programmatic,
                                    kFusedMoeGateUpGemvStep, stream));
    void* down_args[] = {&down};
    return LaunchGemv(ready, kDownEntry, g.down_blocks, g.expert_blocks, down_args, *programmatic,
                      kFusedMoeDownGemvStep, stream);
  }
  moe::FusedMoeFoldParams fold = g.fold;
  fold.column_groups = FusedMoeDownColumnGroupsFor(g.down_blocks, g.expert_blocks, sms);
  const unsigned down_blocks = (g.down_blocks + fold.column_groups - 1) / fold.column_groups;
  fold.arrival_count = static_cast<int>(down_blocks);
  gate_up.slot_to_row = nullptr;  // the combine launch that reads it does not follow
  void* gate_up_args[] = {&gate_up, &fold};
  KILN_RETURN_IF_ERROR(LaunchGemv(ready, kGateUpFoldedEntry, g.gate_up_blocks, g.expert_blocks, gate_up_args,
                                  *programmatic, kFusedMoeGateUpGemvStep, stream));
  void* down_args[] = {&down, &fold};
  return LaunchGemv(ready, kDownFoldedEntry, down_blocks, g.expert_blocks, down_args, *programmatic,
                    kFusedMoeDownGemvStep, stream);
}

// A validated call -> its steps in stream order on the caller's stream: each reads what the one
// before wrote (kernels on one stream run one after another).
Status RunFusedMoe(const FusedMoeCall& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const FusedMoePlan plan, PlanFusedMoe(call.a, api, FusedMoePathInUse()));
  if (plan.tokens == 0) return OkStatus();
  // A step's error names the step; the API's name goes before it, as for any op.
  if (plan.gemv) {
    bool programmatic = false, folded = false;
    KILN_RETURN_IF_ERROR(LaunchGemvs(plan.gemvs, stream, &programmatic, &folded).WithContext(api));
    if (folded) return OkStatus();
    return LaunchMoeUnpermutePlan(plan.unpermute, kFusedMoeCombineStep, stream, programmatic).WithContext(api);
  }
  KILN_RETURN_IF_ERROR(LaunchMoePermutePlan(plan.permute, kFusedMoePermuteStep, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.gate_up, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.down, stream).WithContext(api));
  return LaunchMoeUnpermutePlan(plan.unpermute, kFusedMoeCombineStep, stream).WithContext(api);
}

// The bytes a recorded call's workspace needs, from the shapes of its other tensors; 256 (the
// alignment) when their ranks are wrong, which the plan then refuses naming the tensor.
int64_t RecordedWorkspaceBytes(const FusedMoeArgs& a) {
  if (a.x->ndim != 2 || a.w13->ndim != 3 || a.topk_ids->ndim != 2) return 256;
  const int64_t bytes = ops::fused_moe_workspace_bytes(a.x->shape[0], a.topk_ids->shape[1], a.w13->shape[0],
                                                       a.x->shape[1], a.w13->shape[1] / 2);
  return bytes > 0 ? bytes : 256;
}

// Replay and tests: the tensors by name; the workspace is the arguments' own when they have one
// (a trace example, a dump written before the workspace became a param), else fresh scratch.
Status InvokeFusedMoe(const OpDescriptor& op, NamedArgs& named, void* stream) {
  FusedMoeCall call;
  ArgReader r(named);
  r.Out("out", call.a.out).In("x", call.a.x).In("w13", call.a.w13).In("w2", call.a.w2);
  r.In("topk_ids", call.a.topk_ids).In("topk_weights", call.a.topk_weights);
  KILN_RETURN_IF_ERROR(r.status());
  TensorView scratch;
  KILN_ASSIGN_OR_RETURN(call.a.workspace, ReplayWorkspace(named, RecordedWorkspaceBytes(call.a), &scratch));
  return CallOp(op, op.cpp_api, call, stream, RunFusedMoe);
}

const OpDescriptor kFusedMoe = {.name = "fused_moe",
                                .op = moe::kFusedMoeOp,
                                .family = "moe",
                                .cpp_api = "kiln::ops::fused_moe",
                                .c_api = "kiln_fused_moe",
                                .invoke = InvokeFusedMoe};
KILN_REGISTER_OP(kFusedMoe);

}  // namespace

FusedMoePath FusedMoePathInUse() {
  const int set = g_path.load(std::memory_order_relaxed);
  return set >= 0 ? static_cast<FusedMoePath>(set) : PathFromEnvironment();
}

void SetFusedMoePathForTesting(int path) { g_path.store(path, std::memory_order_relaxed); }

bool FusedMoeProgrammaticLaunch() { return FusedMoeProgrammaticLaunchSwitch().On(); }

bool FusedMoeFoldedCombine() { return FusedMoeFoldSwitch().On(); }

bool FusedMoeOneGrid() { return FusedMoeOneGridSwitch().On(); }

void SetFusedMoeOneGridForTesting(int on) { FusedMoeOneGridSwitch().SetForTesting(on); }

int FusedMoeOneGridLagFor(int64_t expert_blocks) {
  return static_cast<int>(std::min<int64_t>(g_one_grid_lag.Value(), expert_blocks));
}

void SetFusedMoeOneGridLagForTesting(int lag) { g_one_grid_lag.SetForTesting(lag > 0 ? lag : -1); }

bool FusedMoeGatherSuits(int64_t intermediate) { return 2 * intermediate <= kFusedMoeGatherMaxGateUp; }

bool FusedMoeGatherX(int64_t intermediate) {
  const int set = g_gather.load(std::memory_order_relaxed);
  const GatherChoice gather = set >= 0 ? static_cast<GatherChoice>(set) : GatherFromEnvironment();
  return gather == GatherChoice::kAuto ? FusedMoeGatherSuits(intermediate) : gather == GatherChoice::kAlways;
}

void SetFusedMoeGatherXForTesting(int gather) {
  constexpr GatherChoice kByValue[] = {GatherChoice::kNever, GatherChoice::kAlways, GatherChoice::kAuto};
  g_gather.store(gather >= 0 && gather <= 2 ? static_cast<int>(kByValue[gather]) : -1, std::memory_order_relaxed);
}

void SetFusedMoeFoldedCombineForTesting(int on) { FusedMoeFoldSwitch().SetForTesting(on); }

int FusedMoeDownColumnGroupsFor(int64_t column_blocks, int64_t expert_blocks, int sms) {
  if (const int64_t groups = g_down_column_groups.Value(); groups > 0) return static_cast<int>(groups);
  return moe::FusedMoeDownColumnGroups(column_blocks, expert_blocks, sms);
}

void SetFusedMoeDownColumnGroupsForTesting(int groups) { g_down_column_groups.SetForTesting(groups > 0 ? groups : -1); }

void SetFusedMoeProgrammaticLaunchForTesting(int on) { FusedMoeProgrammaticLaunchSwitch().SetForTesting(on); }

}  // namespace kiln::client

namespace kiln::ops {

Status fused_moe(const TensorView& out, const TensorView& x, const TensorView& w13, const TensorView& w2,
                 const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& workspace,
                 void* stream) {
  using namespace client;
  const FusedMoeCall call{{&out, &x, &w13, &w2, &topk_ids, &topk_weights, &workspace}};
  return CallOp(kFusedMoe, kFusedMoe.cpp_api, call, stream, RunFusedMoe);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_fused_moe(DLTensor* out, const DLTensor* x, const DLTensor* w13, const DLTensor* w2,
                           const DLTensor* topk_ids, const DLTensor* topk_weights, DLTensor* workspace, void* stream) {
  using namespace kiln::client;
  return CallOpC(kFusedMoe, stream, RunFusedMoe, [&](CTensors& t) {
    FusedMoeCall call;
    call.a.out = t.Tensor(out, "out");
    call.a.x = t.Tensor(x, "x");
    call.a.w13 = t.Tensor(w13, "w13");
    call.a.w2 = t.Tensor(w2, "w2");
    call.a.topk_ids = t.Tensor(topk_ids, "topk_ids");
    call.a.topk_weights = t.Tensor(topk_weights, "topk_weights");
    call.a.workspace = t.Tensor(workspace, "workspace");
    return call;
  });
}

}  // extern "C"
