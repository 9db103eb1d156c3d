// The moe family's ops moe_route, moe_permute and moe_unpermute (kiln/ops/moe.h): their entries
// in the op table, their launches, and their C++ and C APIs. Validation is moe_plan.h's; the kernel
// contract kiln/moe/moe_contract.h.
#include <climits>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/moe/moe_launch.h"
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

const OpKernels kMoeRouteKernels = {moe::kMoeRouteOp, {{{.name = moe::kMoeRouteEntry}}}};

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
  const LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(blocks)}, stream);
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

// ---- moe_permute ----

static_assert(ops::moe_permute_rows(4096, 8, 256, 128) == moe::MoePermuteRows(4096, 8, 256, 128) &&
                  ops::moe_permute_rows(7, 2, 8, 1) == moe::MoePermuteRows(7, 2, 8, 1),
              "the public row bound (kiln/ops/moe.h) is the contract's");

// One cubin per max_experts: everything else is a launch argument.
struct MoePermuteSpec {
  int32_t max_experts = 32;
  bool operator==(const MoePermuteSpec&) const = default;
  auto Fields() const { return std::tie(max_experts); }
  std::map<std::string, std::string> Params() const { return {{moe::kParamMaxExperts, std::to_string(max_experts)}}; }
};

// The permutation's blocks are the contract's (its shared tables have a column per warp, a chunk
// is a block's threads); the gather and the inversion divide their rows by items_per_block.
// Entries in the order LaunchMoePermutePlan indexes them.
enum MoePermuteEntryIndex { kPermuteSingle, kPermuteGather, kPermuteCount, kPermuteRank, kPermuteInvert };
const OpKernels kMoePermuteKernels = {
    moe::kMoePermuteOp,
    {{{.name = moe::kMoePermuteEntry, .min_block = moe::kPermuteBlock},
      {.name = moe::kMoePermuteGatherEntry, .min_block = 32, .uses_items_per_block = true},
      {.name = moe::kMoePermuteCountEntry, .min_block = moe::kPermuteBlock},
      {.name = moe::kMoePermuteRankEntry, .min_block = moe::kPermuteBlock},
      {.name = moe::kMoePermuteInvertEntry, .min_block = 32, .uses_items_per_block = true}}}};

struct MoePermuteCall {
  MoePermuteArgs a;
  template <typename Self, typename V>
  static void Visit(Self& c, V& v) {
    v.Out("expert_counts", c.a.expert_counts)
        .Out("m_indptr", c.a.m_indptr)
        .Out("row_to_slot", c.a.row_to_slot)
        .Out("slot_to_row", c.a.slot_to_row)
        .OptionalOut("permuted_x", c.a.permuted_x)
        .In("topk_ids", c.a.topk_ids)
        .OptionalIn("x", c.a.x)
        .Param("align", c.a.align);
  }
};

Status RunMoePermute(const MoePermuteCall& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const MoePermutePlan plan, PlanMoePermute(call.a, api));
  return LaunchMoePermutePlan(plan, api, stream);
}

const OpDescriptor kMoePermute = {.name = "moe_permute",
                                  .op = moe::kMoePermuteOp,
                                  .family = "moe",
                                  .cpp_api = "kiln::ops::moe_permute",
                                  .c_api = "kiln_moe_permute",
                                  .invoke = InvokeByVisit<MoePermuteCall, RunMoePermute>};
KILN_REGISTER_OP(kMoePermute);

}  // namespace

namespace {

// A launch of one of the permutation's entries on `blocks` blocks of its hinted size, whose
// block the kernel's shared tables fix (`need`: 0 for any).
Status LaunchPermuteEntry(const PreparedLaunch& ready, int index, const char* entry, int64_t blocks, unsigned need,
                          void* params, const char* api, void* stream) {
  const EntryLaunchReady& e = ready.launch->entry(index);
  if (need != 0 && e.block != need)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(api) + ": the daemon's launch hint for " + entry + " is " + std::to_string(e.block) +
                      " threads; the kernel needs " + std::to_string(need) + " (a kilnd of another version?)");
  if (blocks > INT_MAX)
    return InvalidArgument(std::string(api) + ": " + entry + " needs " + std::to_string(blocks) +
                           " blocks, more than 2^31-1; split the call");
  const LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(blocks)}, stream);
  void* args[] = {params};
  return LaunchFunction(*ready.driver, e.function, config, args, entry, &ready.launch->library->info);
}

}  // namespace

