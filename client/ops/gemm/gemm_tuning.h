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

// Whether KILN_TACTIC_BLOCKLIST (`controls`) or the daemon's list blocks `tactic` of `op` here.
bool GemmTacticBlocked(std::string_view op, const gemm::GemmTactic& tactic, const GemmTacticControls& controls,
                       const GemmDeviceFacts& device, const GemmTuningContext& context);

// The tactic of a call of an op with tactics that has no tuned results (the grouped and fp8
// ops): KILN_FORCE_TACTIC's for `op`; else `heuristic`, unless a blocklist blocks it, then the
// first unblocked of FallbackTactics. A bad control is the call's INVALID_ARGUMENT;
// FAILED_PRECONDITION when every tactic is blocked.
StatusOr<gemm::GemmTactic> ControlledTactic(std::string_view op, const gemm::GemmTactic& heuristic, int device_ordinal,
                                            const GemmDeviceFacts& device, const char* api);
// `heuristic`, then every tactic of `op`'s space: the tiles from the largest (128 x 256) to the
// smallest, each at its most stages down to 2, group_m 8 first, then the other raster groups.
std::vector<gemm::GemmTactic> FallbackTactics(std::string_view op, const gemm::GemmTactic& heuristic);

// The tuned tactic of the plan's bucket for this environment, unless none is stored, it is not
// a tactic of this build's space (said once at the loader log level) or it is blocked.
std::optional<gemm::GemmTactic> TunedGemmTactic(const GemmPlan& plan, const GemmTacticControls& controls,
                                                const GemmDeviceFacts& device, const GemmTuningContext& context);

// Bumped each time this process stores a tuning result: cached tactic choices are stale then.
uint64_t GemmTuningGeneration();
void BumpGemmTuningGeneration();

}  // namespace kiln::client
