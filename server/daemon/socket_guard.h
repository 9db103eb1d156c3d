// SocketGuard: this daemon's claim on its unix socket path. An flock'ed lock file beside the
// socket (<socket>.lock, holding our pid) makes a second daemon on the same path refuse to
// start instead of silently unlinking our socket and taking over.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/file_lock.h"

namespace kiln::server {

class SocketGuard {
 public:
  // Creates the parent folder 0700 when it is missing, takes the lock (FAILED_PRECONDITION
  // naming the holder's pid when another daemon has it) and removes a stale socket file.
  static absl::StatusOr<std::unique_ptr<SocketGuard>> Claim(const std::string& socket_path);
  // The same lock for a socket systemd created and passed (service_manager.h): the socket file
  // is systemd's, so it is never removed (systemd listens on it across kilnd restarts) and its
  // permissions are the unit's SocketMode=/SocketGroup=.
  static absl::StatusOr<std::unique_ptr<SocketGuard>> ClaimInherited(const std::string& socket_path);
  ~SocketGuard();  // removes the socket (unless inherited), then releases the lock

  // Socket files get 0660: the owner and its group may connect. Nothing for an inherited one.
  absl::Status SetSocketPermissions() const;
  const std::string& socket_path() const { return socket_path_; }

 private:
  SocketGuard() = default;
  static absl::StatusOr<std::unique_ptr<SocketGuard>> Take(const std::string& socket_path, bool inherited);
  std::string socket_path_;
  bool inherited_ = false;
  cache::FileLock lock_;
};

}  // namespace kiln::server
