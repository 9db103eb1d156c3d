// API call logging (client/diag): the parsed configuration and its warnings, the log
// destination, and — through kiln_diag_child, a real child process — what each level writes:
// nothing at 0 (no file), the op's name at 1 written before the launch and kept when the
// process abort()s right after, arguments and outcome at 3, validation failures with their
// status, the C ABI, and every op of the op table. No GPU: the tests hide any GPU from the
// child, so each call stops at the driver, after the point where the log is written.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "client/diag/call_log.h"
#include "client/diag/diag_config.h"
#include "client/diag/op_call.h"
#include "client/diag/op_filter.h"
#include "client/ops/op_table.h"
#include "tests/client/diag/diag_test_support.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::client::diag::DiagConfig;
using kiln::client::diag::ParseDiagConfig;
using kiln::testing::RunResult;
using kiln::testing::TempDir;

// The child with exactly `env` of the diagnostics variables, and no visible GPU.
RunResult Child(std::vector<std::string> args, std::map<std::string, std::string> env) {
  env["CUDA_VISIBLE_DEVICES"] = "";
  return kiln::testing::Run(kiln::testing::DiagChildOptions(std::move(args), std::move(env)), std::chrono::seconds(60));
}

std::string TracesDir() { return kiln::testing::KernelsDir() + "/traces"; }

std::vector<std::string> Files(const std::string& dir) { return kiln::testing::FolderEntries(dir); }

std::vector<std::string> Lines(const std::string& text) { return kiln::testing::TextLines(text); }

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

DiagConfig Parse(std::map<std::string, std::string> env, std::vector<std::string>* warnings) {
  return ParseDiagConfig(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      warnings);
}

// The one log file the child wrote in `dir` (named log-<pid>.txt), its pid checked.
std::string OnlyLog(const std::string& dir) {
  auto files = Files(dir);
  REQUIRE(files.size() == 1);
  REQUIRE(files[0].rfind("log-", 0) == 0);
  return kiln::testing::ReadFile(dir + "/" + files[0]);
}

TEST_CASE("the diagnostics variables parse with their defaults and documented forms", "[client][diag]") {
  std::vector<std::string> warnings;
  DiagConfig c = Parse({}, &warnings);
  CHECK(warnings.empty());
  CHECK(c.level == 0);
  CHECK(c.dest == "stderr");
  CHECK(c.dump_dir.empty());
  CHECK(c.dump_max_count == 1000);
  CHECK(c.dump_max_bytes == (int64_t{20} << 30));
  CHECK(c.include.empty());

  c = Parse({{"KILN_LOGLEVEL", "10"},
             {"KILN_LOGDEST", "/tmp/x-%p.log"},
             {"KILN_DUMP_DIR", "/tmp/d"},
             {"KILN_DUMP_MAX_COUNT", "7"},
             {"KILN_DUMP_MAX_BYTES", "3M"},
             {"KILN_DUMP_INCLUDE", "rms_norm, *decode* ,,"},
             {"KILN_DUMP_EXCLUDE", "argmax"}},
            &warnings);
  CHECK(warnings.empty());
  CHECK(c.level == 10);
  CHECK(c.dest == "/tmp/x-%p.log");
  CHECK(c.dump_max_count == 7);
  CHECK(c.dump_max_bytes == 3 << 20);
  CHECK(c.include == std::vector<std::string>{"rms_norm", "*decode*"});
  CHECK(c.exclude == std::vector<std::string>{"argmax"});
  for (const char* level : {"0", "1", "2", "3", "5", "7", "10"}) {
    warnings.clear();
    CHECK(Parse({{"KILN_LOGLEVEL", level}}, &warnings).level == std::stoi(level));
    CHECK(warnings.empty());
  }
}

TEST_CASE("a bad diagnostics value is one warning naming it, and the default stays", "[client][diag]") {
  const std::vector<std::pair<std::string, std::string>> bad = {{"KILN_LOGLEVEL", "abc"},
                                                                {"KILN_LOGLEVEL", "-1"},
                                                                {"KILN_LOGLEVEL", "11"},
                                                                {"KILN_LOGLEVEL", "3x"},
                                                                {"KILN_DUMP_MAX_COUNT", "-5"},
                                                                {"KILN_DUMP_MAX_COUNT", "many"},
                                                                {"KILN_DUMP_MAX_BYTES", "12X"},
                                                                {"KILN_DUMP_MAX_BYTES", "-1"},
                                                                {"KILN_DUMP_MAX_BYTES", "99999999999999999999G"},
                                                                {"KILN_DUMP_TEST_PAUSE_MS", "soon"}};
  for (const auto& [name, value] : bad) {
    INFO(name << "=" << value);
    std::vector<std::string> warnings;
    DiagConfig c = Parse({{name, value}}, &warnings);
    REQUIRE(warnings.size() == 1);
    CHECK(Has(warnings[0], name + "='" + value + "' is not valid"));
    CHECK(Has(warnings[0], "using "));
    CHECK(c.level == 0);
    CHECK(c.dump_max_count == 1000);
    CHECK(c.dump_max_bytes == (int64_t{20} << 30));
  }
  int64_t bytes = 0;
  CHECK(kiln::client::diag::ParseByteCount("1024", &bytes));
  CHECK(bytes == 1024);
  CHECK(kiln::client::diag::ParseByteCount("2k", &bytes));
  CHECK(bytes == 2048);
  CHECK(kiln::client::diag::ParseByteCount("1G", &bytes));
  CHECK(bytes == int64_t{1} << 30);
  CHECK_FALSE(kiln::client::diag::ParseByteCount("", &bytes));
  CHECK_FALSE(kiln::client::diag::ParseByteCount("K", &bytes));
}

