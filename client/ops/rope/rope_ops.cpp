// The rope family's ops, apply_rope and apply_rope_with_cos_sin_cache (kiln/ops/rope.h): their
// entries in the op table, their launch, and their C++ and C APIs. Validation is rope_plan.h's;
// the kernel contract kiln/rope/rope_contract.h.
#include <climits>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/op_table.h"
#include "client/ops/rope/rope_plan.h"
#include "kiln/ops/rope.h"
#include "kiln/rope/rope_contract.h"

namespace kiln::client {
namespace {

// One cubin per (op, dtype, rotary_dim, style, positions' dtype, vec): tokens and heads are
// launch arguments.
struct RopeSpec {
  DType dtype = DType::kBFloat16;
  int32_t rotary_dim = 0;
  bool interleaved = false;
  DType pos_dtype = DType::kInt64;
  int32_t vec = 1;
  bool operator==(const RopeSpec&) const = default;
  auto Fields() const { return std::tie(dtype, rotary_dim, interleaved, pos_dtype, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {rope::kParamRotaryDim, std::to_string(rotary_dim)},
            {rope::kParamStyle, interleaved ? rope::kStyleGptj : rope::kStyleNeox},
            {rope::kParamPosDType, DTypeName(pos_dtype)},
            {kParamVec, std::to_string(vec)}};
  }
};

const OpKernels kApplyRopeKernels = {
    rope::kApplyRopeOp,
    {{{.name = rope::kApplyRopeEntry, .min_block = 1, .uses_items_per_block = true, .waits_first = true}}}};
const OpKernels kApplyRopeWithCacheKernels = {rope::kApplyRopeWithCosSinCacheOp,
                                              {{{.name = rope::kApplyRopeWithCosSinCacheEntry,
                                                 .min_block = 1,
                                                 .uses_items_per_block = true,
                                                 .waits_first = true}}}};

// The parameters both ops start with (kiln/rope/rope_contract.h), from the plan.
template <typename Params>
void SetRopeTensors(const RopePlan& plan, Params& p) {
  p.q = plan.q;
  p.k = plan.k;
  p.positions = plan.positions;
  p.tokens = plan.tokens;
  p.q_token_stride = plan.q_token_stride;
  p.q_head_stride = plan.q_head_stride;
  p.q_heads = static_cast<int>(plan.q_heads);
  p.k_token_stride = plan.k_token_stride;
  p.k_head_stride = plan.k_head_stride;
  p.k_heads = static_cast<int>(plan.k_heads);
}

// A validated call → one launch: grid.x = ceil(tokens / tokens per block), grid.y = the head
// groups RopeHeadGroups chooses for this many tokens (threads per token = block / tokens per
// block), the op's parameter struct from `make_params()`.
template <typename MakeParams>
Status LaunchRope(const RopePlan& plan, const OpKernels& kernels, const char* entry, void* stream,
                  MakeParams&& make_params) {
  const int64_t heads = plan.q_heads + plan.k_heads;
  if (plan.tokens == 0 || heads == 0) return OkStatus();  // nothing to do, and nothing to launch
  const RopeSpec spec{plan.dtype, static_cast<int32_t>(plan.rotary_dim), plan.interleaved, plan.pos_dtype, plan.vec};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(kernels, spec, plan.device, plan.api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t grid_x = (plan.tokens + e.items_per_block - 1) / e.items_per_block;
  if (grid_x > INT_MAX)
    return InvalidArgument(std::string(plan.api) + ": " + std::to_string(plan.tokens) +
                           " tokens need more than 2^31-1 blocks; split the call");
  const int64_t threads_per_token = e.block / e.items_per_block;
  const LaunchConfig config = EntryLaunchConfig(
      e, {static_cast<unsigned>(grid_x), static_cast<unsigned>(RopeHeadGroups(plan.tokens, threads_per_token, heads))},
      stream);
  auto params = make_params();
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, entry, &ready.launch->library->info);
}

struct ApplyRopeArgs {
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* positions = nullptr;
  ops::RopeOptions options;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.InOut("q", a.q).InOut("k", a.k).In("positions", a.positions);
    v.Param("rotary_dim", a.options.rotary_dim)
        .Param("interleaved", a.options.interleaved)
        .Param("theta", a.options.theta);
    v.Optional("llama31", a.options.llama31, [](auto& s, auto& fields) {
      fields.Param("llama31_factor", s.factor)
          .Param("llama31_low_freq_factor", s.low_freq_factor)
          .Param("llama31_high_freq_factor", s.high_freq_factor)
          .Param("llama31_original_max_position", s.original_max_position);
    });
  }
};

Status RunApplyRope(const ApplyRopeArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const RopePlan plan, PlanApplyRope(*a.q, *a.k, *a.positions, a.options, api));
  return LaunchRope(plan, kApplyRopeKernels, rope::kApplyRopeEntry, stream, [&] {
    rope::ApplyRopeParams p;
    SetRopeTensors(plan, p);
    p.log2_theta = plan.log2_theta;
    p.factor = plan.factor;
    p.low_freq_factor = plan.low_freq_factor;
    p.high_freq_factor = plan.high_freq_factor;
    p.original_max_position = plan.original_max_position;
    return p;
  });
}

