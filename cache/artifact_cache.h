// ArtifactCache: the artifact workspace as one object: blob store + SQLite index + entry
// sidecars (a copy of each row, from which a lost index is rebuilt) + per-key file locks +
// start-up recovery + verification + LRU size limit. Several processes may share one folder:
// <dir>/index.sqlite, <dir>/blobs, <dir>/entries, <dir>/locks, <dir>/tmp, <dir>/quarantine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/blob_store.h"
#include "cache/cache_index.h"
#include "cache/cache_key.h"
#include "cache/entry_sidecars.h"
#include "cache/file_lock.h"

namespace kiln::cache {

struct CacheOptions {
  std::string dir;
  uint64_t max_bytes = 10ull << 30;  // LRU eviction above this
  // Orphan blobs (no index row) younger than this are left alone: another process may be
  // between its blob rename and its index insert.
  std::chrono::seconds orphan_grace = std::chrono::minutes(10);
  // Told, once per repair, when a folder of the cache (blobs/, locks/, tmp/, quarantine/) went
  // missing while the cache was open and was recreated; the daemon logs it as a warning.
  BlobStore::RepairReport on_repair;
  // false: Commit evicts (in the committing caller's time). true: Commit only notes that an
  // eviction is due; the owner runs TakeDueEviction and EnforceSizeLimit on a thread of its
  // own (the engine's CacheUpkeep does: evicting thousands of entries took seconds inside the
  // request that triggered it, issue 15).
  bool evict_in_background = false;
};

// What a lookup expects of an entry, from the request; any difference is a corrupt or stale
// row (the key covers all of these), never served.
struct Compatibility {
  std::string uri;
  std::string arch;
  std::vector<std::string> options;
  uint32_t format_version = kCacheFormatVersion;
  std::string kiln_version;
  std::string nvrtc_version;
  std::string nvjitlink_version;
};

struct CachedArtifact {
  EntryRecord record;
  std::shared_ptr<const std::string> cubin;  // verified against record.sha256
  std::string blob_path;
};

struct RecoveryReport {
  int stale_temps_removed = 0;
  int rows_without_blob_removed = 0;
  int orphan_blobs_removed = 0;
  // Entries put back into the index from their sidecars: rows the index lost (index.sqlite
  // deleted or truncated, its WAL removed) or commits cut short between sidecar and row. The
  // owner says so when there are any.
  int entries_restored = 0;
  // Sidecars removed because they could not restore their entry (unreadable, or the blob
  // missing, damaged (quarantined) or of another size).
  int sidecars_removed = 0;
  // Blobs no entry names after that while the index had no entry at all: the index was lost
  // and these entries had no sidecar (written by a Kiln before sidecars). Their kernels are
  // compiled again on request; the blobs go as orphans after orphan_grace. The owner says so
  // loudly.
  int blobs_without_index = 0;
  uint64_t blobs_without_index_bytes = 0;
  // Entries evicted at open because the folder held more than max_bytes (a lowered limit).
  int evicted_over_limit = 0;
  uint64_t evicted_bytes = 0;
};

struct VerifyReport {
  struct Problem {
    std::string key;  // empty for an orphan blob
    std::string sha256;
    std::string problem;
    std::string action;
    std::string quarantine_path;
  };
  uint64_t entries_checked = 0;
  uint64_t blobs_checked = 0;
  std::vector<Problem> problems;
};

struct EvictReport {
  std::vector<std::string> evicted;
  uint64_t bytes_freed = 0;
};

class ArtifactCache {
 public:
  // Opens (creating folders 0755 and the index), then runs Recover() (its report is kept in
  // last_recovery()).
  static absl::StatusOr<std::unique_ptr<ArtifactCache>> Open(const CacheOptions& options);
  ~ArtifactCache();  // flushes buffered hits

  // Row → compatibility check → blob read → SHA-256 check. Returns nullopt on a miss. A row
  // that fails a check is removed and its blob quarantined (reported through `on_problem`),
  // and the lookup is a miss, so the caller recompiles transparently. Errors only when the
  // index or the blob cannot be read at all (busy, permissions, I/O). Does not count a hit:
  // call RecordHit for every hit served (from memory too), which also feeds LRU eviction.
  absl::StatusOr<std::optional<CachedArtifact>> Lookup(
      const std::string& key, const Compatibility& expect,
      const std::function<void(const std::string&)>& on_problem = nullptr);

