// CacheIndex: opening the SQLite index (WAL, busy timeout, schema version) and its writes.
#include "cache/cache_index.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cache/entry_row.h"
#include "cache/sqlite_statement.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

constexpr const char* kSchemaVersionName = "schema_version";

}  // namespace

absl::StatusOr<std::unique_ptr<CacheIndex>> CacheIndex::Open(const std::string& path) {
  std::unique_ptr<CacheIndex> index(new CacheIndex());
  index->path_ = path;
  // NOTES: NOMUTEX because mu_ already serializes every use of the connection.
  int rc = sqlite3_open_v2(path.c_str(), &index->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(index->db_, rc, path, "opening the index");
  sqlite3_extended_result_codes(index->db_, 1);
  sqlite3_busy_timeout(index->db_, kBusyTimeoutMs);

  // NOTES: WAL lets readers (lookups in every process) run while one writer commits; the
  // switch is persistent in the file. SQLite answers BUSY at once, without its busy handler,
  // when another process is opening or switching the same file, so this retries itself.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    absl::Status status = index->ConfigureConnection();
    if (status.ok() || status.code() != absl::StatusCode::kUnavailable || std::chrono::steady_clock::now() >= deadline)
      return status.ok() ? absl::StatusOr<std::unique_ptr<CacheIndex>>(std::move(index)) : status;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

absl::Status CacheIndex::ConfigureConnection() {
  {
    SqliteStatement wal(db_, path_);  // finalized before any transaction below
    KILN_ABSL_RETURN_IF_ERROR(wal.Prepare("PRAGMA journal_mode=WAL"));
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, wal.Step());
    if (!row || wal.Text(0) != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat("cache index ", path_, ": cannot switch to WAL journal mode (got \"", row ? wal.Text(0) : "",
                       "\"); put the cache folder on a local file system"));
    }
  }
  // NOTES: synchronous=NORMAL in WAL never corrupts the index; a power cut may lose the last
  // commits, which leaves orphan blobs (swept by Recover) and costs a recompile.
  KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, "PRAGMA synchronous=NORMAL"));
  // NOTES: the WAL counts against --cache-max-mb (ArtifactCache::EnforceSizeLimit), so it is
  // kept small: checkpointed every 128 pages (512 KiB, not SQLite's 4 MB) and truncated back to
  // 512 KiB when it restarts (SQLite otherwise keeps the file at its largest size).
  KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, "PRAGMA wal_autocheckpoint=128"));
  {
    SqliteStatement limit(db_, path_);  // returns a row: stepped, not exec'd
    KILN_ABSL_RETURN_IF_ERROR(limit.Prepare("PRAGMA journal_size_limit=524288"));
    KILN_ABSL_RETURN_IF_ERROR(limit.Step().status());
  }
  return InitSchema();
}

CacheIndex::~CacheIndex() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status CacheIndex::InitSchema() {
  std::lock_guard<std::mutex> lock(mu_);
  auto check_version = [&](std::optional<int>* found) -> absl::Status {
    {
      SqliteStatement has_meta(db_, path_);
      KILN_ABSL_RETURN_IF_ERROR(
          has_meta.Prepare("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"));
      KILN_ABSL_ASSIGN_OR_RETURN(bool row, has_meta.Step());
      if (!row || has_meta.Int(0) == 0) return absl::OkStatus();  // a new index
    }
    SqliteStatement stmt(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("SELECT value FROM meta WHERE name = ?1"));
    stmt.Bind(1, kSchemaVersionName);
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    int version = 0;
    std::string text = stmt.Text(0);
    if (!absl::SimpleAtoi(text, &version))
      return absl::DataLossError(
          absl::StrCat("cache index ", path_, ": schema version \"", text, "\" is not a number; move the file aside"));
    if (version != kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cache index ", path_, " has schema version ", version, ", this kilnd understands ", kSchemaVersion,
          version > kSchemaVersion ? "; it was written by a newer Kiln: run that version, or give this "
                                     "one another cache folder"
                                   : "; move the file aside (the cache is rebuilt by recompiling)"));
    }
    *found = version;
    return absl::OkStatus();
  };

  std::optional<int> version;
  KILN_ABSL_RETURN_IF_ERROR(check_version(&version));
  if (version.has_value()) return absl::OkStatus();
  // A new index (or one another process is creating right now): create under the write lock,
  // looking again once we hold it.
  return WriteTransaction("creating the schema", [&]() -> absl::Status {
    KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_,
                                         "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY "
                                         "NOT NULL, value TEXT NOT NULL)"));
    std::optional<int> again;
    KILN_ABSL_RETURN_IF_ERROR(check_version(&again));
    if (again.has_value()) return absl::OkStatus();
    KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, entry_row::kCreateSchema));
    SqliteStatement insert(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(insert.Prepare("INSERT INTO meta (name, value) VALUES (?1, ?2)"));
    insert.Bind(1, kSchemaVersionName);
    insert.Bind(2, absl::StrCat(kSchemaVersion));
    return insert.Run();
  });
}