// The permutation: one block (even for T = 0: m_indptr and row_to_slot are written), or for many
// slots the multi-block count, rank and invert; then with x the gather, in stream order on the
// caller's stream.
Status LaunchMoePermutePlan(const MoePermutePlan& plan, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kMoePermuteKernels, MoePermuteSpec{plan.max_experts}, plan.device, api));
  moe::MoePermuteParams params = plan.params;
  const int64_t slots = params.tokens * params.top_k;
  const auto block = static_cast<unsigned>(moe::kPermuteBlock);
  if (!moe::MoePermuteMultiBlock(slots)) {
    KILN_RETURN_IF_ERROR(
        LaunchPermuteEntry(ready, kPermuteSingle, moe::kMoePermuteEntry, 1, block, &params, api, stream));
  } else {
    const int64_t chunks = moe::MoePermuteChunks(slots);
    if (chunks * params.experts > params.rows)  // the contract's static_assert proves it cannot be
      return Status(StatusCode::kInternal, std::string(api) + ": the permutation's counts (" +
                                               std::to_string(chunks * params.experts) +
                                               ") do not fit in row_to_slot (" + std::to_string(params.rows) + ")");
    KILN_RETURN_IF_ERROR(
        LaunchPermuteEntry(ready, kPermuteCount, moe::kMoePermuteCountEntry, chunks, block, &params, api, stream));
    KILN_RETURN_IF_ERROR(
        LaunchPermuteEntry(ready, kPermuteRank, moe::kMoePermuteRankEntry, chunks, block, &params, api, stream));
    const int64_t per_block = ready.launch->entry(kPermuteInvert).items_per_block;
    KILN_RETURN_IF_ERROR(LaunchPermuteEntry(ready, kPermuteInvert, moe::kMoePermuteInvertEntry,
                                            (params.rows + per_block - 1) / per_block,
                                            static_cast<unsigned>(moe::kInvertBlock), &params, api, stream));
  }
  if (!plan.gather || plan.gather_params.rows == 0) return OkStatus();

  const int64_t per_block = ready.launch->entry(kPermuteGather).items_per_block;
  moe::MoePermuteGatherParams gather_params = plan.gather_params;
  return LaunchPermuteEntry(ready, kPermuteGather, moe::kMoePermuteGatherEntry,
                            (plan.gather_params.rows + per_block - 1) / per_block, 0, &gather_params, api, stream);
}

namespace {

// ---- moe_unpermute ----

// One cubin per dtype: the unit, tokens, top_k and the sizes are launch arguments.
struct MoeUnpermuteSpec {
  DType dtype = DType::kBFloat16;
  bool operator==(const MoeUnpermuteSpec&) const = default;
  auto Fields() const { return std::tie(dtype); }
  std::map<std::string, std::string> Params() const { return {{kParamDType, DTypeName(dtype)}}; }
};

// The block is the plan's (at least one warp: the first top_k <= 16 threads load the indices);
// the hint's items_per_block must be the contract's units per block.
const OpKernels kMoeUnpermuteKernels = {
    moe::kMoeUnpermuteOp, {{{.name = moe::kMoeUnpermuteEntry, .min_block = 32, .uses_items_per_block = true}}}};

struct MoeUnpermuteCall {
  MoeUnpermuteArgs a;
  template <typename Self, typename V>
  static void Visit(Self& c, V& v) {
    v.Out("out", c.a.out)
        .In("expert_out", c.a.expert_out)
        .In("slot_to_row", c.a.slot_to_row)
        .In("topk_weights", c.a.topk_weights);
  }
};

Status RunMoeUnpermute(const MoeUnpermuteCall& call, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const MoeUnpermutePlan plan, PlanMoeUnpermute(call.a, api));
  return LaunchMoeUnpermutePlan(plan, api, stream);
}

}  // namespace

