// The client in daemon mode when kilnd is not there (auto mode would compile in-process:
// embedded_engine_test.cpp): every request fails at once (no hang) with UNAVAILABLE,
// naming the socket and saying how to start kilnd or point at another one; and a TCP target
// that is neither TLS nor explicitly plaintext, refused naming the settings.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/c_abi.h"
#include "kiln/client.h"
#include "kiln/kernel.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "tests/support/stale_socket.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::StatusCode;

struct UseSocket {
  explicit UseSocket(const std::string& socket, bool insecure = false) {
    kiln::ClientOptions options;
    options.socket = socket;
    options.insecure = insecure;  // a TCP target is TLS or, by name, plaintext
    options.mode = kiln::ClientMode::kDaemon;
    REQUIRE(kiln::Configure(options).ok());
  }
  ~UseSocket() { kiln::Configure(kiln::ClientOptions{}); }
};

kiln::OpRequest Rmsnorm() { return {"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}}; }

TEST_CASE("no socket file: UNAVAILABLE naming the socket and how to start kilnd", "[client][rpc]") {
  kiln::testing::TempDir dir("kiln-client");
  const std::string socket = dir / "kilnd.sock";
  UseSocket use(socket);
  CHECK(kiln::DaemonTarget() == "unix:" + socket);

  const auto before = kiln::GetClientStats();
  auto info = kiln::Prefetch(Rmsnorm(), "sm_90a");
  REQUIRE_FALSE(info.ok());
  const std::string& m = info.status().message();
  INFO(m);
  CHECK(info.status().code() == StatusCode::kUnavailable);
  CHECK(m.find("GetKernel op rmsnorm {dtype=bf16, hidden=4096} for sm_90a") == 0);
  CHECK(m.find("kilnd is not reachable at unix:" + socket) != std::string::npos);
  CHECK(m.find("no socket file " + socket) != std::string::npos);
  CHECK(m.find("kilnd --socket " + socket) != std::string::npos);
  CHECK(m.find("KILN_SOCKET") != std::string::npos);
  const auto after = kiln::GetClientStats();
  CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + 1);
  CHECK(after.rpc_failures == before.rpc_failures + 1);

  auto ping = kiln::Ping();
  CHECK(ping.code() == StatusCode::kUnavailable);
  CHECK(ping.message().find("no socket file") != std::string::npos);
}

TEST_CASE("a stale socket file nobody listens on is explained as such", "[client][rpc]") {
  kiln::testing::TempDir dir("kiln-client");
  const std::string socket = dir / "kilnd.sock";
  kiln::testing::MakeStaleSocketFile(socket);  // the file stays, nobody listens

  UseSocket use(socket);
  auto info = kiln::Prefetch(Rmsnorm(), "sm_90");
  REQUIRE_FALSE(info.ok());
  INFO(info.status().message());
  CHECK(info.status().code() == StatusCode::kUnavailable);
  CHECK(info.status().message().find("exists but nobody answers") != std::string::npos);
}

TEST_CASE("a TCP target nobody listens on is UNAVAILABLE too", "[client][rpc]") {
  UseSocket use("localhost:1", /*insecure=*/true);
  CHECK(kiln::DaemonTarget() == "localhost:1");
  auto info = kiln::Prefetch(Rmsnorm(), "sm_90");
  REQUIRE_FALSE(info.ok());
  INFO(info.status().message());
  CHECK(info.status().code() == StatusCode::kUnavailable);
  CHECK(info.status().message().find("kilnd is not reachable at localhost:1") != std::string::npos);
}

TEST_CASE("KILN_SOCKET chooses the socket when none is configured", "[client][rpc]") {
  kiln::testing::TempDir dir("kiln-client");
  const std::string socket = dir / "from-env.sock";
  setenv("KILN_SOCKET", socket.c_str(), 1);
  REQUIRE(kiln::Configure(kiln::ClientOptions{}).ok());
  CHECK(kiln::DaemonTarget() == "unix:" + socket);
  unsetenv("KILN_SOCKET");
  kiln::Configure(kiln::ClientOptions{});
}

TEST_CASE("kiln_connect reports an absent daemon through the C ABI", "[client][rpc][capi]") {
  kiln::testing::TempDir dir("kiln-client");
  const std::string socket = dir / "kilnd.sock";
  CHECK(kiln_connect(socket.c_str(), 2000) == KILN_ERROR_UNAVAILABLE);
  std::string error = kiln_last_error();
  INFO(error);
  CHECK(error.find("kilnd is not reachable at unix:" + socket) != std::string::npos);
  CHECK(kiln_set_socket(nullptr) == KILN_OK);
}

TEST_CASE("Configure refuses a non-positive timeout", "[client][rpc]") {
  kiln::ClientOptions options;
  options.rpc_timeout = std::chrono::milliseconds(0);
  auto status = kiln::Configure(options);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message().find("rpc_timeout must be positive") != std::string::npos);
}

