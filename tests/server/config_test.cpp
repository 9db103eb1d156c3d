// DaemonConfig: flags over variables over defaults, and a clear error for every bad value.
#include <stdlib.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "server/config/daemon_config.h"
#include "server/config/engine_options_from_config.h"
#include "server/tiers/redis_url.h"
#include "tests/support/temp_dir.h"

using kiln::server::LoadDaemonConfig;

namespace {
// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }
  const char* name_;
  std::string old_;
  bool had_ = false;
};
const std::string kKernels = KILN_TEST_KERNELS_DIR;
}  // namespace

TEST_CASE("defaults need no flags", "[config]") {
  auto c = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(c.ok());
  CHECK(!c->socket.empty());
  CHECK(c->socket[0] == '/');
  CHECK(c->gen_dir == c->cache_dir + "/generated");
  CHECK(c->listen.empty());
  CHECK(!c->disable_jit);
  CHECK(!c->no_cache);
  CHECK(c->arch_list.empty());
  CHECK(c->max_jobs >= 1);
  CHECK(c->compile_memory_mb >= 512);
  CHECK(c->log_level == "info");
}

TEST_CASE("a flag wins over its environment variable, which wins over the default", "[config]") {
  ScopedEnv socket("KILN_SOCKET", "/tmp/from-env.sock");
  ScopedEnv jobs("KILN_MAX_JOBS", "3");
  ScopedEnv jit("KILN_DISABLE_JIT", "1");
  ScopedEnv arch("KILN_ARCH_LIST", "sm_80 sm_90a");
  auto c = LoadDaemonConfig({"--kernels-dir", kKernels, "--socket", "/tmp/from-flag.sock"});
  REQUIRE(c.ok());
  CHECK(c->socket == "/tmp/from-flag.sock");
  CHECK(c->max_jobs == 3);
  CHECK(c->disable_jit);
  CHECK(c->arch_list == std::vector<std::string>{"sm_80", "sm_90a"});
  auto d = LoadDaemonConfig({"--kernels-dir=" + kKernels, "--max-jobs=5", "--disable-jit=false"});
  REQUIRE(d.ok());
  CHECK(d->max_jobs == 5);
  CHECK(!d->disable_jit);
}

TEST_CASE("bad flags and variables are refused naming what was wrong", "[config]") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const auto& c : std::vector<Case>{
           {{"--bogus"}, "unknown argument \"--bogus\""},
           {{"--max-jobs", "0"}, "--max-jobs \"0\" must be an integer from 1"},
           {{"--max-jobs", "two"}, "--max-jobs \"two\""},
           {{"--socket", "relative.sock"}, "must be an absolute path"},
           {{"--listen", "nohostport"}, "must be HOST:PORT"},
           {{"--listen", "localhost:99999"}, "port"},
           {{"--metrics-listen", "9464"}, "--metrics-listen \"9464\" must be HOST:PORT"},
           {{"--metrics-listen", ":9464"}, "must be HOST:PORT"},
           {{"--metrics-listen", "127.0.0.1:0"}, "--metrics-listen port"},
           {{"--log-level", "loud"}, "\"loud\" is not one of"},
           {{"--kernels-dir", "/nonexistent/kernels"}, "has no include/ folder"},
           {{"--cuda-home", "/nonexistent"}, "has no include/cuda.h"},
           {{"--cache-max-mb"}, "--cache-max-mb needs a value"},
       }) {
    std::vector<std::string> args = {"--kernels-dir", kKernels};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = LoadDaemonConfig(args);
    INFO(c.expect);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.expect));
  }
  ScopedEnv bad("KILN_NO_CACHE", "maybe");
  auto r = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("KILN_NO_CACHE=maybe is not a boolean"));
}

