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
#include "client/ops/op_dispatch.h"
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
  auto library = FetchOpModule(driver, op, {entry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  KILN_RETURN_IF_ERROR(CheckModuleParam(info, "vec", std::to_string(plan.vec)));

  auto cols_per_block = LaunchHint(info, "cols_per_block", 1, INT_MAX);
  if (!cols_per_block.ok()) return cols_per_block.status();
  auto launch = HintedEntryLaunch(driver, *library, entry, ctx);
  if (!launch.ok()) return launch.status();
  launch->cols_per_block = *cols_per_block;
  return launch;
}

}  // namespace

Status RunActAndMul(const ActivationPlan& plan, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  // d is a launch argument, not part of the specialization: one entry per (op, dtype, vec).
  OpLaunchKey key;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  auto ready = PrepareOpLaunch(plan.device, api, key, [&](const CudaDriver& driver, const ContextInfo& ctx) {
    return Resolve(driver, plan, ctx);
  });
  if (!ready.ok()) return ready.status();
  const OpLaunch* launch = ready->launch;

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
  return LaunchFunction(*ready->driver, launch->function, config, args, ActivationOpEntry(plan.op),
                        &launch->library->info);
}

}  // namespace kiln::client
