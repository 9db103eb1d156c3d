// AutoNumberControl's parse (client/core/api/auto_number_control.h), the one behind
// KILN_DECODE_CHUNK, KILN_SAMPLING_CLUSTER and KILN_FUSED_MOE_DOWN_COLUMN_GROUPS: auto, unset,
// numbers in and out of the range, powers of two, and what is not a plain number. The refusals'
// stderr lines are checked in a child (tests/support/subprocess.h).
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

}  // namespace
