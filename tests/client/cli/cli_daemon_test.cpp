// The kiln CLI against a real kilnd: get (compiled, then from memory; --out writes the very
// cubin whose SHA-256 the daemon reported), compile, cache ls/stats/verify/evict, jobs ls/watch
// (ended by SIGINT and by the daemon shutting down), and doctor with everything in place.
#include <catch2/catch.hpp>

#include <signal.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "client/core/rpc/sha256.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::RunResult;
using nlohmann::json;

struct Daemon {
  kiln::testing::TempDir dir{"kiln-cli-daemon"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};

  kiln::testing::SubprocessOptions Options(std::vector<std::string> args) const {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath()};
    for (auto& a : args) p.argv.push_back(std::move(a));
    p.set_env = {
        {"KILN_SOCKET", daemon.socket()}, {"KILN_CACHE_DIR", daemon.cache_dir()}, {"KILN_GEN_DIR", daemon.gen_dir()}};
    return p;
  }
  RunResult Cli(std::vector<std::string> args) const {
    return kiln::testing::Run(Options(std::move(args)), std::chrono::seconds(120));
  }
};

json Json(const RunResult& r) {
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.output);
}

bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

const std::vector<std::string> kGet = {"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_90a"};

std::vector<std::string> With(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

TEST_CASE("kiln get: compiled first, then from the daemon's memory", "[client][cli][daemon]") {
  Daemon d;
  json first = Json(d.Cli(With(kGet, {"--json"})));
  CHECK(first["origin"] == "ORIGIN_COMPILED");
  CHECK(first["uri"] == "rmsnorm_bf16_h4096");
  CHECK(first["arch"] == "sm_90a");  // a portable family builds the target as asked
  CHECK(first["cacheKey"].get<std::string>().size() == 64);
  CHECK_FALSE(first.contains("cubin"));  // the bytes are not printed
  json second = Json(d.Cli(With(kGet, {"--json"})));
  CHECK(second["origin"] == "ORIGIN_MEMORY");
  CHECK(second["cacheKey"] == first["cacheKey"]);
}

TEST_CASE("kiln get prints a human report, and --out writes the verified cubin", "[client][cli][daemon]") {
  Daemon d;
  const std::string out = d.dir / "rmsnorm.cubin";
  auto r = d.Cli(With(kGet, {"--out", out}));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* text :
       {"uri", "rmsnorm_bf16_h4096", "key", "origin", "compiled", "timings", "total", "ms", "launch",
        "kiln_rmsnorm block=", "items_per_block=", "kernels", "kiln_rmsnorm: ", "registers", "(verified)", "written"})
    CHECK(Has(r, text));
  const std::string cubin = kiln::testing::ReadFile(out);
  REQUIRE(cubin.size() > 4);
  CHECK(cubin.substr(0, 4) == "\x7f"
                              "ELF");
  json reply = Json(d.Cli(With(kGet, {"--json"})));
  CHECK(kiln::client::Sha256Hex(cubin) == reply["sha256"].get<std::string>());
}

TEST_CASE("kiln get and compile exit 1 on the daemon's errors, with its message", "[client][cli][daemon]") {
  Daemon d;
  auto unknown = d.Cli({"get", "no_such_op", "--arch", "sm_90a"});
  INFO(unknown.output);
  CHECK(unknown.exit_code == 1);
  CHECK(Has(unknown, "no_such_op"));
  auto bad_param = d.Cli({"get", "rmsnorm", "dtype=int4", "hidden=4096", "--arch", "sm_90a"});
  CHECK(bad_param.exit_code == 1);
  CHECK(Has(bad_param, "dtype"));
  auto arch = d.Cli({"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_75"});
  CHECK(arch.exit_code == 1);
  CHECK(Has(arch, "sm_75"));

  kiln::testing::WriteFile(d.dir / "broken.cu", "extern \"C\" __global__ void k() { not C++ }\n");
  auto broken = d.Cli({"compile", "--source", d.dir / "broken.cu", "--entry", "k", "--arch", "sm_90a"});
  INFO(broken.output);
  CHECK(broken.exit_code == 1);
  CHECK(Has(broken, "error"));
}

