// The kiln CLI as a real process, without a daemon: help, usage errors (exit 2), an
// unreachable daemon (exit 3), and doctor's findings (exit 4).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::testing::RunResult;

RunResult Cli(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  kiln::testing::SubprocessOptions p;
  p.argv = {kiln::testing::KilnCliPath()};
  for (auto& a : args) p.argv.push_back(std::move(a));
  p.set_env = std::move(env);
  for (const char* name : {"KILN_SOCKET", "KILN_CACHE_DIR", "KILN_GEN_DIR", "KILN_MODE"})
    if (!p.set_env.count(name)) p.unset_env.push_back(name);
  return kiln::testing::Run(std::move(p), std::chrono::seconds(60));
}

bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

TEST_CASE("kiln --help lists the commands and documents the exit codes", "[client][cli]") {
  auto r = Cli({"--help"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* text : {"get OP [KEY=VALUE...]", "ops [OP]", "compile", "cache ls", "cache stats", "cache verify",
                           "cache evict", "jobs ls", "jobs watch", "doctor", "--socket PATH", "--timeout SECONDS",
                           "KILN_SOCKET", "Exit codes:", "1  the daemon answered with an error", "2  usage error",
                           "3  the daemon could not be reached", "4  a problem was found"})
    CHECK(Has(r, text));
  CHECK(Cli({"help"}).exit_code == 0);
  auto version = Cli({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.output == std::string("kiln ") + KILN_TEST_VERSION + "\n");
}

TEST_CASE("every command has --help", "[client][cli]") {
  for (std::vector<std::string> command : {std::vector<std::string>{"get"},
                                           {"compile"},
                                           {"cache", "ls"},
                                           {"cache", "stats"},
                                           {"cache", "verify"},
                                           {"cache", "evict"},
                                           {"cache", "get"},
                                           {"jobs", "ls"},
                                           {"jobs", "get"},
                                           {"jobs", "watch"},
                                           {"doctor"},
                                           {"ops"},
                                           {"cache"},
                                           {"jobs"}}) {
    command.push_back("--help");
    auto r = Cli(command);
    INFO(command[0] << " " << command[1] << "\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(Has(r, "Usage: kiln " + command[0]));
  }
  auto get = Cli({"get", "--help"});
  for (const char* text : {"--arch ARCH", "--json", "--out FILE", "Exit codes:", "kiln get OP --help"})
    CHECK(Has(get, text));
  auto ops = Cli({"ops", "--help"});
  for (const char* text : {"Usage: kiln ops [OP] [OPTIONS]", "--json", "--markdown"}) CHECK(Has(ops, text));
  auto evict = Cli({"help", "cache", "evict"});
  CHECK(evict.exit_code == 0);
  for (const char* text : {"--key KEY", "--all", "--dry-run", "(repeatable)"}) CHECK(Has(evict, text));
}

TEST_CASE("usage errors exit with 2 and say what is wrong", "[client][cli]") {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{}, "Usage: kiln [--socket PATH]"},
      {{"frobnicate"}, "kiln: unknown command 'frobnicate'"},
      {{"cache"}, "Usage: kiln cache COMMAND"},
      {{"cache", "frob"}, "kiln cache: unknown command 'frob'"},
      {{"cache", "ls", "--bogus"}, "kiln cache ls: unknown option --bogus"},
      {{"cache", "ls", "--limit"}, "kiln cache ls: --limit needs a value (N)"},
      {{"cache", "ls", "--limit", "zero"}, "--limit wants a positive integer, got 'zero'"},
      {{"cache", "ls", "extra"}, "kiln cache ls: unexpected argument 'extra'"},
      {{"cache", "evict"}, "say what to evict: --key K, --op, --uri-prefix, --arch, or --all"},
      {{"cache", "evict", "--all", "--op", "rmsnorm"}, "--all cannot be combined with filters"},
      {{"cache", "stats", "--json", "--json"}, "--json given more than once"},
      {{"get"}, "kiln get: missing OP [KEY=VALUE...]"},
      {{"get", "rmsnorm", "dtype"}, "'dtype' is not KEY=VALUE"},
      {{"get", "rmsnorm", "dtype=bf16", "dtype=fp16", "--arch", "sm_90"}, "param 'dtype' given twice"},
      {{"get", "rmsnorm", "--json=yes"}, "--json takes no value"},
      {{"compile", "--entry", "k", "--arch", "sm_90"}, "--source FILE is required"},
      {{"compile", "--source", "/nonexistent.cu", "--entry", "k", "--arch", "sm_90"}, "cannot read /nonexistent.cu"},
      {{"jobs", "ls", "--state", "sleeping"}, "--state wants one of queued"},
      {{"jobs", "get"}, "kiln jobs get: missing ID"},
      {{"cache", "get", "a", "b"}, "kiln cache get: unexpected argument 'b'"},
      {{"--timeout", "soon", "cache", "ls"}, "--timeout wants a number of seconds > 0, got 'soon'"},
      {{"cache", "ls", "--socket"}, "--socket needs a value"},
      {{"ops", "--json", "--markdown"}, "--json and --markdown exclude each other"},
      {{"ops", "rmsnorm", "extra"}, "kiln ops: unexpected argument 'extra'"},
      {{"get", "rmsnorm", "--bogus", "--help"}, "kiln get: unknown option --bogus"},
  };
  for (const auto& c : cases) {
    auto r = Cli(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO("kiln " << joined << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(Has(r, c.message));
  }
}

TEST_CASE("kiln get without --arch on a machine without a GPU is a usage error", "[client][cli]") {
  kiln::testing::TempDir dir("kiln-cli");
  auto r = Cli({"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--socket", dir / "none.sock"});
  INFO(r.output);
  if (r.exit_code != 2) {
    // A GPU machine takes the arch from its GPU; then it is the daemon that is missing.
    CHECK(r.exit_code == 3);
  } else {
    CHECK(Has(r, "no --arch given, and no GPU here to take it from"));
  }
}

TEST_CASE("an unreachable daemon exits with 3 and names the socket", "[client][cli]") {
  kiln::testing::TempDir dir("kiln-cli");
  const std::string socket = dir / "kilnd.sock";
  const std::vector<std::vector<std::string>> commands = {
      {"get", "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_90a"},
      {"compile", "--source", "/dev/null", "--entry", "k", "--arch", "sm_90a"},
      {"cache", "ls"},
      {"cache", "get", "0123456789abcdef"},
      {"jobs", "get", "j1-1"},
      {"cache", "stats"},
      {"cache", "verify"},
      {"cache", "evict", "--all"},
      {"jobs", "ls"},
      {"jobs", "watch"},
      {"ops", "--markdown"},
      {"get", "rmsnorm", "--help"},
  };
  for (auto args : commands) {
    args.push_back("--socket");
    args.push_back(socket);
    auto r = Cli(args);
    INFO(args[0] << " " << args[1] << "\n" << r.output);
    CHECK(r.exit_code == 3);
    CHECK(Has(r, "kilnd is not reachable at unix:" + socket));
    CHECK(Has(r, "kilnd --socket " + socket));
  }
  // KILN_SOCKET works as --socket does.
  auto env = Cli({"cache", "stats"}, {{"KILN_SOCKET", socket}});
  CHECK(env.exit_code == 3);
  CHECK(Has(env, "unix:" + socket));
}

TEST_CASE("kiln doctor reports each area and exits 4 when kilnd is missing in daemon mode", "[client][cli][doctor]") {
  kiln::testing::TempDir dir("kiln-cli");
  const std::string socket = dir / "kilnd.sock";
  const std::map<std::string, std::string> env = {
      {"KILN_CACHE_DIR", dir / "cache"}, {"KILN_GEN_DIR", dir / "gen"}, {"KILN_MODE", "daemon"}};
  auto r = Cli({"doctor", "--socket", socket}, env);
  INFO(r.output);
  CHECK(r.exit_code == 4);
  for (const char* text :
       {"toolchain", "NVRTC", "nvJitLink", "CUDA headers", "devices", "workspaces", "daemon",
        "mode of a process here (KILN_MODE)", "daemon: kernels come from kilnd only", "problem(s) found"})
    CHECK(Has(r, text));
  CHECK(Has(r, "cache " + (dir / "cache") + " (KILN_CACHE_DIR): does not exist yet"));
  CHECK(Has(r, "generated sources " + (dir / "gen") + " (KILN_GEN_DIR)"));
  CHECK(Has(r, "socket " + socket + ": does not exist"));
  CHECK(Has(r, "FAIL  kilnd: kilnd is not reachable at unix:"));
  // Without a driver the device line is a warning, not a problem.
  if (Has(r, "no CUDA driver")) CHECK(Has(r, "warn  no CUDA driver"));
}

TEST_CASE("kiln doctor without kilnd in auto mode checks the embedded engine instead", "[client][cli][doctor]") {
  kiln::testing::TempDir dir("kiln-cli");
  const std::string socket = dir / "kilnd.sock";
  auto r = Cli({"doctor", "--socket", socket}, {{"KILN_CACHE_DIR", dir / "cache"},
                                                {"KILN_GEN_DIR", dir / "gen"},
                                                {"KILN_KERNELS_DIR", kiln::testing::KernelsDir()}});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(Has(r, "socket " + socket + ": does not exist"));
  CHECK_FALSE(Has(r, "FAIL"));
  CHECK(Has(r, "ok    auto, no daemon: kernels compile in each process: cache " + (dir / "cache")));
  CHECK(Has(r, "no problems found"));
  // A word KILN_MODE does not know is a problem, named.
  auto bad = Cli({"doctor", "--socket", socket}, {{"KILN_CACHE_DIR", dir / "cache"}, {"KILN_MODE", "sometimes"}});
  INFO(bad.output);
  CHECK(bad.exit_code == 4);
  CHECK(Has(bad, "FAIL  KILN_MODE=\"sometimes\" is not one of auto, daemon, embedded"));
}

TEST_CASE("kiln doctor flags a workspace it cannot write", "[client][cli][doctor]") {
  kiln::testing::TempDir dir("kiln-cli");
  kiln::testing::WriteFile(dir / "file", "x");
  auto r = Cli({"doctor", "--socket", dir / "kilnd.sock"}, {{"KILN_CACHE_DIR", dir / "file"}});
  INFO(r.output);
  CHECK(r.exit_code == 4);
  CHECK(Has(r, "FAIL  cache " + (dir / "file") + " (KILN_CACHE_DIR): exists but is not a folder"));
}

}  // namespace
