#include "proto/endpoint.h"

#include <unistd.h>

#include <cstdlib>

namespace kiln::proto {

std::string DefaultSocketPath() {
  if (geteuid() == 0) return "/run/kiln/kilnd.sock";
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/') return std::string(runtime) + "/kiln/kilnd.sock";
  return "/tmp/kiln-" + std::to_string(geteuid()) + "/kilnd.sock";
}

std::string DefaultCacheDir() {
  if (geteuid() == 0) return "/var/cache/kiln";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  std::string base = home != nullptr && home[0] != '\0' ? home : "/tmp/kiln-" + std::to_string(geteuid());
  return base + "/.cache/kiln";
}

std::string DefaultGenDir(const std::string& cache_dir) { return cache_dir + "/generated"; }

std::string ResolveSocketPath() {
  const char* env = std::getenv(kSocketEnv);
  if (env != nullptr && env[0] != '\0') return env;
  return DefaultSocketPath();
}

std::string GrpcTargetFor(const std::string& socket_or_address) {
  if (socket_or_address.empty() || socket_or_address[0] == '/' || socket_or_address[0] == '.')
    return "unix:" + socket_or_address;
  return socket_or_address;  // "unix:...", "dns:...", "host:port"
}

}  // namespace kiln::proto
