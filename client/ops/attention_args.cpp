#include "client/ops/attention_args.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"

namespace kiln::client {

Status CheckAttentionHeads(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, DType dtype) {
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16)
    return InvalidArgument(std::string("dtype: ") + DTypeName(dtype) +
                           " is not supported; supported: fp16, bf16 (the kernel runs on tensor-core MMAs)");
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    return InvalidArgument("head_dim: " + std::to_string(head_dim) + " is not supported; supported: 64, 128, 256");
  if (num_kv_heads < 1 || num_kv_heads > 8192)
    return InvalidArgument("num_kv_heads: expected 1 to 8192, found " + std::to_string(num_kv_heads));
  if (num_qo_heads < 1 || num_qo_heads % num_kv_heads != 0)
    return InvalidArgument("num_qo_heads: " + std::to_string(num_qo_heads) +
                           " is not a positive multiple of num_kv_heads (" + std::to_string(num_kv_heads) + ")");
  const int64_t group = num_qo_heads / num_kv_heads;
  if (group != 1 && group != 2 && group != 4 && group != 8)
    return InvalidArgument("num_qo_heads: " + std::to_string(num_qo_heads) + " query heads over " +
                           std::to_string(num_kv_heads) + " kv heads is a group of " + std::to_string(group) +
                           "; supported groups (num_qo_heads / num_kv_heads): 1, 2, 4, 8");
  return OkStatus();
}

StatusOr<AttentionScalars> CheckAttentionScalars(double sm_scale, double logits_soft_cap, int64_t window_left,
                                                 int64_t head_dim) {
  constexpr double kLog2E = 1.4426950408889634;
  if (!std::isfinite(sm_scale) || sm_scale < 0)
    return InvalidArgument("options.sm_scale: expected 0 (1/sqrt(head_dim)) or a finite value > 0, found " +
                           NumberText(sm_scale));
  if (!std::isfinite(logits_soft_cap) || logits_soft_cap < 0)
    return InvalidArgument("options.logits_soft_cap: expected 0 (off) or a finite value > 0, found " +
                           NumberText(logits_soft_cap));
  if (window_left < -1)
    return InvalidArgument("options.window_left: expected -1 (no window) or >= 0, found " +
                           std::to_string(window_left));
  AttentionScalars out;
  out.sm_scale = sm_scale == 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : sm_scale;
  const bool capped = logits_soft_cap > 0;
  const double logit_scale = capped ? out.sm_scale / logits_soft_cap : out.sm_scale * kLog2E;
  const double cap_scale = capped ? logits_soft_cap * kLog2E : 0.0;
  out.logit_scale = static_cast<float>(logit_scale);
  out.cap_scale = static_cast<float>(cap_scale);
  if (!std::isfinite(out.logit_scale) || out.logit_scale <= 0 || !std::isfinite(out.cap_scale))
    return InvalidArgument("options: sm_scale " + NumberText(out.sm_scale) + " with soft cap " +
                           NumberText(logits_soft_cap) + " gives a logit scale of " + NumberText(logit_scale) +
                           ", which is not a positive finite float (the kernel computes in float)");
  out.window_left = static_cast<int32_t>(std::min<int64_t>(window_left, INT32_MAX));
  return out;
}

StatusOr<DType> PlanDTypeFromDL(DLDataType t, const char* api) {
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16) return DType::kFloat16;
  if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16) return DType::kBFloat16;
  std::string found = t.code == kDLFloat && t.bits == 32
                          ? std::string("fp32")
                          : "code " + std::to_string(t.code) + " with " + std::to_string(t.bits) + " bits and " +
                                std::to_string(t.lanes) + " lanes";
  return InvalidArgument(std::string(api) + ": dtype: " + found +
                         " is not supported; supported: kDLFloat 16 (fp16), kDLBfloat 16 (bf16)");
}

Status PlanStatusForC(const Status& status, const char* cpp_api, const char* c_api) {
  const std::string cpp = std::string(cpp_api) + ": ";
  const std::string& message = status.message();
  return Status(status.code(),
                message.rfind(cpp, 0) == 0 ? std::string(c_api) + ": " + message.substr(cpp.size()) : message);
}

}  // namespace kiln::client