// One launch: a block column per token (grid.x), the row's blocks on grid.y.
Status LaunchMoeUnpermutePlan(const MoeUnpermutePlan& plan, const char* api, void* stream, bool programmatic) {
  if (plan.params.tokens == 0) return OkStatus();  // nothing to write, and nothing to launch
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kMoeUnpermuteKernels, MoeUnpermuteSpec{plan.dtype}, plan.device, api));
  const EntryLaunchReady& e = ready.launch->entry();
  // The plan's grid comes from the contract's rule; a daemon whose kernels tree says otherwise
  // serves a kernel built for another block.
  if (e.block != static_cast<unsigned>(moe::kUnpermuteBlock) || e.items_per_block != moe::kUnpermuteBlock)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(api) + ": the daemon's launch hint for " + moe::kMoeUnpermuteEntry + " is " +
                      std::to_string(e.block) + " threads and " + std::to_string(e.items_per_block) +
                      " units per block; the kernel needs " + std::to_string(moe::kUnpermuteBlock) + " and " +
                      std::to_string(moe::kUnpermuteBlock) + " (a kilnd of another version?)");
  LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(plan.params.tokens), plan.blocks_per_row}, stream);
  config.block.x = plan.threads;  // the plan's: the row's units split evenly over its blocks (the contract)
  config.programmatic_dependent_launch = programmatic;  // the caller's (fused_moe's decode path)
  moe::MoeUnpermuteParams params = plan.params;
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, moe::kMoeUnpermuteEntry, &ready.launch->library->info);
}

namespace {

const OpDescriptor kMoeUnpermute = {.name = "moe_unpermute",
                                    .op = moe::kMoeUnpermuteOp,
                                    .family = "moe",
                                    .cpp_api = "kiln::ops::moe_unpermute",
                                    .c_api = "kiln_moe_unpermute",
                                    .invoke = InvokeByVisit<MoeUnpermuteCall, RunMoeUnpermute>};
KILN_REGISTER_OP(kMoeUnpermute);

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

Status moe_permute(const TensorView& expert_counts, const TensorView& m_indptr, const TensorView& row_to_slot,
                   const TensorView& slot_to_row, const TensorView* permuted_x, const TensorView& topk_ids,
                   const TensorView* x, int64_t align, void* stream) {
  using namespace client;
  const MoePermuteCall call{{&expert_counts, &m_indptr, &row_to_slot, &slot_to_row, permuted_x, &topk_ids, x, align}};
  return CallOp(kMoePermute, kMoePermute.cpp_api, call, stream, RunMoePermute);
}

Status moe_unpermute(const TensorView& out, const TensorView& expert_out, const TensorView& slot_to_row,
                     const TensorView& topk_weights, void* stream) {
  using namespace client;
  const MoeUnpermuteCall call{{&out, &expert_out, &slot_to_row, &topk_weights}};
  return CallOp(kMoeUnpermute, kMoeUnpermute.cpp_api, call, stream, RunMoeUnpermute);
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

kiln_status kiln_moe_permute(DLTensor* expert_counts, DLTensor* m_indptr, DLTensor* row_to_slot, DLTensor* slot_to_row,
                             DLTensor* permuted_x, const DLTensor* topk_ids, const DLTensor* x, int64_t align,
                             void* stream) {
  return CallOpC(kMoePermute, stream, RunMoePermute, [&](CTensors& t) {
    MoePermuteCall call;
    call.a.expert_counts = t.Tensor(expert_counts, "expert_counts");
    call.a.m_indptr = t.Tensor(m_indptr, "m_indptr");
    call.a.row_to_slot = t.Tensor(row_to_slot, "row_to_slot");
    call.a.slot_to_row = t.Tensor(slot_to_row, "slot_to_row");
    call.a.permuted_x = t.Optional(permuted_x, "permuted_x");
    call.a.topk_ids = t.Tensor(topk_ids, "topk_ids");
    call.a.x = t.Optional(x, "x");
    call.a.align = align;
    return call;
  });
}

kiln_status kiln_moe_unpermute(DLTensor* out, const DLTensor* expert_out, const DLTensor* slot_to_row,
                               const DLTensor* topk_weights, void* stream) {
  return CallOpC(kMoeUnpermute, stream, RunMoeUnpermute, [&](CTensors& t) {
    MoeUnpermuteCall call;
    call.a.out = t.Tensor(out, "out");
    call.a.expert_out = t.Tensor(expert_out, "expert_out");
    call.a.slot_to_row = t.Tensor(slot_to_row, "slot_to_row");
    call.a.topk_weights = t.Tensor(topk_weights, "topk_weights");
    return call;
  });
}

}  // extern "C"
