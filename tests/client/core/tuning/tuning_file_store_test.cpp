// KILN_TUNING_FILE's store (client/core/tuning/tuning_file_store.h) on real files: round trip,
// replacement, re-reading a file another process changed, two processes writing at once losing
// nothing, and bad files refused naming the file.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "client/core/tuning/tuning_file_store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::client::FileTuningStore;
using kiln::testing::TempDir;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;

TEST_CASE("tuning file: put, lookup, replace, the file is the records' JSON", "[tuning][file]") {
  TempDir dir;
  FileTuningStore store(dir / "tuning.json");
  auto none = store.Lookup("gemm", "b1", TestEnvironment());
  REQUIRE(none.ok());
  CHECK_FALSE(none->record.has_value());
  CHECK(none->mismatch.empty());

  REQUIRE(store.Put(TestRecord("b1")).ok());
  REQUIRE(store.Put(TestRecord("b2")).ok());
  auto found = store.Lookup("gemm", "b1", TestEnvironment());
  REQUIRE(found.ok());
  REQUIRE(found->record.has_value());
  CHECK(found->record->tactic() == "t128x256x64s4g8");

  REQUIRE(store.Put(TestRecord("b1", TestEnvironment(), "t64x256x64s5g8", 380.0)).ok());
  CHECK(store.Records()->size() == 2);
  CHECK(store.Lookup("gemm", "b1", TestEnvironment())->record->tactic() == "t64x256x64s5g8");

  const std::string text = kiln::testing::ReadFile(dir / "tuning.json");
  CHECK_THAT(text, Catch::Contains("\"bucket\": \"b1\""));
  CHECK_THAT(text, Catch::Contains("\"gpu_name\": \"NVIDIA H200\""));
  auto parsed = kiln::client::ParseTuningFile(dir / "tuning.json", text);
  REQUIRE(parsed.ok());
  CHECK(parsed->size() == 2);
  // Nothing left beside it but the lock file.
  CHECK_FALSE(std::filesystem::exists(dir / ("tuning.json.tmp." + std::to_string(getpid()))));
}

TEST_CASE("tuning file: another environment is not reused, and the lookup says which fields differ", "[tuning][file]") {
  TempDir dir;
  FileTuningStore store(dir / "tuning.json");
  REQUIRE(store.Put(TestRecord("b1", TestEnvironment("NVIDIA H100 80GB HBM3"))).ok());
  auto found = store.Lookup("gemm", "b1", TestEnvironment());
  REQUIRE(found.ok());
  CHECK_FALSE(found->record.has_value());
  CHECK(found->mismatch ==
        "1 record under another environment: gpu_name: stored 'NVIDIA H100 80GB HBM3', here 'NVIDIA H200'");
}

TEST_CASE("tuning file: a reader sees what another writer stored once the file changed", "[tuning][file]") {
  TempDir dir;
  FileTuningStore reader(dir / "tuning.json", std::chrono::milliseconds(0));
  FileTuningStore writer(dir / "tuning.json", std::chrono::milliseconds(0));
  CHECK_FALSE(reader.Lookup("gemm", "b1", TestEnvironment())->record.has_value());
  REQUIRE(writer.Put(TestRecord("b1")).ok());
  CHECK(reader.Lookup("gemm", "b1", TestEnvironment())->record.has_value());
  // Within the recheck interval a reader keeps what it read (no stat per lookup).
  FileTuningStore slow(dir / "tuning.json", std::chrono::hours(1));
  CHECK(slow.Records()->size() == 1);
  REQUIRE(writer.Put(TestRecord("b2")).ok());
  CHECK(slow.Records()->size() == 1);
  CHECK(reader.Records()->size() == 2);
}

TEST_CASE("tuning file: two processes writing at once lose none of each other's records", "[tuning][file]") {
  TempDir dir;
  const std::string path = dir / "tuning.json";
  constexpr int kEach = 25;
  std::vector<pid_t> children;
  for (int child = 0; child < 2; ++child) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // No Catch2 here: the exit code reports.
      FileTuningStore store(path, std::chrono::milliseconds(0));
      for (int i = 0; i < kEach; ++i)
        if (!store.Put(TestRecord("c" + std::to_string(child) + "." + std::to_string(i))).ok()) _exit(1);
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  FileTuningStore store(path);
  auto records = store.Records();
  REQUIRE(records.ok());
  CHECK(records->size() == 2 * kEach);
  for (int child = 0; child < 2; ++child)
    for (int i = 0; i < kEach; ++i)
      CHECK(store.Lookup("gemm", "c" + std::to_string(child) + "." + std::to_string(i), TestEnvironment())
                ->record.has_value());
}

TEST_CASE("tuning file: a damaged file, an unknown field or a bad record is refused naming the file",
          "[tuning][file]") {
  TempDir dir;
  const std::string path = dir / "tuning.json";
  kiln::testing::WriteFile(path, "{\"records\": [");
  FileTuningStore store(path, std::chrono::milliseconds(0));
  auto damaged = store.Lookup("gemm", "b1", TestEnvironment());
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.status().code() == kiln::StatusCode::kInvalidArgument);
  CHECK_THAT(damaged.status().message(), Catch::StartsWith("KILN_TUNING_FILE " + path + " is not a tuning file ("));
  // A writer refuses too: it would drop what it cannot read.
  CHECK_FALSE(store.Put(TestRecord("b1")).ok());
  CHECK(kiln::testing::ReadFile(path) == "{\"records\": [");

  kiln::testing::WriteFile(path, "{\"records\": [], \"owner\": \"someone\"}");
  auto unknown = store.Records();
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Catch::Contains("owner"));

  kiln::v1::TuningRecord bad = TestRecord("b1");
  bad.set_median_us(-3);
  kiln::testing::WriteFile(path, kiln::client::TuningFileText({TestRecord("b0"), bad}));
  auto bad_record = store.Records();
  REQUIRE_FALSE(bad_record.ok());
  CHECK(bad_record.status().message() ==
        "KILN_TUNING_FILE " + path + ": records[1].median_us -3.000000 must be a positive time");
  // An empty file is an empty store.
  kiln::testing::WriteFile(path, "");
  CHECK(store.Records()->empty());
}

TEST_CASE("tuning file: a bad record is refused before anything is written", "[tuning][file]") {
  TempDir dir;
  FileTuningStore store(dir / "tuning.json");
  kiln::v1::TuningRecord r = TestRecord("b1");
  r.set_op("");
  kiln::Status s = store.Put(r);
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(s.message() == "record.op '' is empty; expected an op name: 1 to 64 of a-z, 0-9 and _, e.g. gemm");
  CHECK_FALSE(std::filesystem::exists(dir / "tuning.json"));
}
