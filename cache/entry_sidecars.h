// EntrySidecars: a copy of each entry's index row beside the blobs, so that a lost index is
// rebuilt from the cache folder instead of every kernel compiling again (issue 15: an index
// deleted, truncated or cut from its WAL silently dropped every entry).
//
// <dir>/entries/<aa>/<key>.json holds the row as JSON without what only the index needs to
// keep (the compile log, hit count, last use). ArtifactCache writes it at commit, after the
// blob and before the row (temp in <dir>/tmp, fsync, rename), and removes it after the row. So
// an indexed entry has its sidecar, and a sidecar without a row is a commit cut short, an
// eviction cut short, or a row the index lost: Recover puts back each one whose blob is there
// and verifies, and removes the rest. Internal to cache/.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/blob_store.h"
#include "cache/cache_index.h"

namespace kiln::cache {

// The sidecar's text for `record` (compile_log, hit_count and last_used_unix_ms left out).
std::string SidecarJson(const EntryRecord& record);
// The record a sidecar holds (hit_count 0, last_used = created). DATA_LOSS naming `path` for
// text that is not a sidecar of this format.
absl::StatusOr<EntryRecord> ParseSidecar(const std::string& text, const std::string& path);

class EntrySidecars {
 public:
  // `blobs` (the same folder's) gives the temp files and recreates tmp/ when it went missing.
  EntrySidecars(std::string dir, const BlobStore* blobs) : dir_(std::move(dir)), blobs_(blobs) {}

  std::string PathOf(const std::string& key) const;  // <dir>/entries/<aa>/<key>.json
  // Writes the sidecar of record.key (replacing it) through a temp file in <dir>/tmp.
  absl::Status Write(const EntryRecord& record) const;
  // Removes the sidecar of `key`; OK when it is absent.
  absl::Status Remove(const std::string& key) const;

  struct Found {
    std::string key;  // from the file name
    std::string path;
    uint64_t bytes = 0;
    std::chrono::system_clock::time_point modified;
  };
  // Every sidecar file (empty when entries/ is missing); not read.
  absl::StatusOr<std::vector<Found>> List() const;
  // The bytes the sidecars take (for the size limit).
  absl::StatusOr<uint64_t> Bytes() const;

 private:
  std::string dir_;
  const BlobStore* blobs_;
};

}  // namespace kiln::cache
