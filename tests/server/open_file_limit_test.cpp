// The open-file limit (issue 15): idle connections that exhaust kilnd's descriptors must not
// leave it deaf. gRPC's own listener stopped accepting for good after one EMFILE while the
// process looked healthy; kilnd's listener (server/daemon/unix_listener.h) refuses what it
// cannot hold, says NOT_SERVING meanwhile, and serves again once connections close.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

// A raw connection to the unix socket that says nothing: what an idle client costs kilnd.
int ConnectIdle(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A channel with its own connection (not shared through gRPC's global subchannel pool).
std::shared_ptr<grpc::Channel> OwnChannel(const DaemonProcess& d) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(d.target(), grpc::InsecureChannelCredentials(), args);
}

HealthCheckResponse::ServingStatus Health(grpc::health::v1::Health::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckResponse response;
  auto s = stub.Check(&ctx, HealthCheckRequest(), &response);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return response.status();
}

}  // namespace

TEST_CASE("kilnd raises its soft open-file limit to the hard one and logs it", "[fds]") {
  TempDir dir;
  // prlimit execs kilnd (same pid) with a soft limit of 256 under a hard one of 4096.
  Subprocess kilnd(
      {.argv = {"/usr/bin/prlimit", "--nofile=256:4096", KilndPath(), "--socket", dir.path() + "/run/kilnd.sock",
                "--cache-dir", dir.path() + "/cache", "--kernels-dir", KernelsDir()}});
  for (int i = 0; i < 300 && kilnd.Output().find("serving on") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE_THAT(kilnd.Output(), Catch::Contains("serving on"));
  CHECK_THAT(kilnd.Output(), Catch::Contains("open-file limit 4096 (hard 4096)"));
  std::ifstream limits("/proc/" + std::to_string(kilnd.pid()) + "/limits");
  std::string line;
  bool seen = false;
  while (std::getline(limits, line))
    if (line.rfind("Max open files", 0) == 0) {
      seen = true;
      CHECK_THAT(line, Catch::Matches("Max open files +4096 +4096 +files *"));
    }
  CHECK(seen);
  kilnd.Signal(SIGTERM);
  CHECK(kilnd.Wait(std::chrono::seconds(30)) == 0);
}

TEST_CASE("kilnd serves again after idle connections exhaust its open-file limit", "[fds]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  REQUIRE(
      Run({.argv = {"/usr/bin/prlimit", "--pid", std::to_string(d.process().pid()), "--nofile=128:128"}}).exit_code ==
      0);

  // A client connected before the exhaustion sees the health service turn NOT_SERVING.
  auto watcher_channel = OwnChannel(d);
  auto health = grpc::health::v1::Health::NewStub(watcher_channel);
  REQUIRE(Health(*health) == HealthCheckResponse::SERVING);

  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = ConnectIdle(d.socket());
    if (fd >= 0) idle.push_back(fd);
  }
  INFO(idle.size() << " idle connections");
  bool not_serving = false;
  for (int i = 0; i < 50 && !not_serving; ++i) {
    not_serving = Health(*health) == HealthCheckResponse::NOT_SERVING;
    if (!not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(not_serving);
  CHECK_THAT(d.Log(), Catch::Contains("open-file limit reached"));

  for (int fd : idle) ::close(fd);
  // A new connection, opened after the others closed, is served.
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    Rpc rpc(OwnChannel(d));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    kiln::v1::GetStatsRequest request;
    kiln::v1::CacheStats stats;
    served = rpc.cache->GetStats(&ctx, request, &stats).ok();
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(served);
  // SERVING again (the health stub's own connection may need a moment to be made again).
  bool serving = false;
  for (int i = 0; i < 50 && !serving; ++i) {
    serving = Health(*health) == HealthCheckResponse::SERVING;
    if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(serving);
  CHECK_THAT(d.Log(), Catch::Contains("accepting connections on"));
  CHECK(d.process().running());
}
