// [gpu] API call logging, statistics, dumps and replay of real ops on a real GPU through a
// real kilnd. Each test runs kiln_diag_child as a child process (the diagnostics variables are
// read once per process) against the session's daemon:
//   - level 3: the kernel line (URI, cache key, arch, entry, grid, block, smem; batch_decode's
//     split-KV tactic) of each of seven calls, written before the call's statistics;
//   - level 5: each tensor's count/NaN/Inf/min/max/mean as the GPU statistics kernel computes
//     them, against a float64 host computation of the same values (a NaN and an Inf included);
//   - graph capture: statistics and dumps skipped with a note, the captured call still right;
//   - level 10: every call dumped and replayed with `kiln replay` bit-exact (in-place rope and
//     fused_add_rms_norm, a padded input whose strides replay keeps, batch_decode planned again,
//     sampling with its seed), a damaged output detected (exit 4), and a call killed between
//     its input dump and its launch replayed from its inputs.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/client/diag/diag_test_support.h"
#include "tests/support/daemon_process.h"
#include "tests/support/gpu_harness.h"
#include "tests/support/subprocess.h"

namespace {

using kiln::testing::GpuSession;
using kiln::testing::RunResult;
using kiln::testing::TempDir;

kiln::testing::SubprocessOptions ChildOptions(GpuSession& session, const std::string& mode,
                                              std::map<std::string, std::string> env) {
  env["KILN_SOCKET"] = session.daemon().socket();
  return kiln::testing::DiagChildOptions({mode}, std::move(env));
}

RunResult Child(GpuSession& session, const std::string& mode, std::map<std::string, std::string> env) {
  return kiln::testing::Run(ChildOptions(session, mode, std::move(env)), std::chrono::seconds(300));
}

RunResult Replay(GpuSession& session, std::vector<std::string> args) {
  return kiln::testing::Run(kiln::testing::ReplayOptions({"--socket", session.daemon().socket()}, std::move(args)),
                            std::chrono::seconds(300));
}

std::vector<std::string> Entries(const std::string& dir) { return kiln::testing::FolderEntries(dir); }

std::vector<std::string> Lines(const std::string& text) { return kiln::testing::TextLines(text); }

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string Log(const std::string& dir) {
  for (const auto& f : Entries(dir))
    if (f.rfind("log-", 0) == 0) return kiln::testing::ReadFile(dir + "/" + f);
  FAIL("no log file in " << dir);
  return "";
}

// "key=value" fields of a line.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return f;
}

