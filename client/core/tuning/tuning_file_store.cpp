#include "client/core/tuning/tuning_file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <google/protobuf/util/json_util.h>

#include "client/core/api/invalid_argument.h"
#include "proto/tuning_checks.h"
#include "proto/tuning_environment.h"

namespace kiln::client {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  const StatusCode code = e == EACCES || e == EPERM || e == EROFS ? StatusCode::kPermissionDenied
                          : e == ENOSPC || e == EDQUOT            ? StatusCode::kResourceExhausted
                                                                  : StatusCode::kFailedPrecondition;
  return Status(code, "KILN_TUNING_FILE " + path + ": " + what + ": " + std::strerror(e));
}

// An fd closed at scope exit (closing it also drops a flock held through it).
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string KeyOf(const TuningRecord& r) {
  return r.op() + '\n' + r.bucket() + '\n' + proto::TuningEnvironmentKey(r.environment());
}

}  // namespace

StatusOr<std::vector<TuningRecord>> ParseTuningFile(const std::string& path, const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return std::vector<TuningRecord>();
  v1::TuningFile file;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (auto s = google::protobuf::util::JsonStringToMessage(text, &file, options); !s.ok())
    return InvalidArgument("KILN_TUNING_FILE " + path + " is not a tuning file (" + s.message().ToString() +
                           "); it may come from a newer Kiln, or be damaged: move it aside");
  std::vector<TuningRecord> records(file.records().begin(), file.records().end());
  for (size_t i = 0; i < records.size(); ++i) {
    if (auto p = proto::TuningRecordProblem("records[" + std::to_string(i) + "]", records[i]); !p.empty())
      return InvalidArgument("KILN_TUNING_FILE " + path + ": " + p);
  }
  return records;
}

std::string TuningFileText(const std::vector<TuningRecord>& records) {
  v1::TuningFile file;
  for (const TuningRecord& r : records) *file.add_records() = r;
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(file, &text, options);
  return text;
}

FileTuningStore::FileTuningStore(std::string path, std::chrono::milliseconds recheck)
    : path_(std::move(path)), recheck_(recheck) {}

Status FileTuningStore::ReadNow(std::vector<TuningRecord>* records, Stamp* stamp) const {
  records->clear();
  *stamp = Stamp();
  Fd in{open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return errno == ENOENT ? OkStatus() : Errno("cannot open it", path_);
  struct stat st {};
  if (fstat(in.fd, &st) != 0) return Errno("cannot stat it", path_);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(in.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read it", path_);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  KILN_ASSIGN_OR_RETURN(*records, ParseTuningFile(path_, text));
  *stamp = Stamp{st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  return OkStatus();
}

Status FileTuningStore::RefreshLocked(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (loaded_ && !force && now - checked_ < recheck_) return OkStatus();
  checked_ = now;
  if (loaded_ && !force) {
    struct stat st {};
    Stamp current;
    if (stat(path_.c_str(), &st) == 0)
      current = Stamp{st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    if (current == stamp_) return OkStatus();
  }
  std::vector<TuningRecord> records;
  Stamp stamp;
  KILN_RETURN_IF_ERROR(ReadNow(&records, &stamp));
  records_ = std::move(records);
  stamp_ = stamp;
  loaded_ = true;
  return OkStatus();
}

StatusOr<std::vector<TuningRecord>> FileTuningStore::Records() {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(RefreshLocked(false));
  return records_;
}

StatusOr<TuningLookup> FileTuningStore::Lookup(const std::string& op, const std::string& bucket,
                                               const TuningEnvironment& environment) {
  std::lock_guard<std::mutex> lock(mu_);
  KILN_RETURN_IF_ERROR(RefreshLocked(false));
  const std::string wanted = proto::TuningEnvironmentKey(environment);
  TuningLookup out;
  std::vector<TuningEnvironment> others;
  for (const TuningRecord& r : records_) {
    if (r.op() != op || r.bucket() != bucket) continue;
    if (proto::TuningEnvironmentKey(r.environment()) == wanted) {
      out.record = r;
      return out;
    }
    others.push_back(r.environment());
  }
  if (!others.empty()) out.mismatch = proto::DescribeTuningMismatch(others, environment);
  return out;
}

Status FileTuningStore::Put(const TuningRecord& record) {
  if (auto p = proto::TuningRecordProblem("record", record); !p.empty()) return InvalidArgument(p);
  std::lock_guard<std::mutex> lock(mu_);
  // NOTES: the lock is a file of its own: the data file is replaced by rename, so a lock held
  // on it would be on a file nobody reads any more.
  const std::string lock_path = path_ + ".lock";
  Fd lock_fd{open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (lock_fd.fd < 0) return Errno("cannot open its lock file " + lock_path, path_);
  while (flock(lock_fd.fd, LOCK_EX) != 0) {
    if (errno != EINTR) return Errno("cannot lock " + lock_path, path_);
  }
  // Under the lock: what other processes wrote since our last read counts.
  std::vector<TuningRecord> records;
  Stamp stamp;
  KILN_RETURN_IF_ERROR(ReadNow(&records, &stamp));
  const std::string key = KeyOf(record);
  bool replaced = false;
  for (TuningRecord& r : records) {
    if (KeyOf(r) == key) {
      r = record;
      replaced = true;
    }
  }
  if (!replaced) records.push_back(record);

  const std::string temp = path_ + ".tmp." + std::to_string(getpid());
  {
    Fd out{open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (out.fd < 0) return Errno("cannot create " + temp, path_);
    if (!WriteAll(out.fd, TuningFileText(records)) || fsync(out.fd) != 0) {
      Status s = Errno("cannot write " + temp, path_);
      unlink(temp.c_str());
      return s;
    }
  }
  if (rename(temp.c_str(), path_.c_str()) != 0) {
    Status s = Errno("cannot rename " + temp + " over it", path_);
    unlink(temp.c_str());
    return s;
  }
  // The rename itself is durable only once the folder is synced.
  const size_t slash = path_.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  Fd dir{open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) (void)fsync(dir.fd);
  return RefreshLocked(true);
}

}  // namespace kiln::client