struct ApplyRopeWithCacheArgs {
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* positions = nullptr;
  const TensorView* cos_sin_cache = nullptr;
  bool interleaved = false;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.InOut("q", a.q).InOut("k", a.k).In("positions", a.positions).In("cos_sin_cache", a.cos_sin_cache);
    v.Param("interleaved", a.interleaved);
  }
};

Status RunApplyRopeWithCache(const ApplyRopeWithCacheArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const RopePlan plan,
                        PlanApplyRopeWithCosSinCache(*a.q, *a.k, *a.positions, *a.cos_sin_cache, a.interleaved, api));
  return LaunchRope(plan, kApplyRopeWithCacheKernels, rope::kApplyRopeWithCosSinCacheEntry, stream, [&] {
    rope::ApplyRopeWithCosSinCacheParams p;
    SetRopeTensors(plan, p);
    p.cos_sin_cache = static_cast<const float*>(plan.cos_sin_cache);
    p.max_position = plan.max_position;
    p.cache_stride = plan.cache_stride;
    return p;
  });
}

const OpDescriptor kApplyRope = {.name = "apply_rope",
                                 .op = rope::kApplyRopeOp,
                                 .family = "rope",
                                 .cpp_api = "kiln::ops::apply_rope",
                                 .c_api = "kiln_apply_rope",
                                 .invoke = InvokeByVisit<ApplyRopeArgs, RunApplyRope>};
const OpDescriptor kApplyRopeWithCache = {.name = "apply_rope_with_cos_sin_cache",
                                          .op = rope::kApplyRopeWithCosSinCacheOp,
                                          .family = "rope",
                                          .cpp_api = "kiln::ops::apply_rope_with_cos_sin_cache",
                                          .c_api = "kiln_apply_rope_with_cos_sin_cache",
                                          .invoke = InvokeByVisit<ApplyRopeWithCacheArgs, RunApplyRopeWithCache>};
KILN_REGISTER_OP(kApplyRope);
KILN_REGISTER_OP(kApplyRopeWithCache);

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

Status apply_rope(const TensorView& q, const TensorView& k, const TensorView& positions, const RopeOptions& options,
                  void* stream) {
  return client::CallOp(client::kApplyRope, client::kApplyRope.cpp_api,
                        client::ApplyRopeArgs{&q, &k, &positions, options}, stream, client::RunApplyRope);
}

Status apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                     const TensorView& cos_sin_cache, bool interleaved, void* stream) {
  return client::CallOp(client::kApplyRopeWithCache, client::kApplyRopeWithCache.cpp_api,
                        client::ApplyRopeWithCacheArgs{&q, &k, &positions, &cos_sin_cache, interleaved}, stream,
                        client::RunApplyRopeWithCache);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_apply_rope(DLTensor* q, DLTensor* k, const DLTensor* positions, int64_t rotary_dim, int interleaved,
                            double theta, const kiln_llama31_rope_scaling* llama31, void* stream) {
  using namespace kiln::client;
  return CallOpC(kApplyRope, stream, RunApplyRope, [&](CTensors& t) {
    ApplyRopeArgs a{t.Tensor(q, "q"), t.Tensor(k, "k"), t.Tensor(positions, "positions")};
    a.options.rotary_dim = rotary_dim;
    a.options.interleaved = interleaved != 0;
    a.options.theta = theta;
    if (llama31 != nullptr)
      a.options.llama31 = kiln::ops::Llama31RopeScaling{llama31->factor, llama31->low_freq_factor,
                                                        llama31->high_freq_factor, llama31->original_max_position};
    return a;
  });
}

kiln_status kiln_apply_rope_with_cos_sin_cache(DLTensor* q, DLTensor* k, const DLTensor* positions,
                                               const DLTensor* cos_sin_cache, int interleaved, void* stream) {
  using namespace kiln::client;
  return CallOpC(kApplyRopeWithCache, stream, RunApplyRopeWithCache, [&](CTensors& t) {
    return ApplyRopeWithCacheArgs{t.Tensor(q, "q"), t.Tensor(k, "k"), t.Tensor(positions, "positions"),
                                  t.Tensor(cos_sin_cache, "cos_sin_cache"), interleaved != 0};
  });
}

}  // extern "C"