TEST_CASE("the engine gets its settings from the daemon's, and only those", "[config]") {
  auto c = LoadDaemonConfig({"--kernels-dir",
                             kKernels,
                             "--cache-dir",
                             "/tmp/kiln-options/cache",
                             "--gen-dir",
                             "/tmp/kiln-options/gen",
                             "--disable-jit",
                             "--no-cache",
                             "--arch",
                             "sm_80 sm_90a",
                             "--max-jobs",
                             "3",
                             "--compile-memory-mb",
                             "1024",
                             "--cache-max-mb",
                             "77",
                             "--job-timeout-s",
                             "42",
                             "--shutdown-grace-s",
                             "5",
                             "--log-level",
                             "debug"});
  REQUIRE(c.ok());
  const kiln::server::EngineOptions o = kiln::server::EngineOptionsFromConfig(*c);
  CHECK(o.cache_dir == "/tmp/kiln-options/cache");
  CHECK(o.gen_dir == "/tmp/kiln-options/gen");
  CHECK(o.kernels_dir == kKernels);
  CHECK(o.cuda_include_dir == c->cuda_home + "/include");
  CHECK(o.disable_jit);
  CHECK(o.no_cache);
  CHECK(o.arch_list == std::vector<std::string>{"sm_80", "sm_90a"});
  CHECK(o.max_jobs == 3);
  CHECK(o.compile_memory_mb == 1024);
  CHECK(o.cache_max_mb == 77);
  CHECK(o.job_timeout_s == 42);

  auto d = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(d.ok());
  const kiln::server::EngineOptions defaults = kiln::server::EngineOptionsFromConfig(*d);
  CHECK(!defaults.disable_jit);
  CHECK(!defaults.no_cache);
  CHECK(defaults.arch_list.empty());
  CHECK(defaults.max_jobs == d->max_jobs);
  CHECK(defaults.compile_memory_mb == d->compile_memory_mb);
  CHECK(defaults.cache_max_mb == d->cache_max_mb);
  CHECK(defaults.job_timeout_s == d->job_timeout_s);
}

TEST_CASE("an embedded engine's load reads only the engine's settings and refuses kilnd's own flags", "[config]") {
  // A client's variables that would stop kilnd (a TLS file that does not exist, a bad port).
  ScopedEnv cert("KILN_TLS_CERT", "/nonexistent/client.pem");
  ScopedEnv listen("KILN_LISTEN", "not a port");
  ScopedEnv jobs("KILN_MAX_JOBS", "3");
  REQUIRE_FALSE(LoadDaemonConfig({}).ok());
  auto engine = LoadDaemonConfig({}, kiln::server::ConfigScope::kEngine);
  INFO(engine.status().ToString());
  REQUIRE(engine.ok());
  CHECK(engine->max_jobs == 3);  // an engine setting is read
  CHECK(engine->listen.empty());
  CHECK(engine->tls_cert.empty());
  auto flag = LoadDaemonConfig({"--socket", "/tmp/x.sock"}, kiln::server::ConfigScope::kEngine);
  REQUIRE_FALSE(flag.ok());
  CHECK_THAT(std::string(flag.status().message()), Catch::Contains("--socket is kilnd's own setting"));
  // The table marks them: every daemon-only flag is one kilnd takes, and the engine's are not.
  CHECK(kiln::server::IsDaemonOnlyFlag("--tuning-store"));
  CHECK(kiln::server::IsDaemonOnlyFlag("--insecure"));
  CHECK_FALSE(kiln::server::IsDaemonOnlyFlag("--cache-dir"));
  CHECK_FALSE(kiln::server::IsDaemonOnlyFlag("--no-such-flag"));
}

TEST_CASE("every flag has an environment variable in the one table", "[config]") {
  for (const auto& f : kiln::server::FlagTable()) {
    CHECK(std::string(f.flag).rfind("--", 0) == 0);
    CHECK(std::string(f.env).rfind("KILN_", 0) == 0);
    CHECK(std::string(f.help).size() > 10);
  }
  CHECK(kiln::server::FlagTable().size() >= 13);
}