absl::Status CacheIndex::WriteTransaction(const std::string& what, const std::function<absl::Status()>& body) {
  if (auto status = SqliteExec(db_, path_, "BEGIN IMMEDIATE"); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  absl::Status status = body();
  if (status.ok()) status = SqliteExec(db_, path_, "COMMIT");
  if (!status.ok()) {
    if (sqlite3_get_autocommit(db_) == 0) (void)SqliteExec(db_, path_, "ROLLBACK");
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<EntryRecord>> CacheIndex::FindLocked(const std::string& key) {
  SqliteStatement stmt(db_, path_);
  KILN_ABSL_RETURN_IF_ERROR(
      stmt.Prepare(absl::StrCat("SELECT ", entry_row::SelectColumns(true), " FROM entries WHERE key = ?1")));
  stmt.Bind(1, key);
  KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<EntryRecord>();
  KILN_ABSL_ASSIGN_OR_RETURN(EntryRecord record, entry_row::ReadRow(stmt, path_));
  return std::optional<EntryRecord>(std::move(record));
}

absl::StatusOr<std::optional<EntryRecord>> CacheIndex::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return FindLocked(key);
}

absl::Status CacheIndex::Upsert(const EntryRecord& record) { return Upsert(record, nullptr, nullptr); }

absl::Status CacheIndex::Upsert(const EntryRecord& record, const std::function<absl::Status()>& before_write,
                                const BlobHook& on_replaced_blob) {
  if (record.key.empty()) return absl::InvalidArgumentError("cannot store an index entry without a key");
  std::lock_guard<std::mutex> lock(mu_);
  return WriteTransaction(absl::StrCat("storing entry ", record.key), [&]() -> absl::Status {
    if (before_write) {
      KILN_ABSL_RETURN_IF_ERROR(before_write());
    }
    std::string previous_sha;
    {
      SqliteStatement stmt(db_, path_);
      KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("SELECT sha256 FROM entries WHERE key = ?1"));
      stmt.Bind(1, record.key);
      KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) previous_sha = stmt.Text(0);
    }
    SqliteStatement insert(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(insert.Prepare(entry_row::kUpsertSql));
    entry_row::BindRecord(insert, record);
    KILN_ABSL_RETURN_IF_ERROR(insert.Run());
    if (!previous_sha.empty() && previous_sha != record.sha256 && on_replaced_blob) {
      KILN_ABSL_ASSIGN_OR_RETURN(uint64_t left, CountRowsWithBlobLocked(previous_sha));
      return on_replaced_blob(previous_sha, left);
    }
    return absl::OkStatus();
  });
}

absl::Status CacheIndex::Remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return WriteTransaction(absl::StrCat("removing entry ", key), [&]() -> absl::Status {
    SqliteStatement stmt(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("DELETE FROM entries WHERE key = ?1"));
    stmt.Bind(1, key);
    return stmt.Run();
  });
}

absl::StatusOr<bool> CacheIndex::RemoveIfBlob(const std::string& key, const std::string& sha256,
                                              const BlobHook& on_removed) {
  std::lock_guard<std::mutex> lock(mu_);
  bool removed = false;
  auto remove = [&]() -> absl::Status {
    SqliteStatement stmt(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("DELETE FROM entries WHERE key = ?1 AND sha256 = ?2"));
    stmt.Bind(1, key);
    stmt.Bind(2, sha256);
    KILN_ABSL_RETURN_IF_ERROR(stmt.Run());
    removed = sqlite3_changes(db_) > 0;
    if (!removed || !on_removed) return absl::OkStatus();
    KILN_ABSL_ASSIGN_OR_RETURN(uint64_t left, CountRowsWithBlobLocked(sha256));
    return on_removed(sha256, left);
  };
  KILN_ABSL_RETURN_IF_ERROR(WriteTransaction(absl::StrCat("removing entry ", key), remove));
  return removed;
}

absl::StatusOr<bool> CacheIndex::RunIfUnreferenced(const std::string& sha256, const std::function<absl::Status()>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  bool ran = false;
  auto run_if_unreferenced = [&]() -> absl::Status {
    KILN_ABSL_ASSIGN_OR_RETURN(uint64_t count, CountRowsWithBlobLocked(sha256));
    if (count > 0) return absl::OkStatus();
    ran = true;
    return fn();
  };
  KILN_ABSL_RETURN_IF_ERROR(WriteTransaction(absl::StrCat("checking blob ", sha256), run_if_unreferenced));
  return ran;
}

absl::Status CacheIndex::AddHits(const std::map<std::string, std::pair<uint64_t, int64_t>>& hits) {
  if (hits.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return WriteTransaction("recording hits", [&]() -> absl::Status {
    SqliteStatement stmt(db_, path_);
    KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("UPDATE entries SET hit_count = hit_count + ?2, "
                                           "last_used_unix_ms = MAX(last_used_unix_ms, ?3) WHERE key = ?1"));
    for (const auto& [key, hit] : hits) {
      stmt.Bind(1, key);
      stmt.Bind(2, static_cast<int64_t>(hit.first));
      stmt.Bind(3, hit.second);
      KILN_ABSL_RETURN_IF_ERROR(stmt.Run());
      stmt.Reset();
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<CacheIndex::Totals> CacheIndex::GetTotals() {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement stmt(db_, path_);
  KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("SELECT (SELECT COUNT(*) FROM entries), COUNT(*), COALESCE(SUM(size), 0) FROM "
                                         "(SELECT MAX(size_bytes) AS size FROM entries GROUP BY sha256)"));
  KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  Totals totals;
  if (row) {
    totals.entries = static_cast<uint64_t>(stmt.Int(0));
    totals.blobs = static_cast<uint64_t>(stmt.Int(1));
    totals.bytes = static_cast<uint64_t>(stmt.Int(2));
  }
  return totals;
}

absl::StatusOr<uint64_t> CacheIndex::CountRowsWithBlobLocked(const std::string& sha256) {
  SqliteStatement stmt(db_, path_);
  KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare("SELECT COUNT(*) FROM entries WHERE sha256 = ?1"));
  stmt.Bind(1, sha256);
  KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? static_cast<uint64_t>(stmt.Int(0)) : 0;
}

absl::StatusOr<uint64_t> CacheIndex::CountRowsWithBlob(const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  return CountRowsWithBlobLocked(sha256);
}

}  // namespace kiln::cache
