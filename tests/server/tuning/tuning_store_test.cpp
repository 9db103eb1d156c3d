// The daemon's tuning store (server/tuning/tuning_store.h) on real SQLite files: one record per
// (op, bucket, environment), replacement, listing, deletion, reopening, and a schema it does
// not know.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include "server/tuning/tuning_store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::server::TuningStore;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;

TEST_CASE("tuning store: put, find, replace, list, delete and reopen", "[tuning][store]") {
  kiln::testing::TempDir dir;
  const std::string path = dir / "tuning.db";
  {
    auto store = TuningStore::Open(path);
    REQUIRE(store.ok());
    auto& s = **store;
    CHECK(*s.Count() == 0);
    CHECK(*s.Put(TestRecord("b1")) == false);
    CHECK(*s.Put(TestRecord("b1", TestEnvironment("NVIDIA H100"))) == false);
    CHECK(*s.Put(TestRecord("b2")) == false);
    CHECK(*s.Count() == 3);
    // The same key again: replaced, not added.
    CHECK(*s.Put(TestRecord("b1", TestEnvironment(), "t128x128x64s7g8", 399.0)) == true);
    CHECK(*s.Count() == 3);
    auto b1 = s.Find("gemm", "b1");
    REQUIRE(b1.ok());
    REQUIRE(b1->size() == 2);
    bool saw_new = false;
    for (const auto& r : *b1) saw_new |= r.tactic() == "t128x128x64s7g8" && r.environment().gpu_name() == "NVIDIA H200";
    CHECK(saw_new);
    CHECK(s.Find("gemm", "none")->empty());
    CHECK(s.List("")->size() == 3);
    CHECK(s.List("gemm")->size() == 3);
    CHECK(s.List("other")->empty());
    CHECK(*s.Delete("gemm", "b2") == 1);
    CHECK(*s.Count() == 2);
  }
  // Reopened: what was committed is there, whole.
  auto again = TuningStore::Open(path);
  REQUIRE(again.ok());
  auto records = (*again)->List("gemm");
  REQUIRE(records->size() == 2);
  CHECK((*records)[0].candidates_size() == 2);
  CHECK((*records)[0].recorded().seconds() == 1796000000);
  CHECK(*(*again)->Delete("", "") == 2);
  CHECK(*(*again)->Count() == 0);
}

TEST_CASE("tuning store: a schema this build does not know is refused naming both versions", "[tuning][store]") {
  kiln::testing::TempDir dir;
  const std::string path = dir / "tuning.db";
  REQUIRE(TuningStore::Open(path).ok());
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE meta SET value = '7' WHERE name = 'schema_version'", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(db);
  auto reopened = TuningStore::Open(path);
  REQUIRE_FALSE(reopened.ok());
  CHECK(reopened.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(reopened.status().message()),
             Catch::Contains("has schema version \"7\", this kilnd understands 1"));
}

TEST_CASE("tuning store: a file that is not SQLite is a clear error naming the tuning store", "[tuning][store]") {
  kiln::testing::TempDir dir;
  kiln::testing::WriteFile(dir / "tuning.db", std::string(4096, 'x'));
  auto store = TuningStore::Open(dir / "tuning.db");
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(store.status().message()), Catch::StartsWith("tuning store " + (dir / "tuning.db")));
  CHECK_THAT(std::string(store.status().message()), Catch::Contains("move the file aside"));
}