  // The cross-process compile lock of one key (<dir>/locks/<aa>/<key>.lock; locks/ is
  // recreated when it went missing). Keys are
  // [A-Za-z0-9._-], at least 2 characters, not starting with '.' (INVALID_ARGUMENT otherwise).
  absl::StatusOr<FileLock> LockKey(const std::string& key, std::chrono::milliseconds timeout);

  // Writes the blob, then the entry's sidecar, then the row (record.sha256/size_bytes/created/
  // last_used are filled in here); then evicts least-recently-used entries while over max_bytes, never this one, or,
  // with evict_in_background, leaves that to the owner's thread (TakeDueEviction). A failing
  // eviction does not fail the commit (the entry is stored); the next commit or
  // EnforceSizeLimit call retries it.
  absl::StatusOr<EntryRecord> Commit(EntryRecord record, std::string_view cubin);

  // Counts a hit in memory; FlushHits (called every second by the daemon and at close)
  // writes the counts and last-use times in one transaction.
  void RecordHit(const std::string& key);
  absl::Status FlushHits();

  // Sweeps stale temps, removes rows whose blob is missing, puts back the entries whose
  // sidecar has no row (when the blob is there and verifies; removes the sidecar otherwise),
  // removes orphan blobs older than orphan_grace. Safe while other processes use the folder.
  absl::StatusOr<RecoveryReport> Recover();
  // Re-hashes every blob (of every row, and every orphan). A corrupt blob is quarantined and
  // its rows removed; a missing blob's rows are removed; a row whose size disagrees with its
  // blob is removed. Good orphans are left to Recover.
  absl::StatusOr<VerifyReport> Verify();
  // Removes every entry matching `filter` (an empty filter matches all). With dry_run, only
  // reports what would go. bytes_freed counts blobs no remaining row uses.
  absl::StatusOr<EvictReport> Evict(const EntryFilter& filter, bool dry_run);
  // Flushes hits, then removes least-recently-used entries (never keep_key) while what the
  // folder holds (distinct blobs, the index's files, the sidecars) exceeds max_bytes.
  absl::StatusOr<EvictReport> EnforceSizeLimit(const std::string& keep_key = "");
  // With evict_in_background: the key of the latest commit when an eviction is due since the
  // last call (to pass to EnforceSizeLimit as keep_key), else nullopt.
  std::optional<std::string> TakeDueEviction();

  CacheIndex& index() { return *index_; }
  BlobStore& blobs() { return *blobs_; }
  const CacheOptions& options() const { return options_; }
  uint64_t evictions() const;
  uint64_t quarantined() const;
  const RecoveryReport& last_recovery() const { return last_recovery_; }

 private:
  ArtifactCache() = default;
  struct Removal {
    bool removed = false;      // false: the row was gone or replaced meanwhile
    uint64_t bytes_freed = 0;  // the blob's size when no other row used it
  };
  // Row, then blob when unreferenced (in the row's write transaction).
  absl::StatusOr<Removal> RemoveEntry(const EntryRecord& record);
  // An orphan blob, unless a row names it by now: whether it was removed (Recover, Verify).
  absl::StatusOr<bool> RemoveOrphan(const std::string& sha256);
  // Recover's step for a sidecar without a row: true when its entry is back in the index;
  // false when the sidecar could not restore it (then removed). Errors only when the blob
  // cannot be read at all (permissions, I/O): the sidecar is kept for the next start.
  absl::StatusOr<bool> RestoreFromSidecar(const EntrySidecars::Found& found);
  // Lookup's failure path: removes the row, quarantines the blob (always when `blob_corrupt`,
  // else when no other row uses it), reports through on_problem.
  void DropUnusableEntry(const EntryRecord& record, const std::string& problem, bool blob_corrupt,
                         const std::function<void(const std::string&)>& on_problem);

  CacheOptions options_;
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<EntrySidecars> sidecars_;
  std::unique_ptr<CacheIndex> index_;
  std::mutex hits_mu_;
  std::map<std::string, std::pair<uint64_t, int64_t>> pending_hits_;
  std::mutex due_mu_;
  std::optional<std::string> due_eviction_;  // evict_in_background: the latest committed key
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> quarantined_{0};
  RecoveryReport last_recovery_;
};

}  // namespace kiln::cache
