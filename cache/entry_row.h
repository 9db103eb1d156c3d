// EntryRow: how an EntryRecord maps onto a row of the entries table (column list, binds,
// reading back with JSON decoding). Internal to cache/.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cache/cache_index.h"
#include "cache/sqlite_statement.h"

namespace kiln::cache::entry_row {

// The schema of the entries table and its indices (version CacheIndex::kSchemaVersion).
extern const char* const kCreateSchema;

// "key, uri, ..." in the order ReadRow expects; without details, manifest_json and
// compile_log are selected as empty strings.
std::string SelectColumns(bool with_details);

// The INSERT OR REPLACE statement with one parameter per column, and its binds.
extern const char* const kUpsertSql;
void BindRecord(SqliteStatement& stmt, const EntryRecord& record);

// DATA_LOSS when params/options JSON stored in the row cannot be read back.
absl::StatusOr<EntryRecord> ReadRow(const SqliteStatement& stmt, const std::string& index_path);

}  // namespace kiln::cache::entry_row
