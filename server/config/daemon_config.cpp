#include "server/config/daemon_config.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln_base/status_macros.h"
#include "proto/endpoint.h"
#include "proto/tactic_blocklist.h"
#include "server/config/tcp_security.h"
#include "server/tiers/redis_url.h"

namespace kiln::server {
namespace fs = std::filesystem;

const std::vector<FlagInfo>& FlagTable() {
  static const std::vector<FlagInfo> table = {
      {"--socket PATH", "KILN_SOCKET",
       "root: /run/kiln/kilnd.sock; others: $XDG_RUNTIME_DIR/kiln/kilnd.sock or /tmp/kiln-$UID/kilnd.sock",
       "Unix socket to serve on (the folder is created 0700, the socket is 0660)", kDaemonOnly},
      {"--listen HOST:PORT", "KILN_LISTEN", "off",
       "Also serve on TCP: with TLS (--tls-cert, --tls-key), or plaintext with --insecure; one of them is required",
       kDaemonOnly},
      {"--tls-cert FILE", "KILN_TLS_CERT", "none",
       "PEM certificate (chain) kilnd presents on --listen; needs --tls-key. Only with --listen: the unix socket is "
       "protected by its file permissions",
       kDaemonOnly},
      {"--tls-key FILE", "KILN_TLS_KEY", "none", "PEM private key of --tls-cert", kDaemonOnly},
      {"--tls-client-ca FILE", "KILN_TLS_CLIENT_CA", "none",
       "Mutual TLS on --listen: a client must present a certificate signed by this PEM CA (bundle), or is refused",
       kDaemonOnly},
      {"--insecure", "KILN_INSECURE=1", "off",
       "Serve --listen in plaintext, unauthenticated: anyone who reaches the port may compile, read and evict; for "
       "trusted networks and tests only (logged as a warning)",
       kDaemonOnly},
      {"--metrics-listen HOST:PORT", "KILN_METRICS_LISTEN", "off",
       "Serve Prometheus metrics (plain HTTP, unauthenticated, read-only) at http://HOST:PORT/metrics, e.g. "
       "127.0.0.1:9464; see docs/operations.md#metrics",
       kDaemonOnly},
      {"--cache-dir DIR", "KILN_CACHE_DIR", "root: /var/cache/kiln; others: $XDG_CACHE_HOME/kiln or ~/.cache/kiln",
       "Artifact workspace: index, blobs, locks (may be shared by several daemons)"},
      {"--gen-dir DIR", "KILN_GEN_DIR", "<cache-dir>/generated",
       "Generated-sources workspace: one folder of exact sources per URI"},
      {"--kernels-dir DIR", "KILN_KERNELS_DIR", "installed share/kiln/kernels, else the source tree's kernels/",
       "The kernel library's device code; read-only to kilnd"},
      {"--cuda-home DIR", "KILN_CUDA_HOME", "$CUDA_HOME or /usr/local/cuda", "CUDA toolkit whose headers NVRTC uses"},
      {"--disable-jit", "KILN_DISABLE_JIT=1", "off",
       "Serve only cached or prebuilt entries; a miss is refused naming the spec and the bundles searched"},
      {"--no-cache", "KILN_NO_CACHE=1", "off", "Diagnostics: compile every request, store nothing"},
      {"--prebuilt DIR", "KILN_PREBUILT (DIR:DIR...)", "none",
       "A prebuilt bundle (kiln aot build) to serve from after a cache miss, before compiling; repeatable, read-only. "
       "An entry answers only under the request's exact key and after its SHA-256 verifies; it is then stored in the "
       "cache"},
      {"--prebuilt-ignore-version", "KILN_PREBUILT_IGNORE_VERSION=1", "off",
       "Diagnostics: let bundle entries of another Kiln version, toolchain or kernels tree answer by URI, arch and "
       "options (never stored); logged loudly"},
      {"--artifact-url URL", "KILN_ARTIFACT_URL", "none",
       "A read-only artifact repository (http:// or https://: a static tree of bundles, kiln aot index) searched after "
       "the --prebuilt bundles, before compiling; set it to a trusted mirror's URL. Entries answer only under the "
       "exact key, after their SHA-256 verifies; they are then stored in the cache"},
      {"--artifact-jobs N", "KILN_ARTIFACT_JOBS", "4", "Artifact repository downloads at a time"},
      {"--artifact-timeout-s N", "KILN_ARTIFACT_TIMEOUT_S", "30",
       "Artifact repository: one download attempt's time limit (a stall of 10 s ends it sooner)"},
      {"--artifact-retries N", "KILN_ARTIFACT_RETRIES", "3",
       "Artifact repository: retries of a failed download (timeouts, resets, truncation, 5xx), with backoff"},
      {"--artifact-log-level LEVEL", "KILN_ARTIFACT_LOG_LEVEL", "info",
       "The artifact repository's own log (downloads, state changes), apart from --log-level"},
      {"--artifact-insecure-skip-checksum", "KILN_ARTIFACT_INSECURE_SKIP_CHECKSUM=1", "off",
       "Debugging only: serve repository blobs whose SHA-256 does not match (logged loudly each time)"},
      {"--remote-cache URL", "KILN_REMOTE_CACHE", "none",
       "The fleet's shared cache on Redis (redis://HOST:PORT[/DB]), read after the artifact repository and written "
       "after each compile; its compile leases make a fleet compile each key once. Values are verified (key, URI, "
       "arch, size, SHA-256) before use; Redis down or slow: the daemon serves and compiles on its own"},
      {"--remote-cache-timeout-ms N", "KILN_REMOTE_CACHE_TIMEOUT_MS", "500",
       "Remote cache: the limit of its connect and of each command; past it Redis is skipped, retried with backoff "
       "(1 s to 30 s)"},
      {"--remote-cache-lease-ms N", "KILN_REMOTE_CACHE_LEASE_MS", "30000",
       "Remote cache: a compile lease's time to live, renewed every third of it while compiling; how long others "
       "wait for a daemon that died mid-compile"},
      {"--remote-cache-queue N", "KILN_REMOTE_CACHE_QUEUE", "64",
       "Remote cache: compiled kernels waiting to be published, at most; beyond, they are dropped (counted)"},
      {"--offline", "KILN_OFFLINE=1", "off",
       "Never touch the network: neither the artifact repository nor the remote cache is used; with --disable-jit a "
       "spec no local tier has fails, saying so"},
      {"--warm LIST", "KILN_WARM", "off",
       "A spec list (`OP KEY=VALUE... @ARCH...` a line; kiln cache export-list writes one) asked for in the background "
       "at start, through every tier; --arch replaces its @ARCH targets. A bad line stops kilnd naming file:line",
       kDaemonOnly},
      {"--arch \"sm_80 sm_90a\"", "KILN_ARCH_LIST", "every arch this NVRTC supports",
       "Compute capabilities this daemon compiles for; other targets are refused"},
      {"--max-jobs N", "KILN_MAX_JOBS", "number of CPUs", "Concurrent compiles at most"},
      {"--max-watchers N", "KILN_MAX_WATCHERS", "256",
       "WatchJobs streams open at once, at most (each holds a server thread); one more is refused "
       "RESOURCE_EXHAUSTED naming the limit",
       kDaemonOnly},
      {"--compile-memory-mb N", "KILN_COMPILE_MEMORY_MB", "half of MemAvailable at start",
       "Memory budget of concurrent compiles (each spec states its estimate)"},
      {"--cache-max-mb N", "KILN_CACHE_MAX_MB", "10240",
       "Size limit of the cache folder (blobs and the index with its WAL); past it, least recently used entries are "
       "evicted, at start too"},
      {"--job-timeout-s N", "KILN_JOB_TIMEOUT_S", "600", "A compile job's time limit, queueing and lock wait included"},
      {"--shutdown-grace-s N", "KILN_SHUTDOWN_GRACE_S", "30",
       "On SIGTERM/SIGINT, how long running compiles may finish before they are abandoned", kDaemonOnly},
      {"--log-level LEVEL", "KILN_LOG_LEVEL", "info", "trace, debug, info, warn, error, critical, off", kDaemonOnly},
      {"--tuning-store PATH", "KILN_TUNING_STORE", "off",
       "SQLite file of autotuning results that every client of the node reuses (TuningService, kiln tune); "
       "its folder must exist. Off: results are not kept",
       kDaemonOnly},
      {"--tactic-blocklist FILE", "KILN_DAEMON_TACTIC_BLOCKLIST", "off",
       "Tactics never tuned or chosen on this node, one a line: `gemm t128x256x64s4g8 [gpu=H200] [driver=N] "
       "[nvrtc=V]`; a bad line stops kilnd naming file:line",
       kDaemonOnly},
  };
  return table;
}

std::string UsageText() {
  std::ostringstream out;
  out << "kilnd: the Kiln daemon (JIT compilation and cache of CUDA kernels)\n\n"
         "usage: kilnd [flags]      (no flag is needed; each has an environment variable)\n\n";
  for (const auto& f : FlagTable()) {
    out << "  " << f.flag << "\n      " << f.help << "\n      env " << f.env << "; default " << f.default_text << "\n";
  }
  out << "  --help, --version\n";
  return out.str();
}

std::string FlagTableMarkdown() {
  std::ostringstream out;
  out << "| flag | environment variable | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& f : FlagTable())
    out << "| `" << f.flag << "` | `" << f.env << "` | " << f.default_text << " | " << f.help << " |\n";
  return out.str();
}

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

absl::StatusOr<bool> ParseBool(const std::string& where, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off" || value.empty()) return false;
  return absl::InvalidArgumentError(
      absl::StrCat(where, "=", value, " is not a boolean; use 1/true/yes/on or 0/false/no/off"));
}

absl::StatusOr<int64_t> ParseInt(const std::string& where, const std::string& value, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < min || v > max)
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", value, "\" must be an integer from ", min, " to ", max));
  return v;
}

