// SqliteStatement: a prepared SQLite statement with RAII finalize, typed binds and columns,
// and Status errors that name the file, what it is and the operation. The cache index's, and
// the daemon's tuning store's (server/tuning/), which names itself through an SqliteFileRole.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::cache {

// What an SQLite file is to its owner, for messages: its name and what to do about it.
struct SqliteFileRole {
  const char* noun;           // "cache index"
  const char* when_damaged;   // what to do with a damaged file
  const char* when_readonly;  // what to make writable
  const char* when_missing;   // what must exist
};
// The cache index: the default role.
extern const SqliteFileRole kCacheIndexRole;

// Maps an SQLite result code to a Status: BUSY/LOCKED → UNAVAILABLE, CORRUPT/NOTADB →
// DATA_LOSS, FULL → RESOURCE_EXHAUSTED, READONLY/PERM/CANTOPEN → PERMISSION_DENIED or
// FAILED_PRECONDITION, others INTERNAL; the message names `role`, `path` and `what` and says
// what to do.
absl::Status SqliteStatus(sqlite3* db, int rc, const std::string& path, absl::string_view what,
                          const SqliteFileRole& role = kCacheIndexRole);

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const std::string& path, const SqliteFileRole& role = kCacheIndexRole)
      : db_(db), path_(path), role_(role) {}
  ~SqliteStatement();
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  absl::Status Prepare(std::string_view sql);
  // Binds are 1-based, like SQLite's.
  void Bind(int index, std::string_view text);
  void Bind(int index, int64_t value);
  void Bind(int index, double value);
  // true: a row is ready; false: done.
  absl::StatusOr<bool> Step();
  absl::Status Run();  // steps to the end, expecting no rows of interest
  void Reset();

  std::string Text(int column) const;
  int64_t Int(int column) const;
  double Real(int column) const;

 private:
  sqlite3* db_;
  const std::string& path_;
  const SqliteFileRole& role_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// Runs SQL without results (schema, BEGIN/COMMIT).
absl::Status SqliteExec(sqlite3* db, const std::string& path, const char* sql,
                        const SqliteFileRole& role = kCacheIndexRole);

}  // namespace kiln::cache