TEST_CASE("kiln compile builds a raw source", "[client][cli][daemon]") {
  Daemon d;
  kiln::testing::WriteFile(d.dir / "vadd.cu", kiln::testing::VaddSource());
  json reply = Json(d.Cli({"compile", "--source", d.dir / "vadd.cu", "--entry", "vadd", "--option", "-DN=3", "--arch",
                           "sm_90a", "--json"}));
  CHECK(reply["origin"] == "ORIGIN_COMPILED");
  CHECK(reply["uri"].get<std::string>().rfind("src_vadd_", 0) == 0);
  CHECK(reply["kernels"][0]["name"] == "vadd");
}

TEST_CASE("kiln cache ls / stats / verify / evict", "[client][cli][daemon]") {
  Daemon d;
  REQUIRE(d.Cli(kGet).exit_code == 0);
  REQUIRE(d.Cli({"get", "rmsnorm", "dtype=fp32", "hidden=512", "--arch", "sm_80"}).exit_code == 0);

  auto ls = d.Cli({"cache", "ls"});
  INFO(ls.output);
  CHECK(ls.exit_code == 0);
  CHECK(Has(ls, "KEY"));
  CHECK(Has(ls, "rmsnorm_bf16_h4096"));
  CHECK(Has(ls, "rmsnorm_fp32_h512"));
  CHECK(Has(ls, "2 of 2 matching entries"));
  json filtered = Json(d.Cli({"cache", "ls", "--arch", "sm_80", "--json"}));
  REQUIRE(filtered["entries"].size() == 1);
  CHECK(filtered["entries"][0]["uri"] == "rmsnorm_fp32_h512");
  json limited = Json(d.Cli({"cache", "ls", "--limit", "1", "--json"}));
  CHECK(limited["entries"].size() == 1);

  json stats = Json(d.Cli({"cache", "stats", "--json"}));
  CHECK(stats["entries"] == "2");  // uint64 prints as a string in proto JSON, as grpcurl shows it
  auto human = d.Cli({"cache", "stats"});
  CHECK(human.exit_code == 0);
  CHECK(Has(human, "entries"));
  CHECK(Has(human, d.daemon.cache_dir()));

  auto verify = d.Cli({"cache", "verify"});
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK(Has(verify, "no problems"));

  const std::string key = filtered["entries"][0]["cacheKey"];
  auto dry = d.Cli({"cache", "evict", "--key", key, "--dry-run"});
  INFO(dry.output);
  CHECK(dry.exit_code == 0);
  CHECK(Has(dry, "would evict 1 entries"));
  CHECK(Json(d.Cli({"cache", "ls", "--json"}))["entries"].size() == 2);
  auto evict = d.Cli({"cache", "evict", "--op", "rmsnorm", "--arch", "sm_80"});
  INFO(evict.output);
  CHECK(evict.exit_code == 0);
  CHECK(Has(evict, "evicted 1 entries"));
  CHECK(Json(d.Cli({"cache", "ls", "--json"}))["entries"].size() == 1);
  CHECK(d.Cli({"cache", "evict", "--all"}).exit_code == 0);
  CHECK(Has(d.Cli({"cache", "ls"}), "0 of 0 matching entries"));
}

