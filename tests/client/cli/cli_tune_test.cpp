// `kiln tune ls | rm` as a real process against a real kilnd with a tuning store: the table and
// JSON of ls, rm by op and bucket and --all, usage errors, and a daemon without a store; and
// `kiln tune run`'s usage errors (its GPU run is in tests/client/ops/gpu_gemm_tune_test.cpp).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <grpcpp/grpcpp.h>

#include "kiln/v1/tuning.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tuning_fixtures.h"

using kiln::testing::DaemonProcess;
using kiln::testing::RunResult;
using kiln::testing::TempDir;
using kiln::testing::TestEnvironment;
using kiln::testing::TestRecord;

namespace {

RunResult Kiln(const DaemonProcess& d, std::vector<std::string> args) {
  kiln::testing::SubprocessOptions p;
  p.argv = {kiln::testing::KilnCliPath()};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.set_env = {{"KILN_SOCKET", d.socket()}};
  return kiln::testing::Run(p, std::chrono::seconds(60));
}

void Put(const DaemonProcess& d, const kiln::v1::TuningRecord& record) {
  auto stub = kiln::v1::TuningService::NewStub(d.channel());
  grpc::ClientContext c;
  kiln::v1::PutTuningRequest request;
  *request.mutable_record() = record;
  kiln::v1::PutTuningResponse reply;
  REQUIRE(stub->PutTuning(&c, request, &reply).ok());
}

}  // namespace

TEST_CASE("kiln tune ls and rm", "[client][cli][tuning]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--tuning-store", dir / "tuning.db"}});
  RunResult empty = Kiln(d, {"tune", "ls"});
  CHECK(empty.exit_code == 0);
  CHECK(empty.output == "0 tuning records\n");

  Put(d, TestRecord("bf16.obf16.m4096.n4096.k4096"));
  Put(d, TestRecord("bf16.obf16.m4096.n4096.k4096", TestEnvironment("NVIDIA H100 80GB HBM3"), "t128x128x64s7g8"));
  Put(d, TestRecord("bf16.obf16.m16.n4096.k4096", TestEnvironment(), "t64x64x64s8g8", 95.0));
  RunResult ls = Kiln(d, {"tune", "ls", "--op", "gemm"});
  INFO(ls.output);
  REQUIRE(ls.exit_code == 0);
  CHECK_THAT(ls.output, Catch::StartsWith("OP"));
  CHECK_THAT(ls.output, Catch::Contains("bf16.obf16.m16.n4096.k4096"));
  CHECK_THAT(ls.output, Catch::Contains("t64x64x64s8g8"));
  CHECK_THAT(ls.output, Catch::Contains("95 µs"));
  CHECK_THAT(ls.output, Catch::Contains("1/2"));
  CHECK_THAT(ls.output,
             Catch::Contains("NVIDIA H100 80GB HBM3, 132 SMs, driver 13000, NVRTC 13.0, Kiln 0.1.0, space 1"));
  CHECK_THAT(ls.output, Catch::EndsWith("3 tuning records of op gemm\n"));

  RunResult json = Kiln(d, {"tune", "ls", "--json"});
  REQUIRE(json.exit_code == 0);
  auto parsed = nlohmann::json::parse(json.output);
  REQUIRE(parsed["records"].size() == 3);
  CHECK(parsed["records"][0]["environment"]["gpuName"].is_string());

  RunResult rm = Kiln(d, {"tune", "rm", "--op", "gemm", "--bucket", "bf16.obf16.m4096.n4096.k4096"});
  CHECK(rm.exit_code == 0);
  CHECK(rm.output == "removed 2 tuning records of op gemm, bucket bf16.obf16.m4096.n4096.k4096\n");
  CHECK(Kiln(d, {"tune", "ls"}).output.find("1 tuning record\n") != std::string::npos);
  RunResult all = Kiln(d, {"tune", "rm", "--all"});
  CHECK(all.output == "removed 1 tuning record\n");
  CHECK(Kiln(d, {"tune", "ls"}).output == "0 tuning records\n");
}

TEST_CASE("kiln tune: usage errors, --help, and a daemon without a store", "[client][cli][tuning]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  RunResult none = Kiln(d, {"tune", "rm"});
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output, Catch::Contains("name what to remove: --op OP [--bucket B], or --all"));
  RunResult both = Kiln(d, {"tune", "rm", "--all", "--op", "gemm"});
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.output, Catch::Contains("--all cannot be combined with --op or --bucket"));
  RunResult bucket_alone = Kiln(d, {"tune", "rm", "--bucket", "b1"});
  CHECK(bucket_alone.exit_code == 2);
  RunResult bad_op = Kiln(d, {"tune", "ls", "--op", "Gemm"});
  CHECK(bad_op.exit_code == 2);
  CHECK_THAT(bad_op.output, Catch::Contains("--op 'Gemm' has the character 'G'"));
  RunResult help = Kiln(d, {"tune", "rm", "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("--bucket BUCKET"));
  RunResult no_store = Kiln(d, {"tune", "ls"});
  CHECK(no_store.exit_code == 1);
  CHECK_THAT(no_store.output, Catch::Contains("this daemon runs without a tuning store"));
}

TEST_CASE("kiln tune run: bad command lines name the option and what it wants", "[client][cli][tuning]") {
  auto run = [](std::vector<std::string> args) {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath(), "tune", "run"};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    return kiln::testing::Run(p, std::chrono::seconds(60));
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"rms_norm", "--m", "8", "--n", "8", "--k", "8"},
       "'rms_norm' has no tactics to tune; the ops with tactics: gemm, grouped_gemm, grouped_gemm_masked, fp8_gemm, "
       "grouped_fp8_gemm, grouped_fp8_gemm_masked"},
      {{"gemm", "--m", "8", "--n", "8"}, "--k is required"},
      {{"gemm", "--m", "0", "--n", "8", "--k", "8"}, "--m wants a whole number from 1 to 2147483647, got '0'"},
      {{"gemm", "--m", "8x", "--n", "8", "--k", "8"}, "--m wants a whole number from 1 to 2147483647, got '8x'"},
      {{"grouped_gemm", "--m", "8", "--n", "8", "--k", "8"}, "grouped_gemm needs --groups E (the experts)"},
      {{"grouped_gemm", "--m", "8", "--n", "8", "--k", "8", "--groups", "257"},
       "--groups wants a whole number from 1 to 256, got '257'"},
      {{"gemm", "--m", "8", "--n", "8", "--k", "8", "--groups", "2"}, "--groups is for the grouped ops, not gemm"},
      {{"gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp32"}, "--dtype wants one of "},
      {{"fp8_gemm", "--m", "8", "--n", "8", "--k", "8", "--out-dtype", "fp16"}, "--out-dtype wants one of "},
      {{"fp8_gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "bf16"},
       "--dtype: the fp8 ops' inputs are fp8_e4m3"},
      {{"gemm", "--m", "8", "--n", "8", "--k", "8", "--device", "-1"}, "--device wants a whole number from 0 to 1023"},
      {{"gemm", "--m", "8", "--n", "8", "--k", "8", "--iterations", "0"}, "--iterations wants a whole number from 1"},
  };
  for (const auto& [args, message] : cases) {
    RunResult r = run(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("kiln tune run: " + message));
  }
  // A good command line on a machine without a GPU says what it needs (exit 2); with one, the
  // [gpu][gemm] tests run it.
  if (!kiln::testing::GpuUnavailableReason().empty()) {
    RunResult r = run({"gemm", "--m", "8", "--n", "8", "--k", "8"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("kiln tune run: needs a GPU: "));
  }
}
