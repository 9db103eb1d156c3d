// The moe family's fused_moe (kiln/ops/moe.h): a whole expert layer on routed tokens as four or
// five launches of kernels the library already has (moe_permute and its gather, the grouped GEMM
// with the silu_and_mul epilogue, the grouped GEMM, moe_unpermute), planned together from the
// caller's arguments and workspace (fused_moe_plan.h): its entry in the op table, and its C++
// and C APIs. docs/kernels-moe.md, "fused_moe".
#include <string>

#include "client/core/capi/c_status.h"
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
  template <typename Self, typename V>
  static void Visit(Self& c, V& v) {
    v.Out("out", c.a.out)
        .In("x", c.a.x)
        .In("w13", c.a.w13)
        .In("w2", c.a.w2)
        .In("topk_ids", c.a.topk_ids)
        .In("topk_weights", c.a.topk_weights)
        .In("workspace", c.a.workspace);
  }
};

// A validated call -> its steps in stream order on the caller's stream: each reads what the one
// before wrote (kernels on one stream run one after another).
Status RunFusedMoe(const FusedMoeCall& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const FusedMoePlan plan, PlanFusedMoe(call.a, api));
  if (plan.tokens == 0) return OkStatus();
  // A step's error names the step; the API's name goes before it, as for any op.
  KILN_RETURN_IF_ERROR(LaunchMoePermutePlan(plan.permute, kFusedMoePermuteStep, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.gate_up, stream).WithContext(api));
  KILN_RETURN_IF_ERROR(LaunchGroupedGemmPlanOfCall(plan.down, stream).WithContext(api));
  return LaunchMoeUnpermutePlan(plan.unpermute, kFusedMoeCombineStep, stream).WithContext(api);
}

const OpDescriptor kFusedMoe = {.name = "fused_moe",
                                .op = moe::kFusedMoeOp,
                                .family = "moe",
                                .cpp_api = "kiln::ops::fused_moe",
                                .c_api = "kiln_fused_moe",
                                .invoke = InvokeByVisit<FusedMoeCall, RunFusedMoe>};
KILN_REGISTER_OP(kFusedMoe);

}  // namespace
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
