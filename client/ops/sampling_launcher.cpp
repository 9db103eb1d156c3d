#include "client/ops/sampling_launcher.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

#include "client/driver/cuda_driver.h"
#include "client/driver/current_context.h"
#include "client/driver/devices.h"
#include "client/loader/arch_compat.h"
#include "client/loader/kernel_launch.h"
#include "client/loader/launch_hint.h"
#include "client/loader/module_cache.h"
#include "client/ops/api_log.h"
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

  auto block = LaunchHint(info, "block", 1, 1024);
  if (!block.ok()) return block.status();
  auto rows_per_block = LaunchHint(info, "rows_per_block", 1, 1);  // the kernel takes one row per block
  if (!rows_per_block.ok()) return rows_per_block.status();
  auto smem = LaunchHint(info, "dynamic_smem", 0, INT_MAX);
  if (!smem.ok()) return smem.status();

  auto entry_launch = EntryLaunch(driver, *library, entry, ctx, *block, *smem);
  if (!entry_launch.ok()) return entry_launch.status();
  OpLaunch launch = std::move(entry_launch).value();
  launch.rows_per_block = 1;
  return launch;
}

// One line before validation and launch (api_log.h levels): the name, and at level 3 every
// tensor and scalar.
void LogSamplingCall(SamplingOp op, const SamplingArgs& a, const char* api, void* stream) {
  const int level = ApiLogLevel();
  if (level <= 0) return;
  if (level < 3) {
    LogOpCall(api, {}, NAN, stream);
    return;
  }
  std::string line = std::string("[kiln api] ") + api + "(";
  auto tensor = [&](const char* name, const TensorView* t) {
    char pointer[32];
    std::snprintf(pointer, sizeof(pointer), "%p", t != nullptr ? t->data : nullptr);
    line += std::string(name) + "=" + (t != nullptr ? t->Describe() + " @" + pointer : std::string("null")) + ", ";
  };
  tensor("samples", a.samples);
  tensor("probs", a.probs);
  char text[160];
  if (op == SamplingOp::kTopK || op == SamplingOp::kTopKTopP) {
    if (a.k_values != nullptr) {
      tensor("top_k", a.k_values);
    } else {
      std::snprintf(text, sizeof(text), "top_k=%lld, ", static_cast<long long>(a.k_scalar));
      line += text;
    }
  }
  if (op != SamplingOp::kTopK && op != SamplingOp::kArgmax) {
    const char* name = op == SamplingOp::kMinP ? "min_p" : "top_p";
    if (a.p_values != nullptr) {
      tensor(name, a.p_values);
    } else {
      std::snprintf(text, sizeof(text), "%s=%g, ", name, a.p_scalar);
      line += text;
    }
  }
  if (op != SamplingOp::kArgmax) {
    std::snprintf(text, sizeof(text), "seed=%llu, offset=%llu, ", static_cast<unsigned long long>(a.seed),
                  static_cast<unsigned long long>(a.offset));
    line += text;
  }
  std::snprintf(text, sizeof(text), "stream=%p)\n", stream);
  line += text;
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines of threads don't mix
}

}  // namespace

Status RunSampling(const SamplingPlan& plan, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  const char* api = plan.api;
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  auto ctx = ContextForDevice(**driver, plan.device, api);
  if (!ctx.ok()) return ctx.status();

  // vocab is a launch argument, not part of the specialization: one entry per (op, out, vec).
  OpLaunchKey key;
  key.context = ctx->context;
  key.op = static_cast<uint16_t>(plan.op);
  key.dtype = static_cast<uint8_t>(plan.out_dtype);
  key.vec = static_cast<uint8_t>(plan.vec);
  auto found = FindOrResolveLaunch(key, [&] { return Resolve(**driver, plan, *ctx); });
  if (!found.ok()) return found.status().WithContext(api);
  const OpLaunch* launch = *found;

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
  return LaunchFunction(**driver, launch->function, config, args, SamplingOpEntry(plan.op));
}

Status SampleWithApi(SamplingOp op, const SamplingArgs& args, const char* api, void* stream) {
  LogSamplingCall(op, args, api, stream);
  auto plan = PlanSampling(op, args, api);
  if (!plan.ok()) return plan.status();
  return RunSampling(*plan, stream);
}

}  // namespace kiln::client
