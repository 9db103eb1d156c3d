// FileLock: exclusive flock(2) with a non-blocking try and a polling, bounded wait.
#include "cache/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

absl::StatusOr<int> OpenLockFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = errno;
    std::string hint = err == ENOENT   ? "create its folder first"
                       : err == EACCES ? "check the permissions of the lock folder"
                                       : "check the lock folder";
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("cannot open lock file ", path, ": ", std::strerror(err), "; ", hint));
  }
  return fd;
}

// true: locked; false: someone else holds it; error: flock itself failed.
absl::StatusOr<bool> TryFlock(int fd, const std::string& path) {
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("flock(", path, ") failed: ", std::strerror(err),
                                     "; the cache folder must be on a file system with flock "
                                     "support"));
  }
}

// Whether `path` still names the file open as `fd`: a holder with RemoveOnRelease deletes the
// lock file before it unlocks, so a waiter that opened it earlier may lock a file no path names
// any more, while a newcomer creates and locks a new one. Such a lock protects nothing.
bool StillNamedBy(int fd, const std::string& path) {
  struct stat held {
  }, named{};
  if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &named) != 0) return false;
  return held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

// The holder writes its pid into the file; a waiter that gives up names it.
std::string DescribeHolder(int fd) {
  char buf[64] = {};
  ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "another process or thread";
  absl::string_view text(buf, static_cast<size_t>(n));
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return "another process or thread";
  return absl::StrCat("pid ", text, " (written by the last holder)");
}

void RecordHolder(int fd) {
  std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
}

}  // namespace

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), remove_on_release_(other.remove_on_release_) {
  other.fd_ = -1;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    remove_on_release_ = other.remove_on_release_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() { Release(); }

void FileLock::Release() {
  if (fd_ >= 0) {
    // Deleted while held: nobody else can hold it now, and a waiter on this file notices.
    if (remove_on_release_) ::unlink(path_.c_str());
    // NOTES: close() alone drops the flock, but only when no fork()ed child shares the open
    // file description; the explicit unlock releases it for everyone.
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
}

absl::StatusOr<FileLock> FileLock::TryAcquire(const std::string& path) {
  KILN_ABSL_ASSIGN_OR_RETURN(int fd, OpenLockFile(path));
  auto locked = TryFlock(fd, path);
  // Locked a file its holder deleted on release: open the path again (bounded: each round
  // means another holder came and went meanwhile).
  for (int round = 0; round < 100 && locked.ok() && *locked && !StillNamedBy(fd, path); ++round) {
    ::close(fd);
    KILN_ABSL_ASSIGN_OR_RETURN(fd, OpenLockFile(path));
    locked = TryFlock(fd, path);
  }
  if (locked.ok() && *locked && !StillNamedBy(fd, path)) locked = false;
  if (!locked.ok() || !*locked) {
    std::string holder = DescribeHolder(fd);
    ::close(fd);
    if (!locked.ok()) return locked.status();
    return absl::UnavailableError(
        absl::StrCat("lock ", path, " is held by ", holder, "; retry later or wait with Acquire"));
  }
  RecordHolder(fd);
  FileLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  return lock;
}

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, std::chrono::milliseconds timeout) {
  KILN_ABSL_ASSIGN_OR_RETURN(int fd, OpenLockFile(path));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  // NOTES: polling instead of a blocking flock keeps the wait bounded and interruptible;
  // the back-off (1 ms doubling to 50 ms) keeps a long wait from costing CPU.
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    auto locked = TryFlock(fd, path);
    if (!locked.ok()) {
      ::close(fd);
      return locked.status();
    }
    if (*locked) {
      if (StillNamedBy(fd, path)) break;
      // Its holder deleted it on release: lock what the path names now.
      ::close(fd);
      KILN_ABSL_ASSIGN_OR_RETURN(fd, OpenLockFile(path));
      continue;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string holder = DescribeHolder(fd);
      ::close(fd);
      return absl::DeadlineExceededError(
          absl::StrCat("timed out after ", timeout.count(), " ms waiting for lock ", path, ", held by ", holder,
                       "; a compile of the same key is still running: retry later or raise the timeout"));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    std::this_thread::sleep_for(std::min(pause, std::max(left, std::chrono::milliseconds(1))));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  RecordHolder(fd);
  FileLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  return lock;
}

}  // namespace kiln::cache
