// The moe family's fused_moe_fp8 (kiln/ops/moe.h): a whole expert layer on block-scaled fp8
// experts, planned from the caller's arguments and workspace (fused_moe_fp8_plan.h) as launches on
// the caller's stream: on the grouped path moe_permute's tables, fused_moe_fp8's gather-and-quantize,
// the w13 grouped_fp8_gemm, fused_moe_fp8's silu-and-quantize, the w2 grouped_fp8_gemm and
// moe_unpermute; on the decode path x's quantization by token, fused_moe_fp8's two GEMVs with the
// silu-and-quantize between them, and moe_unpermute, as programmatic dependents (fused_moe's
// controls: KILN_FUSED_MOE_PATH, KILN_FUSED_MOE_PDL).
// Its entry in the op table, its launches and its C++ and C APIs. docs/kernels-moe.md, "fp8 experts".
#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "client/core/api/auto_number_control.h"
#include "client/core/api/binary_switch.h"
#include "client/core/capi/c_status.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/moe/fused_moe_fp8_plan.h"
#include "client/ops/moe/moe_launch.h"
#include "client/ops/op_table.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::client {
namespace {

static_assert(ops::fused_moe_fp8_workspace_bytes(4096, 8, 256, 7168, 2048) ==
                      KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(4096, 8, 256, 7168, 2048) &&
                  ops::fused_moe_fp8_workspace_bytes(1, 8, 128, 2048, 768) ==
                      KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(1, 8, 128, 2048, 768) &&
                  ops::fused_moe_fp8_workspace_bytes(3, 1, 33, 4096, 16) ==
                      KILN_FUSED_MOE_FP8_WORKSPACE_BYTES(3, 1, 33, 4096, 16),
              "the C macro is the C++ function");

struct FusedMoeFp8Call {
  FusedMoeFp8Args a;
  // The workspace is a param, not a tensor, as fused_moe's: its contents are scratch.
  static void Visit(const FusedMoeFp8Call& c, TraceWriter& v) {
    v.Out("out", c.a.out)
        .In("x", c.a.x)
        .In("w13", c.a.w13)
        .In("w13_scales", c.a.w13_scales)
        .In("w2", c.a.w2)
        .In("w2_scales", c.a.w2_scales)
        .In("topk_ids", c.a.topk_ids)
        .In("topk_weights", c.a.topk_weights);
    if (c.a.workspace != nullptr) v.Param("workspace", c.a.workspace->Describe());
  }
};

// fused_moe_fp8's own kernels, one cubin (bf16 activations), in the generator's entry order.
struct FusedMoeFp8Spec {
  DType dtype = DType::kBFloat16;
  bool operator==(const FusedMoeFp8Spec&) const = default;
  auto Fields() const { return std::tie(dtype); }
  std::map<std::string, std::string> Params() const { return {{kParamDType, DTypeName(dtype)}}; }
};
const OpKernels kFusedMoeFp8Kernels = {
    moe::kFusedMoeFp8Op,
    {{{.name = moe::kFusedMoeFp8QuantizeEntry, .min_block = moe::kFp8QuantBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeFp8SiluAndMulQuantizeEntry,
       .min_block = moe::kFp8QuantBlock,
       .uses_items_per_block = true},
      {.name = moe::kFusedMoeFp8GateUpEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true},
      {.name = moe::kFusedMoeFp8DownEntry, .min_block = moe::kGemvBlock, .uses_items_per_block = true}}}};
enum QuantizeEntry { kQuantizeEntry = 0, kSiluAndMulQuantizeEntry = 1 };
enum GemvEntry { kGateUpEntry = 2, kDownEntry = 3 };

// KILN_FUSED_MOE_FP8_SILU_EPILOGUE, KILN_FUSED_MOE_FP8_PREFETCH and KILN_FUSED_MOE_FP8_K_PARTS
// (diagnostic controls, read once).
constinit BinarySwitch g_silu_epilogue(
    "KILN_FUSED_MOE_FP8_SILU_EPILOGUE", true,
    "fused_moe_fp8's grouped path quantizes silu(gate) * up in a kernel of its own after "
    "the gate-and-up GEMM in this process (a diagnostic control; by default the GEMM's "
    "epilogue does, docs/kernels-moe.md)");
constinit AutoNumberSetting g_prefetch_blocks(
    {"KILN_FUSED_MOE_FP8_PREFETCH", 1, moe::kMaxFp8GemvPrefetchBlocks, "auto or 1 to 8"},
    "fused_moe_fp8's decode GEMVs ask L2 for their weight rows {} k block(s) ahead in this process "
    "(docs/kernels-moe.md)");
constinit AutoNumberSetting g_k_parts({"KILN_FUSED_MOE_FP8_K_PARTS", moe::kFp8GemvMinKParts, moe::kFp8GemvMaxKParts,
                                       "auto, 2, 4 or 8", /*powers_of_two=*/true},
                                      "fused_moe_fp8's decode GEMVs split each row group's k blocks over {} warps in "
                                      "this process (docs/kernels-moe.md)");

// One launch of entry `entry` of the op's module, prepared once per call: its launch hint must be
// the contract's (`block` threads, `items` rows a block), else the daemon serves a kernel built for
// another grid and the launch is refused. `programmatic`: as a programmatic dependent of the kernel
// before it (every entry waits first; the decode path's choice, KILN_FUSED_MOE_PDL, not the
// entry's).
Status LaunchEntry(const PreparedLaunch& ready, int entry, unsigned block, int64_t items, Dim3 grid, void** args,
                   bool programmatic, const char* step, void* stream) {
  const EntryLaunchReady& e = ready.launch->entry(entry);
  const char* name = kFusedMoeFp8Kernels.entries[entry].name;
  if (e.block != block || e.items_per_block != items)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(step) + ": the daemon's launch hint for " + name + " is " + std::to_string(e.block) +
                      " threads and " + std::to_string(e.items_per_block) + " rows per block; the kernel needs " +
                      std::to_string(block) + " and " + std::to_string(items) + " (a kilnd of another version?)");
  LaunchConfig config = EntryLaunchConfig(e, grid, stream);
  config.programmatic_dependent_launch = programmatic;
  return LaunchFunction(*ready.driver, e.function, config, args, name, &ready.launch->library->info);
}