bool Near(double got, double want, double rel, double abs = 0) {
  return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

TEST_CASE("level 5 logs kernels before the launch and statistics that match a float64 host computation",
          "[gpu][diag]") {
  GpuSession session;
  TempDir dir;
  auto r = Child(session, "gpu-ops", {{"KILN_LOGLEVEL", "5"}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string log = Log(dir.path());
  INFO(log);
  const auto lines = Lines(log);

  // Every call launched: one kernel line per launch, before its statistics, naming the module.
  const char* apis[] = {"kiln::ops::silu_and_mul",  "kiln::ops::rms_norm",        "kiln::ops::fused_add_rms_norm",
                        "kiln::ops::apply_rope",    "kiln::ops::append_paged_kv", "kiln::ops::batch_decode",
                        "kiln::ops::top_p_sampling"};
  for (int call = 1; call <= 7; ++call) {
    const std::string prefix = "[kiln api #" + std::to_string(call) + "] ";
    INFO("call " << call);
    size_t header = lines.size(), kernel = lines.size(), first_stats = lines.size(), outcome = lines.size();
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].rfind(prefix, 0) != 0) continue;
      const std::string rest = lines[i].substr(prefix.size());
      if (rest.rfind(apis[call - 1], 0) == 0 && header == lines.size()) header = i;
      if (rest.rfind("  kernel: ", 0) == 0 && kernel == lines.size()) {
        kernel = i;
        auto f = Fields(rest);
        CHECK(f["key"].size() == 64);
        CHECK(f["arch"].rfind("sm_", 0) == 0);
        CHECK(f["entry"].rfind("kiln_", 0) == 0);
        CHECK_FALSE(f["uri"].empty());
        CHECK(Has(rest, " grid=("));
        CHECK(Has(rest, " block=("));
        CHECK(Has(rest, " smem="));
        if (call == 6) CHECK(Has(rest, " backend="));  // batch_decode's split-KV choice
      }
      if (rest.rfind("  stats ", 0) == 0 && first_stats == lines.size()) first_stats = i;
      if (rest.rfind("-> ", 0) == 0) outcome = i;
    }
    CHECK(header < kernel);
    CHECK(kernel < first_stats);
    CHECK(first_stats < outcome);
    CHECK(lines[outcome] == prefix + "-> OK");
  }

  // The statistics against the child's host computation ("expect" lines, in log order: an
  // in-place tensor's first stats line is before the call, its second after).
  int checked = 0;
  for (const auto& e : Lines(r.output)) {
    if (e.rfind("expect #", 0) != 0) continue;
    std::istringstream in(e);
    std::string tag, call, name, phase;
    in >> tag >> call >> name >> phase;
    const auto want = Fields(e);
    const std::string head = "[kiln api " + call + "]   stats " + name + ": ";
    std::vector<std::string> found;
    for (const auto& l : lines)
      if (l.rfind(head, 0) == 0) found.push_back(l);
    INFO(e);
    REQUIRE(found.size() >= (phase == "after" ? 1u : 1u));
    // Inputs are measured at the first launch, outputs after the call; an inout has both.
    const std::string& line = phase == "before" ? found.front() : found.back();
    INFO(line);
    auto got = Fields(line);
    CHECK(got["count"] == want.at("count"));
    CHECK(got["nan"] == want.at("nan"));
    CHECK(got["inf"] == want.at("inf"));
    CHECK(Near(std::stod(got["min"]), std::stod(want.at("min")), 1e-7));
    CHECK(Near(std::stod(got["max"]), std::stod(want.at("max")), 1e-7));
    CHECK(Near(std::stod(got["mean"]), std::stod(want.at("mean")), 1e-6, 1e-9));
    ++checked;
  }
  CHECK(checked == 21);
  CHECK(Has(log, "[kiln api #1]   stats input: count=2560 nan=1 inf=1 "));
}

