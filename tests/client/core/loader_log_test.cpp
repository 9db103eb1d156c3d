// KILN_LOADER_LOG: parsing, the text of a line, and real processes that fetch kernels through
// the client library's fetch path from a real daemon (compiled, then from the daemon's memory;
// a failed fetch; off by default and with 0; an invalid value said once).
#include <catch2/catch.hpp>

#include "client/core/loader/loader_log.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("KILN_LOADER_LOG is 0 or 1, anything else is off with a message", "[client][loader-log]") {
  std::string error;
  for (const char* off : {static_cast<const char*>(nullptr), "", "0"}) {
    CHECK_FALSE(kiln::client::ParseLoaderLog(off, &error));
    CHECK(error.empty());
  }
  CHECK(kiln::client::ParseLoaderLog("1", &error));
  CHECK(error.empty());
  for (const char* bad : {"yes", "2", "on", " 1"}) {
    CHECK_FALSE(kiln::client::ParseLoaderLog(bad, &error));
    INFO(error);
    CHECK(error.find(std::string("KILN_LOADER_LOG='") + bad + "' is not valid") == 0);
    CHECK(error.find("expected 0 (off, the default) or 1") != std::string::npos);
  }
}

TEST_CASE("a loader-log line says what, for which arch, from where, how big and how long", "[client][loader-log]") {
  kiln::client::FetchedCubin fetched;
  fetched.reply.set_uri("rmsnorm_bf16_h4096");
  fetched.reply.set_arch("sm_90");
  fetched.reply.set_origin(kiln::v1::ORIGIN_DISK);
  fetched.reply.set_job_id("j42-7");
  fetched.reply.set_cache_key(std::string(64, 'a'));
  fetched.cubin = std::string(10 * 1024, 'x');
  fetched.blob_path = "/cache/blobs/ab/abcd";
  fetched.rpc_ms = 0.5;
  fetched.verify_ms = 0.25;
  kiln::v1::GetKernelRequest request;
  request.mutable_debug()->set_lineinfo(true);
  const std::string line = kiln::client::LoaderLogLine(kiln::client::LoaderEvent::kLoaded, request, fetched, 1.5);
  CHECK(line ==
        "[kiln loader] loaded rmsnorm_bf16_h4096 for sm_90 (debug compile: lineinfo): origin disk, job j42-7, key "
        "aaaaaaaaaaaa, cubin 10.0 KiB from the blob file /cache/blobs/ab/abcd, rpc 0.50 ms, verify 0.25 ms, "
        "load 1.50 ms");
  const std::string reused = kiln::client::LoaderLogLine(kiln::client::LoaderEvent::kAlreadyLoaded,
                                                         kiln::v1::GetKernelRequest(), fetched, 0);
  CHECK(reused.find("in-process cache: this process had loaded that cubin already") != std::string::npos);
  CHECK(reused.find("load ") == std::string::npos);
}

TEST_CASE("a process with KILN_LOADER_LOG=1 logs each kernel it fetches from a real daemon, 0 and unset log nothing",
          "[client][loader-log][daemon]") {
  kiln::testing::TempDir dir{"kiln-loader-log"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};
  auto get = [&](std::map<std::string, std::string> env, std::vector<std::string> args = {}) {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath(), "get", "rmsnorm", "dtype=fp32", "hidden=512", "--arch", "sm_80"};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    env.emplace("KILN_SOCKET", daemon.socket());
    p.set_env = std::move(env);
    p.unset_env = {"KILN_DEBUG_COMPILE"};
    if (!p.set_env.count("KILN_LOADER_LOG")) p.unset_env.push_back("KILN_LOADER_LOG");
    return kiln::testing::Run(p, std::chrono::seconds(120));
  };

  auto first = get({{"KILN_LOADER_LOG", "1"}});
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(Count(first.output, "[kiln loader] ") == 1);
  CHECK(
      first.output.find("[kiln loader] fetched rmsnorm_fp32_h512 for sm_80, not loaded here: origin compiled, job j") !=
      std::string::npos);
  CHECK(first.output.find("from the blob file " + daemon.cache_dir() + "/blobs/") != std::string::npos);
  CHECK(first.output.find(", rpc ") != std::string::npos);
  CHECK(first.output.find(" ms, verify ") != std::string::npos);

  auto second = get({{"KILN_LOADER_LOG", "1"}}, {"--lineinfo"});
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.find("[kiln loader] fetched rmsnorm_fp32_h512 for sm_80 (debug compile: lineinfo), not loaded "
                           "here: origin compiled") != std::string::npos);
  auto third = get({{"KILN_LOADER_LOG", "1"}});
  CHECK(third.output.find("[kiln loader] fetched rmsnorm_fp32_h512 for sm_80, not loaded here: origin memory") !=
        std::string::npos);

  CHECK(Count(get({{"KILN_LOADER_LOG", "0"}}).output, "[kiln loader]") == 0);
  CHECK(Count(get({}).output, "[kiln loader]") == 0);
  auto invalid = get({{"KILN_LOADER_LOG", "yes"}});
  CHECK(invalid.exit_code == 0);
  CHECK(Count(invalid.output, "kiln: KILN_LOADER_LOG='yes' is not valid") == 1);
  CHECK(Count(invalid.output, "[kiln loader]") == 0);

  // A fetch the daemon refuses is logged too.
  kiln::testing::SubprocessOptions p;
  p.argv = {kiln::testing::KilnCliPath(), "get", "rmsnorm", "dtype=fp32", "hidden=512", "--arch", "sm_75"};
  p.set_env = {{"KILN_SOCKET", daemon.socket()}, {"KILN_LOADER_LOG", "1"}};
  auto refused = kiln::testing::Run(p, std::chrono::seconds(120));
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("[kiln loader] fetch failed after ") != std::string::npos);
}