TEST_CASE("docs/configuration.md holds the flag table exactly as the daemon defines it", "[config][docs]") {
  std::ifstream in(std::string(KILN_TEST_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream doc;
  doc << in.rdbuf();
  INFO("regenerate with: kilnd --print-flag-table");
  CHECK_THAT(doc.str(), Catch::Contains(kiln::server::FlagTableMarkdown()));
}

TEST_CASE("kilnd --metrics-listen: off by default and HOST:PORT from the flag or KILN_METRICS_LISTEN", "[config]") {
  auto off = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(off.ok());
  CHECK(off->metrics_listen.empty());
  auto on = LoadDaemonConfig({"--kernels-dir", kKernels, "--metrics-listen", "127.0.0.1:9464"});
  REQUIRE(on.ok());
  CHECK(on->metrics_listen == "127.0.0.1:9464");
  ScopedEnv env("KILN_METRICS_LISTEN", "[::1]:9465");
  auto from_env = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(from_env.ok());
  CHECK(from_env->metrics_listen == "[::1]:9465");
  ScopedEnv bad("KILN_METRICS_LISTEN", "localhost");
  auto r = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("KILN_METRICS_LISTEN \"localhost\" must be HOST:PORT"));
}

TEST_CASE("kilnd --tuning-store: off by default, an absolute file path in an existing folder", "[config][tuning]") {
  kiln::testing::TempDir dir;
  auto off = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(off.ok());
  CHECK(off->tuning_store.empty());
  auto on = LoadDaemonConfig({"--kernels-dir", kKernels, "--tuning-store", dir / "tuning.db"});
  REQUIRE(on.ok());
  CHECK(on->tuning_store == dir / "tuning.db");
  {
    ScopedEnv env("KILN_TUNING_STORE", (dir / "from-env.db").c_str());
    auto from_env = LoadDaemonConfig({"--kernels-dir", kKernels});
    REQUIRE(from_env.ok());
    CHECK(from_env->tuning_store == dir / "from-env.db");
  }
  for (const auto& [value, expect] : std::vector<std::pair<std::string, std::string>>{
           {"relative.db", "--tuning-store \"relative.db\" must be an absolute path"},
           {dir.path(), "exists and is not a file"},
           {dir / "missing/tuning.db", "its folder " + (dir / "missing") + " does not exist"}}) {
    auto r = LoadDaemonConfig({"--kernels-dir", kKernels, "--tuning-store", value});
    INFO(value);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(expect));
  }
}

TEST_CASE("kilnd --tactic-blocklist: read and checked at start, a bad line names file:line", "[config][tuning]") {
  kiln::testing::TempDir dir;
  kiln::testing::WriteFile(dir / "good", "# known hangs\ngemm t128x256x64s4g8 gpu=H200\n");
  auto good = LoadDaemonConfig({"--kernels-dir", kKernels, "--tactic-blocklist", dir / "good"});
  REQUIRE(good.ok());
  REQUIRE(good->blocked_tactics.size() == 1);
  CHECK(good->blocked_tactics[0].source() == dir / "good:2");
  CHECK(good->tactic_blocklist == dir / "good");

  kiln::testing::WriteFile(dir / "bad", "gemm t128x256x64s4g8\ngemm t128x256x64s4g8 H200\n");
  auto bad = LoadDaemonConfig({"--kernels-dir", kKernels, "--tactic-blocklist", dir / "bad"});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::StartsWith("--tactic-blocklist " + (dir / "bad") + ":2: 'gemm t128x256x64s4g8 H200'"));

  ScopedEnv env("KILN_DAEMON_TACTIC_BLOCKLIST", (dir / "missing").c_str());
  auto missing = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()),
             Catch::Contains("KILN_DAEMON_TACTIC_BLOCKLIST " + (dir / "missing") + ": cannot read the file"));
}

