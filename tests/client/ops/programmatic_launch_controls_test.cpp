// The process controls of programmatic dependent launch without a GPU: BinarySwitch (read once,
// a change from the default said once on stderr, a bad value reported and the default used, the
// testing override on top), KILN_PDL for the ops whose kernels wait first, and LaunchAsDependent
// (an entry launches as a dependent only when it waits first on this device and KILN_PDL is on).
// Each case runs this binary again as a child with the variable set: the environment is read
// once per process.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "client/core/loader/programmatic_launch.h"
#include "tests/support/subprocess.h"

namespace {

using kiln::client::BinarySwitch;
using kiln::client::EntryLaunchReady;
using kiln::client::LaunchAsDependent;
using kiln::client::OpProgrammaticLaunchSwitch;

// Run only as the child of the tests below ([.] keeps it out of a plain run).
TEST_CASE("child: programmatic launch controls", "[.programmatic-launch-child]") {
  static BinarySwitch off_by_default("KILN_TEST_SWITCH_OFF", false, "the test switch is on");
  std::printf("pdl: %d\n", OpProgrammaticLaunchSwitch().On() ? 1 : 0);
  std::printf("pdl again: %d\n", OpProgrammaticLaunchSwitch().On() ? 1 : 0);
  std::printf("off-by-default: %d\n", off_by_default.On() ? 1 : 0);
  EntryLaunchReady waits;
  waits.programmatic = true;
  const EntryLaunchReady plain;
  std::printf("dependent: %d %d\n", LaunchAsDependent(waits) ? 1 : 0, LaunchAsDependent(plain) ? 1 : 0);
  OpProgrammaticLaunchSwitch().SetForTesting(1);
  std::printf("forced on: %d %d\n", LaunchAsDependent(waits) ? 1 : 0, LaunchAsDependent(plain) ? 1 : 0);
  OpProgrammaticLaunchSwitch().SetForTesting(0);
  std::printf("forced off: %d\n", LaunchAsDependent(waits) ? 1 : 0);
  OpProgrammaticLaunchSwitch().SetForTesting(-1);
  std::printf("back: %d\n", OpProgrammaticLaunchSwitch().On() ? 1 : 0);
}

struct Case {
  const char* pdl;     // KILN_PDL, null: unset
  const char* off;     // KILN_TEST_SWITCH_OFF, null: unset
  int want_pdl;        // KILN_PDL's answer
  int want_off;        // the off-by-default switch's answer
  const char* said;    // on stderr, or null
  const char* silent;  // a variable stderr must not name, or null
};

std::string RunChild(const Case& c) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  INFO("KILN_PDL=" << (c.pdl ? c.pdl : "(unset)") << " KILN_TEST_SWITCH_OFF=" << (c.off ? c.off : "(unset)"));
  kiln::testing::SubprocessOptions options;
  options.argv = {self, "child: programmatic launch controls"};
  if (c.pdl != nullptr) options.set_env["KILN_PDL"] = c.pdl;
  else options.unset_env.push_back("KILN_PDL");
  if (c.off != nullptr) options.set_env["KILN_TEST_SWITCH_OFF"] = c.off;
  else options.unset_env.push_back("KILN_TEST_SWITCH_OFF");
  kiln::testing::Subprocess child(options);
  REQUIRE(child.Wait() == 0);
  const std::string out = child.Output();
  INFO(out);
  CHECK(out.find("pdl: " + std::to_string(c.want_pdl) + "\n") != std::string::npos);
  CHECK(out.find("pdl again: " + std::to_string(c.want_pdl) + "\n") != std::string::npos);
  CHECK(out.find("off-by-default: " + std::to_string(c.want_off) + "\n") != std::string::npos);
  CHECK(out.find("dependent: " + std::to_string(c.want_pdl) + " 0\n") != std::string::npos);
  CHECK(out.find("forced on: 1 0\n") != std::string::npos);
  CHECK(out.find("forced off: 0\n") != std::string::npos);
  CHECK(out.find("back: " + std::to_string(c.want_pdl) + "\n") != std::string::npos);
  if (c.said != nullptr) {
    CHECK(out.find(c.said) != std::string::npos);
    CHECK(out.find(c.said) == out.rfind(c.said));  // once, though read twice
  }
  if (c.silent != nullptr) CHECK(out.find(c.silent) == std::string::npos);
  return out;
}

TEST_CASE("KILN_PDL: on by default, 0 turns it off and says so once, a bad value is reported", "[client][ops]") {
  const Case cases[] = {
      {nullptr, nullptr, 1, 0, nullptr, "KILN_PDL"},
      {"1", nullptr, 1, 0, nullptr, "KILN_PDL"},
      {"0", nullptr, 0, 0,
       "kiln: KILN_PDL=0: the norm, activation, RoPE, KV append, decode and sampling ops launch in plain stream order "
       "in this process",
       nullptr},
      {"yes", nullptr, 1, 0, "kiln: KILN_PDL='yes' is not valid: expected 0 or 1; the default (1) is used", nullptr},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("a BinarySwitch off by default: 1 turns it on and says so, 0 is silent, a long bad value is cut",
          "[client][ops]") {
  RunChild({nullptr, "1", 1, 1, "kiln: KILN_TEST_SWITCH_OFF=1: the test switch is on", nullptr});
  RunChild({nullptr, "0", 1, 0, nullptr, "KILN_TEST_SWITCH_OFF"});
  const std::string long_value(200, 'x');
  const std::string out = RunChild(
      {nullptr, long_value.c_str(), 1, 0, "expected 0 or 1; the default (0) is used", nullptr});
  CHECK(out.find(std::string(64, 'x') + "'") != std::string::npos);
  CHECK(out.find(std::string(65, 'x')) == std::string::npos);
}

}  // namespace