TEST_CASE("kiln cache verify exits 4 when a blob is damaged", "[client][cli][daemon]") {
  Daemon d;
  json reply = Json(d.Cli(With(kGet, {"--json"})));
  std::string blob;
  for (const auto& e : std::filesystem::recursive_directory_iterator(d.daemon.cache_dir()))
    if (e.is_regular_file() && e.path().filename() == reply["sha256"].get<std::string>()) blob = e.path();
  REQUIRE_FALSE(blob.empty());
  std::filesystem::permissions(blob, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  kiln::testing::WriteFile(blob, "damaged");
  auto verify = d.Cli({"cache", "verify"});
  INFO(verify.output);
  CHECK(verify.exit_code == 4);
  CHECK(Has(verify, "problem(s)"));
}

TEST_CASE("kiln jobs ls shows the compile job", "[client][cli][daemon]") {
  Daemon d;
  REQUIRE(d.Cli(kGet).exit_code == 0);
  auto ls = d.Cli({"jobs", "ls"});
  INFO(ls.output);
  CHECK(ls.exit_code == 0);
  CHECK(Has(ls, "succeeded"));
  CHECK(Has(ls, "rmsnorm_bf16_h4096"));
  json jobs = Json(d.Cli({"jobs", "ls", "--state", "succeeded", "--json"}));
  REQUIRE(jobs["jobs"].size() >= 1);
  CHECK(jobs["jobs"][0]["state"] == "JOB_STATE_SUCCEEDED");
  CHECK(Json(d.Cli({"jobs", "ls", "--state", "failed", "--json"})).value("jobs", json::array()).empty());

  const std::string id = jobs["jobs"][0]["id"];
  auto get = d.Cli({"jobs", "get", id});
  INFO(get.output);
  CHECK(get.exit_code == 0);
  CHECK(Has(get, "succeeded"));
  CHECK(Has(get, "rmsnorm.cu"));  // the manifest's sources
  json job = Json(d.Cli({"jobs", "get", id, "--json"}));
  CHECK(job["id"] == id);
  auto missing = d.Cli({"jobs", "get", "no-such-job"});
  CHECK(missing.exit_code == 1);
}

TEST_CASE("kiln cache get shows one entry by key or prefix", "[client][cli][daemon]") {
  Daemon d;
  json reply = Json(d.Cli(With(kGet, {"--json"})));
  const std::string key = reply["cacheKey"];
  auto get = d.Cli({"cache", "get", key.substr(0, 12)});
  INFO(get.output);
  CHECK(get.exit_code == 0);
  CHECK(Has(get, key));
  CHECK(Has(get, "rmsnorm_bf16_h4096"));
  CHECK(Has(get, "toolchain"));
  json entry = Json(d.Cli({"cache", "get", key, "--json"}));
  CHECK(entry["sha256"] == reply["sha256"]);
  CHECK(d.Cli({"cache", "get", "0000000000000000"}).exit_code == 1);
}

// Waits until `text` shows in the process's output.
bool WaitFor(kiln::testing::Subprocess& p, const std::string& text, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (p.Output().find(text) != std::string::npos) return true;
    if (!p.running()) return p.Output().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST_CASE("kiln jobs watch follows jobs and stops cleanly on SIGINT", "[client][cli][daemon]") {
  Daemon d;
  kiln::testing::Subprocess watch(d.Options({"jobs", "watch"}));
  REQUIRE(WaitFor(watch, "watching the jobs of kilnd", std::chrono::seconds(30)));
  REQUIRE(d.Cli({"get", "rmsnorm", "dtype=fp16", "hidden=2048", "--arch", "sm_90a"}).exit_code == 0);
  CHECK(WaitFor(watch, "succeeded  rmsnorm_fp16_h2048", std::chrono::seconds(60)));
  watch.Signal(SIGINT);
  auto code = watch.Wait(std::chrono::seconds(30));
  INFO(watch.Output());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

TEST_CASE("kiln jobs watch --json ends cleanly when the daemon shuts down", "[client][cli][daemon]") {
  Daemon d;
  kiln::testing::Subprocess watch(d.Options({"jobs", "watch", "--json"}));
  // --json prints nothing until an event: wait for one.
  REQUIRE(d.Cli({"get", "rmsnorm", "dtype=fp32", "hidden=256", "--arch", "sm_90a"}).exit_code == 0);
  REQUIRE(WaitFor(watch, "JOB_STATE_SUCCEEDED", std::chrono::seconds(60)));
  const std::string first_line = watch.Output().substr(0, watch.Output().find('\n'));
  CHECK(json::parse(first_line).contains("job"));
  d.daemon.Terminate();
  auto code = watch.Wait(std::chrono::seconds(30));
  INFO(watch.Output());
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(watch.Output().find("kilnd closed the stream") != std::string::npos);
}

TEST_CASE("kiln doctor finds the daemon and its workspaces", "[client][cli][daemon][doctor]") {
  Daemon d;
  auto r = d.Cli({"doctor"});
  INFO(r.output);
  CHECK(Has(r, "ok    kilnd answers at unix:" + d.daemon.socket()));
  CHECK(Has(r, "ok    socket " + d.daemon.socket() + ": exists"));
  CHECK(Has(r, "ok    cache " + d.daemon.cache_dir() + " (KILN_CACHE_DIR): writable"));
  CHECK(r.exit_code == 0);
  CHECK(Has(r, "no problems found"));
}

}  // namespace