TEST_CASE("the log path expands %p, the op filters match either name", "[client][diag]") {
  CHECK(kiln::client::diag::ExpandLogPath("/tmp/k-%p.log", 42) == "/tmp/k-42.log");
  CHECK(kiln::client::diag::ExpandLogPath("a%%p%p%", 7) == "a%p7%");
  using kiln::client::diag::OpSelected;
  CHECK(OpSelected({}, {}, "rms_norm", "kiln::ops::rms_norm"));
  CHECK(OpSelected({"rms_norm"}, {}, "rms_norm", "kiln_rms_norm"));
  CHECK(OpSelected({"kiln_*"}, {}, "rms_norm", "kiln_rms_norm"));
  CHECK_FALSE(OpSelected({"*decode*"}, {}, "rms_norm", "kiln::ops::rms_norm"));
  CHECK_FALSE(OpSelected({}, {"*norm*"}, "fused_add_rms_norm", "kiln::ops::fused_add_rms_norm"));
  CHECK_FALSE(OpSelected({"*"}, {"rms_norm"}, "rms_norm", "kiln::ops::rms_norm"));  // exclude wins
  CHECK(kiln::client::diag::DoubleText(1e-6) == "1e-06");
  CHECK(kiln::client::diag::DoubleText(0.1) == "0.1");
  CHECK(std::stod(kiln::client::diag::DoubleText(1.0 / 3)) == 1.0 / 3);
  CHECK(kiln::client::diag::PointerAlignment(reinterpret_cast<void*>(0x1000)) == 256);
  CHECK(kiln::client::diag::PointerAlignment(reinterpret_cast<void*>(0x1002)) == 2);
}

TEST_CASE("level 0 writes nothing and creates no log file", "[client][diag]") {
  TempDir dir;
  for (const char* level : {"", "0"}) {
    std::map<std::string, std::string> env = {{"KILN_LOGDEST", dir / "log-%p.txt"}};
    if (*level) env["KILN_LOGLEVEL"] = level;
    auto r = Child({"op-then-exit"}, env);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(Has(r.output, "rms_norm: NO_DRIVER"));
    CHECK_FALSE(Has(r.output, "[kiln"));
    CHECK(Files(dir.path()).empty());
  }
}

