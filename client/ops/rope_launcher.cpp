#include "client/ops/rope_launcher.h"

#include <climits>
#include <string>

#include "client/driver/cuda_driver.h"
#include "client/driver/current_context.h"
#include "client/driver/devices.h"
#include "client/loader/arch_compat.h"
#include "client/loader/kernel_launch.h"
#include "client/loader/launch_hint.h"
#include "client/loader/module_cache.h"
#include "client/ops/op_dispatch.h"
#include "client/ops/op_launch_cache.h"
#include "client/rpc/client_counters.h"
#include "client/rpc/kernel_request.h"

namespace kiln::client {
namespace {

StatusOr<OpLaunch> Resolve(const CudaDriver& driver, const RopePlan& plan, const ContextInfo& ctx) {
  OpRequest op;
  op.name = RopeOpName(plan.op);
  op.params = {{"dtype", DTypeName(plan.dtype)},
               {"rotary_dim", std::to_string(plan.rotary_dim)},
               {"style", plan.interleaved ? "gptj" : "neox"},
               {"pos_dtype", DTypeName(plan.pos_dtype)},
               {"vec", std::to_string(plan.vec)}};
  const char* entry = RopeOpEntry(plan.op);
  auto library = FetchOpModule(driver, op, {entry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  KILN_RETURN_IF_ERROR(CheckModuleParam(info, "vec", std::to_string(plan.vec)));

  auto block = LaunchHint(info, "block", 1, 1024);
  if (!block.ok()) return block.status();
  auto tokens_per_block = LaunchHint(info, "tokens_per_block", 1, 1024);
  if (!tokens_per_block.ok()) return tokens_per_block.status();
  auto threads_per_token = LaunchHint(info, "threads_per_token", 1, 1024);
  if (!threads_per_token.ok()) return threads_per_token.status();
  // The launch derives threads_per_token as block / tokens_per_block (OpLaunch keeps two).
  if (*block != *threads_per_token * *tokens_per_block)
    return Status(StatusCode::kFailedPrecondition,
                  "the launch hints of " + info.uri + " disagree: block=" + std::to_string(*block) +
                      " is not threads_per_token=" + std::to_string(*threads_per_token) +
                      " x tokens_per_block=" + std::to_string(*tokens_per_block));

  auto launch = HintedEntryLaunch(driver, *library, entry, ctx);
  if (!launch.ok()) return launch.status();
  launch->rows_per_block = *tokens_per_block;
  return launch;
}

}  // namespace

Status RunRope(const RopePlan& plan, void* stream) {
  const int64_t heads = plan.q_heads + plan.k_heads;
  if (plan.tokens == 0 || heads == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  OpLaunchKey key;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  key.size0 = plan.rotary_dim;
  key.size1 = (plan.interleaved ? 1 : 0) | (plan.pos_dtype == DType::kInt64 ? 2 : 0);
  auto ready = PrepareOpLaunch(plan.device, api, key, [&](const CudaDriver& driver, const ContextInfo& ctx) {
    return Resolve(driver, plan, ctx);
  });
  if (!ready.ok()) return ready.status();
  const OpLaunch* launch = ready->launch;

  const int64_t tokens_per_block = launch->rows_per_block;
  const int64_t grid_x = (plan.tokens + tokens_per_block - 1) / tokens_per_block;
  if (grid_x > INT_MAX)
    return Status(StatusCode::kInvalidArgument, std::string(api) + ": " + std::to_string(plan.tokens) +
                                                    " tokens need more than 2^31-1 blocks; split the call");
  const int64_t threads_per_token = launch->block / tokens_per_block;
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(grid_x);
  config.grid.y = static_cast<unsigned>(RopeHeadGroups(plan.tokens, threads_per_token, heads));
  config.block.x = launch->block;
  config.dynamic_smem_bytes = launch->dynamic_smem;
  config.stream = stream;
  // The kernel contract (kernels/src/rope/rope.cu): q, k, positions, tokens, q strides and
  // heads, k strides and heads, then the op's own arguments.
  void* q = plan.q;
  void* k = plan.k;
  const void* positions = plan.positions;
  long long tokens = plan.tokens;
  long long q_token_stride = plan.q_token_stride, q_head_stride = plan.q_head_stride;
  long long k_token_stride = plan.k_token_stride, k_head_stride = plan.k_head_stride;
  int q_heads = static_cast<int>(plan.q_heads), k_heads = static_cast<int>(plan.k_heads);
  if (plan.op == RopeOp::kApplyRope) {
    double log2_theta = plan.log2_theta, factor = plan.factor, low = plan.low_freq_factor;
    double high = plan.high_freq_factor, original = plan.original_max_position;
    void* args[] = {&q, &k, &positions, &tokens, &q_token_stride, &q_head_stride, &q_heads,
                    &k_token_stride, &k_head_stride, &k_heads, &log2_theta, &factor, &low, &high, &original};
    return LaunchFunction(*ready->driver, launch->function, config, args, RopeOpEntry(plan.op),
                          &launch->library->info);
  }
  const void* cache_ptr = plan.cos_sin_cache;
  long long max_position = plan.max_position, cache_stride = plan.cache_stride;
  void* args[] = {&q, &k, &positions, &tokens, &q_token_stride, &q_head_stride, &q_heads,
                  &k_token_stride, &k_head_stride, &k_heads, &cache_ptr, &max_position, &cache_stride};
  return LaunchFunction(*ready->driver, launch->function, config, args, RopeOpEntry(plan.op),
                          &launch->library->info);
}

}  // namespace kiln::client
