// What the gemm op and the tuner call (client/core/tuning/tuning_records.h), over a real file
// store and over no store: the mismatch is logged once per (op, bucket) naming the fields; no
// store keeps nothing and says so once; bad arguments are refused.
#include <catch2/catch.hpp>

#include "client/core/tuning/tuning_environment.h"
#include "client/core/tuning/tuning_file_store.h"
#include "client/core/tuning/tuning_records.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::client::FileTuningStore;
using kiln::client::TuningRecords;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;

TEST_CASE("tuning records: reused in an equal environment, otherwise ignored and logged once per bucket", "[tuning]") {
  kiln::testing::TempDir dir;
  std::vector<std::string> lines;
  TuningRecords records(std::make_unique<FileTuningStore>(dir / "tuning.json"), "",
                        [&](const std::string& line) { lines.push_back(line); });
  REQUIRE(records.Store(TestRecord("b1")).ok());
  auto same = records.Lookup("gemm", "b1", TestEnvironment());
  REQUIRE(same.ok());
  REQUIRE(same->has_value());
  CHECK((*same)->tactic() == "t128x256x64s4g8");
  CHECK(lines.empty());

  kiln::v1::TuningEnvironment here = TestEnvironment();
  here.set_nvrtc_version("13.1");
  for (int i = 0; i < 3; ++i) {
    auto other = records.Lookup("gemm", "b1", here);
    REQUIRE(other.ok());
    CHECK_FALSE(other->has_value());
  }
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "[kiln loader] tuning gemm b1: not reused from KILN_TUNING_FILE " + (dir / "tuning.json") +
                        ": 1 record under another environment: nvrtc_version: stored '13.0', here '13.1'");
  // No record of a bucket at all is not a mismatch: nothing to say.
  CHECK_FALSE(records.Lookup("gemm", "b2", here)->has_value());
  CHECK(lines.size() == 1);
}

TEST_CASE("tuning records: without a store nothing is kept or found, said once", "[tuning]") {
  std::vector<std::string> lines;
  TuningRecords records(nullptr, "kilnd at unix:/x runs without a tuning store",
                        [&](const std::string& line) { lines.push_back(line); });
  CHECK(records.Store(TestRecord("b1")).ok());
  CHECK_FALSE(records.Lookup("gemm", "b1", TestEnvironment())->has_value());
  CHECK_FALSE(records.Lookup("gemm", "b1", TestEnvironment())->has_value());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "[kiln loader] tuning results are not kept and none are reused: kilnd at unix:/x runs without "
                    "a tuning store");
  CHECK(records.Describe() == "nowhere: kilnd at unix:/x runs without a tuning store");
}

TEST_CASE("tuning records: bad arguments are refused naming them", "[tuning]") {
  TuningRecords records(nullptr, "none", [](const std::string&) {});
  auto bad_op = records.Lookup("", "b1", TestEnvironment());
  REQUIRE_FALSE(bad_op.ok());
  CHECK(bad_op.status().message() == "op '' is empty; expected an op name: 1 to 64 of a-z, 0-9 and _, e.g. gemm");
  auto bad_bucket = records.Lookup("gemm", "m=1 n=2", TestEnvironment());
  REQUIRE_FALSE(bad_bucket.ok());
  CHECK_THAT(bad_bucket.status().message(), Catch::StartsWith("bucket 'm=1 n=2' has the character ' '"));
  kiln::v1::TuningRecord r = TestRecord("b1");
  r.set_timing("");
  CHECK(records.Store(r).code() == kiln::StatusCode::kInvalidArgument);
}

TEST_CASE("tuning environment: made from the device, the driver, the daemon's NVRTC and this VERSION", "[tuning]") {
  kiln::client::DeviceInfo device;
  device.name = "NVIDIA H200";
  device.multiprocessors = 132;
  const auto e = kiln::client::MakeTuningEnvironment(device, 13000, "13.0", 3);
  CHECK(e.gpu_name() == "NVIDIA H200");
  CHECK(e.sm_count() == 132);
  CHECK(e.driver_version() == 13000);
  CHECK(e.nvrtc_version() == "13.0");
  CHECK(e.kiln_version() == KILN_TEST_VERSION);
  CHECK(e.tactic_space_version() == 3);
  kiln::v1::TuningEnvironment stored = e;
  stored.set_sm_count(114);
  CHECK(kiln::client::DescribeMismatch(stored, e) == "sm_count: stored 114, here 132");
  CHECK(kiln::client::DescribeMismatch(e, e).empty());
  auto bad = kiln::client::CurrentTuningEnvironment(0, 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "tactic_space_version 0 must be at least 1 (the op's version of its tactic space)");
}
