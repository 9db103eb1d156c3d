#include "server/config/engine_options_from_config.h"

namespace kiln::server {

EngineOptions EngineOptionsFromConfig(const DaemonConfig& config) {
  EngineOptions options;
  options.cache_dir = config.cache_dir;
  options.gen_dir = config.gen_dir;
  options.kernels_dir = config.kernels_dir;
  options.cuda_include_dir = config.cuda_include_dir();
  options.disable_jit = config.disable_jit;
  options.no_cache = config.no_cache;
  options.arch_list = config.arch_list;
  options.max_jobs = config.max_jobs;
  options.compile_memory_mb = config.compile_memory_mb;
  options.cache_max_mb = config.cache_max_mb;
  options.job_timeout_s = config.job_timeout_s;
  options.prebuilt_dirs = config.prebuilt_dirs;
  options.prebuilt_ignore_version = config.prebuilt_ignore_version;
  options.artifact_url = config.artifact_url;
  options.artifact_jobs = config.artifact_jobs;
  options.artifact_timeout_s = config.artifact_timeout_s;
  options.artifact_retries = config.artifact_retries;
  options.artifact_skip_checksum = config.artifact_skip_checksum;
  options.artifact_log_level = config.artifact_log_level;
  options.offline = config.offline;
  options.remote_cache_url = config.remote_cache_url;
  options.remote_cache_timeout_ms = config.remote_cache_timeout_ms;
  options.remote_cache_lease_ms = config.remote_cache_lease_ms;
  options.remote_cache_queue = config.remote_cache_queue;
  return options;
}

}  // namespace kiln::server
