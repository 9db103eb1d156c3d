// The tuning environment's key and mismatch text (proto/tuning_environment.h).
#include <catch2/catch.hpp>

#include "proto/tuning_environment.h"

using kiln::proto::DescribeTuningMismatch;
using kiln::proto::TuningEnvironmentDifferences;
using kiln::proto::TuningEnvironmentKey;

namespace {

kiln::v1::TuningEnvironment H200() {
  kiln::v1::TuningEnvironment e;
  e.set_gpu_name("NVIDIA H200");
  e.set_sm_count(132);
  e.set_driver_version(13000);
  e.set_nvrtc_version("13.0");
  e.set_kiln_version("0.1.0");
  e.set_tactic_space_version(1);
  return e;
}

}  // namespace

TEST_CASE("tuning environment: every field is part of the key", "[proto][tuning]") {
  const std::string base = TuningEnvironmentKey(H200());
  CHECK(base == "gpu_name=11:NVIDIA H200;sm_count=132;driver_version=13000;nvrtc_version=4:13.0;"
                "kiln_version=5:0.1.0;tactic_space_version=1;");
  auto changed = [](auto edit) {
    kiln::v1::TuningEnvironment e = H200();
    edit(e);
    return TuningEnvironmentKey(e);
  };
  CHECK(changed([](auto& e) { e.set_gpu_name("NVIDIA H100"); }) != base);
  CHECK(changed([](auto& e) { e.set_sm_count(114); }) != base);
  CHECK(changed([](auto& e) { e.set_driver_version(12080); }) != base);
  CHECK(changed([](auto& e) { e.set_nvrtc_version("12.8"); }) != base);
  CHECK(changed([](auto& e) { e.set_kiln_version("0.2.0"); }) != base);
  CHECK(changed([](auto& e) { e.set_tactic_space_version(2); }) != base);
  // A value cannot pose as a field boundary: the lengths differ.
  CHECK(changed([](auto& e) { e.set_gpu_name("NVIDIA H200;sm_count=132"); }) != base);
}

TEST_CASE("tuning environment: the differences name each field, stored then here", "[proto][tuning]") {
  kiln::v1::TuningEnvironment stored = H200();
  stored.set_gpu_name("NVIDIA H100 80GB HBM3");
  stored.set_driver_version(12080);
  CHECK(TuningEnvironmentDifferences(H200(), H200()).empty());
  auto d = TuningEnvironmentDifferences(stored, H200());
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "gpu_name: stored 'NVIDIA H100 80GB HBM3', here 'NVIDIA H200'");
  CHECK(d[1] == "driver_version: stored 12080, here 13000");
  CHECK(DescribeTuningMismatch({stored}, H200()) ==
        "1 record under another environment: gpu_name: stored 'NVIDIA H100 80GB HBM3', here 'NVIDIA H200', "
        "driver_version: stored 12080, here 13000");
}

TEST_CASE("tuning environment: a long mismatch is cut after three records", "[proto][tuning]") {
  std::vector<kiln::v1::TuningEnvironment> stored;
  for (int v = 2; v <= 6; ++v) {
    stored.push_back(H200());
    stored.back().set_tactic_space_version(v);
  }
  const std::string text = DescribeTuningMismatch(stored, H200());
  CHECK(text.find("5 records under other environments: tactic_space_version: stored 2, here 1; ") == 0);
  CHECK(text.find("stored 4, here 1; and 2 more") != std::string::npos);
  CHECK(text.find("stored 5") == std::string::npos);
}
