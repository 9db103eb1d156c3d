// The client's tuning functions against a real kilnd (client/core/tuning/): the daemon's store
// chosen when KILN_TUNING_FILE is unset, records shared through it, a lookup answered from
// memory (the daemon killed after the first one), a mismatch logged from the daemon's answer,
// a daemon without a store, and the daemon's blocklist.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "client/core/tuning/daemon_tuning.h"
#include "client/core/tuning/tuning_daemon_store.h"
#include "client/core/tuning/tuning_records.h"
#include "kiln/client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::testing::DaemonProcess;
using kiln::testing::TempDir;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;

namespace {

void UseDaemon(const DaemonProcess& d) {
  unsetenv("KILN_TUNING_FILE");
  kiln::ClientOptions options;
  options.socket = d.socket();
  REQUIRE(kiln::Configure(options).ok());
}

}  // namespace

TEST_CASE("client tuning: StoreTuning and LookupTuning go through the daemon's store, lookups stay in memory",
          "[tuning][daemon]") {
  TempDir dir;
  auto d = std::make_unique<DaemonProcess>(
      kiln::testing::DaemonOptions{.root = dir.path(), .extra_args = {"--tuning-store", dir / "tuning.db"}});
  UseDaemon(*d);
  auto where = kiln::client::TuningStoreDescription();
  REQUIRE(where.ok());
  CHECK(*where == "the tuning store " + (dir / "tuning.db") + " of kilnd at unix:" + d->socket());
  REQUIRE(kiln::client::StoreTuning(TestRecord("b1")).ok());
  auto found = kiln::client::LookupTuning("gemm", "b1", TestEnvironment());
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->tactic() == "t128x256x64s4g8");

  // Another process's record (put straight into the daemon) is found by a new lookup.
  {
    kiln::client::DaemonTuningStore other(std::make_shared<kiln::client::DaemonConnection>(d->socket()),
                                          dir / "tuning.db");
    REQUIRE(other.Put(TestRecord("b2", TestEnvironment(), "t64x128x64s8g8", 90.0)).ok());
  }
  auto b2 = kiln::client::LookupTuning("gemm", "b2", TestEnvironment());
  REQUIRE(b2.ok());
  REQUIRE(b2->has_value());
  CHECK((*b2)->tactic() == "t64x128x64s8g8");

  // Answered from memory: no RPC per call, the daemon may even be gone.
  d.reset();
  auto again = kiln::client::LookupTuning("gemm", "b2", TestEnvironment());
  REQUIRE(again.ok());
  CHECK(again->has_value());
}

TEST_CASE("client tuning: a daemon's record of another environment is ignored, the log names the fields",
          "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--tuning-store", dir / "tuning.db"}});
  auto connection = std::make_shared<kiln::client::DaemonConnection>(d.socket());
  std::vector<std::string> lines;
  kiln::client::TuningRecords records(std::make_unique<kiln::client::DaemonTuningStore>(connection, dir / "tuning.db"),
                                      "", [&](const std::string& line) { lines.push_back(line); });
  REQUIRE(records.Store(TestRecord("b1")).ok());
  kiln::v1::TuningEnvironment here = TestEnvironment();
  here.set_kiln_version("0.2.0");
  auto found = records.Lookup("gemm", "b1", here);
  REQUIRE(found.ok());
  CHECK_FALSE(found->has_value());
  CHECK_FALSE(records.Lookup("gemm", "b1", here)->has_value());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "[kiln loader] tuning gemm b1: not reused from the tuning store " + (dir / "tuning.db") +
                        " of kilnd at unix:" + d.socket() +
                        ": 1 record under another environment: kiln_version: stored '0.1.0', here '0.2.0'");
}

TEST_CASE("client tuning: a daemon without a store keeps nothing, its blocklist is served", "[tuning][daemon]") {
  TempDir dir;
  kiln::testing::WriteFile(dir / "blocklist", "gemm t128x256x64s4g8 gpu=H200\n");
  DaemonProcess d({.root = dir.path(), .extra_args = {"--tactic-blocklist", dir / "blocklist"}});
  UseDaemon(d);
  CHECK(kiln::client::StoreTuning(TestRecord("b1")).ok());
  auto found = kiln::client::LookupTuning("gemm", "b1", TestEnvironment());
  REQUIRE(found.ok());
  CHECK_FALSE(found->has_value());
  CHECK(*kiln::client::TuningStoreDescription() == "nowhere: kilnd at unix:" + d.socket() +
                                                       " runs without a tuning store (kilnd --tuning-store PATH) and "
                                                       "KILN_TUNING_FILE is not set");
  auto blocked = kiln::client::DaemonBlockedTactics();
  REQUIRE(blocked.ok());
  REQUIRE(blocked->size() == 1);
  CHECK((*blocked)[0].tactic() == "t128x256x64s4g8");
  CHECK((*blocked)[0].gpu() == "H200");
}

TEST_CASE("client tuning: KILN_TUNING_FILE wins over the daemon's store", "[tuning][daemon]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--tuning-store", dir / "tuning.db"}});
  UseDaemon(d);
  setenv("KILN_TUNING_FILE", (dir / "mine.json").c_str(), 1);
  CHECK(*kiln::client::TuningStoreDescription() == "KILN_TUNING_FILE " + (dir / "mine.json"));
  REQUIRE(kiln::client::StoreTuning(TestRecord("b1")).ok());
  CHECK_THAT(kiln::testing::ReadFile(dir / "mine.json"), Catch::Contains("\"bucket\": \"b1\""));
  setenv("KILN_TUNING_FILE", "relative.json", 1);
  auto bad = kiln::client::LookupTuning("gemm", "b1", TestEnvironment());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "KILN_TUNING_FILE='relative.json' must be an absolute path (every process of the node must mean the same "
        "file)");
  unsetenv("KILN_TUNING_FILE");
}
