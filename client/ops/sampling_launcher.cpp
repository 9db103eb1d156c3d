#include "client/ops/sampling_launcher.h"

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

StatusOr<OpLaunch> Resolve(const CudaDriver& driver, const SamplingPlan& plan, const ContextInfo& ctx) {
  OpRequest op;
  op.name = SamplingOpName(plan.op);
  op.params = {{"out_dtype", DTypeName(plan.out_dtype)}, {"vec", std::to_string(plan.vec)}};
  const char* entry = SamplingOpEntry(plan.op);
  auto library = FetchOpModule(driver, op, {entry}, ctx);
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  KILN_RETURN_IF_ERROR(CheckModuleParam(info, "vec", std::to_string(plan.vec)));

  auto rows_per_block = LaunchHint(info, "rows_per_block", 1, 1);  // the kernel takes one row per block
  if (!rows_per_block.ok()) return rows_per_block.status();
  auto launch = HintedEntryLaunch(driver, *library, entry, ctx);
  if (!launch.ok()) return launch.status();
  launch->rows_per_block = 1;
  return launch;
}

// The call record: a null tensor pointer is left out (the validation names it); a per-row
// parameter is a tensor or a scalar param, under the name the API gives it.
void DescribeSamplingCall(SamplingOp op, const SamplingArgs& a, diag::OpCall& c) {
  if (a.samples != nullptr) c.Out("samples", *a.samples);
  if (a.probs != nullptr) c.In("probs", *a.probs);
  if (op == SamplingOp::kTopK || op == SamplingOp::kTopKTopP) {
    if (a.k_values != nullptr)
      c.In("top_k", *a.k_values);
    else
      c.Param("top_k", a.k_scalar);
  }
  if (op != SamplingOp::kTopK && op != SamplingOp::kArgmax) {
    const char* name = op == SamplingOp::kMinP ? "min_p" : "top_p";
    if (a.p_values != nullptr)
      c.In(name, *a.p_values);
    else
      c.Param(name, a.p_scalar);
  }
  if (op != SamplingOp::kArgmax) c.Param("seed", a.seed).Param("offset", a.offset);
}

}  // namespace

Status RunSampling(const SamplingPlan& plan, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  // vocab is a launch argument, not part of the specialization: one entry per (op, out, vec).
  OpLaunchKey key;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.out_dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  auto ready = PrepareOpLaunch(plan.device, api, key, [&](const CudaDriver& driver, const ContextInfo& ctx) {
    return Resolve(driver, plan, ctx);
  });
  if (!ready.ok()) return ready.status();
  const OpLaunch* launch = ready->launch;

  if (plan.rows > INT_MAX)
    return Status(StatusCode::kInvalidArgument,
                  std::string(api) + ": " + std::to_string(plan.rows) +
                      " rows need more than 2^31-1 blocks (one per row); split the call");
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(plan.rows);
  config.block.x = launch->block;
  config.dynamic_smem_bytes = launch->dynamic_smem;
  config.stream = stream;
  // The kernel contract (kernels/src/sampling/sampling.cu): (samples, probs, vocab, row_stride,
  // k_values, k_scalar, p_values, p_scalar, seed, offset).
  void* samples = plan.samples;
  const float* probs = plan.probs;
  long long vocab = plan.vocab;
  long long row_stride = plan.row_stride;
  const int32_t* k_values = plan.k_values;
  long long k_scalar = plan.k_scalar;
  const float* p_values = plan.p_values;
  double p_scalar = plan.p_scalar;
  unsigned long long seed = plan.seed;
  unsigned long long offset = plan.offset;
  void* args[] = {&samples, &probs, &vocab, &row_stride, &k_values, &k_scalar, &p_values, &p_scalar, &seed, &offset};
  return LaunchFunction(*ready->driver, launch->function, config, args, SamplingOpEntry(plan.op),
                        &launch->library->info);
}

Status SampleWithApi(SamplingOp op, const SamplingArgs& args, const char* api, void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanSampling(op, args, api);
    if (!plan.ok()) return plan.status();
    return RunSampling(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced(SamplingOpName(op), api, stream, [&](diag::OpCall& c) { DescribeSamplingCall(op, args, c); },
                        body);
  return body();
}

}  // namespace kiln::client