TEST_CASE("level 1: the op's name is written before the launch and survives abort()", "[client][diag]") {
  TempDir dir;
  auto r = Child({"op-then-abort"}, {{"KILN_LOGLEVEL", "1"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGABRT);
  const std::string log = OnlyLog(dir.path());
  INFO(log);
  const auto lines = Lines(log);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "[kiln api #1] kiln::ops::rms_norm");
  // The call stopped at the driver (no GPU visible): the outcome is logged, being an error.
  CHECK(lines[1].rfind("[kiln api #1] -> NO_DRIVER: ", 0) == 0);
  CHECK_FALSE(Has(r.output, "[kiln api"));  // the log went to the file, not stderr
}

TEST_CASE("level 3: params, every tensor's metadata and the outcome", "[client][diag]") {
  TempDir dir;
  auto r = Child({"op-then-abort"}, {{"KILN_LOGLEVEL", "3"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  CHECK(r.exit_code == 128 + SIGABRT);
  const std::string log = OnlyLog(dir.path());
  INFO(log);
  const auto lines = Lines(log);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].rfind("[kiln api #1] kiln::ops::rms_norm(eps=1e-06) stream=(nil) tid=", 0) == 0);
  CHECK(lines[1] == "[kiln api #1]   input input: bf16[7, 4096] strides [4096, 1] cuda:0 @0x7f0010000000 align=256");
  CHECK(lines[2] == "[kiln api #1]   input weight: bf16[4096] strides [1] cuda:0 @0x7f0030000000 align=256");
  CHECK(lines[3] == "[kiln api #1]   output out: bf16[7, 4096] strides [4096, 1] cuda:0 @0x7f0020000000 align=256");
  CHECK(lines[4].rfind("[kiln api #1] -> NO_DRIVER: ", 0) == 0);
}

TEST_CASE("a call refused by validation is logged with its status", "[client][diag]") {
  TempDir dir;
  for (const char* level : {"1", "3"}) {
    auto r = Child({"invalid"}, {{"KILN_LOGLEVEL", level}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(Has(r.output, "rms_norm: INVALID_ARGUMENT"));
    const std::string log = OnlyLog(dir.path());
    INFO(log);
    CHECK(Has(log, "[kiln api #1] -> INVALID_ARGUMENT: kiln::ops::rms_norm: out: "));
    CHECK_FALSE(Has(log, "kernel:"));  // nothing was launched
    for (const auto& f : Files(dir.path())) std::remove((dir.path() + "/" + f).c_str());
  }
}

TEST_CASE("KILN_LOGDEST stdout and stderr, and an unwritable path falls back to stderr", "[client][diag]") {
  auto out = Child({"op-then-exit"}, {{"KILN_LOGLEVEL", "1"}, {"KILN_LOGDEST", "stdout"}});
  CHECK(Has(out.output, "[kiln api #1] kiln::ops::rms_norm\n"));
  auto err = Child({"op-then-exit"}, {{"KILN_LOGLEVEL", "1"}});
  CHECK(Has(err.output, "[kiln api #1] kiln::ops::rms_norm\n"));
  auto bad = Child({"op-then-exit"}, {{"KILN_LOGLEVEL", "1"}, {"KILN_LOGDEST", "/nonexistent-dir/x/log"}});
  INFO(bad.output);
  CHECK(Has(bad.output, "[kiln] KILN_LOGDEST='/nonexistent-dir/x/log': cannot open /nonexistent-dir/x/log: "));
  CHECK(Has(bad.output, "the call log goes to stderr"));
  CHECK(Has(bad.output, "[kiln api #1] kiln::ops::rms_norm\n"));
}

TEST_CASE("a bad KILN_LOGLEVEL warns once on stderr and logs nothing", "[client][diag]") {
  TempDir dir;
  auto r = Child({"all-ops", TracesDir()},
                 {{"KILN_LOGLEVEL", "verbose"}, {"KILN_LOGDEST", dir / "log-%p.txt"}, {"KILN_DUMP_MAX_BYTES", "lots"}});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  const std::string warning =
      "[kiln] KILN_LOGLEVEL='verbose' is not valid: expected an integer 0..10 (0 off, 1 op names, 3 arguments, "
      "5 statistics, 10 dumps); using 0 (call logging off)\n";
  CHECK(Has(r.output, warning));
  CHECK(r.output.find(warning) == r.output.rfind(warning));  // once, not per call
  CHECK(Has(r.output, "[kiln] KILN_DUMP_MAX_BYTES='lots' is not valid"));
  CHECK(Files(dir.path()).empty());
}

TEST_CASE("the C ABI logs under its own names", "[client][diag][capi]") {
  TempDir dir;
  auto r = Child({"c-abi"}, {{"KILN_LOGLEVEL", "3"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  const std::string log = OnlyLog(dir.path());
  INFO(log);
  CHECK(Has(log, "[kiln api #1] kiln_rms_norm(eps=1e-06) stream=(nil)"));
  CHECK(Has(log, "[kiln api #1]   input input: bf16[7, 4096] strides [4096, 1] cuda:0"));
  CHECK(Has(log, "[kiln api #1] -> NO_DRIVER"));
}

TEST_CASE("every op of the op table logs its name, one call number each", "[client][diag]") {
  TempDir dir;
  auto r = Child({"all-ops", TracesDir()}, {{"KILN_LOGLEVEL", "1"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  const std::string log = OnlyLog(dir.path());
  INFO(log);
  // A host-planned op's invoker (batch_decode, batch_prefill_*) plans the call again from its
  // index arrays' host bytes and the device's SM count; made from shapes alone and without a
  // GPU, it is refused before its record.
  int n = 0;
  for (const kiln::client::OpDescriptor* op : kiln::client::AllOps()) {
    INFO(op->name);
    const std::string name = op->name;
    if (op->invoke == nullptr) {
      CHECK(Has(r.output, name + ": not invokable: "));
      continue;
    }
    if (op->planned_on_host && Has(r.output, name + ": not called: ")) continue;
    CHECK(Has(r.output, name + ": called: "));
    ++n;
    CHECK(Has(log, "[kiln api #" + std::to_string(n) + "] " + op->cpp_api + "\n"));
  }
  CHECK(n >= 12);
  // Each call's outcome follows (every one of them failed here: no driver).
  CHECK(Lines(log).size() == 2 * static_cast<size_t>(n));
}

TEST_CASE("fused_moe's call record describes its workspace as a param: a dump never copies the scratch",
          "[client][diag]") {
  TempDir dir;
  auto r = Child({"all-ops", TracesDir()}, {{"KILN_LOGLEVEL", "3"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  const std::string log = OnlyLog(dir.path());
  INFO(log);
  CHECK(Has(log, "kiln::ops::fused_moe(workspace=uint8[75264]"));  // the first trace example's
  CHECK(Has(log, "  input topk_weights: fp32[1, 2]"));
  CHECK_FALSE(Has(log, " workspace: uint8"));  // no tensor line: nothing to dump
}

}  // namespace
