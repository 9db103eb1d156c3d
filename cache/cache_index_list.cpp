// CacheIndex queries over many rows: filtered, paged listing (with its opaque page token),
// prefix search, all rows, and the least-recently-used order.
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cache/cache_index.h"
#include "cache/entry_row.h"
#include "cache/sha256.h"
#include "cache/sqlite_statement.h"
#include "kiln_base/status_macros.h"

namespace kiln::cache {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
constexpr absl::string_view kTokenTag = "kiln-list-1";

// A WHERE clause and its text parameters, bound in order from ?1.
struct Where {
  std::string sql = "1";
  std::vector<std::string> params;
  void Add(absl::string_view condition, std::string value) {
    params.push_back(std::move(value));
    absl::StrAppend(&sql, " AND ", condition, " ?", params.size());
  }
  void Bind(SqliteStatement& stmt) const {
    for (size_t i = 0; i < params.size(); ++i) stmt.Bind(static_cast<int>(i + 1), params[i]);
  }
};

// "abc" → "abd": every string with the prefix sorts in [prefix, upper). Empty: no bound
// (the prefix was all 0xFF bytes).
std::string UpperBoundOfPrefix(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xFF) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

// NOTES: ranges instead of LIKE/GLOB: no wildcard escaping, byte-exact, and they use the index.
void AddPrefix(Where& where, absl::string_view column, const std::string& prefix) {
  if (prefix.empty()) return;
  where.Add(absl::StrCat(column, " >="), prefix);
  std::string upper = UpperBoundOfPrefix(prefix);
  if (!upper.empty()) where.Add(absl::StrCat(column, " <"), upper);
}

Where FilterWhere(const EntryFilter& filter) {
  Where where;
  if (!filter.op.empty()) where.Add("op =", filter.op);
  AddPrefix(where, "uri", filter.uri_prefix);
  if (!filter.arch.empty()) where.Add("arch =", filter.arch);
  if (!filter.keys.empty()) {
    // One JSON parameter instead of one per key: no limit on the number of keys.
    nlohmann::json keys = filter.keys;
    where.params.push_back(keys.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    absl::StrAppend(&where.sql, " AND key IN (SELECT value FROM json_each(?", where.params.size(), "))");
  }
  return where;
}

// Ties a token to the filter it was made for.
std::string FilterFingerprint(const EntryFilter& filter) {
  std::string encoding;
  for (const std::string* field : {&filter.op, &filter.uri_prefix, &filter.arch})
    absl::StrAppend(&encoding, field->size(), ":", *field, ";");
  absl::StrAppend(&encoding, filter.keys.size(), ";");
  for (const auto& key : filter.keys) absl::StrAppend(&encoding, key.size(), ":", key, ";");
  return Sha256Hex(encoding).substr(0, 16);
}

std::string MakeToken(const EntryFilter& filter, const std::string& last_key) {
  return absl::WebSafeBase64Escape(absl::StrCat(kTokenTag, "\n", FilterFingerprint(filter), "\n", last_key));
}

absl::StatusOr<std::string> ParseToken(const EntryFilter& filter, const std::string& token) {
  std::string raw;
  std::vector<std::string> parts;
  if (absl::WebSafeBase64Unescape(token, &raw)) parts = absl::StrSplit(raw, absl::MaxSplits('\n', 2));
  if (parts.size() != 3 || parts[0] != kTokenTag)
    return absl::InvalidArgumentError(absl::StrCat("page token \"", token.substr(0, 40),
                                                   "\" is not one this cache made; pass the "
                                                   "next_page_token of the previous page, or none for the first page"));
  if (parts[1] != FilterFingerprint(filter))
    return absl::InvalidArgumentError(
        "page token was made for a different filter; list again from the first page with this "
        "filter");
  return parts[2];
}

// Reads every row a prepared statement yields.
absl::StatusOr<std::vector<EntryRecord>> ReadAll(SqliteStatement& stmt, const std::string& path) {
  std::vector<EntryRecord> out;
  while (true) {
    KILN_ABSL_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    KILN_ABSL_ASSIGN_OR_RETURN(EntryRecord record, entry_row::ReadRow(stmt, path));
    out.push_back(std::move(record));
  }
}

}  // namespace

absl::StatusOr<CacheIndex::Page> CacheIndex::List(const EntryFilter& filter, int page_size,
                                                  const std::string& page_token, bool with_details) {
  if (page_size <= 0) page_size = kDefaultPageSize;
  page_size = std::min(page_size, kMaxPageSize);
  std::string after;
  if (!page_token.empty()) {
    KILN_ABSL_ASSIGN_OR_RETURN(after, ParseToken(filter, page_token));
  }
  const Where where = FilterWhere(filter);

  std::lock_guard<std::mutex> lock(mu_);
  // One read transaction: the count and the page come from the same snapshot.
  KILN_ABSL_RETURN_IF_ERROR(SqliteExec(db_, path_, "BEGIN"));
  auto finish = [&](absl::Status status) {
    (void)SqliteExec(db_, path_, status.ok() ? "COMMIT" : "ROLLBACK");
    return status;
  };
  Page page;
  {
    SqliteStatement count(db_, path_);
    if (auto status = count.Prepare(absl::StrCat("SELECT COUNT(*) FROM entries WHERE ", where.sql)); !status.ok())
      return finish(status);
    where.Bind(count);
    auto row = count.Step();
    if (!row.ok()) return finish(row.status());
    page.total_matching = *row ? static_cast<uint64_t>(count.Int(0)) : 0;
  }
  SqliteStatement select(db_, path_);
  const int after_param = static_cast<int>(where.params.size()) + 1;
  if (auto status = select.Prepare(absl::StrCat("SELECT ", entry_row::SelectColumns(with_details),
                                                " FROM entries WHERE ", where.sql, " AND key > ?", after_param,
                                                " ORDER BY key LIMIT ?", after_param + 1));
      !status.ok())
    return finish(status);
  where.Bind(select);
  select.Bind(after_param, after);
  select.Bind(after_param + 1,
              static_cast<int64_t>(page_size) + 1);  // one more: is there a next page?
  auto rows = ReadAll(select, path_);
  if (!rows.ok()) return finish(rows.status());
  KILN_ABSL_RETURN_IF_ERROR(finish(absl::OkStatus()));
  page.entries = std::move(*rows);
  if (page.entries.size() > static_cast<size_t>(page_size)) {
    page.entries.resize(static_cast<size_t>(page_size));
    page.next_page_token = MakeToken(filter, page.entries.back().key);
  }
  return page;
}

absl::StatusOr<std::vector<EntryRecord>> CacheIndex::FindByPrefix(const std::string& prefix, int limit) {
  Where where;
  AddPrefix(where, "key", prefix);
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement stmt(db_, path_);
  const int limit_param = static_cast<int>(where.params.size()) + 1;
  KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare(absl::StrCat("SELECT ", entry_row::SelectColumns(true), " FROM entries WHERE ",
                                                      where.sql, " ORDER BY key LIMIT ?", limit_param)));
  where.Bind(stmt);
  stmt.Bind(limit_param, static_cast<int64_t>(std::max(limit, 0)));
  return ReadAll(stmt, path_);
}

absl::StatusOr<std::vector<EntryRecord>> CacheIndex::All() {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement stmt(db_, path_);
  KILN_ABSL_RETURN_IF_ERROR(
      stmt.Prepare(absl::StrCat("SELECT ", entry_row::SelectColumns(false), " FROM entries ORDER BY key")));
  return ReadAll(stmt, path_);
}

absl::StatusOr<std::vector<EntryRecord>> CacheIndex::LeastRecentlyUsed(int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement stmt(db_, path_);
  KILN_ABSL_RETURN_IF_ERROR(stmt.Prepare(absl::StrCat("SELECT ", entry_row::SelectColumns(false),
                                                      " FROM entries ORDER BY last_used_unix_ms, key LIMIT ?1")));
  stmt.Bind(1, static_cast<int64_t>(std::max(limit, 0)));
  return ReadAll(stmt, path_);
}

}  // namespace kiln::cache
