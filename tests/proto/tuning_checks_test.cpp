// The checks of tuning records (proto/tuning_checks.h): a good record passes; each bad field is
// named with its value and what is allowed; unknown fields are found at any depth.
#include <catch2/catch.hpp>

#include <limits>

#include "proto/tuning_checks.h"

using kiln::proto::TuningRecordProblem;

namespace {

kiln::v1::TuningRecord Good() {
  kiln::v1::TuningRecord r;
  r.set_op("gemm");
  r.set_bucket("bf16.obf16.m4096.n4096.k4096");
  auto* e = r.mutable_environment();
  e->set_gpu_name("NVIDIA H200");
  e->set_sm_count(132);
  e->set_driver_version(13000);
  e->set_nvrtc_version("13.0");
  e->set_kiln_version("0.1.0");
  e->set_tactic_space_version(1);
  r.set_tactic("t128x256x64s4g8");
  r.set_median_us(412.5);
  r.set_timing("cupti");
  auto* a = r.add_candidates();
  a->set_tactic("t128x256x64s4g8");
  a->set_ok(true);
  a->set_median_us(412.5);
  auto* b = r.add_candidates();
  b->set_tactic("t128x128x64s7g8");
  b->set_ok(false);
  b->set_failure("launch timed out");
  return r;
}

std::string ProblemAfter(void (*edit)(kiln::v1::TuningRecord&)) {
  kiln::v1::TuningRecord r = Good();
  edit(r);
  return TuningRecordProblem("record", r);
}

}  // namespace

TEST_CASE("tuning checks: a complete record passes", "[proto][tuning]") {
  CHECK(TuningRecordProblem("record", Good()).empty());
  kiln::v1::TuningRecord no_candidates = Good();
  no_candidates.clear_candidates();
  CHECK(TuningRecordProblem("record", no_candidates).empty());
}

TEST_CASE("tuning checks: each bad field is named with its value", "[proto][tuning]") {
  CHECK(ProblemAfter([](auto& r) { r.set_op(""); }) ==
        "record.op '' is empty; expected an op name: 1 to 64 of a-z, 0-9 and _, e.g. gemm");
  CHECK(ProblemAfter([](auto& r) { r.set_op("9gemm"); }) == "record.op '9gemm' must start with a letter, e.g. gemm");
  CHECK(ProblemAfter([](auto& r) { r.set_bucket("m 4096"); }).find("record.bucket 'm 4096' has the character ' '") ==
        0);
  CHECK(ProblemAfter([](auto& r) { r.set_tactic("t128 x256"); }).find("record.tactic 't128 x256' has the character") ==
        0);
  CHECK(ProblemAfter([](auto& r) { r.clear_environment(); }).find("record.environment is missing") == 0);
  CHECK(ProblemAfter([](auto& r) { r.mutable_environment()->set_sm_count(0); }) ==
        "record.environment.sm_count 0 must be positive (is it set?)");
  CHECK(ProblemAfter([](auto& r) { r.mutable_environment()->set_gpu_name(""); }).find("record.environment.gpu_name") ==
        0);
  CHECK(ProblemAfter([](auto& r) {
          r.mutable_environment()->set_nvrtc_version("");
        }).find("record.environment.nvrtc_version '' is empty") == 0);
  CHECK(ProblemAfter([](auto& r) { r.mutable_environment()->set_tactic_space_version(-1); }) ==
        "record.environment.tactic_space_version -1 must be positive (is it set?)");
  CHECK(ProblemAfter([](auto& r) { r.set_median_us(0); }).find("record.median_us 0") == 0);
  CHECK(ProblemAfter([](auto& r) {
          r.set_median_us(std::numeric_limits<double>::quiet_NaN());
        }).find("record.median_us nan") == 0);
  CHECK(ProblemAfter([](auto& r) { r.set_timing(""); }).find("record.timing '' is empty") == 0);
  CHECK(ProblemAfter([](auto& r) { r.mutable_candidates(1)->clear_failure(); }) ==
        "record.candidates[1].failure is empty: a failed candidate says why (ok is false)");
  CHECK(ProblemAfter([](auto& r) { r.mutable_candidates(1)->set_tactic("t128x256x64s4g8"); }) ==
        "record.candidates[1].tactic 't128x256x64s4g8' is listed twice");
  CHECK(ProblemAfter([](auto& r) {
          r.mutable_candidates(0)->set_median_us(-1);
        }).find("record.candidates[0].median_us -1") == 0);
  CHECK(ProblemAfter([](auto& r) { r.set_tactic("t128x128x64s7g8"); }) ==
        "record.tactic 't128x128x64s7g8' is not one of the candidates that ran ok");
}

TEST_CASE("tuning checks: unknown fields are found at any depth", "[proto][tuning]") {
  kiln::v1::TuningRecord r = Good();
  CHECK(kiln::proto::UnknownFieldsProblem("record", r).empty());
  r.mutable_candidates(1)->GetReflection()->MutableUnknownFields(r.mutable_candidates(1))->AddVarint(42, 7);
  CHECK(kiln::proto::UnknownFieldsProblem("record", r) ==
        "record.candidates[1]: unknown field number 42 in kiln.v1.TuningCandidate (written by a newer Kiln? this "
        "one cannot keep it)");
}
