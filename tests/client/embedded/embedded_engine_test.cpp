// The embedded engine (client/embedded/) and the choice of mode (client/core/rpc/
// kernel_source.h): with no daemon a process compiles itself, into the same cache folder with
// the same per-key file locks, so processes and a daemon sharing a folder compile a key once;
// the same request gives the same key and cubin either way; an edited kernels tree is seen at
// the next request. Real processes (kiln_embedded_child, kilnd), real NVRTC compiles; no GPU.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "client/core/rpc/kernel_source.h"
#include "tests/support/daemon_process.h"
#include "tests/support/stale_socket.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using kiln::testing::DaemonOptions;
using kiln::testing::DaemonProcess;
using kiln::testing::Subprocess;
using kiln::testing::SubprocessOptions;
using kiln::testing::TempDir;

struct Fetch {
  std::string origin, job, key, sha256;
};

struct ChildResult {
  int exit_code = -1;
  std::string mode;  // the "mode" line's text
  std::vector<Fetch> fetches;
  std::vector<std::string> errors;
  std::string output;
};

ChildResult Parse(int exit_code, const std::string& output) {
  ChildResult r;
  r.exit_code = exit_code;
  r.output = output;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("mode ", 0) == 0) r.mode = line.substr(5);
    if (line.rfind("error ", 0) == 0) r.errors.push_back(line.substr(6));
    if (line.rfind("fetch ", 0) == 0) {
      std::istringstream words(line.substr(6));
      Fetch f;
      words >> f.origin >> f.job >> f.key >> f.sha256;
      r.fetches.push_back(f);
    }
  }
  return r;
}

// The child's environment: only what a test names counts (the test process's own KILN_* do not).
SubprocessOptions Child(std::vector<std::string> args, std::map<std::string, std::string> env) {
  SubprocessOptions p;
  p.argv = {kiln::testing::EmbeddedChildPath()};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.unset_env = {"KILN_MODE", "KILN_SOCKET", "KILN_CACHE_DIR", "KILN_GEN_DIR", "KILN_KERNELS_DIR", "KILN_LOG_LEVEL"};
  if (!env.count("KILN_KERNELS_DIR")) env["KILN_KERNELS_DIR"] = kiln::testing::KernelsDir();
  p.set_env = std::move(env);
  return p;
}

ChildResult RunChild(std::vector<std::string> args, std::map<std::string, std::string> env) {
  auto r = kiln::testing::Run(Child(std::move(args), std::move(env)), std::chrono::seconds(300));
  return Parse(r.exit_code, r.output);
}

const std::vector<std::string> kRmsnorm = {"--op", "rmsnorm", "dtype=bf16", "hidden=4096"};

// A raw source no cache has seen: a miss everywhere.
std::string FreshSource(const TempDir& dir) {
  std::random_device random;
  const std::string path = dir / "fresh.cu";
  std::ofstream(path) << "// " << random() << random() << "\n"
                      << "extern \"C\" __global__ void fresh(float* x) { x[threadIdx.x] *= 2.0f; }\n";
  return path;
}

}  // namespace

TEST_CASE("KILN_MODE is auto or daemon or embedded and anything else is refused naming it", "[client][mode]") {
  CHECK(*kiln::client::ParseClientMode(nullptr) == kiln::ClientMode::kAuto);
  CHECK(*kiln::client::ParseClientMode("") == kiln::ClientMode::kAuto);
  CHECK(*kiln::client::ParseClientMode("auto") == kiln::ClientMode::kAuto);
  CHECK(*kiln::client::ParseClientMode("daemon") == kiln::ClientMode::kDaemon);
  CHECK(*kiln::client::ParseClientMode("embedded") == kiln::ClientMode::kEmbedded);
  auto bad = kiln::client::ParseClientMode("Embedded");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == kiln::StatusCode::kInvalidArgument);
  CHECK(bad.status().message() == "KILN_MODE=\"Embedded\" is not one of auto, daemon, embedded");
}