TEST_CASE("raw sources are described by name in errors", "[client][rpc]") {
  kiln::testing::TempDir dir("kiln-client");
  UseSocket use(dir / "kilnd.sock");
  kiln::SourceRequest source{"axpy", "extern \"C\" __global__ void axpy() {}", {"axpy"}, {}, {}};
  auto info = kiln::Prefetch(source, "sm_90a");
  REQUIRE_FALSE(info.ok());
  CHECK(info.status().message().rfind("GetKernel source 'axpy' for sm_90a: ", 0) == 0);
  auto no_arch = kiln::Prefetch(source, "");
  CHECK(no_arch.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace

TEST_CASE("a TCP target needs TLS or insecure and Configure names the settings", "[client][rpc][tls]") {
  kiln::testing::TempDir dir("kiln-client");
  for (const char* name : {"KILN_TLS_CA", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_INSECURE"}) unsetenv(name);
  kiln::ClientOptions options;
  options.socket = "localhost:7070";
  auto neither = kiln::Configure(options);
  INFO(neither.message());
  CHECK(neither.code() == StatusCode::kInvalidArgument);
  CHECK(neither.message().find("TCP target localhost:7070 needs TLS or an explicit plaintext switch") == 0);
  CHECK(neither.message().find("ClientOptions::tls_ca") != std::string::npos);
  CHECK(neither.message().find("KILN_INSECURE=1") != std::string::npos);
  CHECK(kiln::DaemonTarget() != "localhost:7070");  // the settings stay as they were

  options.tls_ca = dir / "missing.pem";
  auto unreadable = kiln::Configure(options);
  CHECK(unreadable.code() == StatusCode::kInvalidArgument);
  CHECK(unreadable.message().find("\"" + dir / "missing.pem" + "\" cannot be read") != std::string::npos);

  kiln::testing::WriteFile(dir / "junk.pem", "not PEM\n");
  options.tls_ca = dir / "junk.pem";
  auto junk = kiln::Configure(options);
  CHECK(junk.message().find("holds no PEM CERTIFICATE block") != std::string::npos);

  options.tls_ca.clear();
  options.insecure = true;
  CHECK(kiln::Configure(options).ok());
  CHECK(kiln::DaemonTarget() == "localhost:7070");

  // A unix socket ignores the TLS settings: its file permissions protect it.
  options.socket = dir / "kilnd.sock";
  options.insecure = false;
  options.tls_ca = dir / "missing.pem";
  CHECK(kiln::Configure(options).ok());
  kiln::Configure(kiln::ClientOptions{});
}

TEST_CASE("a connection that cannot be secured fails every call with its reason", "[client][rpc][tls]") {
  for (const char* name : {"KILN_TLS_CA", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_INSECURE"}) unsetenv(name);
  // What the process-wide default connection is when KILN_SOCKET names a TCP target and no
  // TLS variable is set: its channel fails each call at once, and Explain says why.
  kiln::client::DaemonConnection connection("localhost:1");
  REQUIRE_FALSE(connection.setup_error().ok());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  kiln::v1::CacheStats stats;
  grpc::Status status =
      kiln::v1::CacheService::NewStub(connection.channel())->GetStats(&context, kiln::v1::GetStatsRequest(), &stats);
  REQUIRE_FALSE(status.ok());
  kiln::Status explained = connection.Explain(status, "GetStats");
  INFO(explained.message());
  CHECK(explained.code() == StatusCode::kInvalidArgument);
  CHECK(explained.message().find("GetStats: TCP target localhost:1 needs TLS or an explicit plaintext switch") == 0);

  setenv("KILN_INSECURE", "1", 1);  // the variables apply when no setting is given
  kiln::client::DaemonConnection insecure("localhost:1");
  CHECK(insecure.setup_error().ok());
  unsetenv("KILN_INSECURE");
  kiln::client::DaemonConnection given("localhost:1", {.insecure = true});
  CHECK(given.setup_error().ok());
}
