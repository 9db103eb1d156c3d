// KILN_DEBUG_COMPILE: parsing (every accepted word, the defaults, invalid values refused whole),
// the requests the library builds carrying the controls (and the module cache telling the
// variants apart), and a real process under the variable: its loud notice, and the debug
// entry the daemon built for it.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "client/core/loader/module_cache.h"
#include "client/core/rpc/debug_compile.h"
#include "client/core/rpc/kernel_request.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::client::DebugCompile;
using kiln::client::ParseDebugCompile;

DebugCompile Parse(const char* value, std::string* error) { return ParseDebugCompile(value, error); }

DebugCompile Valid(const char* value) {
  std::string error;
  DebugCompile debug = ParseDebugCompile(value, &error);
  INFO(value << ": " << error);
  CHECK(error.empty());
  return debug;
}

}  // namespace

TEST_CASE("KILN_DEBUG_COMPILE accepts lineinfo, device-debug and verbose-log as a comma list", "[client][debug]") {
  for (const char* off : {static_cast<const char*>(nullptr), "", "  ", "0", "none"}) CHECK_FALSE(Valid(off).any());
  DebugCompile li = Valid("lineinfo");
  CHECK(li.lineinfo);
  CHECK_FALSE(li.device_debug);
  CHECK_FALSE(li.verbose_log);
  CHECK(li.Describe() == "lineinfo");
  DebugCompile all = Valid(" verbose-log, Device-Debug ,lineinfo");
  CHECK(all.lineinfo);
  CHECK(all.device_debug);
  CHECK(all.verbose_log);
  CHECK(all.Describe() == "lineinfo,device-debug,verbose-log");
}

TEST_CASE("an invalid KILN_DEBUG_COMPILE is refused whole, naming the variable and the accepted values",
          "[client][debug]") {
  for (const char* bad : {"bogus", "lineinfo,bogus", "lineinfo,", "-G", "1"}) {
    std::string error;
    DebugCompile debug = Parse(bad, &error);
    INFO(bad << ": " << error);
    CHECK_FALSE(debug.any());  // nothing half-applied from a typo
    CHECK(error.find("KILN_DEBUG_COMPILE='") == 0);
    CHECK(error.find("lineinfo, device-debug, verbose-log") != std::string::npos);
    CHECK(error.find("default") != std::string::npos);
  }
}

TEST_CASE("the requests the library builds carry the debug controls, and the module cache tells them apart",
          "[client][debug]") {
  const kiln::OpRequest op{"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}};
  auto plain = kiln::client::MakeKernelRequest(op, "sm_90", DebugCompile{});
  CHECK_FALSE(plain.has_debug());  // the default request is what it always was on the wire
  auto li = kiln::client::MakeKernelRequest(op, "sm_90", DebugCompile{.lineinfo = true});
  REQUIRE(li.has_debug());
  CHECK(li.debug().lineinfo());
  CHECK_FALSE(li.debug().device_debug());
  CHECK_FALSE(li.debug().verbose_log());
  CHECK(li.op().name() == "rmsnorm");
  CHECK(li.target().arch() == "sm_90");
  auto g = kiln::client::MakeKernelRequest(op, "sm_90", DebugCompile{.device_debug = true, .verbose_log = true});
  CHECK(g.debug().device_debug());
  CHECK(g.debug().verbose_log());

  const kiln::SourceRequest source{"axpy", "extern \"C\" __global__ void axpy() {}", {"axpy"}, {}, {}};
  auto src = kiln::client::MakeKernelRequest(source, "sm_90a", DebugCompile{.verbose_log = true});
  CHECK(src.source().name() == "axpy");
  CHECK(src.debug().verbose_log());

  using kiln::client::ModuleCache;
  const std::string plain_id = ModuleCache::OpIdentity(op, "sm_90", DebugCompile{});
  const std::string li_id = ModuleCache::OpIdentity(op, "sm_90", DebugCompile{.lineinfo = true});
  const std::string g_id = ModuleCache::OpIdentity(op, "sm_90",
                                                   DebugCompile{.device_debug = true, .verbose_log = true});
  CHECK(plain_id != li_id);
  CHECK(li_id != g_id);
  CHECK(li_id == ModuleCache::OpIdentity(op, "sm_90", DebugCompile{.lineinfo = true}));
  CHECK(ModuleCache::SourceIdentity(source, "sm_90a", DebugCompile{}) !=
        ModuleCache::SourceIdentity(source, "sm_90a", DebugCompile{.verbose_log = true}));
}

TEST_CASE("the notice of an active KILN_DEBUG_COMPILE names the variable, the controls and the defaults",
          "[client][debug]") {
  std::string notice = kiln::client::DebugCompileNotice(DebugCompile{.lineinfo = true, .device_debug = true});
  CHECK(notice.find("kiln: KILN_DEBUG_COMPILE=lineinfo,device-debug: ") == 0);
  CHECK(notice.find("DEBUG COMPILE") != std::string::npos);
  CHECK(notice.find("default: no line info") != std::string::npos);
  CHECK(notice.find("default: optimized") != std::string::npos);
  CHECK(notice.find("docs/diagnostic-controls.md") != std::string::npos);
}

TEST_CASE("a process under KILN_DEBUG_COMPILE says so once and gets the debug entry from a real daemon",
          "[client][debug][daemon]") {
  kiln::testing::TempDir dir{"kiln-debug-compile"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};
  auto kiln = [&](std::vector<std::string> args, std::map<std::string, std::string> env) {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath()};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    env["KILN_SOCKET"] = daemon.socket();
    p.set_env = std::move(env);
    p.unset_env = {"KILN_LOADER_LOG"};
    return kiln::testing::Run(p, std::chrono::seconds(120));
  };
  const std::vector<std::string> get = {"get", "rmsnorm", "dtype=fp16", "hidden=768", "--arch", "sm_80"};
  auto lineinfo = kiln(get, {{"KILN_DEBUG_COMPILE", "lineinfo"}});
  INFO(lineinfo.output);
  REQUIRE(lineinfo.exit_code == 0);
  const std::string loud =
      "kiln: KILN_DEBUG_COMPILE=lineinfo: every kernel this process asks kilnd for is a DEBUG COMPILE";
  CHECK(lineinfo.output.find(loud) != std::string::npos);
  CHECK(lineinfo.output.find(loud, lineinfo.output.find(loud) + 1) == std::string::npos);  // once

  auto bad = kiln(get, {{"KILN_DEBUG_COMPILE", "line-info"}});
  INFO(bad.output);
  REQUIRE(bad.exit_code == 0);
  CHECK(bad.output.find("kiln: KILN_DEBUG_COMPILE='line-info' is not valid") != std::string::npos);

  // Two entries of the URI: the lineinfo one, and the default one the invalid value fell back to.
  auto inspect = kiln({"inspect", "rmsnorm_fp16_h768", "--json"}, {});
  INFO(inspect.output);
  REQUIRE(inspect.exit_code == 0);
  auto views = nlohmann::json::parse(inspect.output)["entries"];
  REQUIRE(views.size() == 2);
  int lineinfo_entries = 0;
  for (const auto& v : views) lineinfo_entries += v["entry"]["debug"].value("lineinfo", false);
  CHECK(lineinfo_entries == 1);
}
