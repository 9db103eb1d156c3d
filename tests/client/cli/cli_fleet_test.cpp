// kiln warm and kiln cache export-list against real daemons: a list warmed on one daemon,
// exported from its cache, warms another to the very same keys; progress lines, summary and
// exit codes.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proto/spec_list.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::DaemonProcess;
using kiln::testing::RunCli;
using kiln::testing::RunResult;
using nlohmann::json;

// The JSON progress lines of a run (stdout is not a terminal here).
std::vector<json> Lines(const std::string& output) {
  std::vector<json> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
  return lines;
}

std::multiset<std::string> Origins(const std::vector<json>& lines) {
  std::multiset<std::string> out;
  for (const auto& l : lines) out.insert(l.value("origin", "failed"));
  return out;
}

}  // namespace

TEST_CASE("a list warmed on one daemon and exported from its cache warms another to the same keys", "[cli][fleet]") {
  kiln::testing::TempDir dir;
  kiln::testing::WriteFile(dir / "warm.list", "# two specs, one for two archs\n"
                                              "rmsnorm dtype=bf16 hidden=4096 @sm_90a @sm_80\n"
                                              "fused_add_rmsnorm dtype=fp16 hidden=2048 @sm_90a\n");
  std::set<std::string> keys;
  DaemonProcess first({.root = dir / "first"});
  {
    auto r = RunCli(first, {"warm", dir / "warm.list", "--jobs", "2"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto lines = Lines(r.output);
    REQUIRE(lines.size() == 3);
    CHECK(Origins(lines) == std::multiset<std::string>{"compiled", "compiled", "compiled"});
    for (const auto& l : lines) {
      CHECK(l["ok"].get<bool>());
      CHECK(l["total"].get<int>() == 3);
      keys.insert(l["cache_key"].get<std::string>());
    }
    CHECK_THAT(r.output, Catch::Contains("kiln warm: 3 specs: 3 compiled; 0 failed"));
  }
  {
    auto again = RunCli(first, {"warm", dir / "warm.list"});
    REQUIRE(again.exit_code == 0);
    CHECK(Origins(Lines(again.output)) == std::multiset<std::string>{"memory", "memory", "memory"});
  }

  // Hit counts reach the index within a second of a hit (the daemon flushes them each second).
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto exported = RunCli(first, {"cache", "export-list", "--out", dir / "exported.list"});
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  auto list = kiln::proto::ReadSpecList(dir / "exported.list");
  REQUIRE(list.error.empty());
  REQUIRE(list.entries.size() == 2);
  // The most used first: rmsnorm was served from the cache twice (two archs), the other once.
  CHECK(list.entries[0].op == "rmsnorm");
  CHECK(list.entries[0].archs == std::vector<std::string>{"sm_80", "sm_90a"});
  CHECK(list.entries[0].params.at("vec") != "");  // canonical params, defaults filled in
  CHECK(list.entries[1].op == "fused_add_rmsnorm");
  CHECK_THAT(kiln::testing::ReadFile(dir / "exported.list"), Catch::Contains("# 2 hits"));

  DaemonProcess second({.root = dir / "second"});
  auto warmed = RunCli(second, {"warm", dir / "exported.list"});
  INFO(warmed.output);
  REQUIRE(warmed.exit_code == 0);
  std::set<std::string> second_keys;
  for (const auto& l : Lines(warmed.output)) {
    CHECK(l["origin"] == "compiled");
    second_keys.insert(l["cache_key"].get<std::string>());
  }
  CHECK(second_keys == keys);

  // --arch replaces the lines' archs; --min-hits leaves out the rarely used.
  auto sm80 = RunCli(second, {"warm", dir / "exported.list", "--arch", "sm_80"});
  REQUIRE(sm80.exit_code == 0);
  CHECK(Origins(Lines(sm80.output)) == std::multiset<std::string>{"compiled", "memory"});
  auto rare = RunCli(first, {"cache", "export-list", "--min-hits", "2"});
  REQUIRE(rare.exit_code == 0);
  CHECK(kiln::proto::ParseSpecList(rare.output, "out").entries.size() == 1);
  CHECK_THAT(rare.output, Catch::Contains("1 below --min-hits"));
}

TEST_CASE("kiln warm exits 1 naming each failed spec and 2 on a bad list", "[cli][fleet]") {
  kiln::testing::TempDir dir;
  DaemonProcess d({.root = dir / "d"});
  kiln::testing::WriteFile(dir / "mixed.list", "rmsnorm dtype=bf16 hidden=4096\nrmsnorm dtype=int8 hidden=4096\n");
  auto mixed = RunCli(d, {"warm", dir / "mixed.list", "--arch", "sm_90a"});
  INFO(mixed.output);
  CHECK(mixed.exit_code == 1);
  auto lines = Lines(mixed.output);
  REQUIRE(lines.size() == 2);
  int failed = 0;
  for (const auto& l : lines)
    if (!l["ok"].get<bool>()) {
      ++failed;
      CHECK(l["source"] == dir / "mixed.list" + ":2");
      CHECK_THAT(l["error"].get<std::string>(), Catch::Contains("int8"));
    }
  CHECK(failed == 1);
  CHECK_THAT(mixed.output, Catch::Contains("1 compiled; 1 failed"));

  auto no_arch = RunCli(d, {"warm", dir / "mixed.list"});
  CHECK(no_arch.exit_code == 2);
  CHECK_THAT(no_arch.output, Catch::Contains(":1: rmsnorm names no @ARCH target and no --arch was given"));
  kiln::testing::WriteFile(dir / "bad.list", "rmsnorm dtype=bf16 @sm_90\nrmsnorm =4\n");
  auto bad = RunCli(d, {"warm", dir / "bad.list"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains(dir / "bad.list" + ":2: 'rmsnorm =4'"));
  auto jobs = RunCli(d, {"warm", dir / "mixed.list", "--jobs", "0"});
  CHECK(jobs.exit_code == 2);
  CHECK_THAT(jobs.output, Catch::Contains("--jobs wants an integer from 1 to 64"));
}
