#include "server/tuning/tuning_store.h"

#include <sqlite3.h>

#include <chrono>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cache/sqlite_statement.h"
#include "kiln_base/status_macros.h"
#include "proto/tuning_environment.h"

namespace kiln::server {
namespace {

using cache::SqliteExec;
using cache::SqliteStatement;

const cache::SqliteFileRole kRole = {
    "tuning store",
    "stop kilnd, move the file aside and restart (the store starts empty; tune again)",
    "make the tuning store and its folder writable for kilnd's user",
    "check that the folder of --tuning-store exists and is writable",
};

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tunings ("
    "  op TEXT NOT NULL, bucket TEXT NOT NULL,"
    "  environment TEXT NOT NULL,"  // proto::TuningEnvironmentKey
    "  recorded_unix_ms INTEGER NOT NULL,"
    "  record_json TEXT NOT NULL,"  // the kiln.v1.TuningRecord as protobuf JSON: readable with sqlite3
    "  PRIMARY KEY (op, bucket, environment));";

int64_t RecordedMs(const v1::TuningRecord& r) { return r.recorded().seconds() * 1000 + r.recorded().nanos() / 1000000; }

// BEGIN IMMEDIATE; body; COMMIT, or ROLLBACK on error.
template <typename Body>
absl::Status WriteTransaction(sqlite3* db, const std::string& path, Body body) {
  KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db, path, "BEGIN IMMEDIATE", kRole));
  absl::Status status = body();
  if (status.ok()) status = SqliteExec(db, path, "COMMIT", kRole);
  if (!status.ok() && sqlite3_get_autocommit(db) == 0) (void)SqliteExec(db, path, "ROLLBACK", kRole);
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TuningStore>> TuningStore::Open(const std::string& path) {
  std::unique_ptr<TuningStore> store(new TuningStore());
  store->path_ = path;
  // NOTES: NOMUTEX because mu_ serializes every use of the connection.
  int rc = sqlite3_open_v2(path.c_str(), &store->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return cache::SqliteStatus(store->db_, rc, path, "opening", kRole);
  sqlite3_extended_result_codes(store->db_, 1);
  sqlite3_busy_timeout(store->db_, kBusyTimeoutMs);
  // NOTES: SQLite answers BUSY at once, without its busy handler, while another process opens
  // or switches the same file to WAL (cache/cache_index.cpp does the same).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    absl::Status status = store->Configure();
    if (status.ok()) return store;
    if (status.code() != absl::StatusCode::kUnavailable || std::chrono::steady_clock::now() >= deadline) return status;
    std::this_thread::sleep_for(pause);
  }
}

TuningStore::~TuningStore() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status TuningStore::Configure() {
  std::lock_guard<std::mutex> lock(mu_);
  {
    SqliteStatement wal(db_, path_, kRole);
    KILN_ABSL_RETURN_IF_ERROR(wal.Prepare("PRAGMA journal_mode=WAL"));
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, wal.Step());
    if (!row || wal.Text(0) != "wal")
      return absl::FailedPreconditionError(absl::StrCat("tuning store ", path_,
                                                        ": cannot switch to WAL journal mode; put it on a local file "
                                                        "system"));
  }
  // NOTES: FULL, not the cache's NORMAL: a lost cubin costs a recompile, a lost tuning result
  // costs a tuning run; and writes come one per tuned shape.
  KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, "PRAGMA synchronous=FULL", kRole));
  return WriteTransaction(db_, path_, [&]() -> absl::Status {
    KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, kSchema, kRole));
    SqliteStatement get(db_, path_, kRole);
    KILN_ABSL_RETURN_IF_ERROR(get.Prepare("SELECT value FROM meta WHERE name = 'schema_version'"));
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, get.Step());
    if (!row) {
      SqliteStatement put(db_, path_, kRole);
      KILN_ABSL_RETURN_IF_ERROR(put.Prepare("INSERT INTO meta (name, value) VALUES ('schema_version', ?1)"));
      put.Bind(1, absl::StrCat(kSchemaVersion));
      return put.Run();
    }
    int version = 0;
    if (!absl::SimpleAtoi(get.Text(0), &version) || version != kSchemaVersion)
      return absl::FailedPreconditionError(
          absl::StrCat("tuning store ", path_, " has schema version \"", get.Text(0), "\", this kilnd understands ",
                       kSchemaVersion, "; run the Kiln that wrote it, or give this one another --tuning-store"));
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> TuningStore::Put(const v1::TuningRecord& record) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(record, &json, print); !s.ok())
    return absl::InternalError(absl::StrCat("tuning store: cannot encode the record: ", s.message().ToString()));
  const std::string environment = proto::TuningEnvironmentKey(record.environment());
  std::lock_guard<std::mutex> lock(mu_);
  bool replaced = false;
  KILN_ABSL_RETURN_IF_ERROR(WriteTransaction(db_, path_, [&]() -> absl::Status {
    SqliteStatement del(db_, path_, kRole);
    KILN_ABSL_RETURN_IF_ERROR(del.Prepare("DELETE FROM tunings WHERE op = ?1 AND bucket = ?2 AND environment = ?3"));
    del.Bind(1, record.op());
    del.Bind(2, record.bucket());
    del.Bind(3, environment);
    KILN_ABSL_RETURN_IF_ERROR(del.Run());
    replaced = sqlite3_changes(db_) > 0;
    SqliteStatement insert(db_, path_, kRole);
    KILN_ABSL_RETURN_IF_ERROR(
        insert.Prepare("INSERT INTO tunings (op, bucket, environment, recorded_unix_ms, record_json) "
                       "VALUES (?1, ?2, ?3, ?4, ?5)"));
    insert.Bind(1, record.op());
    insert.Bind(2, record.bucket());
    insert.Bind(3, environment);
    insert.Bind(4, RecordedMs(record));
    insert.Bind(5, json);
    return insert.Run();
  }));
  return replaced;
}