// One launch of a quantizing entry: a warp per passes x 256 columns of a row, the contract's warps a block.
Status LaunchQuantize(const PreparedLaunch& ready, const FusedMoeFp8QuantizePlan& q, QuantizeEntry entry,
                      const char* step, void* stream, bool programmatic = false) {
  if (q.blocks == 0) return OkStatus();
  moe::FusedMoeFp8QuantParams params = q.params;
  void* args[] = {&params};
  return LaunchEntry(ready, entry, moe::kFp8QuantBlock, moe::kFp8QuantWarps, {q.blocks}, args, programmatic, step,
                     stream);
}

// One decode GEMV launch: kGemvBlock threads, FusedMoeFp8GemvRows(k parts) weight rows a block
// (the parts FusedMoeFp8GemvKPartsFor's on a device of `sms` SMs), an expert block per chosen
// expert; `prefetch_blocks` FusedMoeFp8PrefetchBlocks(). The launch hint is the widest block's.
Status LaunchGemv(const PreparedLaunch& ready, const FusedMoeFp8GemvPlan& g, GemvEntry entry, const char* step,
                  void* stream, bool programmatic, int prefetch_blocks, int sms) {
  const bool gate_up = entry == kGateUpEntry;
  moe::FusedMoeGemvParams params = gate_up ? g.gate_up : g.down;
  moe::FusedMoeFp8GemvScales scales = gate_up ? g.gate_up_scales : g.down_scales;
  scales.prefetch_blocks = prefetch_blocks;
  scales.k_parts = FusedMoeFp8GemvKPartsFor(params.n, g.expert_blocks, sms);
  const int rows = moe::FusedMoeFp8GemvRows(scales.k_parts);
  const auto row_blocks = static_cast<unsigned>((params.n + rows - 1) / rows);
  void* args[] = {&params, &scales};
  return LaunchEntry(ready, entry, moe::kGemvBlock, moe::kFp8GemvColumns, {row_blocks, g.expert_blocks}, args,
                     programmatic, step, stream);
}

