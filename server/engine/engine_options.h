// EngineOptions: everything KernelEngine needs to run, and nothing about how a process got it.
// kilnd fills it from its flags and environment (server/config/engine_options_from_config.h);
// anything else that hosts an engine (a test, an embedded engine) fills it directly, with no
// flag parsing, sockets or log levels involved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::server {

struct EngineOptions {
  std::string cache_dir;                    // artifact workspace: index, blobs, locks (unused with no_cache)
  std::string gen_dir;                      // generated-sources workspace: one folder of exact sources per URI
  std::string kernels_dir;                  // the kernel library's device code (read-only)
  std::string cuda_include_dir;             // CUDA headers NVRTC compiles against ("<cuda home>/include")
  bool disable_jit = false;                 // serve only cached entries; a miss is refused
  bool no_cache = false;                    // compile every request and store nothing (diagnostics)
  std::vector<std::string> arch_list;       // compute capabilities to compile for; empty: all
  int max_jobs = 1;                         // concurrent compiles at most
  int64_t compile_memory_mb = 512;          // memory budget of concurrent compiles
  int64_t cache_max_mb = 10240;             // cache size limit; least recently used entries go first
  int job_timeout_s = 600;                  // a compile job's limit, queueing and lock wait included
  std::vector<std::string> prebuilt_dirs;   // read-only AOT bundles, searched after the cache in order
  bool prebuilt_ignore_version = false;     // diagnostics: bundle entries answer by URI, arch, options
  std::string artifact_url;                 // read-only artifact repository (HTTP), after the bundles; empty: none
  int artifact_jobs = 4;                    // its blob downloads at a time
  int artifact_timeout_s = 30;              // per download attempt
  int artifact_retries = 3;                 // per download, after the first attempt
  bool artifact_skip_checksum = false;      // debugging only: serve its blobs unchecked
  std::string artifact_log_level = "info";  // its own logger's level
  bool offline = false;                     // never touch the network: neither the repository nor Redis is used
  std::string remote_cache_url;             // the fleet's shared cache, redis://HOST:PORT[/DB]; empty: none
  int remote_cache_timeout_ms = 500;        // its connect and each command
  int remote_cache_lease_ms = 30000;        // a compile lease's time to live (renewed while compiling)
  int remote_cache_queue = 64;              // values waiting to be published, at most
};

}  // namespace kiln::server
