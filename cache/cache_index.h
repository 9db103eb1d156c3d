// CacheIndex: the SQLite index of cache entries (WAL mode, busy timeout, one connection
// serialized by a mutex). Several processes may open the same file.
#pragma once

#include <cstdint>
#include <functional>
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
  std::string op;                 // exact, empty: any
  std::string uri_prefix;         // empty: any
  std::string arch;               // exact, empty: any
  std::vector<std::string> keys;  // any of these; empty: any
};

class CacheIndex {
 public:
  // The layout of the entries table, stored in meta.schema_version.
  static constexpr int kSchemaVersion = 1;
  // SQLite waits this long for another process's write lock before UNAVAILABLE.
  static constexpr int kBusyTimeoutMs = 15000;

  // Opens or creates <path> (schema versioned in a meta table; a newer, unknown schema is
  // FAILED_PRECONDITION naming both versions). WAL journal, synchronous=NORMAL.
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
  // (manifest_json, compile_log) unless asked. page_size <= 0 means 100; at most 1000. A token
  // from a List with another filter is INVALID_ARGUMENT.
  absl::StatusOr<Page> List(const EntryFilter& filter, int page_size, const std::string& page_token,
                            bool with_details = false);
  absl::StatusOr<std::vector<EntryRecord>> All();  // without the heavy fields

  // Adds buffered hits: key → (count, newest use time).
  absl::Status AddHits(const std::map<std::string, std::pair<uint64_t, int64_t>>& hits);

  struct Totals {
    uint64_t entries = 0;
    uint64_t bytes = 0;  // of distinct blobs: what the entries take on disk
    uint64_t blobs = 0;  // distinct blobs referenced
  };
  absl::StatusOr<Totals> GetTotals();
  // Entries ordered by last use, oldest first.
  absl::StatusOr<std::vector<EntryRecord>> LeastRecentlyUsed(int limit);
  absl::StatusOr<uint64_t> CountRowsWithBlob(const std::string& sha256);

  // Write operations that must stay atomic with blob files. Each runs inside one write
  // transaction (BEGIN IMMEDIATE: no other process or thread writes meanwhile); a hook that
  // fails rolls the transaction back. Hooks must not call this CacheIndex.
  // NOTES: a blob is only ever unlinked inside such a transaction after its rows were counted,
  // and a commit checks that its blob exists inside one, so a concurrent remover can never
  // leave a fresh row without its blob.
  using BlobHook = std::function<absl::Status(const std::string& sha256, uint64_t rows_left)>;

  // Upsert that first runs `before_write` (e.g. re-create the blob if it vanished), then
  // writes the row; when it replaced a row naming another blob, calls `on_replaced_blob`.
  absl::Status Upsert(const EntryRecord& record, const std::function<absl::Status()>& before_write,
                      const BlobHook& on_replaced_blob);
  // Removes the row of `key` only while it still names blob `sha256` (another process may
  // have replaced it since it was read), then calls `on_removed` with the rows left that
  // name that blob. false: the row was gone or changed, nothing done.
  absl::StatusOr<bool> RemoveIfBlob(const std::string& key, const std::string& sha256, const BlobHook& on_removed);
  // Runs `fn` only when no row names blob `sha256`. false: some row does, nothing done.
  absl::StatusOr<bool> RunIfUnreferenced(const std::string& sha256, const std::function<absl::Status()>& fn);

  const std::string& path() const { return path_; }

 private:
  CacheIndex() = default;
  absl::Status ConfigureConnection();  // WAL, synchronous, schema
  absl::Status InitSchema();
  // BEGIN IMMEDIATE; body; COMMIT (ROLLBACK on error). Caller holds mu_.
  absl::Status WriteTransaction(const std::string& what, const std::function<absl::Status()>& body);
  absl::StatusOr<uint64_t> CountRowsWithBlobLocked(const std::string& sha256);
  absl::StatusOr<std::optional<EntryRecord>> FindLocked(const std::string& key);

  sqlite3* db_ = nullptr;
  std::string path_;
  std::mutex mu_;
};

}  // namespace kiln::cache