TEST_CASE("kilnd --prebuilt is repeatable and KILN_PREBUILT is a colon-separated list of existing absolute folders",
          "[config]") {
  kiln::testing::TempDir dir;
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  auto c = LoadDaemonConfig(
      {"--kernels-dir", kKernels, "--prebuilt", dir / "a", "--prebuilt=" + (dir / "b"), "--prebuilt-ignore-version"});
  REQUIRE(c.ok());
  CHECK(c->prebuilt_dirs == std::vector<std::string>{dir / "a", dir / "b"});
  CHECK(c->prebuilt_ignore_version);
  const kiln::server::EngineOptions o = kiln::server::EngineOptionsFromConfig(*c);
  CHECK(o.prebuilt_dirs == c->prebuilt_dirs);
  CHECK(o.prebuilt_ignore_version);
  {
    ScopedEnv env("KILN_PREBUILT", (dir / "b" + ":" + dir / "a").c_str());
    auto e = LoadDaemonConfig({"--kernels-dir", kKernels});
    REQUIRE(e.ok());
    CHECK(e->prebuilt_dirs == std::vector<std::string>{dir / "b", dir / "a"});
    CHECK_FALSE(e->prebuilt_ignore_version);
    auto flag = LoadDaemonConfig({"--kernels-dir", kKernels, "--prebuilt", dir / "a"});  // the flag wins
    REQUIRE(flag.ok());
    CHECK(flag->prebuilt_dirs == std::vector<std::string>{dir / "a"});
  }
  auto relative = LoadDaemonConfig({"--kernels-dir", kKernels, "--prebuilt", "bundles/a"});
  REQUIRE_FALSE(relative.ok());
  CHECK_THAT(std::string(relative.status().message()), Catch::Contains("--prebuilt \"bundles/a\" must be an absolute"));
  auto missing = LoadDaemonConfig({"--kernels-dir", kKernels, "--prebuilt", dir / "nope"});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("is not a folder"));
  auto bad_bool = LoadDaemonConfig({"--kernels-dir", kKernels, "--prebuilt-ignore-version=maybe"});
  REQUIRE_FALSE(bad_bool.ok());
  CHECK_THAT(std::string(bad_bool.status().message()), Catch::Contains("not a boolean"));
}

TEST_CASE("kilnd --artifact-url takes an http or https URL and its settings have ranges", "[config]") {
  auto c = LoadDaemonConfig({"--kernels-dir", kKernels, "--artifact-url", "https://mirror.example/kiln/",
                             "--artifact-jobs", "8", "--artifact-timeout-s", "5", "--artifact-retries", "0",
                             "--offline", "--artifact-log-level", "debug"});
  REQUIRE(c.ok());
  CHECK(c->artifact_url == "https://mirror.example/kiln");  // no trailing '/'
  CHECK(c->artifact_jobs == 8);
  CHECK(c->artifact_timeout_s == 5);
  CHECK(c->artifact_retries == 0);
  CHECK(c->offline);
  CHECK(c->artifact_log_level == "debug");
  CHECK_FALSE(c->artifact_skip_checksum);
  const kiln::server::EngineOptions o = kiln::server::EngineOptionsFromConfig(*c);
  CHECK(o.artifact_url == c->artifact_url);
  CHECK(o.artifact_jobs == 8);
  CHECK(o.offline);
  struct Bad {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Bad& b :
       {Bad{{"--artifact-url", "ftp://x/y"}, "must be an http:// or https:// URL"},
        Bad{{"--artifact-url", "/srv/kiln"}, "must be an http:// or https:// URL"},
        Bad{{"--artifact-jobs", "0"}, "--artifact-jobs \"0\" must be an integer from 1 to 64"},
        Bad{{"--artifact-retries", "11"}, "from 0 to 10"}, Bad{{"--artifact-log-level", "loud"}, "is not one of"},
        Bad{{"--offline=perhaps"}, "not a boolean"}}) {
    std::vector<std::string> args = {"--kernels-dir", kKernels};
    args.insert(args.end(), b.args.begin(), b.args.end());
    auto bad = LoadDaemonConfig(args);
    INFO(b.args[0]);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains(b.says));
  }
}