TEST_CASE("during graph capture statistics and dumps are skipped with a note, and the graph is right", "[gpu][diag]") {
  GpuSession session;
  TempDir dir;
  const std::string dumps = dir / "dumps";
  auto r = Child(session, "gpu-capture",
                 {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", dumps}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(Has(r.output, "graph output matches"));
  const std::string log = Log(dir.path());
  INFO(log);
  // Call 1 ran on the stream: measured and dumped. Call 2 was captured: neither.
  CHECK(Has(log, "[kiln api #1]   stats input: count=8192 "));
  CHECK(Has(log, "[kiln api #2]   stats skipped: stream is capturing a CUDA graph\n"));
  CHECK(Has(log, "[kiln api #2]   dump skipped: stream is capturing a CUDA graph\n"));
  CHECK_FALSE(Has(log, "[kiln api #2]   stats input"));
  CHECK(Has(log, "[kiln api #2]   kernel: uri="));  // the kernel line is still there
  CHECK(Has(log, "[kiln api #2] -> OK"));
  CHECK(Entries(dumps).size() == 1);
}

TEST_CASE("level-10 dumps of real calls replay bit-exact through kiln replay", "[gpu][diag][cli]") {
  GpuSession session;
  TempDir dir;
  const std::string dumps = dir / "dumps";
  auto r = Child(session, "gpu-ops",
                 {{"KILN_LOGLEVEL", "10"}, {"KILN_DUMP_DIR", dumps}, {"KILN_LOGDEST", dir / "log-%p.txt"}});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto folders = Entries(dumps);
  REQUIRE(folders.size() == 7);
  const char* ops[] = {"silu_and_mul",    "rms_norm",     "fused_add_rms_norm", "apply_rope",
                       "append_paged_kv", "batch_decode", "top_p_sampling"};
  for (size_t i = 0; i < folders.size(); ++i) {
    const std::string folder = dumps + "/" + folders[i];
    INFO(folder);
    CHECK(Has(folders[i], std::string("_") + ops[i]));
    const auto meta = nlohmann::json::parse(kiln::testing::ReadFile(folder + "/meta.json"));
    CHECK(meta["status"] == "completed");
    CHECK(meta["result"]["code"] == "OK");
    CHECK(meta["device"]["arch"] == session.gpu().arch);
    CHECK_FALSE(meta["kernels"].empty());
    auto replay = Replay(session, {folder});
    INFO(replay.output);
    CHECK(replay.exit_code == 0);
    CHECK(Has(replay.output, "outputs match (bit-exact)"));
    CHECK(Has(replay.output, "(the recorded kernels)"));
  }
  // The padded rms_norm input kept its strides; the in-place rope wrote q in both files.
  auto j = Replay(session, {dumps + "/" + folders[1], "--json"});
  INFO(j.output);
  REQUIRE(j.exit_code == 0);
  const auto report = nlohmann::json::parse(j.output);
  CHECK(report["recorded"]["tensors"][1]["strides"] == nlohmann::json::array({1040, 1}));
  CHECK(report["verdict"] == "outputs match (bit-exact)");
  CHECK(report["replay"]["same_kernels"] == true);
  const std::string rope = dumps + "/" + folders[3];
  CHECK(Has(kiln::testing::ReadFile(rope + "/inputs.safetensors"), "\"q\""));
  CHECK(Has(kiln::testing::ReadFile(rope + "/outputs.safetensors"), "\"q\""));

  // A damaged recorded output is found: exit 4.
  const std::string out_file = dumps + "/" + folders[1] + "/outputs.safetensors";
  std::string bytes = kiln::testing::ReadFile(out_file);
  bytes[bytes.size() - 2] = static_cast<char>(bytes[bytes.size() - 2] ^ 0x40);
  kiln::testing::WriteFile(out_file, bytes);
  auto damaged = Replay(session, {dumps + "/" + folders[1]});
  INFO(damaged.output);
  CHECK(damaged.exit_code == 4);
  CHECK(Has(damaged.output, "outputs differ (bit-exact expected: same arch, same kernels)"));
  CHECK(Has(damaged.output, "compare   out: 1 of 7168 elements differ"));
}

TEST_CASE("a GPU call killed after its input dump replays from its inputs", "[gpu][diag][cli]") {
  GpuSession session;
  TempDir dir;
  const std::string dumps = dir / "dumps";
  kiln::testing::Subprocess child(ChildOptions(session, "gpu-ops",
                                               {{"KILN_LOGLEVEL", "10"},
                                                {"KILN_DUMP_DIR", dumps},
                                                {"KILN_DUMP_INCLUDE", "rms_norm"},
                                                {"KILN_DUMP_TEST_PAUSE_MS", "120000"},
                                                {"KILN_LOGDEST", dir / "log-%p.txt"}}));
  std::string folder;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (folder.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const auto& f : Entries(dumps))
      if (access((dumps + "/" + f + "/inputs.safetensors").c_str(), F_OK) == 0) folder = dumps + "/" + f;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE_FALSE(folder.empty());
  child.Signal(SIGKILL);
  CHECK(child.Wait(std::chrono::seconds(30)) == 128 + SIGKILL);
  CHECK(Has(folder, "_rms_norm"));
  const auto meta = nlohmann::json::parse(kiln::testing::ReadFile(folder + "/meta.json"));
  CHECK(meta["status"] == "started");
  CHECK(meta["kernels"].size() == 1);  // the kernel it was about to launch
  auto replay = Replay(session, {folder});
  INFO(replay.output);
  CHECK(replay.exit_code == 0);
  CHECK(Has(replay.output, "result    OK"));
  CHECK(Has(replay.output, "no recorded outputs to compare: the call never completed (status 'started')"));
}

}  // namespace
