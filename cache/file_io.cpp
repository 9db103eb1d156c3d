// FileIo: POSIX file primitives with Status errors.
#include "cache/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::cache::file_io {

absl::Status ErrnoStatus(int err, absl::string_view what, absl::string_view hint) {
  std::string message = absl::StrCat("cannot ", what, ": ", std::strerror(err));
  if (!hint.empty()) absl::StrAppend(&message, "; ", hint);
  return absl::Status(absl::ErrnoToStatusCode(err), message);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  std::string data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("write ", path), "is the disk full?");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteSmallFile(const std::string& path, std::string_view content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", path));
  absl::Status status = WriteAll(fd, content, path);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, absl::StrCat("fsync ", path));
  ::close(fd);
  return status;
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open folder ", dir, " to fsync it"));
  absl::Status status;
  if (::fsync(fd) != 0 && errno != EINVAL)  // EINVAL: the file system cannot sync folders
    status = ErrnoStatus(errno, absl::StrCat("fsync folder ", dir));
  ::close(fd);
  return status;
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("cannot create a folder with an empty name");
  // Component by component with mode 0755 (std::filesystem would use 0777 & ~umask).
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      return ErrnoStatus(errno, absl::StrCat("create folder ", part), "check that its parent exists and is writable");
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists but is not a folder; move it aside or choose another path"));
  return absl::OkStatus();
}

absl::StatusOr<bool> RecreateDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != ENOENT)
    return ErrnoStatus(errno, absl::StrCat("create folder ", dir), "check that the cache folder is writable");
  // Its parent is gone too (the whole cache folder was removed): make the parents, then it.
  const size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto made = MakeDirs(dir.substr(0, slash)); !made.ok()) return made;
  }
  if (::mkdir(dir.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  return ErrnoStatus(errno, absl::StrCat("create folder ", dir), "check that the cache folder is writable");
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const std::string& HostName() {
  static const std::string name = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return std::string("localhost");
    std::string out;
    for (const char* p = buf; *p != '\0'; ++p) {
      char c = *p;
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-';
      out.push_back(ok ? c : '_');
    }
    return out;
  }();
  return name;
}

}  // namespace kiln::cache::file_io
