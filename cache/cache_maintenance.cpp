// ArtifactCache maintenance: start-up recovery, full verification, eviction by filter and
// by size (LRU), and entry removal that frees a blob only when no row uses it any more.
#include <sys/stat.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "cache/artifact_cache.h"
#include "cache/file_io.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

constexpr int kEvictionBatch = 64;
constexpr int kListPage = 1000;

// The index's files (the database, its WAL and shared-memory file): part of what the cache
// folder holds, so part of what --cache-max-mb bounds.
uint64_t IndexFilesBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st {};
    if (::stat(absl::StrCat(dir, "/index.sqlite", suffix).c_str(), &st) == 0) total += uint64_t(st.st_size);
  }
  return total;
}

}  // namespace

absl::StatusOr<ArtifactCache::Removal> ArtifactCache::RemoveEntry(const EntryRecord& record) {
  Removal removal;
  auto removed = index_->RemoveIfBlob(record.key, record.sha256,
                                      [&](const std::string& sha, uint64_t rows_left) -> absl::Status {
                                        if (rows_left > 0) return absl::OkStatus();
                                        auto status = blobs_->Remove(sha);
                                        if (status.ok()) removal.bytes_freed = record.size_bytes;
                                        return status;
                                      });
  if (!removed.ok())
    return absl::Status(removed.status().code(),
                        absl::StrCat("removing cache entry ", record.key, ": ", removed.status().message()));
  removal.removed = *removed;
  if (removal.removed) (void)sidecars_->Remove(record.key);  // a leftover goes at the next Recover
  if (!removal.removed) removal.bytes_freed = 0;
  return removal;
}

absl::StatusOr<bool> ArtifactCache::RemoveOrphan(const std::string& sha256) {
  // Decided inside a write transaction: a committer checks its blob in one too.
  return index_->RunIfUnreferenced(sha256, [&] { return blobs_->Remove(sha256); });
}

absl::StatusOr<RecoveryReport> ArtifactCache::Recover() {
  RecoveryReport report;
  KILN_ABSL_ASSIGN_OR_RETURN(report.stale_temps_removed, blobs_->SweepStaleTemps());

  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<EntryRecord> rows, index_->All());
  std::set<std::string> referenced;
  for (const auto& row : rows) {
    if (blobs_->Exists(row.sha256)) {
      referenced.insert(row.sha256);
      continue;
    }
    KILN_ABSL_ASSIGN_OR_RETURN(bool removed, index_->RemoveIfBlob(row.key, row.sha256, nullptr));
    if (removed) {
      ++report.rows_without_blob_removed;
      (void)sidecars_->Remove(row.key);
    }
  }

  // Sidecars without a row: rows the index lost, or a commit or an eviction cut short.
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(row.key);
  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<EntrySidecars::Found> sidecars, sidecars_->List());
  for (const auto& found : sidecars) {
    if (keys.count(found.key) > 0) continue;
    auto restored = RestoreFromSidecar(found);
    if (!restored.ok()) continue;  // the blob could not be read now: kept for the next start
    if (*restored) {
      ++report.entries_restored;
      KILN_ABSL_ASSIGN_OR_RETURN(std::optional<EntryRecord> row, index_->Find(found.key));
      if (row.has_value()) referenced.insert(row->sha256);
    } else {
      ++report.sidecars_removed;
    }
  }

  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<BlobStore::BlobInfo> blobs, blobs_->List());
  if (rows.empty()) {
    for (const auto& blob : blobs) {
      if (referenced.count(blob.sha256) > 0) continue;
      ++report.blobs_without_index;
      report.blobs_without_index_bytes += blob.size;
    }
  }
  const auto now = std::chrono::system_clock::now();
  for (const auto& blob : blobs) {
    if (referenced.count(blob.sha256) > 0) continue;
    // NOTES: a young orphan may be a commit between its blob rename and its row insert.
    if (now - blob.modified < options_.orphan_grace) continue;
    KILN_ABSL_ASSIGN_OR_RETURN(bool removed, RemoveOrphan(blob.sha256));
    if (removed) ++report.orphan_blobs_removed;
  }
  return report;
}

