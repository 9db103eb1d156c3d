// FileLock: an exclusive flock(2) on a file. The kernel drops it when the holder's process
// dies, so a compile killed with -9 never leaves a lock that hangs anyone.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::cache {

class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();  // unlocks and closes

  // Never blocks: UNAVAILABLE when another holder has it (the message names the path).
  static absl::StatusOr<FileLock> TryAcquire(const std::string& path);
  // Waits until `timeout` (polling with back-off, so a waiter is never stuck in the kernel):
  // DEADLINE_EXCEEDED naming the path when it runs out. Creates the file (0644 & ~umask) if
  // missing.
  static absl::StatusOr<FileLock> Acquire(const std::string& path, std::chrono::milliseconds timeout);

  // Release() also deletes the lock file (while still holding it), so lock files do not pile
  // up for every key ever compiled. Safe against a waiter that opened the file before it went:
  // Acquire and TryAcquire keep a lock only when the path still names the file they locked,
  // and open the path again otherwise.
  void RemoveOnRelease() { remove_on_release_ = true; }

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // The descriptor, for writing the holder's pid into the lock file (daemon socket lock).
  int fd() const { return fd_; }
  void Release();

 private:
  int fd_ = -1;
  std::string path_;
  bool remove_on_release_ = false;
};

}  // namespace kiln::cache