TEST_CASE("kilnd --remote-cache takes a redis URL and its settings have ranges", "[config]") {
  auto c = LoadDaemonConfig({"--kernels-dir", kKernels, "--remote-cache", "redis://cache.internal:6380/2",
                             "--remote-cache-timeout-ms", "250", "--remote-cache-lease-ms", "5000",
                             "--remote-cache-queue", "8"});
  REQUIRE(c.ok());
  CHECK(c->remote_cache_url == "redis://cache.internal:6380/2");
  CHECK(c->remote_cache_timeout_ms == 250);
  CHECK(c->remote_cache_lease_ms == 5000);
  CHECK(c->remote_cache_queue == 8);
  const kiln::server::EngineOptions o = kiln::server::EngineOptionsFromConfig(*c);
  CHECK(o.remote_cache_url == c->remote_cache_url);
  CHECK(o.remote_cache_timeout_ms == 250);
  CHECK(o.remote_cache_lease_ms == 5000);
  CHECK(o.remote_cache_queue == 8);

  auto d = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE(d.ok());
  CHECK(d->remote_cache_url.empty());
  CHECK(d->remote_cache_timeout_ms == 500);
  CHECK(d->remote_cache_lease_ms == 30000);
  CHECK(d->remote_cache_queue == 64);
  {
    ScopedEnv env("KILN_REMOTE_CACHE", "redis://10.0.0.7");
    auto e = LoadDaemonConfig({"--kernels-dir", kKernels});
    REQUIRE(e.ok());
    CHECK(e->remote_cache_url == "redis://10.0.0.7");
    auto f = LoadDaemonConfig({"--kernels-dir", kKernels, "--remote-cache", "redis://127.0.0.1:7000"});
    REQUIRE(f.ok());
    CHECK(f->remote_cache_url == "redis://127.0.0.1:7000");  // the flag wins
  }
  kiln::server::RedisUrl url;
  CHECK(kiln::server::ParseRedisUrl("redis://cache.internal", &url).empty());
  CHECK(url.str() == "redis://cache.internal:6379/0");

  struct Bad {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Bad& b :
       {Bad{{"--remote-cache", "http://cache:6379"},
            "--remote-cache \"http://cache:6379\" must be a redis://HOST:PORT"},
        Bad{{"--remote-cache", "cache:6379"}, "must be a redis://HOST:PORT[/DB] URL"},
        Bad{{"--remote-cache", "redis://"}, "names no host"},
        Bad{{"--remote-cache", "redis://cache:0"}, "names the port \"0\""},
        Bad{{"--remote-cache", "redis://cache:63x9"}, "names the port \"63x9\""},
        Bad{{"--remote-cache", "redis://cache:6379/x"}, "names the database \"x\""},
        Bad{{"--remote-cache", "redis://user:secret@cache:6379"}, "holds credentials"},
        Bad{{"--remote-cache", "rediss://cache:6379"}, "uses TLS"},
        Bad{{"--remote-cache-timeout-ms", "5"}, "--remote-cache-timeout-ms \"5\" must be an integer from 10 to 60000"},
        Bad{{"--remote-cache-lease-ms", "100"}, "from 300 to 3600000"},
        Bad{{"--remote-cache-queue", "0"}, "from 1 to 4096"}}) {
    std::vector<std::string> args = {"--kernels-dir", kKernels};
    args.insert(args.end(), b.args.begin(), b.args.end());
    auto bad = LoadDaemonConfig(args);
    INFO(b.args[0] << " " << b.args[1]);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains(b.says));
  }
  ScopedEnv env("KILN_REMOTE_CACHE", "memcached://x");
  auto from_env = LoadDaemonConfig({"--kernels-dir", kKernels});
  REQUIRE_FALSE(from_env.ok());
  CHECK_THAT(std::string(from_env.status().message()), Catch::Contains("KILN_REMOTE_CACHE \"memcached://x\""));
}