absl::StatusOr<bool> ArtifactCache::RestoreFromSidecar(const EntrySidecars::Found& found) {
  auto drop = [&]() -> absl::StatusOr<bool> {
    (void)sidecars_->Remove(found.key);
    return false;
  };
  auto text = file_io::ReadWholeFile(found.path);
  if (!text.ok()) return text.status().code() == absl::StatusCode::kNotFound ? false : drop();
  auto record = ParseSidecar(*text, found.path);
  if (!record.ok() || record->key != found.key) return drop();
  auto bytes = blobs_->Read(record->sha256);
  if (!bytes.ok()) {
    switch (bytes.status().code()) {
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kInvalidArgument:  // the sidecar names no valid blob
        return drop();
      case absl::StatusCode::kDataLoss:
        if (blobs_->Quarantine(record->sha256, std::string(bytes.status().message())).ok()) quarantined_.fetch_add(1);
        return drop();
      default: return bytes.status();
    }
  }
  if (bytes->size() != record->size_bytes) return drop();
  // Inside the write transaction: an evictor in another process may have removed the blob since
  // it was read; it is put back from the bytes just verified.
  KILN_ABSL_RETURN_IF_ERROR(index_->Upsert(
      *record,
      [&]() -> absl::Status {
        if (blobs_->Exists(record->sha256)) return absl::OkStatus();
        return blobs_->Put(*bytes).status();
      },
      [&](const std::string& old_sha, uint64_t rows_left) -> absl::Status {
        return rows_left == 0 ? blobs_->Remove(old_sha) : absl::OkStatus();
      }));
  return true;
}

absl::StatusOr<VerifyReport> ArtifactCache::Verify() {
  VerifyReport report;
  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<EntryRecord> rows, index_->All());
  std::map<std::string, std::vector<EntryRecord>> by_blob;
  for (auto& row : rows) by_blob[row.sha256].push_back(std::move(row));

  auto remove_rows = [&](const std::vector<EntryRecord>& group, const std::string& problem, const std::string& action,
                         const std::string& quarantine_path) {
    for (const auto& row : group) {
      ++report.entries_checked;
      auto removed = index_->RemoveIfBlob(row.key, row.sha256, nullptr);
      if (removed.ok() && *removed) (void)sidecars_->Remove(row.key);
      std::string done = !removed.ok() ? absl::StrCat("could not remove the entry: ", removed.status().message())
                         : *removed    ? action
                                       : "the entry was already replaced or removed meanwhile";
      report.problems.push_back({row.key, row.sha256, problem, done, quarantine_path});
    }
  };

  for (const auto& [sha, group] : by_blob) {
    auto bytes = blobs_->Read(sha);
    if (bytes.ok()) {
      ++report.blobs_checked;
      for (const auto& row : group) {
        ++report.entries_checked;
        if (row.size_bytes == bytes->size()) continue;
        auto removal = RemoveEntry(row);
        report.problems.push_back(
            {row.key, sha, absl::StrCat("the index says ", row.size_bytes, " bytes, the blob has ", bytes->size()),
             removal.ok() ? "removed the entry; the next request recompiles it"
                          : absl::StrCat("could not remove the entry: ", removal.status().message()),
             ""});
      }
      continue;
    }
    const absl::Status& error = bytes.status();
    if (error.code() == absl::StatusCode::kDataLoss) {
      ++report.blobs_checked;
      auto moved = blobs_->Quarantine(sha, std::string(error.message()));
      if (moved.ok()) quarantined_.fetch_add(1);
      remove_rows(group, std::string(error.message()),
                  moved.ok()
                      ? absl::StrCat("quarantined the blob to ", *moved,
                                     " and removed the entry; the next request recompiles it")
                      : absl::StrCat("removed the entry; could not quarantine the blob: ", moved.status().message()),
                  moved.ok() ? *moved : "");
    } else if (error.code() == absl::StatusCode::kNotFound || error.code() == absl::StatusCode::kInvalidArgument) {
      remove_rows(group, absl::StrCat("blob missing: ", error.message()),
                  "removed the entry; the next request recompiles it", "");
    } else {
      for (const auto& row : group) {
        ++report.entries_checked;
        report.problems.push_back({row.key, sha, absl::StrCat("blob unreadable: ", error.message()),
                                   "nothing: fix the cause and verify again", ""});
      }
    }
  }

  // Orphans: blobs no row named when the rows were read.
  KILN_ABSL_ASSIGN_OR_RETURN(std::vector<BlobStore::BlobInfo> blobs, blobs_->List());
  const auto now = std::chrono::system_clock::now();
  for (const auto& blob : blobs) {
    if (by_blob.count(blob.sha256) > 0) continue;
    auto bytes = blobs_->Read(blob.sha256);
    if (bytes.status().code() == absl::StatusCode::kNotFound) continue;  // removed meanwhile
    ++report.blobs_checked;
    if (bytes.ok()) {
      // A young orphan may be a commit between its blob rename and its row insert: not a
      // problem yet. An older one was left by a commit that failed (or a process killed in
      // one): space no entry accounts for. It goes as Recover would take it.
      if (now - blob.modified < options_.orphan_grace) continue;
      auto ran = RemoveOrphan(blob.sha256);
      report.problems.push_back({"", blob.sha256,
                                 absl::StrCat("orphan blob: no entry names it (", bytes->size(),
                                              " bytes; a commit failed or its process was killed)"),
                                 !ran.ok() ? absl::StrCat("could not remove it: ", ran.status().message())
                                 : *ran    ? "removed it"
                                           : "an entry names it now (committed meanwhile): kept",
                                 ""});
      continue;
    }
    if (bytes.status().code() != absl::StatusCode::kDataLoss) {
      report.problems.push_back({"", blob.sha256, absl::StrCat("orphan blob unreadable: ", bytes.status().message()),
                                 "nothing: fix the cause and verify again", ""});
      continue;
    }
    auto moved = blobs_->Quarantine(blob.sha256, std::string(bytes.status().message()));
    if (moved.ok()) quarantined_.fetch_add(1);
    report.problems.push_back({"", blob.sha256, absl::StrCat("orphan blob: ", bytes.status().message()),
                               moved.ok() ? absl::StrCat("quarantined the blob to ", *moved)
                                          : absl::StrCat("could not quarantine the blob: ", moved.status().message()),
                               moved.ok() ? *moved : ""});
  }
  return report;
}

