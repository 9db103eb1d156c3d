// FileIo: the POSIX file primitives the cache is built on (whole reads, full writes, fsync of
// a folder, folder creation), each returning an absl::Status that names the path and errno.
// Internal to cache/.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::cache::file_io {

// A Status for errno `err` while doing `what` (e.g. "open blob /x/y"): the code follows errno
// (ENOENT → NOT_FOUND, EACCES → PERMISSION_DENIED, ...), the message adds `hint` when given.
absl::Status ErrnoStatus(int err, absl::string_view what, absl::string_view hint = "");

absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path);
// Writes `content` to `path` (replacing it) and fsyncs it.
absl::Status WriteSmallFile(const std::string& path, std::string_view content);

// fsync of a folder, so that a rename or create inside it survives a crash.
absl::Status FsyncDir(const std::string& dir);
// Creates `dir` and missing parents (0755); OK when it exists as a folder.
absl::Status MakeDirs(const std::string& dir);
// MakeDirs that says whether this call created `dir` itself (false: it was there, or another
// thread or process made it first), so that a repair is reported once, by whoever made it.
absl::StatusOr<bool> RecreateDir(const std::string& dir);

int64_t NowUnixMs();
// This host's name, restricted to [A-Za-z0-9._-] (it becomes part of file names).
const std::string& HostName();

}  // namespace kiln::cache::file_io
