// SqliteStatement: prepared statements and SQLite error mapping.
#include "cache/sqlite_statement.h"

#include "absl/strings/str_cat.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {

const SqliteFileRole kCacheIndexRole = {
    "cache index",
    "stop kilnd, move the file aside and restart (blobs are kept; entries are rebuilt by recompiling)",
    "make the cache folder and index writable for this user",
    "check that the cache folder exists and is writable",
};

absl::Status SqliteStatus(sqlite3* db, int rc, const std::string& path, absl::string_view what,
                          const SqliteFileRole& role) {
  const char* detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string message = absl::StrCat(role.noun, " ", path, ": ", what, " failed: ", detail, " (sqlite code ", rc, ")");
  switch (rc & 0xFF) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(
          absl::StrCat(message, "; another process kept the file locked past the busy timeout: retry"));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return absl::DataLossError(absl::StrCat(message, "; the file is damaged: ", role.when_damaged));
    case SQLITE_FULL: return absl::ResourceExhaustedError(absl::StrCat(message, "; free disk space"));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH: return absl::PermissionDeniedError(absl::StrCat(message, "; ", role.when_readonly));
    case SQLITE_CANTOPEN: return absl::FailedPreconditionError(absl::StrCat(message, "; ", role.when_missing));
    case SQLITE_IOERR: return absl::UnavailableError(absl::StrCat(message, "; check the disk"));
    default: return absl::InternalError(message);
  }
}

SqliteStatement::~SqliteStatement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

absl::Status SqliteStatement::Prepare(std::string_view sql) {
  sql_ = std::string(sql);
  int rc = sqlite3_prepare_v2(db_, sql_.c_str(), static_cast<int>(sql_.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, path_, absl::StrCat("preparing \"", sql_, "\""), role_);
  return absl::OkStatus();
}

void SqliteStatement::Bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}
void SqliteStatement::Bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
void SqliteStatement::Bind(int index, double value) { sqlite3_bind_double(stmt_, index, value); }

absl::StatusOr<bool> SqliteStatement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(db_, rc, path_, absl::StrCat("running \"", sql_, "\""), role_);
}

absl::Status SqliteStatement::Run() {
  while (true) {
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string SqliteStatement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}
int64_t SqliteStatement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }
double SqliteStatement::Real(int column) const { return sqlite3_column_double(stmt_, column); }

absl::Status SqliteExec(sqlite3* db, const std::string& path, const char* sql, const SqliteFileRole& role) {
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  if (error != nullptr) sqlite3_free(error);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, path, absl::StrCat("running \"", sql, "\""), role);
  return absl::OkStatus();
}

}  // namespace kiln::cache
