// What the gemm op takes from the autotuner's side at each call: the device's tuning
// environment and the daemon's tactic blocklist (asked once per device; a failure, such as an
// unreachable daemon, is remembered for a minute so that calls do not retry it each time), the
// shape bucket of a call, and the tuned tactic of that bucket when a result for this environment
// is stored (client/core/tuning/tuning_records.h: in memory after the first lookup).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/core/tuning/tuning_environment.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln::client {

struct GemmTuningContext {
  bool ok = false;
  TuningEnvironment environment;              // when ok
  std::vector<BlockedTactic> daemon_blocked;  // when ok: kilnd --tactic-blocklist
  std::string why_not;                        // when not ok
};
// Device `ordinal`'s context (never null).
std::shared_ptr<const GemmTuningContext> GemmTuningContextFor(int ordinal);

// M rounded up to a power of two: the rows a tuned result serves are (bucket / 2, bucket].
int64_t GemmBucketM(int64_t m);
// "bf16.obf16.m4096.n4096.k4096"
std::string GemmTuningBucket(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k);

// Whether KILN_TACTIC_BLOCKLIST (`controls`) or the daemon's list blocks `tactic` here.
bool GemmTacticBlocked(const gemm::GemmTactic& tactic, const GemmTacticControls& controls,
                       const GemmDeviceFacts& device, const GemmTuningContext& context);

// The tuned tactic of the plan's bucket for this environment, unless none is stored, it is not
// a tactic of this build's space (said once at the loader log level) or it is blocked.
std::optional<gemm::GemmTactic> TunedGemmTactic(const GemmPlan& plan, const GemmTacticControls& controls,
                                                const GemmDeviceFacts& device, const GemmTuningContext& context);

// Bumped each time this process stores a tuning result: cached tactic choices are stale then.
uint64_t GemmTuningGeneration();
void BumpGemmTuningGeneration();

}  // namespace kiln::client
