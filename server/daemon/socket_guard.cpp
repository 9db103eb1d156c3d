#include "server/daemon/socket_guard.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<SocketGuard>> SocketGuard::Claim(const std::string& socket_path) {
  return Take(socket_path, /*inherited=*/false);
}

absl::StatusOr<std::unique_ptr<SocketGuard>> SocketGuard::ClaimInherited(const std::string& socket_path) {
  return Take(socket_path, /*inherited=*/true);
}

absl::StatusOr<std::unique_ptr<SocketGuard>> SocketGuard::Take(const std::string& socket_path, bool inherited) {
  std::unique_ptr<SocketGuard> guard(new SocketGuard());
  guard->inherited_ = inherited;
  fs::path dir = fs::path(socket_path).parent_path();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    // Only the folder we create is made private; an existing one (e.g. /run) is left as is.
    fs::create_directories(dir.parent_path(), ec);
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return absl::FailedPreconditionError(absl::StrCat("cannot create the socket folder ", dir.string(), ": ",
                                                        std::strerror(errno), "; pass --socket or set KILN_SOCKET"));
  }
  std::string lock_path = socket_path + ".lock";
  auto lock = cache::FileLock::TryAcquire(lock_path);
  if (!lock.ok()) {
    std::string holder;
    if (FILE* f = fopen(lock_path.c_str(), "r")) {
      char buf[32] = {0};
      if (fgets(buf, sizeof(buf), f) != nullptr) holder = buf;
      fclose(f);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    }
    if (lock.status().code() == absl::StatusCode::kUnavailable)
      return absl::FailedPreconditionError(absl::StrCat(
          "another kilnd", holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"), " already serves ", socket_path,
          " (it holds ", lock_path, "); stop it first, or give this daemon another --socket"));
    return lock.status();
  }
  guard->lock_ = std::move(*lock);
  guard->socket_path_ = socket_path;  // from here on the socket is ours (or systemd's when inherited)
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(guard->lock_.fd(), 0) == 0) (void)!pwrite(guard->lock_.fd(), pid.data(), pid.size(), 0);
  if (inherited) return guard;
  // We hold the lock, so a socket file still there was left by a daemon that died.
  if (unlink(socket_path.c_str()) != 0 && errno != ENOENT)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove the stale socket ", socket_path, ": ", std::strerror(errno)));
  return guard;
}

SocketGuard::~SocketGuard() {
  // Never touch a socket we did not claim: it belongs to the daemon holding the lock.
  if (lock_.held() && !socket_path_.empty() && !inherited_) unlink(socket_path_.c_str());
  lock_.Release();
}

absl::Status SocketGuard::SetSocketPermissions() const {
  if (inherited_) return absl::OkStatus();
  if (chmod(socket_path_.c_str(), 0660) != 0)
    return absl::InternalError(absl::StrCat("chmod 0660 ", socket_path_, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace kiln::server
