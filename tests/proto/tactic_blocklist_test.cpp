// The tactic blocklist format (proto/tactic_blocklist.h): every accepted line, every refusal
// naming file:line, and where an entry applies.
#include <catch2/catch.hpp>

#include "proto/tactic_blocklist.h"
#include "tests/support/temp_dir.h"

using kiln::proto::BlockedTacticApplies;
using kiln::proto::IsTacticBlocked;
using kiln::proto::ParseTacticBlocklist;

namespace {

kiln::v1::TuningEnvironment Here(const std::string& gpu = "NVIDIA H200", int driver = 13000,
                                 const std::string& nvrtc = "13.0") {
  kiln::v1::TuningEnvironment e;
  e.set_gpu_name(gpu);
  e.set_driver_version(driver);
  e.set_nvrtc_version(nvrtc);
  return e;
}

}  // namespace

TEST_CASE("blocklist: ops, tactics, comments and environment matches", "[proto][blocklist]") {
  auto parsed = ParseTacticBlocklist("# hangs on the H200 with driver 580\n"
                                     "\n"
                                     "gemm t128x256x64s4g8\n"
                                     "  gemm   t64x64x64s8g8   gpu=NVIDIA H100   # a GPU name with a space\n"
                                     "gemm t128x128x64s7g8 gpu=H200 driver=13000 nvrtc=13.0\n"
                                     "gemm t128x128x64s6g8 nvrtc=12.8 gpu=H20\n",
                                     "--tactic-blocklist", "/etc/kiln/blocklist");
  INFO(parsed.error);
  REQUIRE(parsed.error.empty());
  REQUIRE(parsed.entries.size() == 4);
  CHECK(parsed.entries[0].op() == "gemm");
  CHECK(parsed.entries[0].tactic() == "t128x256x64s4g8");
  CHECK(parsed.entries[0].gpu().empty());
  CHECK(parsed.entries[0].source() == "/etc/kiln/blocklist:3");
  CHECK(parsed.entries[1].gpu() == "NVIDIA H100");
  CHECK(parsed.entries[1].source() == "/etc/kiln/blocklist:4");
  CHECK(parsed.entries[2].gpu() == "H200");
  CHECK(parsed.entries[2].driver_version() == 13000);
  CHECK(parsed.entries[2].nvrtc_version() == "13.0");
  CHECK(parsed.entries[3].gpu() == "H20");
  CHECK(parsed.entries[3].nvrtc_version() == "12.8");
}

TEST_CASE("blocklist: a bad line is refused naming the label, file, line and the form", "[proto][blocklist]") {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"gemm\n", "the tactic '' is empty"}, Case{"Gemm t128x256x64s4g8\n", "the op 'Gemm' has the character 'G'"},
        Case{"gemm t128x256x64s4g8 H200\n", "'H200' after the tactic"},
        Case{"gemm t128x256x64s4g8 gpu=\n", "gpu= has no value"},
        Case{"gemm t128x256x64s4g8 gpu=A gpu=B\n", "gpu= is given twice"},
        Case{"gemm t128x256x64s4g8 driver=13.0\n", "driver=13.0: expected the driver's version"},
        Case{"gemm t128/256 \n", "the tactic 't128/256' has the character '/'"}}) {
    auto parsed = ParseTacticBlocklist(std::string("# first\n") + c.text, "KILN_TACTIC_BLOCKLIST", "/x/list");
    INFO(c.text << " -> " << parsed.error);
    CHECK(parsed.entries.empty());
    CHECK(parsed.error.find("KILN_TACTIC_BLOCKLIST /x/list:2: ") == 0);
    CHECK(parsed.error.find(c.says) != std::string::npos);
    CHECK(parsed.error.find("expected '<op> <tactic> [gpu=") != std::string::npos);
  }
}

TEST_CASE("blocklist: an op's own tactic check refuses tactics outside its space", "[proto][blocklist]") {
  auto check = [](std::string_view op, std::string_view tactic) -> std::string {
    if (op == "gemm" && tactic.substr(0, 1) != "t") return "not a gemm tactic";
    return "";
  };
  auto parsed = ParseTacticBlocklist("gemm t64x64x64s2g1\ngemm x\n", "--tactic-blocklist", "f", check);
  CHECK(parsed.error == "--tactic-blocklist f:2: 'gemm x': not a gemm tactic; expected '<op> <tactic> "
                        "[gpu=<part of the GPU name>] [driver=<driver version, e.g. 13000>] [nvrtc=<version, e.g. "
                        "13.0>]'");
}

TEST_CASE("blocklist: an unreadable file is refused naming it", "[proto][blocklist]") {
  kiln::testing::TempDir dir;
  auto parsed = kiln::proto::ReadTacticBlocklist("--tactic-blocklist", dir / "missing");
  CHECK(parsed.error ==
        "--tactic-blocklist " + (dir / "missing") + ": cannot read the file (No such file or directory)");
  kiln::testing::WriteFile(dir / "list", "gemm t128x256x64s4g8 gpu=H200\n");
  parsed = kiln::proto::ReadTacticBlocklist("--tactic-blocklist", dir / "list");
  REQUIRE(parsed.error.empty());
  CHECK(parsed.entries.size() == 1);
}

TEST_CASE("blocklist: an entry applies where all its matches hold", "[proto][blocklist]") {
  kiln::v1::BlockedTactic b;
  b.set_op("gemm");
  b.set_tactic("t128x256x64s4g8");
  CHECK(BlockedTacticApplies(b, Here()));
  b.set_gpu("H200");
  CHECK(BlockedTacticApplies(b, Here("NVIDIA H200")));
  CHECK_FALSE(BlockedTacticApplies(b, Here("NVIDIA H100 80GB HBM3")));
  b.set_driver_version(12080);
  CHECK_FALSE(BlockedTacticApplies(b, Here("NVIDIA H200", 13000)));
  CHECK(BlockedTacticApplies(b, Here("NVIDIA H200", 12080)));
  b.set_nvrtc_version("12.8");
  CHECK_FALSE(BlockedTacticApplies(b, Here("NVIDIA H200", 12080, "13.0")));
  CHECK(BlockedTacticApplies(b, Here("NVIDIA H200", 12080, "12.8")));

  CHECK(IsTacticBlocked({b}, "gemm", "t128x256x64s4g8", Here("NVIDIA H200", 12080, "12.8")));
  CHECK_FALSE(IsTacticBlocked({b}, "gemm", "t128x128x64s7g8", Here("NVIDIA H200", 12080, "12.8")));
  CHECK_FALSE(IsTacticBlocked({b}, "other", "t128x256x64s4g8", Here("NVIDIA H200", 12080, "12.8")));
}
