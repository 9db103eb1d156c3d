// kilnd as a process: one daemon per socket and port, clean shutdown, socket permissions,
// bad flags, and read-only inputs with an unwritable $HOME.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/free_port.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {
const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};

}  // namespace

TEST_CASE("a second daemon on the same socket refuses to start and the first keeps serving", "[daemon]") {
  TempDir dir;
  DaemonProcess first({.root = dir.path()});
  DaemonProcess second({.root = dir.path(), .cache_dir = dir / "other-cache", .wait_ready = false});
  auto code = second.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK_THAT(second.Log(), Catch::Contains("already serves"));
  CHECK_THAT(second.Log(), Catch::Contains(std::to_string(first.process().pid())));
  Rpc rpc(first.channel());
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
}

TEST_CASE("a second daemon on the same TCP port refuses to start", "[daemon]") {
  TempDir dir;
  std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  // Plaintext: this test is about the port, not its security (tls_listen_test.cpp).
  DaemonProcess first({.root = dir / "a", .extra_args = {"--listen", listen, "--insecure"}});
  DaemonProcess second({.root = dir / "b", .extra_args = {"--listen", listen, "--insecure"}, .wait_ready = false});
  auto code = second.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK_THAT(second.Log(), Catch::Contains(listen));
  // The first answers over TCP.
  Rpc rpc(grpc::CreateChannel(listen, grpc::InsecureChannelCredentials()));
  CHECK(Stats(rpc).cache_enabled());
}

TEST_CASE("SIGTERM shuts down cleanly: exit 0, socket removed, a new daemon can start", "[daemon]") {
  TempDir dir;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc rpc(d.channel());
    REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
    CHECK(d.Terminate() == 0);
    CHECK_FALSE(fs::exists(d.socket()));
    CHECK_THAT(d.Log(), Catch::Contains("kilnd stopped"));
  }
  DaemonProcess again({.root = dir.path()});
  Rpc rpc(again.channel());
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_DISK);
}

TEST_CASE("SIGTERM during a compile lets it finish or abandons it, never a half entry", "[daemon]") {
  TempDir dir;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc rpc(d.channel());
    std::thread client([&] { Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", "12288"}})); });
    for (int i = 0; i < 500 && Jobs(rpc).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CHECK(d.Terminate() == 0);
    client.join();
  }
  DaemonProcess again({.root = dir.path()});
  Rpc rpc(again.channel());
  CHECK(Verify(rpc).problems_size() == 0);
}

TEST_CASE("the socket folder Kiln creates is 0700 and the socket is 0660", "[daemon]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .socket = dir / "fresh/kilnd.sock"});
  struct stat st {};
  REQUIRE(stat((dir / "fresh").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(stat(d.socket().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0660);
  CHECK(fs::exists(d.socket() + ".lock"));
}

TEST_CASE("bad flags stop kilnd with exit code 2 and say what was wrong", "[daemon]") {
  auto r = Run({.argv = {KilndPath(), "--max-jobs", "lots"}});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--max-jobs \"lots\""));
  auto help = Run({.argv = {KilndPath(), "--help"}});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("KILN_CACHE_DIR"));
  auto version = Run({.argv = {KilndPath(), "--version"}});
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.output, Catch::Contains("kilnd "));
}

TEST_CASE("an unwritable cache folder is a clear start-up error", "[daemon]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .cache_dir = "/proc/kiln-cannot-be-here", .wait_ready = false});
  auto code = d.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK_THAT(d.Log(), Catch::Contains("/proc/kiln-cannot-be-here"));
}

TEST_CASE("read-only kernels, unwritable $HOME: overrides work and nothing is written outside the workspaces",
          "[daemon]") {
  TempDir dir;
  // Root ignores permissions; the daemon runs as an unprivileged user so read-only means it.
  const int nobody = 65534;
  std::string kernels = dir / "kernels", home = dir / "home", work = dir / "work";
  fs::copy(KernelsDir(), kernels, fs::copy_options::recursive);
  fs::create_directories(home);
  fs::create_directories(work);
  if (geteuid() == 0) REQUIRE(chown(work.c_str(), nobody, nobody) == 0);
  fs::permissions(dir.path(), fs::perms::others_exec | fs::perms::others_read, fs::perm_options::add);
  for (auto& e : fs::recursive_directory_iterator(kernels))
    fs::permissions(e.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
  fs::permissions(kernels, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  fs::permissions(home, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  auto kernels_before = SnapshotTree(kernels);
  {
    DaemonProcess d({.root = work,
                     .kernels_dir = kernels,
                     .env = {{"HOME", home}, {"XDG_CACHE_HOME", home + "/.cache"}},
                     .run_as_uid = geteuid() == 0 ? nobody : -1});
    Rpc rpc(d.channel());
    auto r = Get(rpc, OpRequest("fused_add_rmsnorm", {{"dtype", "bf16"}, {"hidden", "2048"}}));
    INFO(r.status.error_message() << "\n" << d.Log());
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
    CHECK(fs::exists(d.gen_dir() + "/fused_add_rmsnorm_bf16_h2048"));
  }
  CHECK(SnapshotTree(kernels) == kernels_before);
  CHECK(fs::is_empty(home));
}
