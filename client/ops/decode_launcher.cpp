#include "client/ops/decode_launcher.h"

#include <algorithm>
#include <climits>
#include <string>

#include "client/diag/call_trace.h"
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

constexpr const char* kDecodeEntry = "kiln_batch_decode";
constexpr const char* kMergeEntry = "kiln_batch_decode_merge";
constexpr const char* kAppendEntry = "kiln_append_paged_kv";

OpLaunchKey DecodeKey(CUcontext context, DecodeOp op, const ops::BatchDecodePlan::State& plan) {
  OpLaunchKey key;
  key.context = context;
  key.op = static_cast<uint16_t>(op);
  key.dtype = static_cast<uint8_t>(plan.dtype);
  key.size0 = plan.head_dim | (plan.page_size << 16);
  key.size1 = plan.group | (plan.options.logits_soft_cap > 0 ? 1 << 8 : 0);
  return key;
}

// Both entries of the batch_decode specialization of `plan`, inserted into the launch cache.
Status ResolveBatchDecode(const CudaDriver& driver, const ops::BatchDecodePlan::State& plan, const ContextInfo& ctx) {
  OpRequest op;
  op.name = "batch_decode";
  op.params = {{"dtype", DTypeName(plan.dtype)},
               {"head_dim", std::to_string(plan.head_dim)},
               {"group", std::to_string(plan.group)},
               {"page_size", std::to_string(plan.page_size)},
               {"soft_cap", plan.options.logits_soft_cap > 0 ? "1" : "0"}};
  auto library = FetchOpModule(driver, op, {kDecodeEntry, kMergeEntry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  auto block = LaunchHint(info, "block", 32, 1024);
  if (!block.ok()) return block.status();
  auto smem = LaunchHint(info, "dynamic_smem", 0, INT_MAX);
  if (!smem.ok()) return smem.status();
  auto merge_block = LaunchHint(info, "merge_block", 32, 1024);
  if (!merge_block.ok()) return merge_block.status();
  auto merge_heads = LaunchHint(info, "merge_heads_per_block", 1, 32);
  if (!merge_heads.ok()) return merge_heads.status();

  auto decode = EntryLaunch(driver, *library, kDecodeEntry, ctx, *block, *smem);
  if (!decode.ok()) return decode.status();
  auto merge = EntryLaunch(driver, *library, kMergeEntry, ctx, *merge_block, 0);
  if (!merge.ok()) return merge.status();
  merge->rows_per_block = *merge_heads;  // query heads per merge block
  OpLaunchCache& cache = OpLaunchCache::Global();
  cache.Insert(DecodeKey(ctx.context, DecodeOp::kBatchDecode, plan), std::move(decode).value());
  cache.Insert(DecodeKey(ctx.context, DecodeOp::kBatchDecodeMerge, plan), std::move(merge).value());
  return OkStatus();
}

StatusOr<OpLaunch> ResolveAppend(const CudaDriver& driver, const AppendPagedKvCall& call, const ContextInfo& ctx) {
  OpRequest op;
  op.name = "append_paged_kv";
  op.params = {{"dtype", DTypeName(call.dtype)},
               {"head_dim", std::to_string(call.head_dim)},
               {"vec", std::to_string(call.vec)}};
  auto library = FetchOpModule(driver, op, {kAppendEntry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  KILN_RETURN_IF_ERROR(CheckModuleParam(info, "vec", std::to_string(call.vec)));
  auto max_blocks = LaunchHint(info, "max_blocks", 1, INT_MAX);
  if (!max_blocks.ok()) return max_blocks.status();
  auto launch = HintedEntryLaunch(driver, *library, kAppendEntry, ctx, /*min_block=*/32);
  if (!launch.ok()) return launch.status();
  launch->rows_per_block = *max_blocks;  // the grid's cap (the kernel loops over the rest)
  return launch;
}

}  // namespace

Status RunBatchDecode(const BatchDecodeCall& call, void* stream) {
  const char* api = call.api;
  const ops::BatchDecodePlan::State& plan = *call.plan;
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  auto ctx = ContextForDevice(**driver, call.device, api);
  if (!ctx.ok()) return ctx.status();

  OpLaunchCache& cache = OpLaunchCache::Global();
  const OpLaunch* decode = cache.Find(DecodeKey(ctx->context, DecodeOp::kBatchDecode, plan));
  const OpLaunch* merge = cache.Find(DecodeKey(ctx->context, DecodeOp::kBatchDecodeMerge, plan));
  if (decode != nullptr && merge != nullptr) {
    Bump(Counters().op_fast_hits);
  } else {
    Bump(Counters().op_fast_misses);
    KILN_RETURN_IF_ERROR(ResolveBatchDecode(**driver, plan, *ctx).WithContext(api));
    decode = cache.Find(DecodeKey(ctx->context, DecodeOp::kBatchDecode, plan));
    merge = cache.Find(DecodeKey(ctx->context, DecodeOp::kBatchDecodeMerge, plan));
  }

  // The schedule is this op's tactic: the call log and dumps name it (a replay on a GPU with
  // another SM count may choose differently).
  if (KILN_UNLIKELY(diag::Level() != 0) && diag::InTracedCall())
    diag::NoteBackend(plan.schedule.split ? "split-kv:" + std::to_string(plan.schedule.num_items) + "-items-of-" +
                                                std::to_string(plan.schedule.chunk_tokens) + "-positions+merge"
                                          : std::string("single-pass:no-split"));
  // The kernel contract (kiln/decode/batch_decode.cu): one KilnBatchDecodeParams by value.
  BatchDecodeParamsAbi params = call.params;
  void* args[] = {&params};
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(plan.schedule.num_items * plan.num_kv_heads);  // < 2^31 (plan)
  config.block.x = decode->block;
  config.dynamic_smem_bytes = decode->dynamic_smem;
  config.stream = stream;
  KILN_RETURN_IF_ERROR(LaunchFunction(**driver, decode->function, config, args, kDecodeEntry, &decode->library->info)
                           .WithContext(api));
  if (!plan.schedule.split) return OkStatus();

  LaunchConfig merge_config;
  merge_config.grid.x = static_cast<unsigned>(plan.batch);
  merge_config.grid.y = static_cast<unsigned>((plan.num_qo_heads + merge->rows_per_block - 1) / merge->rows_per_block);
  merge_config.block.x = merge->block;
  merge_config.stream = stream;
  return LaunchFunction(**driver, merge->function, merge_config, args, kMergeEntry, &merge->library->info)
      .WithContext(api);
}

Status RunAppendPagedKv(const AppendPagedKvCall& call, void* stream) {
  if (call.params.nnz == 0) return OkStatus();  // nothing to write, and nothing to launch
  const char* api = call.api;
  OpLaunchKey key;
  key.op = static_cast<uint16_t>(DecodeOp::kAppendPagedKv);
  key.dtype = static_cast<uint8_t>(call.dtype);
  key.vec = static_cast<uint8_t>(call.vec);
  key.size0 = call.head_dim;
  auto ready = PrepareOpLaunch(call.device, api, key, [&](const CudaDriver& driver, const ContextInfo& ctx) {
    return ResolveAppend(driver, call, ctx);
  });
  if (!ready.ok()) return ready.status();
  const OpLaunch* launch = ready->launch;

  const int64_t threads = call.params.nnz * call.params.num_kv_heads * (call.head_dim / call.vec);
  const int64_t blocks = std::min<int64_t>((threads + launch->block - 1) / launch->block, launch->rows_per_block);
  AppendPagedKvParamsAbi params = call.params;
  void* args[] = {&params};
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(blocks);
  config.block.x = launch->block;
  config.stream = stream;
  return LaunchFunction(*ready->driver, launch->function, config, args, kAppendEntry, &launch->library->info)
      .WithContext(api);
}

}  // namespace kiln::client
