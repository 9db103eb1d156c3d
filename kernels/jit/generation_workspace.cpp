#include "kernels/jit/generation_workspace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path, int error) {
  std::string message = absl::StrCat(std::string(what), " ", path, ": ", strerror(error));
  if (error == EACCES || error == EROFS || error == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat(message, " (the generated-sources workspace must be writable; point it elsewhere with "
                              "the daemon's flag or environment variable)"));
  }
  return absl::InternalError(message);
}

// A URI or file name used as one path component of the workspace: never "..", never a '/'.
bool IsSafeComponent(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= 255 &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.'; });
}

bool SameContent(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) == content.size();
  char buffer[64 * 1024];
  size_t offset = 0;
  while (same) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      same = n == 0 && offset == content.size();
      break;
    }
    same = offset + n <= content.size() && memcmp(buffer, content.data() + offset, n) == 0;
    offset += n;
  }
  close(fd);
  return same;
}

}  // namespace

absl::StatusOr<bool> WriteIfDifferent(const std::string& path, const std::string& content) {
  if (SameContent(path, content)) return false;
  // A hidden temporary beside the target (same file system, so rename() is atomic).
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
  const size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  std::string temp;
  temp.reserve(path.size() + 8);
  temp.append(path, 0, name_start).append(".").append(path, name_start, std::string::npos).append(".XXXXXX");
  int fd = mkstemp(temp.data());
  if (fd < 0) return ErrnoError("cannot create a temporary file in", folder, errno);
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      close(fd);
      unlink(temp.c_str());
      return ErrnoError("cannot write", temp, error);
    }
    written += static_cast<size_t>(n);
  }
  // Readable like any source file (mkstemp makes 0600); the umask still applies.
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0644 & ~mask);
  if (close(fd) != 0) {
    int error = errno;
    unlink(temp.c_str());
    return ErrnoError("cannot write", temp, error);
  }
  // rename() replaces atomically: a reader sees the old file or the new one, never a mix.
  if (rename(temp.c_str(), path.c_str()) != 0) {
    int error = errno;
    unlink(temp.c_str());
    return ErrnoError("cannot rename a temporary file onto", path, error);
  }
  return true;
}

absl::StatusOr<std::string> MaterializeSpec(const JitSpec& spec, const std::string& gen_dir) {
  if (!IsSafeComponent(spec.uri)) {
    return absl::InvalidArgumentError(absl::StrCat("spec URI '", spec.uri, "' cannot name a folder of the workspace"));
  }
  if (gen_dir.empty()) return absl::InvalidArgumentError("no generated-sources workspace given");
  std::string folder = absl::StrCat(gen_dir, "/", spec.uri);
  for (const std::string& dir : {gen_dir, folder}) {
    std::error_code error;
    bool created = std::filesystem::create_directories(dir, error);
    if (error) return ErrnoError("cannot create", dir, error.value());
    if (created) chmod(dir.c_str(), 0755);  // an existing (shared) folder keeps its mode
  }
  for (const auto* files : {&spec.headers, &spec.units}) {
    for (const SourceFile& file : *files) {
      if (!IsSafeComponent(file.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("source name '", file.name, "' of spec ", spec.uri, " cannot name a file"));
      }
      KILN_ABSL_RETURN_IF_ERROR(WriteIfDifferent(absl::StrCat(folder, "/", file.name), file.content).status());
    }
  }
  return folder;
}

}  // namespace kiln::kernels
