// SqliteStatement: a prepared SQLite statement with RAII finalize, typed binds and columns,
// and Status errors that name the index file and the operation. Internal to cache/.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::cache {

// Maps an SQLite result code to a Status: BUSY/LOCKED → UNAVAILABLE, CORRUPT/NOTADB →
// DATA_LOSS, FULL → RESOURCE_EXHAUSTED, READONLY/PERM/CANTOPEN → PERMISSION_DENIED or
// FAILED_PRECONDITION, others INTERNAL; the message names `path` and `what` and says what to do.
absl::Status SqliteStatus(sqlite3* db, int rc, const std::string& path, absl::string_view what);

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const std::string& path) : db_(db), path_(path) {}
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
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// Runs SQL without results (schema, BEGIN/COMMIT).
absl::Status SqliteExec(sqlite3* db, const std::string& path, const char* sql);

}  // namespace kiln::cache
