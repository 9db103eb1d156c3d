// kiln-launch as a real process: the environment each rank gets, how the ranks' exit
// statuses add up, stopping the others when one dies, passing on SIGTERM, --tag, usage
// errors — and its ranks meeting through the rendezvous at KILN_COMM_ADDRESS.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "client/comm/rendezvous.h"
#include "tests/client/ranks/kiln_launch_path.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::comm::testing::KilnLaunchPath;
using kiln::testing::RunResult;
using kiln::testing::SubprocessOptions;
using namespace std::chrono_literals;

SubprocessOptions LaunchOptions(std::vector<std::string> args) {
  SubprocessOptions p;
  p.argv = {KilnLaunchPath()};
  for (auto& a : args) p.argv.push_back(std::move(a));
  // The ranks must see what kiln-launch sets, not what the test runner had.
  p.unset_env = {"KILN_RANK",  "KILN_WORLD_SIZE", "KILN_COMM_ADDRESS",   "RANK",
                 "WORLD_SIZE", "MASTER_PORT",     "CUDA_VISIBLE_DEVICES"};
  return p;
}

RunResult Launch(std::vector<std::string> args) { return kiln::testing::Run(LaunchOptions(std::move(args)), 30s); }

// kiln-launch -n N -- /bin/sh -c SCRIPT DIR: the script finds the test's folder in $0.
RunResult LaunchShell(int n, const std::string& script, const std::string& dir = "/",
                      std::vector<std::string> options = {}) {
  std::vector<std::string> args = {"-n", std::to_string(n)};
  for (auto& o : options) args.push_back(o);
  for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
  args.push_back(script);
  args.push_back(dir);
  return Launch(std::move(args));
}

bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(kiln::testing::ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

TEST_CASE("kiln-launch: each rank gets its rank, the world and one fresh address", "[comm][launch]") {
  kiln::testing::TempDir dir("kiln-launch");
  std::string first_address;
  for (int launch = 0; launch < 2; ++launch) {
    auto r = LaunchShell(3, "env > \"$0/rank-$KILN_RANK.env\"", dir.path());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::string address, port;
    for (int rank = 0; rank < 3; ++rank) {
      auto env = ReadEnvFile(dir / ("rank-" + std::to_string(rank) + ".env"));
      const std::string rs = std::to_string(rank);
      CHECK(env["KILN_RANK"] == rs);
      CHECK(env["KILN_LOCAL_RANK"] == rs);
      CHECK(env["KILN_WORLD_SIZE"] == "3");
      CHECK(env["KILN_LOCAL_WORLD_SIZE"] == "3");
      CHECK(env["RANK"] == rs);
      CHECK(env["LOCAL_RANK"] == rs);
      CHECK(env["WORLD_SIZE"] == "3");
      CHECK(env["LOCAL_WORLD_SIZE"] == "3");
      CHECK(env["MASTER_ADDR"] == "127.0.0.1");
      CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);  // every GPU stays visible
      CHECK(env["KILN_COMM_ADDRESS"].rfind("@kiln-launch-", 0) == 0);
      if (rank == 0) {
        address = env["KILN_COMM_ADDRESS"];
        port = env["MASTER_PORT"];
        int p = std::atoi(port.c_str());
        CHECK((p > 0 && p < 65536));
      }
      CHECK(env["KILN_COMM_ADDRESS"] == address);
      CHECK(env["MASTER_PORT"] == port);
    }
    if (launch == 0) first_address = address;
    else CHECK(address != first_address);
  }
}