absl::StatusOr<std::vector<v1::TuningRecord>> TuningStore::Select(const std::string& where_sql,
                                                                  const std::vector<std::string>& binds) {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement select(db_, path_, kRole);
  KILN_ABSL_RETURN_IF_ERROR(select.Prepare(absl::StrCat("SELECT record_json FROM tunings ", where_sql)));
  for (size_t i = 0; i < binds.size(); ++i) select.Bind(static_cast<int>(i + 1), binds[i]);
  std::vector<v1::TuningRecord> out;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;  // a row of a newer kilnd sharing the file
  while (true) {
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return out;
    v1::TuningRecord record;
    const std::string json = select.Text(0);
    if (auto s = google::protobuf::util::JsonStringToMessage(json, &record, parse); !s.ok())
      return absl::DataLossError(absl::StrCat("tuning store ", path_, ": a row is unreadable (", s.message().ToString(),
                                              "); delete it with DeleteTunings or move the file aside"));
    out.push_back(std::move(record));
  }
}

absl::StatusOr<std::vector<v1::TuningRecord>> TuningStore::Find(const std::string& op, const std::string& bucket) {
  return Select("WHERE op = ?1 AND bucket = ?2 ORDER BY recorded_unix_ms DESC", {op, bucket});
}

absl::StatusOr<std::vector<v1::TuningRecord>> TuningStore::List(const std::string& op) {
  if (op.empty()) return Select("ORDER BY op, bucket, recorded_unix_ms", {});
  return Select("WHERE op = ?1 ORDER BY bucket, recorded_unix_ms", {op});
}

absl::StatusOr<uint64_t> TuningStore::Delete(const std::string& op, const std::string& bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement del(db_, path_, kRole);
  if (op.empty()) {
    KILN_ABSL_RETURN_IF_ERROR(del.Prepare("DELETE FROM tunings"));
  } else if (bucket.empty()) {
    KILN_ABSL_RETURN_IF_ERROR(del.Prepare("DELETE FROM tunings WHERE op = ?1"));
    del.Bind(1, op);
  } else {
    KILN_ABSL_RETURN_IF_ERROR(del.Prepare("DELETE FROM tunings WHERE op = ?1 AND bucket = ?2"));
    del.Bind(1, op);
    del.Bind(2, bucket);
  }
  KILN_ABSL_RETURN_IF_ERROR(del.Run());
  return static_cast<uint64_t>(sqlite3_changes(db_));
}

absl::StatusOr<uint64_t> TuningStore::Count() {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement count(db_, path_, kRole);
  KILN_ABSL_RETURN_IF_ERROR(count.Prepare("SELECT COUNT(*) FROM tunings"));
  KILN_ABSL_ASSIGN_OR_RETURN(bool row, count.Step());
  return row ? static_cast<uint64_t>(count.Int(0)) : 0;
}

}  // namespace kiln::server
