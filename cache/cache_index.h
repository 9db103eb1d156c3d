// CacheIndex: the SQLite index of cache entries (WAL mode, busy timeout, one connection
// serialized by a mutex). Several processes may open the same file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct sqlite3;

namespace kiln::cache {

// One cache entry: the key, what it was built from (compatibility metadata, validated before
// the blob is served), and bookkeeping. *_json fields are opaque to the cache.
struct EntryRecord {
  std::string key;
  std::string uri;
  std::string op;
  std::map<std::string, std::string> params;
  std::string arch;
  std::vector<std::string> options;
  std::string sha256;  // of the blob
  uint64_t size_bytes = 0;
  uint32_t format_version = 0;
  std::string kiln_version;
  std::string nvrtc_version;
  std::string nvjitlink_version;
  std::string cuda_headers_version;
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  uint64_t hit_count = 0;
  double compile_ms = 0;
  std::string job_id;
  std::string kernels_json;   // kernel names and attributes
  std::string launch_json;    // launch hints
  std::string manifest_json;  // the job's manifest
  std::string compile_log;
};

struct EntryFilter {
  std::string op;          // exact, empty: any
  std::string uri_prefix;  // empty: any
  std::string arch;        // exact, empty: any
  std::vector<std::string> keys;  // any of these; empty: any
};

class CacheIndex {
 public:
  // Opens or creates <path> (schema versioned in a meta table; a newer, unknown schema is
  // FAILED_PRECONDITION naming both versions).
  static absl::StatusOr<std::unique_ptr<CacheIndex>> Open(const std::string& path);
  ~CacheIndex();

  absl::StatusOr<std::optional<EntryRecord>> Find(const std::string& key);
  // Keys starting with `prefix` (at most `limit`).
  absl::StatusOr<std::vector<EntryRecord>> FindByPrefix(const std::string& prefix, int limit);
  absl::Status Upsert(const EntryRecord& record);
  absl::Status Remove(const std::string& key);

  struct Page {
    std::vector<EntryRecord> entries;
    std::string next_page_token;  // empty on the last page
    uint64_t total_matching = 0;
  };
  // Ordered by key; the token is opaque to callers. Without the heavy fields
  // (manifest_json, compile_log) unless asked.
  absl::StatusOr<Page> List(const EntryFilter& filter, int page_size,
                            const std::string& page_token, bool with_details = false);
  absl::StatusOr<std::vector<EntryRecord>> All();  // without the heavy fields

  // Adds buffered hits: key → (count, newest use time).
  absl::Status AddHits(const std::map<std::string, std::pair<uint64_t, int64_t>>& hits);

  struct Totals {
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };
  absl::StatusOr<Totals> GetTotals();
  // Entries ordered by last use, oldest first.
  absl::StatusOr<std::vector<EntryRecord>> LeastRecentlyUsed(int limit);
  absl::StatusOr<uint64_t> CountRowsWithBlob(const std::string& sha256);

 private:
  CacheIndex() = default;
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

}  // namespace kiln::cache
