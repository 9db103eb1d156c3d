#include "client/ops/activation_launcher.h"

#include <climits>
#include <string>

#include "client/driver/cuda_driver.h"
#include "client/driver/current_context.h"
#include "client/driver/devices.h"
#include "client/loader/arch_compat.h"
#include "client/loader/kernel_launch.h"
#include "client/loader/launch_hint.h"
#include "client/loader/module_cache.h"
#include "client/ops/op_launch_cache.h"
#include "client/rpc/client_counters.h"
#include "client/rpc/kernel_request.h"

namespace kiln::client {
namespace {

StatusOr<OpLaunch> Resolve(const CudaDriver& driver, const ActivationPlan& plan, const ContextInfo& ctx) {
  OpRequest op;
  op.name = ActivationOpName(plan.op);
  op.params = {{"dtype", DTypeName(plan.dtype)}, {"vec", std::to_string(plan.vec)}};
  const char* entry = ActivationOpEntry(plan.op);
  auto request = MakeKernelRequest(op, ArchForComputeCapability(ctx.cc_major, ctx.cc_minor));
  auto library = ModuleCache::Global().GetOrLoad(driver, request, {entry}, ModuleCache::RequestIdentity(request));
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;

  if (!CubinRunsOn(info.arch, ctx.cc_major, ctx.cc_minor))
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon built " + info.uri + " for " + info.arch + ", which cannot run on " +
                      "cuda:" + std::to_string(ctx.device) + " (" +
                      ArchForComputeCapability(ctx.cc_major, ctx.cc_minor) + ")");
  auto vec = info.params.find("vec");
  if (vec != info.params.end() && vec->second != std::to_string(plan.vec))
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon built " + info.uri + " with vec=" + vec->second +
                      " for a request of vec=" + std::to_string(plan.vec));

  auto block = LaunchHint(info, "block", 1, 1024);
  if (!block.ok()) return block.status();
  auto cols_per_block = LaunchHint(info, "cols_per_block", 1, INT_MAX);
  if (!cols_per_block.ok()) return cols_per_block.status();
  auto smem = LaunchHint(info, "dynamic_smem", 0, INT_MAX);
  if (!smem.ok()) return smem.status();

  int index = (*library)->FindEntry(entry);
  if (index < 0) return Status(StatusCode::kNotFound, info.uri + " has no kernel " + entry);
  auto function = (*library)->Function(static_cast<size_t>(index), ctx.context, static_cast<unsigned>(*smem));
  if (!function.ok()) return function.status();
  int max_threads = 0;
  KILN_RETURN_IF_ERROR(driver.Check(
      driver.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, *function),
      "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)"));
  if (*block > max_threads)
    return Status(StatusCode::kFailedPrecondition,
                  "the launch hint block=" + std::to_string(*block) + " of " + info.uri +
                      " exceeds what the kernel can run per block (" + std::to_string(max_threads) +
                      " threads)");

  OpLaunch launch;
  launch.function = *function;
  launch.block = static_cast<unsigned>(*block);
  launch.dynamic_smem = static_cast<unsigned>(*smem);
  launch.cols_per_block = *cols_per_block;
  launch.library = std::move(library).value();
  return launch;
}

}  // namespace

Status RunActAndMul(const ActivationPlan& plan, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  auto ctx = CurrentContext(**driver, plan.device);
  if (!ctx.ok()) return ctx.status().WithContext(api);
  if (ctx->device != plan.device)
    return Status(StatusCode::kInvalidArgument,
                  std::string(api) + ": the tensors are on cuda:" + std::to_string(plan.device) +
                      ", but the current CUDA context is on cuda:" + std::to_string(ctx->device) +
                      "; make a context of cuda:" + std::to_string(plan.device) +
                      " current first (e.g. cudaSetDevice(" + std::to_string(plan.device) + "))");

  // d is a launch argument, not part of the specialization: one entry per (op, dtype, vec).
  OpLaunchKey key;
  key.context = ctx->context;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  OpLaunchCache& cache = OpLaunchCache::Global();
  const OpLaunch* launch = cache.Find(key);
  if (launch != nullptr) {
    Bump(Counters().op_fast_hits);
  } else {
    Bump(Counters().op_fast_misses);
    auto resolved = Resolve(**driver, plan, *ctx);
    if (!resolved.ok()) return resolved.status().WithContext(api);
    launch = cache.Insert(key, std::move(resolved).value());
  }

  // One block per (row, chunk of cols_per_block columns of d): the rule of the device code.
  const int64_t chunks = (plan.d + launch->cols_per_block - 1) / launch->cols_per_block;
  if (plan.rows > INT_MAX / chunks)
    return Status(StatusCode::kInvalidArgument,
                  std::string(api) + ": " + std::to_string(plan.rows) + " rows of d " + std::to_string(plan.d) +
                      " need more than 2^31-1 blocks (" + std::to_string(chunks) +
                      " per row); split the call");
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(plan.rows * chunks);
  config.block.x = launch->block;
  config.dynamic_smem_bytes = launch->dynamic_smem;
  config.stream = stream;
  // The kernel contract (kiln/activation/act_and_mul.cuh):
  // (out, input, rows, d, out_row_stride, in_row_stride).
  void* out = plan.out;
  const void* input = plan.input;
  long long rows = plan.rows;
  int d = static_cast<int>(plan.d);
  long long out_stride = plan.out_stride;
  long long in_stride = plan.in_stride;
  void* args[] = {&out, &input, &rows, &d, &out_stride, &in_stride};
  return LaunchFunction(**driver, launch->function, config, args, ActivationOpEntry(plan.op));
}

}  // namespace kiln::client
