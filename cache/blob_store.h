// BlobStore: immutable cubins addressed by their SHA-256, under <root>/blobs/<aa>/<sha256>.
// Writes go temp file (<root>/tmp/<pid>-<random>-<host>.tmp, flock'ed by its writer) → fsync
// → rename → fsync of the folder, so a crash at any point leaves no half blob under blobs/.
// Blobs are made read-only (0444). Thread-safe and safe across processes: it holds no state
// besides the root.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::cache {

class BlobStore {
 public:
  // Told, once per repair, when the store recreates one of its folders that went missing while
  // it ran (someone removed blobs/ under a running daemon); the daemon logs it as a warning.
  using RepairReport = std::function<void(const std::string&)>;

  // Creates <root>/blobs, tmp and quarantine (0755) when missing. Later, a write that finds one
  // of them missing recreates it (and tells `on_repair`) rather than failing.
  static absl::StatusOr<std::unique_ptr<BlobStore>> Open(const std::string& root, RepairReport on_repair = nullptr);

  // Stores bytes; returns their SHA-256. Storing bytes that are already there is a no-op (a
  // blob already there whose bytes do not match its name is replaced).
  absl::StatusOr<std::string> Put(std::string_view bytes);

  // Recreates <root>/<sub> when it is missing, telling on_repair when this call made it.
  absl::Status Recreate(const std::string& sub) const;

  // Reads a blob and checks its hash: NOT_FOUND when absent, DATA_LOSS (naming the blob, the
  // expected and the actual hash) when the bytes do not match.
  absl::StatusOr<std::string> Read(std::string_view sha256) const;

  std::string PathOf(std::string_view sha256) const;
  bool Exists(std::string_view sha256) const;

  // Moves a blob to <root>/quarantine/<sha256>.<unix-ms> with a .why file beside it; returns
  // the new path. NOT_FOUND when absent.
  absl::StatusOr<std::string> Quarantine(std::string_view sha256, std::string_view reason);
  absl::Status Remove(std::string_view sha256);  // OK when already absent

  struct BlobInfo {
    std::string sha256;
    uint64_t size = 0;
    std::chrono::system_clock::time_point modified;
  };
  absl::StatusOr<std::vector<BlobInfo>> List() const;  // empty when blobs/ is missing

  // Removes temp files whose writer is gone: the pid in the name is not alive on this host,
  // or the file is older than `max_age` (another host or pid namespace may share the folder).
  // A temp whose writer still holds its flock is never removed, whatever its age or pid.
  // Returns how many were removed.
  absl::StatusOr<int> SweepStaleTemps(std::chrono::seconds max_age = std::chrono::hours(1));

  // A fresh temp file path under <root>/tmp for a writer with process id `pid` on this host
  // (tests use it to stage the temps of other processes).
  std::string NewTempPath(long pid) const;

  const std::string& root() const { return root_; }

 private:
  BlobStore(std::string root, RepairReport on_repair) : root_(std::move(root)), on_repair_(std::move(on_repair)) {}
  std::string root_;
  RepairReport on_repair_;
};

}  // namespace kiln::cache