TEST_CASE("kilnd --listen needs TLS files or --insecure and TLS flags need --listen", "[config][tls]") {
  kiln::testing::TempDir dir;
  // The config checks the files' PEM form; a real handshake is tls_listen_test.cpp's.
  const std::string cert = dir / "server.pem", key = dir / "server.key", ca = dir / "ca.pem";
  kiln::testing::WriteFile(cert, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  kiln::testing::WriteFile(key, "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n");
  kiln::testing::WriteFile(ca, "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n");
  kiln::testing::WriteFile(dir / "junk.pem", "not a certificate\n");

  auto tls = LoadDaemonConfig(
      {"--kernels-dir", kKernels, "--listen", "127.0.0.1:7070", "--tls-cert", cert, "--tls-key", key});
  REQUIRE(tls.ok());
  CHECK(tls->tls_cert == cert);
  CHECK(tls->tls_key == key);
  CHECK(tls->tls_cert_pem.find("MIIB") != std::string::npos);
  CHECK(tls->tls_key_pem.find("MHc") != std::string::npos);
  CHECK(tls->tls_client_ca.empty());
  CHECK_FALSE(tls->insecure);

  auto mtls = LoadDaemonConfig({"--kernels-dir", kKernels, "--listen", "127.0.0.1:7070", "--tls-cert", cert,
                                "--tls-key", key, "--tls-client-ca", ca});
  REQUIRE(mtls.ok());
  CHECK(mtls->tls_client_ca_pem.find("MIIC") != std::string::npos);

  auto plain = LoadDaemonConfig({"--kernels-dir", kKernels, "--listen", "127.0.0.1:7070", "--insecure"});
  REQUIRE(plain.ok());
  CHECK(plain->insecure);
  {
    ScopedEnv listen("KILN_LISTEN", "127.0.0.1:7071");
    ScopedEnv env_cert("KILN_TLS_CERT", cert.c_str());
    ScopedEnv env_key("KILN_TLS_KEY", key.c_str());
    ScopedEnv env_ca("KILN_TLS_CLIENT_CA", ca.c_str());
    auto from_env = LoadDaemonConfig({"--kernels-dir", kKernels});
    REQUIRE(from_env.ok());
    CHECK(from_env->tls_cert == cert);
    CHECK(from_env->tls_client_ca == ca);
  }
  {
    ScopedEnv listen("KILN_LISTEN", "127.0.0.1:7071");
    ScopedEnv insecure("KILN_INSECURE", "1");
    auto from_env = LoadDaemonConfig({"--kernels-dir", kKernels});
    REQUIRE(from_env.ok());
    CHECK(from_env->insecure);
  }

  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"--listen", "127.0.0.1:7070"},
            "--listen 127.0.0.1:7070 would serve TCP unauthenticated: give --tls-cert FILE and --tls-key FILE"},
           {{"--listen", "127.0.0.1:7070"}, "or --insecure (KILN_INSECURE=1)"},
           {{"--listen", "127.0.0.1:7070", "--tls-cert", cert}, "--tls-cert needs --tls-cert FILE and --tls-key FILE"},
           {{"--listen", "127.0.0.1:7070", "--tls-key", key}, "--tls-key needs --tls-cert FILE and --tls-key FILE"},
           {{"--listen", "127.0.0.1:7070", "--tls-client-ca", ca}, "--tls-client-ca needs --tls-cert FILE"},
           {{"--listen", "127.0.0.1:7070", "--insecure", "--tls-cert", cert, "--tls-key", key},
            "--insecure and --tls-cert are both given"},
           {{"--listen", "127.0.0.1:7070", "--tls-cert", dir / "missing.pem", "--tls-key", key},
            "--tls-cert \"" + dir / "missing.pem" + "\" cannot be read"},
           {{"--listen", "127.0.0.1:7070", "--tls-cert", dir / "junk.pem", "--tls-key", key},
            "--tls-cert \"" + dir / "junk.pem" + "\" holds no PEM CERTIFICATE"},
           {{"--listen", "127.0.0.1:7070", "--tls-cert", cert, "--tls-key", dir / "junk.pem"},
            "--tls-key \"" + dir / "junk.pem" + "\" holds no PEM PRIVATE KEY"},
           {{"--listen", "127.0.0.1:7070", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", dir / "junk.pem"},
            "--tls-client-ca \"" + dir / "junk.pem" + "\" holds no PEM CERTIFICATE"},
           {{"--tls-cert", cert, "--tls-key", key}, "--tls-cert is only for a TCP port, and no --listen HOST:PORT"},
           {{"--tls-client-ca", ca}, "--tls-client-ca is only for a TCP port"},
           {{"--insecure"}, "--insecure is only for a TCP port"},
           {{"--listen", "127.0.0.1:7070", "--insecure=maybe"}, "--insecure=maybe is not a boolean"},
       }) {
    std::vector<std::string> args = {"--kernels-dir", kKernels};
    args.insert(args.end(), b.args.begin(), b.args.end());
    auto r = LoadDaemonConfig(args);
    INFO(b.says);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(b.says));
  }
}
