// The moe family's op moe_route (kiln/ops/moe.h): its entry in the op table, its launch, and
// its C++ and C APIs. Validation is moe_plan.h's; the kernel contract kiln/moe/moe_contract.h.
#include <climits>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/moe/moe_plan.h"
#include "client/ops/op_table.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::client {
namespace {

// One cubin per (logits' dtype, scoring, max_experts): tokens, E, top_k and the rest are
// launch arguments.
struct MoeRouteSpec {
  DType dtype = DType::kFloat32;
  bool sigmoid = false;
  int32_t max_experts = 32;
  bool operator==(const MoeRouteSpec&) const = default;
  auto Fields() const { return std::tie(dtype, sigmoid, max_experts); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {moe::kParamScoring, sigmoid ? moe::kScoringSigmoid : moe::kScoringSoftmax},
            {moe::kParamMaxExperts, std::to_string(max_experts)}};
  }
};

const OpKernels kMoeRouteKernels = {moe::kMoeRouteOp, {{{moe::kMoeRouteEntry}}}};

// The arguments in API order; the options as the call record names them (the C ABI's names).
struct MoeRouteCall {
  MoeRouteArgs a;
  template <typename Self, typename V>
  static void Visit(Self& c, V& v) {
    v.Out("topk_ids", c.a.topk_ids)
        .Out("topk_weights", c.a.topk_weights)
        .In("logits", c.a.logits)
        .OptionalIn("correction_bias", c.a.correction_bias)
        .Param("scoring", c.a.scoring)
        .Param("renormalize", c.a.renormalize)
        .Param("n_group", c.a.n_group)
        .Param("topk_group", c.a.topk_group)
        .Param("routed_scaling_factor", c.a.routed_scaling_factor);
  }
};

// A validated call -> one launch, one warp per token.
Status RunMoeRoute(const MoeRouteCall& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const MoeRoutePlan plan, PlanMoeRoute(call.a, api));
  if (plan.params.tokens == 0) return OkStatus();  // nothing to do, and nothing to launch
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kMoeRouteKernels, MoeRouteSpec{plan.dtype, plan.sigmoid, plan.max_experts},
                                        plan.device, api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t per_block = e.items_per_block > 0 ? e.items_per_block : 1;
  const int64_t blocks = (plan.params.tokens + per_block - 1) / per_block;
  if (blocks > INT_MAX)
    return InvalidArgument(std::string(api) + ": " + std::to_string(plan.params.tokens) + " tokens need " +
                           std::to_string(blocks) + " blocks, more than 2^31-1; split the call");
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(blocks);
  config.block.x = e.block;
  config.dynamic_smem_bytes = e.dynamic_smem;
  config.stream = stream;
  moe::MoeRouteParams params = plan.params;
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, moe::kMoeRouteEntry, &ready.launch->library->info);
}

const OpDescriptor kMoeRoute = {.name = "moe_route",
                                .op = moe::kMoeRouteOp,
                                .family = "moe",
                                .cpp_api = "kiln::ops::moe_route",
                                .c_api = "kiln_moe_route",
                                .invoke = InvokeByVisit<MoeRouteCall, RunMoeRoute>};
KILN_REGISTER_OP(kMoeRoute);

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

Status moe_route(const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& logits,
                 const TensorView* correction_bias, const MoeRouteOptions& options, void* stream) {
  using namespace client;
  const MoeRouteCall call{{&topk_ids, &topk_weights, &logits, correction_bias, static_cast<int>(options.scoring),
                           options.renormalize, options.n_group, options.topk_group, options.routed_scaling_factor}};
  return CallOp(kMoeRoute, kMoeRoute.cpp_api, call, stream, RunMoeRoute);
}

}  // namespace kiln::ops

extern "C" {

using namespace kiln::client;

kiln_status kiln_moe_route(DLTensor* topk_ids, DLTensor* topk_weights, const DLTensor* logits,
                           const DLTensor* correction_bias, kiln_moe_scoring scoring, int renormalize, int64_t n_group,
                           int64_t topk_group, double routed_scaling_factor, void* stream) {
  return CallOpC(kMoeRoute, stream, RunMoeRoute, [&](CTensors& t) {
    MoeRouteCall call;
    call.a.topk_ids = t.Tensor(topk_ids, "topk_ids");
    call.a.topk_weights = t.Tensor(topk_weights, "topk_weights");
    call.a.logits = t.Tensor(logits, "logits");
    call.a.correction_bias = t.Optional(correction_bias, "correction_bias");
    call.a.scoring = static_cast<int>(scoring);
    call.a.renormalize = renormalize != 0;
    call.a.n_group = n_group;
    call.a.topk_group = topk_group;
    call.a.routed_scaling_factor = routed_scaling_factor;
    return call;
  });
}

}  // extern "C"
