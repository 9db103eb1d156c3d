#include "tests/support/tuning_fixtures.h"

namespace kiln::testing {

v1::TuningEnvironment TestEnvironment(const std::string& gpu) {
  v1::TuningEnvironment e;
  e.set_gpu_name(gpu);
  e.set_sm_count(132);
  e.set_driver_version(13000);
  e.set_nvrtc_version("13.0");
  e.set_kiln_version("0.1.0");
  e.set_tactic_space_version(1);
  return e;
}

v1::TuningRecord TestRecord(const std::string& bucket, const v1::TuningEnvironment& environment,
                            const std::string& tactic, double median_us, int64_t recorded_s) {
  v1::TuningRecord r;
  r.set_op("gemm");
  r.set_bucket(bucket);
  *r.mutable_environment() = environment;
  r.set_tactic(tactic);
  r.set_median_us(median_us);
  r.set_timing("cupti");
  auto* chosen = r.add_candidates();
  chosen->set_tactic(tactic);
  chosen->set_ok(true);
  chosen->set_median_us(median_us);
  auto* failed = r.add_candidates();
  failed->set_tactic(tactic == "t64x64x64s8g8" ? "t64x128x64s8g8" : "t64x64x64s8g8");
  failed->set_ok(false);
  failed->set_failure("launch timed out after 2 s");
  r.mutable_recorded()->set_seconds(recorded_s);
  return r;
}

}  // namespace kiln::testing
