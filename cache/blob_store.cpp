// BlobStore: content-addressed, immutable blobs with crash-safe writes and temp sweeping.
#include "cache/blob_store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cache/file_io.h"
#include "cache/sha256.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace fs = std::filesystem;
using file_io::ErrnoStatus;

namespace {

// NOTES: this abseil's StrCat takes absl::string_view, not std::string_view, hence the
// std::string copies of names below (64 bytes, never on a hot path).
absl::Status CheckSha(std::string_view sha256) {
  if (IsSha256Hex(sha256)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("\"", std::string(sha256), "\" is not a blob name (64 lowercase hex digits of a SHA-256 expected)"));
}

// 16 hex digits, distinct per call within a process and unpredictable across processes.
// NOTES: the generator is re-seeded when the pid changes: a fork()ed child would otherwise
// repeat its parent's sequence.
std::string RandomTag() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng;
  thread_local pid_t seeded_for = -1;
  if (seeded_for != ::getpid()) {
    seeded_for = ::getpid();
    std::random_device device;
    rng.seed((static_cast<uint64_t>(device()) << 32) ^ device() ^ (static_cast<uint64_t>(seeded_for) << 20) ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  uint64_t value = rng() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  char bytes[8];
  for (int i = 7; i >= 0; --i, value >>= 8) bytes[i] = static_cast<char>(value & 0xFF);
  return LowerHex(std::string_view(bytes, sizeof(bytes)));
}

struct TempName {
  long pid = -1;  // -1: not one of ours
  std::string host;
};

// "<pid>-<random>-<host>.tmp"; the host may itself contain '-'.
TempName ParseTempName(std::string_view name) {
  TempName parsed;
  if (!name.ends_with(".tmp")) return parsed;
  name.remove_suffix(4);
  size_t first = name.find('-');
  if (first == std::string_view::npos) return parsed;
  size_t second = name.find('-', first + 1);
  if (second == std::string_view::npos) return parsed;
  long pid = 0;
  if (!absl::SimpleAtoi(absl::string_view(name.data(), first), &pid) || pid <= 0) return parsed;
  parsed.pid = pid;
  parsed.host = std::string(name.substr(second + 1));
  return parsed;
}

bool ProcessAlive(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
  return errno == EPERM;  // exists, owned by someone else
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlobStore>> BlobStore::Open(const std::string& root, RepairReport on_repair) {
  if (root.empty()) return absl::InvalidArgumentError("blob store root is empty; pass the cache folder");
  for (const char* sub : {"blobs", "tmp", "quarantine"}) {
    KILN_ABSL_RETURN_IF_ERROR(file_io::MakeDirs(absl::StrCat(root, "/", sub)));
  }
  return std::unique_ptr<BlobStore>(new BlobStore(root, std::move(on_repair)));
}

absl::Status BlobStore::Recreate(const std::string& sub) const {
  const std::string dir = absl::StrCat(root_, "/", sub);
  KILN_ABSL_ASSIGN_OR_RETURN(bool created, file_io::RecreateDir(dir));
  if (created && on_repair_)
    on_repair_(absl::StrCat("the cache folder ", dir,
                            " was missing (removed while the cache was in use?); recreated it. Entries whose blobs "
                            "went with it are recompiled on their next request; Verify lists them"));
  return absl::OkStatus();
}

std::string BlobStore::PathOf(std::string_view sha256_view) const {
  const std::string sha256(sha256_view);
  return absl::StrCat(root_, "/blobs/", sha256.substr(0, 2), "/", sha256);
}

bool BlobStore::Exists(std::string_view sha256) const {
  if (!IsSha256Hex(sha256)) return false;
  struct stat st {};
  return ::stat(PathOf(sha256).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string BlobStore::NewTempPath(long pid) const {
  return absl::StrCat(root_, "/tmp/", pid, "-", RandomTag(), "-", file_io::HostName(), ".tmp");
}

absl::StatusOr<std::string> BlobStore::Put(std::string_view bytes) {
  const std::string sha = Sha256Hex(bytes);
  const std::string final_path = PathOf(sha);
  if (Exists(sha)) {
    auto existing = Read(sha);
    if (existing.ok()) return sha;
    // A corrupt blob under this name is replaced below (rename is atomic); other errors
    // (permissions, I/O) would hit the write too, so they are reported now.
    if (existing.status().code() != absl::StatusCode::kDataLoss &&
        existing.status().code() != absl::StatusCode::kNotFound)
      return existing.status();
  }
  const std::string fan_dir = absl::StrCat(root_, "/blobs/", sha.substr(0, 2));
  int made = ::mkdir(fan_dir.c_str(), 0755);
  if (made != 0 && errno == ENOENT) {  // blobs/ itself is gone: recreate it, then try again
    KILN_ABSL_RETURN_IF_ERROR(Recreate("blobs"));
    made = ::mkdir(fan_dir.c_str(), 0755);
  }
  if (made == 0) {
    KILN_ABSL_RETURN_IF_ERROR(file_io::FsyncDir(root_ + "/blobs"));
  } else if (errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("create blob folder ", fan_dir), "check that the cache folder is writable");
  }

  const std::string temp = NewTempPath(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {  // tmp/ is gone
    KILN_ABSL_RETURN_IF_ERROR(Recreate("tmp"));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0)
    return ErrnoStatus(errno, absl::StrCat("create temp file ", temp),
                       "check that the cache folder's tmp/ is writable");
  // NOTES: the flock tells SweepStaleTemps in other processes that this temp is live, even
  // when our pid means nothing to them (another pid namespace on the same file system).
  ::flock(fd, LOCK_EX | LOCK_NB);
  auto fail = [&](absl::Status status) {
    ::unlink(temp.c_str());
    ::close(fd);
    return status;
  };
  if (auto status = file_io::WriteAll(fd, bytes, temp); !status.ok()) return fail(status);
  // Read-only, and no more readable than the process's umask lets a new file be (the temp was
  // created 0644 & ~umask): under kilnd.service's UMask=0027 a blob is 0440, readable by the
  // socket group's clients (prefer_blob_path) and by no one else.
  struct stat created {};
  if (::fstat(fd, &created) != 0) return fail(ErrnoStatus(errno, absl::StrCat("stat ", temp)));
  if (::fchmod(fd, created.st_mode & 0444) != 0) return fail(ErrnoStatus(errno, absl::StrCat("chmod ", temp)));
  if (::fsync(fd) != 0) return fail(ErrnoStatus(errno, absl::StrCat("fsync ", temp)));
  if (::rename(temp.c_str(), final_path.c_str()) != 0)
    return fail(ErrnoStatus(errno, absl::StrCat("rename ", temp, " to ", final_path)));
  ::close(fd);
  KILN_ABSL_RETURN_IF_ERROR(file_io::FsyncDir(fan_dir));
  return sha;
}

absl::StatusOr<std::string> BlobStore::Read(std::string_view sha256_view) const {
  KILN_ABSL_RETURN_IF_ERROR(CheckSha(sha256_view));
  const std::string sha256(sha256_view);
  const std::string path = PathOf(sha256);
  auto bytes = file_io::ReadWholeFile(path);
  if (!bytes.ok()) {
    if (bytes.status().code() == absl::StatusCode::kNotFound)
      return absl::NotFoundError(absl::StrCat("blob ", sha256, " is not in the store (", path, ")"));
    return bytes.status();
  }
  std::string actual = Sha256Hex(*bytes);
  if (actual != sha256) {
    return absl::DataLossError(absl::StrCat("blob ", path, " is corrupt: expected sha256 ", sha256, ", found ", actual,
                                            " over ", bytes->size(),
                                            " bytes; quarantine it (ArtifactCache::Verify does) and recompile"));
  }
  return std::move(*bytes);
}

absl::StatusOr<std::string> BlobStore::Quarantine(std::string_view sha256_view, std::string_view reason_view) {
  KILN_ABSL_RETURN_IF_ERROR(CheckSha(sha256_view));
  const std::string sha256(sha256_view);
  const std::string reason(reason_view);
  const std::string source = PathOf(sha256);
  // Its folder first: a rename's ENOENT below then means the blob is gone.
  KILN_ABSL_RETURN_IF_ERROR(Recreate("quarantine"));
  const std::string base = absl::StrCat(root_, "/quarantine/", sha256, ".", file_io::NowUnixMs());
  std::string target = base;
  struct stat st {};
  for (int n = 1; ::lstat(target.c_str(), &st) == 0; ++n) target = absl::StrCat(base, "-", n);
  if (::rename(source.c_str(), target.c_str()) != 0) {
    if (errno == ENOENT)
      return absl::NotFoundError(
          absl::StrCat("cannot quarantine blob ", sha256, ": it is not in the store (", source, ")"));
    return ErrnoStatus(errno, absl::StrCat("move blob ", source, " to ", target));
  }
  std::string why = absl::StrCat("blob: ", sha256, "\nfrom: ", source, "\nreason: ", reason,
                                 "\nquarantined_unix_ms: ", file_io::NowUnixMs(), "\npid: ", ::getpid(),
                                 "\nhost: ", file_io::HostName(), "\n");
  KILN_ABSL_RETURN_IF_ERROR(file_io::WriteSmallFile(target + ".why", why));
  (void)file_io::FsyncDir(root_ + "/quarantine");
  return target;
}

absl::Status BlobStore::Remove(std::string_view sha256) {
  KILN_ABSL_RETURN_IF_ERROR(CheckSha(sha256));
  const std::string path = PathOf(sha256);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return ErrnoStatus(errno, absl::StrCat("remove blob ", path), "check the permissions of the blobs folder");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BlobStore::BlobInfo>> BlobStore::List() const {
  std::vector<BlobInfo> blobs;
  std::error_code ec;
  const fs::path blobs_dir = root_ + "/blobs";
  for (fs::directory_iterator fan(blobs_dir, ec), end; !ec && fan != end; fan.increment(ec)) {
    const std::string prefix = fan->path().filename().string();
    if (prefix.size() != 2) continue;
    std::error_code inner;
    for (fs::directory_iterator it(fan->path(), inner); !inner && it != end; it.increment(inner)) {
      std::string name = it->path().filename().string();
      if (!IsSha256Hex(name) || name.compare(0, 2, prefix) != 0) continue;
      struct stat st {};
      if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone meanwhile
      BlobInfo info;
      info.sha256 = std::move(name);
      info.size = static_cast<uint64_t>(st.st_size);
      info.modified = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
      blobs.push_back(std::move(info));
    }
  }
  if (ec == std::errc::no_such_file_or_directory) return blobs;  // blobs/ removed: no blobs; Put recreates it
  if (ec)
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("cannot list ", blobs_dir.string(), ": ", ec.message()));
  return blobs;
}

absl::StatusOr<int> BlobStore::SweepStaleTemps(std::chrono::seconds max_age) {
  const std::string tmp_dir = root_ + "/tmp";
  const auto now = std::chrono::system_clock::now();
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(tmp_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;                       // renamed or removed meanwhile
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // its writer is still at work
      ::close(fd);
      continue;
    }
    const TempName name = ParseTempName(it->path().filename().string());
    const bool ours_to_judge = name.pid > 0 && name.host == file_io::HostName();
    const auto modified = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                                        std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    const bool too_old = now - modified > max_age;
    // NOTES: a writer holds its flock from open to rename, except for the instant between
    // open() and flock(); there its pid is alive, which the pid test below respects.
    const bool writer_dead = ours_to_judge && !ProcessAlive(name.pid);
    if (writer_dead || too_old) {
      if (::unlink(path.c_str()) == 0) ++removed;
    }
    ::close(fd);
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("cannot list temp folder ", tmp_dir, ": ", ec.message()));
  return removed;
}

}  // namespace kiln::cache