TEST_CASE("a daemon is there only where something accepts connections on the socket", "[client][mode]") {
  TempDir dir("kiln-mode");
  std::string why;
  CHECK_FALSE(kiln::client::DaemonListensAt(dir / "none.sock", &why));
  CHECK(why.find("no daemon at " + (dir / "none.sock")) == 0);

  // A socket file nobody listens on (a daemon killed -9 leaves one): no daemon.
  const std::string stale = dir / "stale.sock";
  kiln::testing::MakeStaleSocketFile(stale);
  CHECK_FALSE(kiln::client::DaemonListensAt(stale, &why));
  CHECK(why.find("Connection refused") != std::string::npos);

  DaemonProcess daemon(DaemonOptions{.root = dir / "d"});
  CHECK(kiln::client::DaemonListensAt(daemon.socket(), &why));
  CHECK(why == "a daemon listens at " + daemon.socket());
}

TEST_CASE("with no daemon an op compiles in process and a daemon gives the same key and cubin", "[client][embedded]") {
  TempDir dir("kiln-embedded");
  const std::string cache = dir / "embedded-cache";
  const std::map<std::string, std::string> no_daemon = {{"KILN_SOCKET", dir / "none.sock"}, {"KILN_CACHE_DIR", cache}};

  ChildResult first = RunChild(kRmsnorm, no_daemon);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.mode.find("embedded: compiling in this process, cache " + cache + ", kernels ") == 0);
  CHECK(first.mode.find("KILN_MODE unset, auto: no daemon at " + (dir / "none.sock")) != std::string::npos);
  REQUIRE(first.fetches.size() == 1);
  CHECK(first.fetches[0].origin == "compiled");
  CHECK(fs::exists(cache + "/index.sqlite"));

  // A new process on the same folder: the disk entry, no compile.
  ChildResult again = RunChild(kRmsnorm, no_daemon);
  INFO(again.output);
  REQUIRE(again.fetches.size() == 1);
  CHECK(again.fetches[0].origin == "disk");
  CHECK(again.fetches[0].key == first.fetches[0].key);
  CHECK(again.fetches[0].sha256 == first.fetches[0].sha256);

  // A daemon on a folder of its own compiles the same request into the same key and bytes.
  DaemonProcess daemon(DaemonOptions{.root = dir / "d"});
  ChildResult through = RunChild(kRmsnorm, {{"KILN_SOCKET", daemon.socket()}});
  INFO(through.output);
  REQUIRE(through.exit_code == 0);
  CHECK(through.mode ==
        "daemon at unix:" + daemon.socket() + " (KILN_MODE unset, auto: a daemon listens at " + daemon.socket() + ")");
  REQUIRE(through.fetches.size() == 1);
  CHECK(through.fetches[0].origin == "compiled");
  CHECK(through.fetches[0].key == first.fetches[0].key);
  CHECK(through.fetches[0].sha256 == first.fetches[0].sha256);

  // KILN_MODE=embedded uses the engine even with the daemon there; KILN_MODE=daemon never does.
  auto embedded = no_daemon;
  embedded["KILN_MODE"] = "embedded";
  embedded["KILN_SOCKET"] = daemon.socket();
  ChildResult forced = RunChild(kRmsnorm, embedded);
  INFO(forced.output);
  CHECK(forced.mode.find("embedded: ") == 0);
  REQUIRE(forced.fetches.size() == 1);
  CHECK(forced.fetches[0].origin == "disk");

  auto daemon_only = no_daemon;
  daemon_only["KILN_MODE"] = "daemon";
  ChildResult refused = RunChild(kRmsnorm, daemon_only);
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK(refused.mode.find("daemon at unix:" + (dir / "none.sock") + " (KILN_MODE=daemon: the daemon only)") == 0);
  REQUIRE(refused.errors.size() == 1);
  CHECK(refused.errors[0].find("UNAVAILABLE GetKernel op rmsnorm") == 0);
  CHECK(refused.errors[0].find("no socket file") != std::string::npos);

  auto bogus = no_daemon;
  bogus["KILN_MODE"] = "sometimes";
  ChildResult invalid = RunChild(kRmsnorm, bogus);
  INFO(invalid.output);
  CHECK(invalid.exit_code == 1);
  CHECK(invalid.mode == "no mode: KILN_MODE=\"sometimes\" is not one of auto, daemon, embedded");
  REQUIRE(invalid.errors.size() == 1);
  CHECK(invalid.errors[0] == "INVALID_ARGUMENT KILN_MODE=\"sometimes\" is not one of auto, daemon, embedded");
}

