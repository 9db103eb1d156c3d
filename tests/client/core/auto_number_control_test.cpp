// AutoNumberControl's parse (client/core/api/auto_number_control.h), the one behind
// KILN_DECODE_CHUNK, KILN_SAMPLING_CLUSTER and fused_moe's and fused_moe_fp8's numeric controls:
// auto, unset, numbers in and out of the range, powers of two, and what is not a plain number; and
// AutoNumberSetting (read once, said once, the test override). The stderr lines are checked in a
// child (tests/support/subprocess.h).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "client/core/api/auto_number_control.h"
#include "tests/support/subprocess.h"

namespace {

using kiln::client::AutoNumberControl;
using kiln::client::ParseAutoNumberControl;

const AutoNumberControl kChunk{"KILN_TEST_CHUNK", 64, 1 << 20, "auto or 64 to 1048576"};
const AutoNumberControl kCluster{"KILN_TEST_CLUSTER", 1, 8, "auto, 1, 2, 4 or 8", true};

TEST_CASE("an auto-or-number control takes auto, unset and numbers in its range, and nothing else",
          "[client][controls]") {
  CHECK(ParseAutoNumberControl(kChunk, nullptr) == 0);
  CHECK(ParseAutoNumberControl(kChunk, "auto") == 0);
  CHECK(ParseAutoNumberControl(kChunk, "64") == 64);
  CHECK(ParseAutoNumberControl(kChunk, "1048576") == 1048576);
  CHECK(ParseAutoNumberControl(kChunk, "0001024") == 1024);
  for (const char* bad :
       {"63", "1048577", "", "AUTO", "+64", " 64", "64 ", "-64", "6e2", "0x40", "99999999999999999999"})
    CHECK(ParseAutoNumberControl(kChunk, bad) == 0);
  for (const char* good : {"1", "2", "4", "8"}) CHECK(ParseAutoNumberControl(kCluster, good) == std::stoi(good));
  for (const char* bad : {"0", "3", "6", "16"}) CHECK(ParseAutoNumberControl(kCluster, bad) == 0);
}

// Run only as the child of the test below: a refused and a taken value.
TEST_CASE("child: auto-or-number refusals", "[.auto-number-child]") {
  std::printf("taken: %lld\n", static_cast<long long>(ParseAutoNumberControl(kCluster, "4")));
  std::printf("refused: %lld\n", static_cast<long long>(ParseAutoNumberControl(kCluster, "3")));
}

TEST_CASE("an auto-or-number control names a refused value and what it expected on stderr, and says nothing else",
          "[client][controls]") {
  kiln::testing::SubprocessOptions options;
  options.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "child: auto-or-number refusals"};
  kiln::testing::Subprocess child(options);
  REQUIRE(child.Wait() == 0);
  const std::string out = child.Output();
  INFO(out);
  CHECK(out.find("taken: 4\n") != std::string::npos);
  CHECK(out.find("refused: 0\n") != std::string::npos);
  CHECK(out.find("kiln: KILN_TEST_CLUSTER='3' is not valid: expected auto, 1, 2, 4 or 8; auto is used\n") !=
        std::string::npos);
  CHECK(out.find("KILN_TEST_CLUSTER='4'") == std::string::npos);
}

// Run only as the child of the test below, with KILN_TEST_SETTING set by it: a setting read
// twice (said once), forced and returned to the environment.
TEST_CASE("child: auto-or-number setting", "[.auto-number-setting-child]") {
  static kiln::client::AutoNumberSetting setting(kCluster, "not said: the variable is unset");
  kiln::client::AutoNumberSetting other({"KILN_TEST_SETTING", 1, 8, "auto or 1 to 8"}, "takes {}, {} again");
  std::printf("first: %lld\n", static_cast<long long>(other.Value()));
  std::printf("second: %lld\n", static_cast<long long>(other.Value()));
  other.SetForTesting(0);
  std::printf("forced auto: %lld\n", static_cast<long long>(other.Value()));
  other.SetForTesting(7);
  std::printf("forced: %lld\n", static_cast<long long>(other.Value()));
  other.SetForTesting(-1);
  std::printf("back: %lld\n", static_cast<long long>(other.Value()));
  std::printf("unset: %lld\n", static_cast<long long>(setting.Value()));
}

TEST_CASE("an auto-or-number setting reads its variable once, says a number once with it in the note, and takes "
          "a test override",
          "[client][controls]") {
  for (const char* value : {"5", "9"}) {
    kiln::testing::SubprocessOptions options;
    options.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "child: auto-or-number setting"};
    options.set_env["KILN_TEST_SETTING"] = value;
    options.unset_env.push_back("KILN_TEST_CLUSTER");
    kiln::testing::Subprocess child(options);
    REQUIRE(child.Wait() == 0);
    const std::string out = child.Output();
    INFO(out);
    const std::string want = std::string(value) == "5" ? "5" : "0";
    CHECK(out.find("first: " + want + "\n") != std::string::npos);
    CHECK(out.find("second: " + want + "\n") != std::string::npos);
    CHECK(out.find("forced auto: 0\n") != std::string::npos);
    CHECK(out.find("forced: 7\n") != std::string::npos);
    CHECK(out.find("back: " + want + "\n") != std::string::npos);
    CHECK(out.find("unset: 0\n") != std::string::npos);
    if (want == "5") {
      const std::string said = "kiln: KILN_TEST_SETTING=5: takes 5, 5 again\n";
      CHECK(out.find(said) != std::string::npos);
      CHECK(out.find(said, out.find(said) + 1) == std::string::npos);  // once
    } else {
      CHECK(out.find("kiln: KILN_TEST_SETTING='9' is not valid: expected auto or 1 to 8; auto is used\n") !=
            std::string::npos);
    }
    CHECK(out.find("KILN_TEST_CLUSTER") == std::string::npos);
  }
}

}  // namespace