TEST_CASE("kiln-launch: leaves CUDA_VISIBLE_DEVICES as it is", "[comm][launch]") {
  kiln::testing::TempDir dir("kiln-launch");
  auto p = LaunchOptions(
      {"-n", "2", "--", "/bin/sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES\" > \"$0/$KILN_RANK\"", dir.path()});
  p.unset_env.pop_back();
  p.set_env["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto r = kiln::testing::Run(std::move(p), 30s);
  REQUIRE(r.exit_code == 0);
  CHECK(kiln::testing::ReadFile(dir / "0") == "0,1\n");
  CHECK(kiln::testing::ReadFile(dir / "1") == "0,1\n");
}

TEST_CASE("kiln-launch: the exit status sums up the ranks'", "[comm][launch]") {
  CHECK(LaunchShell(3, "exit 0").exit_code == 0);
  CHECK(LaunchShell(1, "exit 0").exit_code == 0);
  // A skipped test stays skipped.
  CHECK(LaunchShell(3, "exit 77").exit_code == 77);
  CHECK(LaunchShell(3, "[ $KILN_RANK = 1 ] && exit 77; exit 0").exit_code == 77);
  // A failure wins over a skip.
  auto mixed = LaunchShell(3, "[ $KILN_RANK = 1 ] && exit 77; [ $KILN_RANK = 2 ] && exit 3; exit 0");
  INFO(mixed.output);
  CHECK(mixed.exit_code == 3);
  CHECK(Has(mixed, "kiln-launch: rank 2 exited with status 3"));
  // The first rank to fail sets the status; the later one does not.
  auto first = LaunchShell(2, "[ $KILN_RANK = 0 ] && exit 5; sleep 0.3; exit 6");
  INFO(first.output);
  CHECK(first.exit_code == 5);
  CHECK(Has(first, "kiln-launch: rank 0 exited with status 5; stopping the others in 30 s"));
}

TEST_CASE("kiln-launch: a rank killed by a signal stops the others after --grace-s", "[comm][launch]") {
  const auto start = std::chrono::steady_clock::now();
  auto r = LaunchShell(3, "[ $KILN_RANK = 1 ] && kill -9 $$; exec sleep 30", "/", {"--grace-s", "0.2"});
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(Has(r, "kiln-launch: rank 1 killed by signal 9 (SIGKILL); stopping the others in 0.2 s\n"));
  CHECK(Has(r, "kiln-launch: sending SIGTERM to the 2 rank(s) still running\n"));
  // Stopped by that SIGTERM, not by running out their 30 s.
  CHECK(std::chrono::steady_clock::now() - start < 20s);
}

TEST_CASE("kiln-launch: SIGTERM is passed on to every rank", "[comm][launch]") {
  kiln::testing::TempDir dir("kiln-launch");
  auto p = LaunchOptions({"-n", "3", "--", "/bin/sh", "-c",
                          "trap 'echo term > \"$0/term-$KILN_RANK\"; exit 0' TERM; "
                          "touch \"$0/up-$KILN_RANK\"; while :; do sleep 0.05; done",
                          dir.path()});
  kiln::testing::Subprocess launcher(std::move(p));
  auto all_up = [&] {
    for (int rank = 0; rank < 3; ++rank)
      if (!std::filesystem::exists(dir / ("up-" + std::to_string(rank)))) return false;
    return true;
  };
  for (int i = 0; i < 2000 && !all_up(); ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(all_up());
  launcher.Signal(SIGTERM);
  auto code = launcher.Wait(20s);
  INFO(launcher.Output());
  REQUIRE(code.has_value());
  // Every rank exited 0 on its own terms; kiln-launch still says it was stopped.
  CHECK(*code == 128 + SIGTERM);
  for (int rank = 0; rank < 3; ++rank) CHECK(std::filesystem::exists(dir / ("term-" + std::to_string(rank))));
}

TEST_CASE("kiln-launch: --tag prefixes every line with its rank", "[comm][launch]") {
  auto r = LaunchShell(2, "echo hello; echo oops >&2; printf 'no newline'", "/", {"--tag"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* line :
       {"[0] hello\n", "[1] hello\n", "[0] oops\n", "[1] oops\n", "[0] no newline\n", "[1] no newline\n"})
    CHECK(Has(r, line));
}

TEST_CASE("kiln-launch: a command that cannot run", "[comm][launch]") {
  auto r = Launch({"-n", "2", "/nonexistent/kiln-test-program"});
  INFO(r.output);
  CHECK(r.exit_code == 127);
  CHECK(Has(r, "kiln-launch: cannot run '/nonexistent/kiln-test-program': "
               "No such file or directory"));
}

TEST_CASE("kiln-launch: usage errors exit 2 and say what is wrong", "[comm][launch]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const auto& c : std::vector<Case>{
           {{}, "-n/--nproc is required"},
           {{"true"}, "-n/--nproc is required"},
           {{"-n", "2"}, "no command given"},
           {{"-n"}, "-n needs a value"},
           {{"-n", "0", "true"}, "-n '0': the number of processes must be a whole number from 1 to 64"},
           {{"--nproc=65", "true"}, "--nproc '65'"},
           {{"-n", "two", "true"}, "-n 'two'"},
           {{"-n", "2", "--grace-s", "-1", "true"}, "--grace-s '-1'"},
           {{"-n", "2", "--grace-s", "soon", "true"}, "--grace-s 'soon'"},
           {{"-n", "2", "--bogus", "true"}, "unknown option '--bogus'"},
       }) {
    auto r = Launch(c.args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(Has(r, "kiln-launch: " + c.message));
  }
  auto help = Launch({"--help"});
  CHECK(help.exit_code == 0);
  for (const char* text : {"usage: kiln-launch -n N", "KILN_COMM_ADDRESS", "MASTER_PORT", "--grace-s", "77"})
    CHECK(Has(help, text));
  // Options after the command belong to the command.
  CHECK(Launch({"-n", "1", "/bin/sh", "-c", "exit 4", "-n", "9"}).exit_code == 4);
  CHECK(Launch({"--nproc=2", "--grace-s=1.5", "--", "/bin/sh", "-c", "exit 0"}).exit_code == 0);
}

// Run by kiln-launch (below), not on its own: the ranks meet at KILN_COMM_ADDRESS.
TEST_CASE("kiln-launch rank: join the rendezvous from the environment", "[.][launch-rank]") {
  const char* address = std::getenv("KILN_COMM_ADDRESS");
  const char* rank = std::getenv("KILN_RANK");
  const char* world = std::getenv("KILN_WORLD_SIZE");
  REQUIRE(address != nullptr);
  REQUIRE(rank != nullptr);
  REQUIRE(world != nullptr);
  const int n = std::atoi(world);
  auto joined = kiln::client::comm::Rendezvous::Join(address, std::atoi(rank), n, 20s);
  REQUIRE(joined.ok());
  auto got = (*joined)->AllGather(std::string("hello from ") + rank, {}, 20s);
  REQUIRE(got.ok());
  for (int k = 0; k < n; ++k) CHECK((*got)[k].payload == "hello from " + std::to_string(k));
  CHECK((*joined)->Barrier(20s).ok());
}

TEST_CASE("kiln-launch: its ranks meet at KILN_COMM_ADDRESS", "[comm][launch]") {
  auto self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto r = Launch({"-n", "3", "--tag", self, "[launch-rank]"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(Has(r, "[2] All tests passed"));
}

}  // namespace