// A validated call -> its steps in stream order on the caller's stream.
Status RunFusedMoeFp8(const FusedMoeFp8Call& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const FusedMoeFp8Plan plan, PlanFusedMoeFp8(call.a, api, FusedMoePathInUse()));
  if (plan.tokens == 0) return OkStatus();
  // The op's own kernels are one module: prepared once for the call's launches.
  int sms = 0;  // the decode GEMVs' k parts follow the device's SMs
  StatusOr<PreparedLaunch> prepared = PrepareOpLaunchFor(
      kFusedMoeFp8Kernels,
      [&](const ContextInfo& context) {
        sms = context.multiprocessors;
        return FusedMoeFp8Spec{};
      },
      plan.device, kFusedMoeFp8QuantizeStep);
  if (!prepared.ok()) return prepared.status().WithContext(api);
  const PreparedLaunch& ready = *prepared;
  if (plan.gemv) {
    // The decode path: each kernel reads what the one before wrote and waits for it first
    // (griddepcontrol), so they launch as programmatic dependents unless KILN_FUSED_MOE_PDL=0 (the
    // control of fused_moe's decode path too), the combine included: a kernel's blocks are
    // scheduled while the one before ends. The kernels are sm_90a's, which has griddepcontrol.
    // (The grouped path's launches stay in plain stream order.)
    const bool programmatic = FusedMoeProgrammaticLaunch();
    const int prefetch = FusedMoeFp8PrefetchBlocks();
    KILN_RETURN_IF_ERROR(
        LaunchQuantize(ready, plan.quantize, kQuantizeEntry, kFusedMoeFp8QuantizeStep, stream, programmatic)
            .WithContext(api));
    KILN_RETURN_IF_ERROR(
        LaunchGemv(ready, plan.gemvs, kGateUpEntry, kFusedMoeFp8GateUpGemvStep, stream, programmatic, prefetch, sms)
            .WithContext(api));
    KILN_RETURN_IF_ERROR(
        LaunchQuantize(ready, plan.silu, kSiluAndMulQuantizeEntry, kFusedMoeFp8SiluStep, stream, programmatic)
            .WithContext(api));
    KILN_RETURN_IF_ERROR(
        LaunchGemv(ready, plan.gemvs, kDownEntry, kFusedMoeFp8DownGemvStep, stream, programmatic, prefetch, sms)
            .WithContext(api));
    return LaunchMoeUnpermutePlan(plan.unpermute, kFusedMoeFp8CombineStep, stream, programmatic).WithContext(api);
  }
  KILN_RETURN_IF_ERROR(LaunchMoePermutePlan(plan.permute, kFusedMoeFp8PermuteStep, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(
      LaunchQuantize(ready, plan.quantize, kQuantizeEntry, kFusedMoeFp8QuantizeStep, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.gate_up, stream).WithContext(api));
  if (!plan.silu_in_gate_up)
    KILN_RETURN_IF_ERROR(
        LaunchQuantize(ready, plan.silu, kSiluAndMulQuantizeEntry, kFusedMoeFp8SiluStep, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.down, stream).WithContext(api));
  return LaunchMoeUnpermutePlan(plan.unpermute, kFusedMoeFp8CombineStep, stream).WithContext(api);
}

// The bytes a recorded call's workspace needs, from the shapes of its other tensors; 256 (the
// alignment) when their ranks are wrong, which the plan then refuses naming the tensor.
int64_t RecordedWorkspaceBytes(const FusedMoeFp8Args& a) {
  if (a.x->ndim != 2 || a.w13->ndim != 3 || a.topk_ids->ndim != 2) return 256;
  const int64_t bytes = ops::fused_moe_fp8_workspace_bytes(a.x->shape[0], a.topk_ids->shape[1], a.w13->shape[0],
                                                           a.x->shape[1], a.w13->shape[1] / 2);
  return bytes > 0 ? bytes : 256;
}

// Replay and tests: the tensors by name; the workspace is the arguments' own when they have one
// (a trace example), else fresh scratch.
Status InvokeFusedMoeFp8(const OpDescriptor& op, NamedArgs& named, void* stream) {
  FusedMoeFp8Call call;
  ArgReader r(named);
  r.Out("out", call.a.out).In("x", call.a.x).In("w13", call.a.w13).In("w13_scales", call.a.w13_scales);
  r.In("w2", call.a.w2).In("w2_scales", call.a.w2_scales);
  r.In("topk_ids", call.a.topk_ids).In("topk_weights", call.a.topk_weights);
  KILN_RETURN_IF_ERROR(r.status());
  TensorView scratch;
  KILN_ASSIGN_OR_RETURN(call.a.workspace, ReplayWorkspace(named, RecordedWorkspaceBytes(call.a), &scratch));
  return CallOp(op, op.cpp_api, call, stream, RunFusedMoeFp8);
}

const OpDescriptor kFusedMoeFp8 = {.name = "fused_moe_fp8",
                                   .op = moe::kFusedMoeFp8Op,
                                   .family = "moe",
                                   .cpp_api = "kiln::ops::fused_moe_fp8",
                                   .c_api = "kiln_fused_moe_fp8",
                                   .invoke = InvokeFusedMoeFp8};
KILN_REGISTER_OP(kFusedMoeFp8);

}  // namespace