absl::StatusOr<EvictReport> ArtifactCache::Evict(const EntryFilter& filter, bool dry_run) {
  std::vector<EntryRecord> matching;
  std::string token;
  do {
    KILN_ABSL_ASSIGN_OR_RETURN(CacheIndex::Page page, index_->List(filter, kListPage, token));
    for (auto& entry : page.entries) matching.push_back(std::move(entry));
    token = page.next_page_token;
  } while (!token.empty());

  EvictReport report;
  if (dry_run) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> per_blob;  // sha → (matching rows, size)
    for (const auto& entry : matching) {
      report.evicted.push_back(entry.key);
      auto& blob = per_blob[entry.sha256];
      ++blob.first;
      blob.second = entry.size_bytes;
    }
    for (const auto& [sha, blob] : per_blob) {
      KILN_ABSL_ASSIGN_OR_RETURN(uint64_t rows, index_->CountRowsWithBlob(sha));
      if (rows <= blob.first) report.bytes_freed += blob.second;
    }
    return report;
  }
  for (const auto& entry : matching) {
    KILN_ABSL_ASSIGN_OR_RETURN(Removal removal, RemoveEntry(entry));
    if (!removal.removed) continue;
    report.evicted.push_back(entry.key);
    report.bytes_freed += removal.bytes_freed;
    evictions_.fetch_add(1);
  }
  return report;
}

absl::StatusOr<EvictReport> ArtifactCache::EnforceSizeLimit(const std::string& keep_key) {
  // Recent hits decide what is least recently used; a failed flush keeps them for later.
  (void)FlushHits();
  EvictReport report;
  // The sidecars are listed once per call (a folder walk), then counted at their mean size per
  // entry as entries go.
  KILN_ABSL_ASSIGN_OR_RETURN(uint64_t sidecar_bytes, sidecars_->Bytes());
  KILN_ABSL_ASSIGN_OR_RETURN(CacheIndex::Totals at_start, index_->GetTotals());
  const uint64_t sidecar_mean = at_start.entries > 0 ? sidecar_bytes / at_start.entries : 0;
  // NOTES: bounded rounds: other processes may commit meanwhile, and a limit smaller than
  // keep_key alone can never be met.
  for (int round = 0; round < 10000; ++round) {
    KILN_ABSL_ASSIGN_OR_RETURN(CacheIndex::Totals totals, index_->GetTotals());
    // The limit covers the folder: blobs, the index's files and the sidecars (lock files exist
    // only while their key compiles; temps only while a blob is written).
    const uint64_t held = totals.bytes + IndexFilesBytes(options_.dir) + totals.entries * sidecar_mean;
    if (held <= options_.max_bytes) break;
    uint64_t excess = held - options_.max_bytes;
    KILN_ABSL_ASSIGN_OR_RETURN(std::vector<EntryRecord> oldest, index_->LeastRecentlyUsed(kEvictionBatch));
    bool progressed = false;
    for (const auto& entry : oldest) {
      if (entry.key == keep_key) continue;
      KILN_ABSL_ASSIGN_OR_RETURN(Removal removal, RemoveEntry(entry));
      if (!removal.removed) continue;
      progressed = true;
      report.evicted.push_back(entry.key);
      report.bytes_freed += removal.bytes_freed;
      evictions_.fetch_add(1);
      if (removal.bytes_freed >= excess) break;
      excess -= removal.bytes_freed;
    }
    if (!progressed) break;
  }
  return report;
}

}  // namespace kiln::cache
