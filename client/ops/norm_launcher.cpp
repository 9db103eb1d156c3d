#include "client/ops/norm_launcher.h"

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

StatusOr<OpLaunch> Resolve(const CudaDriver& driver, const NormPlan& plan,
                           const ContextInfo& ctx) {
  OpRequest op;
  op.name = NormOpName(plan.op);
  op.params = {{"dtype", DTypeName(plan.dtype)},
               {"hidden", std::to_string(plan.hidden)},
               {"vec", std::to_string(plan.vec)}};
  const char* entry = NormOpEntry(plan.op);
  auto library = FetchOpModule(driver, op, {entry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  KILN_RETURN_IF_ERROR(CheckModuleParam(info, "vec", std::to_string(plan.vec)));

  auto rows_per_block = LaunchHint(info, "rows_per_block", 1, INT_MAX);
  if (!rows_per_block.ok()) return rows_per_block.status();
  auto launch = HintedEntryLaunch(driver, *library, entry, ctx);
  if (!launch.ok()) return launch.status();
  launch->rows_per_block = *rows_per_block;
  return launch;
}

}  // namespace

Status RunNorm(const NormPlan& plan, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  OpLaunchKey key;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  key.size0 = plan.hidden;
  auto ready = PrepareOpLaunch(plan.device, api, key, [&](const CudaDriver& driver, const ContextInfo& ctx) {
    return Resolve(driver, plan, ctx);
  });
  if (!ready.ok()) return ready.status();
  const OpLaunch* launch = ready->launch;

  const int64_t grid = (plan.rows + launch->rows_per_block - 1) / launch->rows_per_block;
  if (grid > INT_MAX)
    return Status(StatusCode::kInvalidArgument,
                  std::string(api) + ": " + std::to_string(plan.rows) +
                      " rows need more than 2^31-1 blocks; split the call");
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(grid);
  config.block.x = launch->block;
  config.dynamic_smem_bytes = launch->dynamic_smem;
  config.stream = stream;
  // The kernel contract (kernels/): (a, b, weight, rows, a_row_stride, b_row_stride, eps).
  void* a = plan.a;
  void* b = plan.b;
  const void* weight = plan.weight;
  long long rows = plan.rows;
  long long a_stride = plan.a_stride;
  long long b_stride = plan.b_stride;
  float eps = plan.eps;
  void* args[] = {&a, &b, &weight, &rows, &a_stride, &b_stride, &eps};
  return LaunchFunction(*ready->driver, launch->function, config, args, NormOpEntry(plan.op), &launch->library->info);
}

}  // namespace kiln::client