bool FusedMoeFp8SiluEpilogue() { return g_silu_epilogue.On(); }

void SetFusedMoeFp8SiluEpilogueForTesting(int on) { g_silu_epilogue.SetForTesting(on); }

int FusedMoeFp8PrefetchBlocks() { return static_cast<int>(g_prefetch_blocks.Value()); }

void SetFusedMoeFp8PrefetchBlocksForTesting(int blocks) {
  g_prefetch_blocks.SetForTesting(blocks < 0 ? -1 : std::min(blocks, moe::kMaxFp8GemvPrefetchBlocks));
}

int FusedMoeFp8GemvKPartsFor(int64_t rows, int64_t expert_blocks, int sms) {
  if (const int64_t parts = g_k_parts.Value(); parts > 0) return static_cast<int>(parts);
  return moe::FusedMoeFp8GemvKParts(rows, expert_blocks, sms);
}

void SetFusedMoeFp8GemvKPartsForTesting(int parts) {
  const bool valid = parts == 2 || parts == 4 || parts == 8;
  g_k_parts.SetForTesting(valid ? parts : -1);
}

}  // namespace kiln::client

namespace kiln::ops {

Status fused_moe_fp8(const TensorView& out, const TensorView& x, const TensorView& w13, const TensorView& w13_scales,
                     const TensorView& w2, const TensorView& w2_scales, const TensorView& topk_ids,
                     const TensorView& topk_weights, const TensorView& workspace, void* stream) {
  using namespace client;
  const FusedMoeFp8Call call{{&out, &x, &w13, &w13_scales, &w2, &w2_scales, &topk_ids, &topk_weights, &workspace}};
  return CallOp(kFusedMoeFp8, kFusedMoeFp8.cpp_api, call, stream, RunFusedMoeFp8);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_fused_moe_fp8(DLTensor* out, const DLTensor* x, const DLTensor* w13, const DLTensor* w13_scales,
                               const DLTensor* w2, const DLTensor* w2_scales, const DLTensor* topk_ids,
                               const DLTensor* topk_weights, DLTensor* workspace, void* stream) {
  using namespace kiln::client;
  return CallOpC(kFusedMoeFp8, stream, RunFusedMoeFp8, [&](CTensors& t) {
    FusedMoeFp8Call call;
    call.a.out = t.Tensor(out, "out");
    call.a.x = t.Tensor(x, "x");
    call.a.w13 = t.Tensor(w13, "w13");
    call.a.w13_scales = t.Tensor(w13_scales, "w13_scales");
    call.a.w2 = t.Tensor(w2, "w2");
    call.a.w2_scales = t.Tensor(w2_scales, "w2_scales");
    call.a.topk_ids = t.Tensor(topk_ids, "topk_ids");
    call.a.topk_weights = t.Tensor(topk_weights, "topk_weights");
    call.a.workspace = t.Tensor(workspace, "workspace");
    return call;
  });
}

}  // extern "C"
