// DaemonConfig: every setting of kilnd, from flags, then environment variables, then
// defaults that need no flags at all. The table in docs/configuration.md is generated from
// kFlagTable below, the one list of flags and variables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/tuning.pb.h"
#include "proto/spec_list.h"

namespace kiln::server {

struct DaemonConfig {
  std::string socket;          // unix socket path
  std::string listen;          // optional TCP host:port
  std::string metrics_listen;  // --metrics-listen HOST:PORT: Prometheus /metrics over HTTP; empty: off
  // TCP's security (tcp_security.h): TLS with a server certificate, mutual TLS when a client CA
  // is given too, or plaintext only when asked for by name. The PEM texts are read at start.
  bool insecure = false;      // --insecure: plaintext TCP
  std::string tls_cert;       // --tls-cert FILE; empty: none
  std::string tls_key;        // --tls-key FILE
  std::string tls_client_ca;  // --tls-client-ca FILE; empty: client certificates not asked for
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;
  std::string cache_dir;    // artifact workspace (index, blobs, locks)
  std::string gen_dir;      // generated-sources workspace
  std::string kernels_dir;  // the kernel library's device code (read-only)
  std::string cuda_home;    // CUDA toolkit (headers for NVRTC)
  bool disable_jit = false;
  bool no_cache = false;
  std::vector<std::string> prebuilt_dirs;  // --prebuilt (repeatable) / KILN_PREBUILT (':'-separated)
  bool prebuilt_ignore_version = false;
  std::string artifact_url;  // --artifact-url; empty: none
  int artifact_jobs = 4;
  int artifact_timeout_s = 30;
  int artifact_retries = 3;
  bool artifact_skip_checksum = false;
  std::string artifact_log_level = "info";
  bool offline = false;
  std::string remote_cache_url;  // --remote-cache redis://HOST:PORT[/DB]; empty: none
  int remote_cache_timeout_ms = 500;
  int remote_cache_lease_ms = 30000;
  int remote_cache_queue = 64;
  std::string warm_list;                         // --warm: a spec list asked for at start; empty: none
  std::vector<proto::SpecListEntry> warm_specs;  // its entries, read and checked at start
  std::vector<std::string> arch_list;            // empty: every arch NVRTC supports
  int max_jobs = 0;
  int max_watchers = 256;  // WatchJobs streams open at once, at most (each holds a thread)
  int64_t compile_memory_mb = 0;
  int64_t cache_max_mb = 0;
  int job_timeout_s = 0;
  int shutdown_grace_s = 0;
  std::string log_level;
  std::string tuning_store;                        // SQLite file of tuning results; empty: none (results not kept)
  std::string tactic_blocklist;                    // blocklist file; empty: none
  std::vector<v1::BlockedTactic> blocked_tactics;  // its entries, read and checked at start

  std::string cuda_include_dir() const { return cuda_home + "/include"; }
};

// One row of the flag table: flag, variable, default (as documented), meaning.
struct FlagInfo {
  const char* flag;
  const char* env;
  const char* default_text;
  const char* help;
  // Only kilnd reads it (its socket, TCP and TLS, metrics, warm-up, watchers, shutdown, log
  // level, tuning store, blocklist); an embedded engine ignores it (ConfigScope::kEngine).
  bool daemon_only = false;
};
inline constexpr bool kDaemonOnly = true;
const std::vector<FlagInfo>& FlagTable();

// Which settings a load reads. kDaemon: every one (kilnd). kEngine: only the engine's (cache,
// kernels, toolchain, compile limits, tiers), as a client library's embedded engine reads them
// (client/embedded/): the daemon's own settings (its socket, TCP and TLS, metrics, --warm,
// watchers, shutdown grace, log level, tuning store, tactic blocklist) keep their defaults and
// their variables are not even read, so a client's KILN_SOCKET or KILN_TLS_CERT means what the
// client takes it to mean and never fails the engine's load.
enum class ConfigScope { kDaemon, kEngine };

// Parses argv (after argv[0]) and the environment. INVALID_ARGUMENT naming the flag or the
// variable, the bad value and what is allowed. `--help` and `--version` are handled by the
// caller (see WantsHelp).
absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::vector<std::string>& args,
                                              ConfigScope scope = ConfigScope::kDaemon);

// The flags (and so their variables) that only kilnd reads: ignored under ConfigScope::kEngine.
bool IsDaemonOnlyFlag(const std::string& flag);

std::string UsageText();  // for --help
// The flag table as Markdown, exactly as docs/configuration.md holds it (a test compares).
std::string FlagTableMarkdown();

// The kernels folder an installed or build-tree kilnd uses when none is given.
std::string DefaultKernelsDir();

}  // namespace kiln::server