int64_t MemAvailableMb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb / 1024;
  }
  return 4096;
}

bool IsDir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

}  // namespace

std::string DefaultKernelsDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path installed = exe.parent_path().parent_path() / "share" / "kiln" / "kernels";
    if (IsDir(installed.string())) return installed.string();
  }
#ifdef KILN_SOURCE_KERNELS_DIR
  if (IsDir(KILN_SOURCE_KERNELS_DIR)) return KILN_SOURCE_KERNELS_DIR;
#endif
  return "";
}

bool IsDaemonOnlyFlag(const std::string& flag) {
  for (const FlagInfo& f : FlagTable()) {
    const std::string_view name(f.flag);
    if (name.substr(0, name.find(' ')) == flag) return f.daemon_only;
  }
  return false;
}

absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::vector<std::string>& args, ConfigScope scope) {
  // Flags first: collect "--name value" / "--name=value" / boolean "--name".
  static const std::map<std::string, bool> kTakesValue = {{"--socket", true},
                                                          {"--listen", true},
                                                          {"--tls-cert", true},
                                                          {"--tls-key", true},
                                                          {"--tls-client-ca", true},
                                                          {"--insecure", false},
                                                          {"--metrics-listen", true},
                                                          {"--cache-dir", true},
                                                          {"--gen-dir", true},
                                                          {"--kernels-dir", true},
                                                          {"--cuda-home", true},
                                                          {"--disable-jit", false},
                                                          {"--no-cache", false},
                                                          {"--prebuilt", true},
                                                          {"--prebuilt-ignore-version", false},
                                                          {"--warm", true},
                                                          {"--artifact-url", true},
                                                          {"--artifact-jobs", true},
                                                          {"--artifact-timeout-s", true},
                                                          {"--artifact-retries", true},
                                                          {"--artifact-log-level", true},
                                                          {"--artifact-insecure-skip-checksum", false},
                                                          {"--offline", false},
                                                          {"--remote-cache", true},
                                                          {"--remote-cache-timeout-ms", true},
                                                          {"--remote-cache-lease-ms", true},
                                                          {"--remote-cache-queue", true},
                                                          {"--arch", true},
                                                          {"--max-jobs", true},
                                                          {"--max-watchers", true},
                                                          {"--compile-memory-mb", true},
                                                          {"--cache-max-mb", true},
                                                          {"--job-timeout-s", true},
                                                          {"--shutdown-grace-s", true},
                                                          {"--log-level", true},
                                                          {"--tuning-store", true},
                                                          {"--tactic-blocklist", true}};
  // Flags that may be given more than once keep every value; the others keep the last.
  static const std::set<std::string> kRepeatable = {"--prebuilt"};
  std::map<std::string, std::string> flags;
  std::map<std::string, std::vector<std::string>> repeated;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = kTakesValue.find(name);
    if (it == kTakesValue.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown argument \"", args[i], "\"; see kilnd --help"));
    if (scope == ConfigScope::kEngine && IsDaemonOnlyFlag(name))
      return absl::InvalidArgumentError(absl::StrCat(name, " is kilnd's own setting, not the engine's"));
    if (it->second && eq == std::string::npos) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = args[++i];
    } else if (!it->second) {
      if (eq != std::string::npos) {
        KILN_ABSL_ASSIGN_OR_RETURN(bool b, ParseBool(name, value));
        value = b ? "1" : "0";
      } else {
        value = "1";
      }
    }
    flags[name] = value;
    if (kRepeatable.count(name)) repeated[name].push_back(value);
  }
  // A flag wins over its variable; `where` names whichever was used, for error messages.
  auto pick = [&](const char* flag, const char* env, std::string* where) -> std::optional<std::string> {
    if (scope == ConfigScope::kEngine && IsDaemonOnlyFlag(flag)) return std::nullopt;
    if (auto it = flags.find(flag); it != flags.end()) {
      *where = flag;
      return it->second;
    }
    const char* v = std::getenv(env);
    if (v != nullptr && v[0] != '\0') {
      *where = env;
      return std::string(v);
    }
    return std::nullopt;
  };

  DaemonConfig c;
  std::string where;
  c.socket = pick("--socket", proto::kSocketEnv, &where).value_or(proto::DefaultSocketPath());
  if (c.socket.empty() || c.socket[0] != '/')
    return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.socket, "\" must be an absolute path"));
  if (c.socket.size() > 100)
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", c.socket, "\" is longer than a unix socket path may be (~107 bytes)"));
  c.listen = pick("--listen", "KILN_LISTEN", &where).value_or("");
  if (!c.listen.empty()) {
    auto colon = c.listen.rfind(':');
    if (colon == std::string::npos || colon + 1 == c.listen.size())
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.listen, "\" must be HOST:PORT"));
    KILN_ABSL_RETURN_IF_ERROR(ParseInt(where + " port", c.listen.substr(colon + 1), 1, 65535).status());
  }
  c.metrics_listen = pick("--metrics-listen", "KILN_METRICS_LISTEN", &where).value_or("");
  if (!c.metrics_listen.empty()) {
    auto colon = c.metrics_listen.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == c.metrics_listen.size())
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", c.metrics_listen, "\" must be HOST:PORT, e.g. 127.0.0.1:9464"));
    KILN_ABSL_RETURN_IF_ERROR(ParseInt(where + " port", c.metrics_listen.substr(colon + 1), 1, 65535).status());
  }
  c.cache_dir = pick("--cache-dir", "KILN_CACHE_DIR", &where).value_or(proto::DefaultCacheDir());
  if (c.cache_dir.empty() || c.cache_dir[0] != '/')
    return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.cache_dir, "\" must be an absolute path"));
  c.gen_dir = pick("--gen-dir", "KILN_GEN_DIR", &where).value_or(proto::DefaultGenDir(c.cache_dir));
  if (c.gen_dir.empty() || c.gen_dir[0] != '/')
    return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.gen_dir, "\" must be an absolute path"));
  auto kernels = pick("--kernels-dir", "KILN_KERNELS_DIR", &where);
  c.kernels_dir = kernels.value_or(DefaultKernelsDir());
  if (c.kernels_dir.empty())
    return absl::InvalidArgumentError(
        "no kernels folder found (looked for <prefix>/share/kiln/kernels beside kilnd and the source "
        "tree); pass --kernels-dir or set KILN_KERNELS_DIR");
  if (!IsDir(c.kernels_dir + "/include"))
    return absl::InvalidArgumentError(absl::StrCat(kernels ? where : "the default kernels folder", " \"", c.kernels_dir,
                                                   "\" has no include/ folder of device code"));
  std::string cuda_default = Env("CUDA_HOME").empty() ? "/usr/local/cuda" : Env("CUDA_HOME");
  c.cuda_home = pick("--cuda-home", "KILN_CUDA_HOME", &where).value_or(cuda_default);
  if (!fs::exists(c.cuda_home + "/include/cuda.h"))
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA toolkit \"", c.cuda_home, "\" has no include/cuda.h; pass --cuda-home or KILN_CUDA_HOME"));
  for (auto [flag, env, out] : {std::tuple{"--disable-jit", "KILN_DISABLE_JIT", &c.disable_jit},
                                std::tuple{"--no-cache", "KILN_NO_CACHE", &c.no_cache},
                                std::tuple{"--artifact-insecure-skip-checksum", "KILN_ARTIFACT_INSECURE_SKIP_CHECKSUM",
                                           &c.artifact_skip_checksum},
                                std::tuple{"--offline", "KILN_OFFLINE", &c.offline}}) {
    if (auto v = pick(flag, env, &where)) {
      KILN_ABSL_ASSIGN_OR_RETURN(*out, ParseBool(where, *v));
    }
  }
  std::string insecure_where;
  if (auto v = pick("--insecure", "KILN_INSECURE", &insecure_where)) {
    KILN_ABSL_ASSIGN_OR_RETURN(c.insecure, ParseBool(insecure_where, *v));
  }
  KILN_ABSL_RETURN_IF_ERROR(LoadTcpSecurity(pick, insecure_where, &c));
  if (auto it = repeated.find("--prebuilt"); it != repeated.end()) {
    c.prebuilt_dirs = it->second;
    where = "--prebuilt";
  } else if (auto v = pick("--prebuilt", "KILN_PREBUILT", &where)) {
    for (auto part : absl::StrSplit(*v, ':', absl::SkipEmpty())) c.prebuilt_dirs.emplace_back(part);
  }
  for (const auto& dir : c.prebuilt_dirs) {
    if (dir.empty() || dir[0] != '/')
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", dir, "\" must be an absolute path"));
    if (!IsDir(dir))
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", dir, "\" is not a folder (a bundle folder that kiln aot build --out wrote)"));
  }
  if (auto v = pick("--prebuilt-ignore-version", "KILN_PREBUILT_IGNORE_VERSION", &where)) {
    KILN_ABSL_ASSIGN_OR_RETURN(c.prebuilt_ignore_version, ParseBool(where, *v));
  }
  if (auto v = pick("--arch", "KILN_ARCH_LIST", &where)) {
    for (auto part : absl::StrSplit(*v, absl::ByAnyChar(" ,;"), absl::SkipEmpty())) c.arch_list.emplace_back(part);
    if (c.arch_list.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, " is empty; name archs like \"sm_80 sm_90a\""));
  }
  if (auto v = pick("--artifact-url", "KILN_ARTIFACT_URL", &where)) {
    c.artifact_url = *v;
    while (!c.artifact_url.empty() && c.artifact_url.back() == '/') c.artifact_url.pop_back();
    if (c.artifact_url.rfind("http://", 0) != 0 && c.artifact_url.rfind("https://", 0) != 0)
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", *v, "\" must be an http:// or https:// URL (the root of an artifact repository)"));
    if (c.artifact_url.find_first_of(" \t\n") != std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", *v, "\" holds a space"));
  }
  if (auto v = pick("--remote-cache", "KILN_REMOTE_CACHE", &where)) {
    RedisUrl url;
    if (std::string problem = ParseRedisUrl(*v, &url); !problem.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", *v, "\" ", problem));
    c.remote_cache_url = *v;
  }
  if (auto v = pick("--warm", "KILN_WARM", &where)) {
    c.warm_list = *v;
    proto::ParsedSpecList list = proto::ReadSpecList(c.warm_list);
    if (!list.error.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", list.error));
    if (list.entries.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.warm_list, "\" names no spec"));
    auto targets = proto::ExpandSpecTargets(list.entries, c.arch_list, "--arch");
    if (!targets.error.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", targets.error));
    c.warm_specs = std::move(list.entries);
  }
  struct IntSetting {
    const char* flag;
    const char* env;
    int64_t min, max, def;
    int64_t* out;
  };
  int64_t max_jobs = 0, mem = 0, cache_max = 0, timeout = 0, grace = 0, artifact_jobs = 0, artifact_timeout = 0,
          artifact_retries = 0, remote_timeout = 0, remote_lease = 0, remote_queue = 0, max_watchers = 0;
  int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  for (const IntSetting& s :
       {IntSetting{"--max-jobs", "KILN_MAX_JOBS", 1, 256, cpus, &max_jobs},
        IntSetting{"--compile-memory-mb", "KILN_COMPILE_MEMORY_MB", 64, 1 << 24,
                   std::max<int64_t>(512, MemAvailableMb() / 2), &mem},
        IntSetting{"--cache-max-mb", "KILN_CACHE_MAX_MB", 1, int64_t(1) << 30, 10240, &cache_max},
        IntSetting{"--job-timeout-s", "KILN_JOB_TIMEOUT_S", 1, 86400, 600, &timeout},
        IntSetting{"--shutdown-grace-s", "KILN_SHUTDOWN_GRACE_S", 0, 3600, 30, &grace},
        IntSetting{"--artifact-jobs", "KILN_ARTIFACT_JOBS", 1, 64, 4, &artifact_jobs},
        IntSetting{"--artifact-timeout-s", "KILN_ARTIFACT_TIMEOUT_S", 1, 3600, 30, &artifact_timeout},
        IntSetting{"--artifact-retries", "KILN_ARTIFACT_RETRIES", 0, 10, 3, &artifact_retries},
        IntSetting{"--remote-cache-timeout-ms", "KILN_REMOTE_CACHE_TIMEOUT_MS", 10, 60000, 500, &remote_timeout},
        IntSetting{"--remote-cache-lease-ms", "KILN_REMOTE_CACHE_LEASE_MS", 300, 3600000, 30000, &remote_lease},
        IntSetting{"--remote-cache-queue", "KILN_REMOTE_CACHE_QUEUE", 1, 4096, 64, &remote_queue},
        // At most 1024: kilnd's server threads (2048, main.cpp) must outnumber the watchers.
        IntSetting{"--max-watchers", "KILN_MAX_WATCHERS", 1, 1024, 256, &max_watchers}}) {
    *s.out = s.def;
    if (auto v = pick(s.flag, s.env, &where)) {
      KILN_ABSL_ASSIGN_OR_RETURN(*s.out, ParseInt(where, *v, s.min, s.max));
    }
  }
  c.max_jobs = int(max_jobs);
  c.compile_memory_mb = mem;
  c.cache_max_mb = cache_max;
  c.job_timeout_s = int(timeout);
  c.shutdown_grace_s = int(grace);
  c.artifact_jobs = int(artifact_jobs);
  c.artifact_timeout_s = int(artifact_timeout);
  c.artifact_retries = int(artifact_retries);
  c.remote_cache_timeout_ms = int(remote_timeout);
  c.remote_cache_lease_ms = int(remote_lease);
  c.remote_cache_queue = int(remote_queue);
  c.max_watchers = int(max_watchers);
  c.log_level = pick("--log-level", "KILN_LOG_LEVEL", &where).value_or("info");
  static const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::find(kLevels.begin(), kLevels.end(), c.log_level) == kLevels.end())
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", c.log_level, "\" is not one of ", absl::StrJoin(kLevels, ", ")));
  c.artifact_log_level = pick("--artifact-log-level", "KILN_ARTIFACT_LOG_LEVEL", &where).value_or("info");
  if (std::find(kLevels.begin(), kLevels.end(), c.artifact_log_level) == kLevels.end())
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", c.artifact_log_level, "\" is not one of ", absl::StrJoin(kLevels, ", ")));
  if (auto v = pick("--tuning-store", "KILN_TUNING_STORE", &where)) {
    c.tuning_store = *v;
    const fs::path store(c.tuning_store);
    std::error_code ec;
    if (!store.is_absolute())
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.tuning_store, "\" must be an absolute path"));
    if (fs::exists(store, ec) && !fs::is_regular_file(store, ec))
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", c.tuning_store, "\" exists and is not a file; name the SQLite file to keep"));
    if (!IsDir(store.parent_path().string()))
      return absl::InvalidArgumentError(absl::StrCat(where, " \"", c.tuning_store, "\": its folder ",
                                                     store.parent_path().string(),
                                                     " does not exist; create it (kilnd never creates it: the store "
                                                     "lives only where it is asked for)"));
  }
  if (auto v = pick("--tactic-blocklist", "KILN_DAEMON_TACTIC_BLOCKLIST", &where)) {
    c.tactic_blocklist = *v;
    // NOTES: without an op's own check the daemon checks a tactic's form only: the tactic
    // spaces live with the ops' clients (client/ops/<family>/), which the daemon does not link.
    proto::ParsedBlocklist parsed = proto::ReadTacticBlocklist(where, c.tactic_blocklist);
    if (!parsed.error.empty()) return absl::InvalidArgumentError(parsed.error);
    c.blocked_tactics = std::move(parsed.entries);
  }
  return c;
}

}  // namespace kiln::server
