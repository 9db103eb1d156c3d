// kiln::ops::apply_rope and kiln::ops::apply_rope_with_cos_sin_cache (kiln/ops/rope.h), and the
// path they share with the C ABI (rope_ops.h).
#include "client/ops/rope_ops.h"

#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "client/ops/api_log.h"
#include "client/ops/rope_launcher.h"
#include "client/ops/rope_plan.h"
#include "kiln/ops.h"

namespace kiln::client {
namespace {

// The API log line (client/ops/api_log.h's format; LogOpCall knows only eps, so the rope
// scalars are written here): level 1 the name, level 3 every argument.
void LogRopeCall(const char* api, std::initializer_list<std::pair<const char*, const TensorView*>> tensors,
                 const std::string& scalars, void* stream) {
  const int level = ApiLogLevel();
  if (level <= 0) return;
  std::string line = std::string("[kiln api] ") + api;
  if (level >= 3) {
    line += "(";
    for (const auto& [name, t] : tensors) {
      char pointer[32];
      std::snprintf(pointer, sizeof(pointer), "%p", t->data);
      line += std::string(name) + "=" + t->Describe() + " @" + pointer + ", ";
    }
    char rest[48];
    std::snprintf(rest, sizeof(rest), "stream=%p)", stream);
    line += scalars + ", " + rest;
  }
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines of threads don't mix
}

std::string OptionsText(const ops::RopeOptions& o) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), "rotary_dim=%lld, interleaved=%d, theta=%g, llama31=",
                static_cast<long long>(o.rotary_dim), o.interleaved ? 1 : 0, o.theta);
  std::string text = buffer;
  if (!o.llama31.has_value()) return text + "none";
  std::snprintf(buffer, sizeof(buffer),
                "{factor=%g, low_freq_factor=%g, high_freq_factor=%g, original_max_position=%lld}",
                o.llama31->factor, o.llama31->low_freq_factor, o.llama31->high_freq_factor,
                static_cast<long long>(o.llama31->original_max_position));
  return text + buffer;
}

}  // namespace

Status ApplyRope(const char* api, const TensorView& q, const TensorView& k, const TensorView& positions,
                 const ops::RopeOptions& options, void* stream) {
  if (ApiLogLevel() > 0)
    LogRopeCall(api, {{"q", &q}, {"k", &k}, {"positions", &positions}}, OptionsText(options), stream);
  auto plan = PlanApplyRope(q, k, positions, options, api);
  if (!plan.ok()) return plan.status();
  return RunRope(*plan, stream);
}

Status ApplyRopeWithCosSinCache(const char* api, const TensorView& q, const TensorView& k,
                                const TensorView& positions, const TensorView& cos_sin_cache,
                                bool interleaved, void* stream) {
  if (ApiLogLevel() > 0)
    LogRopeCall(api, {{"q", &q}, {"k", &k}, {"positions", &positions}, {"cos_sin_cache", &cos_sin_cache}},
                std::string("interleaved=") + (interleaved ? "1" : "0"), stream);
  auto plan = PlanApplyRopeWithCosSinCache(q, k, positions, cos_sin_cache, interleaved, api);
  if (!plan.ok()) return plan.status();
  return RunRope(*plan, stream);
}

}  // namespace kiln::client

namespace kiln::ops {

Status apply_rope(const TensorView& q, const TensorView& k, const TensorView& positions,
                  const RopeOptions& options, void* stream) {
  return client::ApplyRope("kiln::ops::apply_rope", q, k, positions, options, stream);
}

Status apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                     const TensorView& cos_sin_cache, bool interleaved, void* stream) {
  return client::ApplyRopeWithCosSinCache("kiln::ops::apply_rope_with_cos_sin_cache", q, k, positions,
                                          cos_sin_cache, interleaved, stream);
}

}  // namespace kiln::ops