TEST_CASE("two embedded processes and a daemon on one cache folder compile 16 identical misses once",
          "[client][embedded]") {
  TempDir dir("kiln-embedded");
  const std::string cache = dir / "shared-cache";
  DaemonProcess daemon(DaemonOptions{.root = dir / "d", .cache_dir = cache});
  const std::string source = FreshSource(dir);
  const auto start_at = std::chrono::duration_cast<std::chrono::milliseconds>(
                            (std::chrono::system_clock::now() + std::chrono::milliseconds(1500)).time_since_epoch())
                            .count();
  auto args = [&](int threads) {
    return std::vector<std::string>{
        "--threads", std::to_string(threads), "--start-at-ms", std::to_string(start_at), "--source", source, "fresh"};
  };
  const std::map<std::string, std::string> embedded = {
      {"KILN_MODE", "embedded"}, {"KILN_CACHE_DIR", cache}, {"KILN_SOCKET", daemon.socket()}};
  Subprocess a(Child(args(6), embedded));
  Subprocess b(Child(args(6), embedded));
  Subprocess c(Child(args(4), {{"KILN_MODE", "daemon"}, {"KILN_SOCKET", daemon.socket()}}));

  std::vector<ChildResult> results;
  for (Subprocess* p : {&a, &b, &c}) {
    auto code = p->Wait(std::chrono::seconds(300));
    REQUIRE(code.has_value());
    results.push_back(Parse(*code, p->Output()));
  }
  // Each process's compiles: the jobs its fetches waited on. One job in all, whoever ran it.
  int compile_jobs = 0, fetches = 0;
  std::set<std::string> keys, shas;
  for (size_t i = 0; i < results.size(); ++i) {
    INFO("process " << i << ":\n" << results[i].output);
    CHECK(results[i].exit_code == 0);
    std::set<std::string> jobs;
    for (const Fetch& f : results[i].fetches) {
      ++fetches;
      keys.insert(f.key);
      shas.insert(f.sha256);
      if (f.origin == "compiled") jobs.insert(f.job);
      else CHECK((f.origin == "disk" || f.origin == "memory"));
    }
    compile_jobs += int(jobs.size());
  }
  CHECK(fetches == 16);
  CHECK(keys.size() == 1);
  CHECK(shas.size() == 1);
  CHECK(compile_jobs == 1);
  CHECK(results[0].mode.find("embedded: ") == 0);
  CHECK(results[2].mode.find("daemon at ") == 0);
}

TEST_CASE("an edited kernels tree is compiled anew at the next request without a restart", "[client][embedded]") {
  TempDir dir("kiln-embedded");
  const std::string kernels = dir / "kernels";
  fs::copy(kiln::testing::KernelsDir(), kernels, fs::copy_options::recursive);
  const std::string go = dir / "go";
  std::vector<std::string> args = kRmsnorm;
  args.insert(args.end(), {"--again-after", go});
  Subprocess child(
      Child(args, {{"KILN_MODE", "embedded"}, {"KILN_CACHE_DIR", dir / "cache"}, {"KILN_KERNELS_DIR", kernels}}));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (child.Output().find("waiting") == std::string::npos && child.running() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(child.Output().find("waiting") != std::string::npos);
  std::ofstream(kernels + "/src/norm/rmsnorm.cu", std::ios::app) << "\n// edited while a process runs\n";
  std::ofstream(go) << "go\n";
  auto code = child.Wait(std::chrono::seconds(300));
  REQUIRE(code.has_value());
  ChildResult r = Parse(*code, child.Output());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  REQUIRE(r.fetches.size() == 2);
  CHECK(r.fetches[0].origin == "compiled");
  CHECK(r.fetches[1].origin == "compiled");
  CHECK(r.fetches[1].key != r.fetches[0].key);
}
