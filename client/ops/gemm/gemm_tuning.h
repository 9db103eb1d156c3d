// What the gemm op takes from the autotuner's side at each call: the device's tuning
// environment and the daemon's tactic blocklist (asked once per device; a failure, such as an
// unreachable daemon, is remembered for a minute so that calls do not retry it each time), the
// shape bucket of a call, and the tuned tactic of that bucket when a result for this environment
// is stored (client/core/tuning/tuning_records.h: in memory after the first lookup).
#pragma once

#include <cstdint>
#include <functional>
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
// "bf16.obf16.m4096.n4096.k4096" (gemm, fp8_gemm: "fp8_e4m3.obf16.m...")
std::string GemmTuningBucket(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k);
// The grouped ops': "bf16.obf16.e8.m512.n28672.k4096", with M the bucket of the rows a group has
// on average (contiguous: T / E, rounded up) or at most (masked: M_max).
std::string GroupedTuningBucket(DType dtype, DType out_dtype, int groups, int64_t rows_per_group, int64_t n, int64_t k);

// Whether KILN_TACTIC_BLOCKLIST (`controls`) or the daemon's list blocks `tactic` of `op` here.
bool GemmTacticBlocked(std::string_view op, const gemm::GemmTactic& tactic, const GemmTacticControls& controls,
                       const GemmDeviceFacts& device, const GemmTuningContext& context);

// Where the tactic of a call of an op with tactics comes from.
enum class GemmTacticSource { kForced, kTuned, kHeuristic };
struct ChosenGemmTactic {
  gemm::GemmTactic tactic{};
  GemmTacticSource source = GemmTacticSource::kHeuristic;
};

// What decides the tactic of one call.
struct TacticQuestion {
  std::string_view op;  // one of kTacticOps
  int device_ordinal = 0;
  const GemmDeviceFacts* device = nullptr;
  const char* api = "";
  std::string bucket;            // the call's tuning bucket (GemmTuningBucket, GroupedTuningBucket)
  gemm::GemmTactic heuristic{};  // the default tactic of the shape
  // The tactics in the op's order of preference, the heuristic's first (a blocklist takes the
  // first it does not block); null: FallbackTactics(op, heuristic).
  std::function<std::vector<gemm::GemmTactic>()> ranked;
};
// The tactic of a call: KILN_FORCE_TACTIC's for the op; else the tuned tactic of the bucket
// (kiln::tune, stored for this environment; not with `skip_tuned`: what the tuner compares
// against); else the first of the ranking that neither KILN_TACTIC_BLOCKLIST nor the daemon's
// --tactic-blocklist blocks on the device. FAILED_PRECONDITION when every tactic is blocked.
StatusOr<ChosenGemmTactic> ChooseTactic(const TacticQuestion& question, const GemmTacticControls& controls,
                                        bool skip_tuned = false);

// The calls of one shape, for remembering their tactic (RememberedTactic).
struct TacticCallKey {
  std::string_view op;  // one of the gemm:: op names (static strings)
  int device = 0;
  DType dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  int64_t m = 0;  // gemm: M; grouped: rows a group has on average (contiguous) or at most (masked)
  int64_t n = 0;
  int64_t k = 0;
  int groups = 0;    // 0 for the dense ops
  int epilogue = 0;  // grouped: gemm::GemmEpilogue (silu_and_mul is another kernel: its own choice)
  bool operator==(const TacticCallKey&) const = default;
};
// The choice this thread made for `key` within the last second, unless this process stored a
// tuning result since (GemmTuningGeneration); null otherwise. A call then pays a hash lookup,
// not the bucket text and the tuning lookups (1.3 us on the H200 host).
const ChosenGemmTactic* FindRememberedTactic(const TacticCallKey& key);
void RememberTactic(const TacticCallKey& key, const ChosenGemmTactic& chosen);
// `choose()`'s answer for `key`, remembered per thread for a second.
template <typename Choose>
StatusOr<ChosenGemmTactic> RememberedTactic(const TacticCallKey& key, Choose&& choose) {
  if (const ChosenGemmTactic* known = FindRememberedTactic(key)) return *known;
  StatusOr<ChosenGemmTactic> chosen = choose();
  if (chosen.ok()) RememberTactic(key, *chosen);
  return chosen;
}
// `heuristic`, then every tactic of `op`'s space: the tiles from the largest (128 x 256) to the
// smallest, each at its most stages down to 2, group_m 8 first, then the other raster groups.
std::vector<gemm::GemmTactic> FallbackTactics(std::string_view op, const gemm::GemmTactic& heuristic);

// The tuned tactic of `op`'s `bucket` for this environment, unless none is stored, it is not a
// tactic of the op's space in this build (said once at the loader log level) or it is blocked.
std::optional<gemm::GemmTactic> TunedTactic(std::string_view op, const std::string& bucket,
                                            const GemmTacticControls& controls, const GemmDeviceFacts& device,
                                            const GemmTuningContext& context);

// Bumped each time this process stores a tuning result: cached tactic choices are stale then.
uint64_t GemmTuningGeneration();
void BumpGemmTuningGeneration();

}  // namespace kiln::client
