// EntryRow: EntryRecord ↔ entries-table row.
#include "cache/entry_row.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kiln::cache::entry_row {

const char* const kCreateSchema = R"sql(
CREATE TABLE entries (
  key                  TEXT PRIMARY KEY NOT NULL,
  uri                  TEXT NOT NULL,
  op                   TEXT NOT NULL,
  params_json          TEXT NOT NULL,
  arch                 TEXT NOT NULL,
  options_json         TEXT NOT NULL,
  sha256               TEXT NOT NULL,
  size_bytes           INTEGER NOT NULL,
  format_version       INTEGER NOT NULL,
  kiln_version         TEXT NOT NULL,
  nvrtc_version        TEXT NOT NULL,
  nvjitlink_version    TEXT NOT NULL,
  cuda_headers_version TEXT NOT NULL,
  created_unix_ms      INTEGER NOT NULL,
  last_used_unix_ms    INTEGER NOT NULL,
  hit_count            INTEGER NOT NULL,
  compile_ms           REAL NOT NULL,
  job_id               TEXT NOT NULL,
  kernels_json         TEXT NOT NULL,
  launch_json          TEXT NOT NULL,
  manifest_json        TEXT NOT NULL,
  compile_log          TEXT NOT NULL
);
CREATE INDEX entries_by_op ON entries(op);
CREATE INDEX entries_by_uri ON entries(uri);
CREATE INDEX entries_by_arch ON entries(arch);
CREATE INDEX entries_by_last_used ON entries(last_used_unix_ms);
CREATE INDEX entries_by_sha256 ON entries(sha256);
)sql";

namespace {
constexpr const char* kLightColumns =
    "key, uri, op, params_json, arch, options_json, sha256, size_bytes, format_version, "
    "kiln_version, nvrtc_version, nvjitlink_version, cuda_headers_version, created_unix_ms, "
    "last_used_unix_ms, hit_count, compile_ms, job_id, kernels_json, launch_json";
}  // namespace

const char* const kUpsertSql =
    "INSERT OR REPLACE INTO entries (key, uri, op, params_json, arch, options_json, sha256, "
    "size_bytes, format_version, kiln_version, nvrtc_version, nvjitlink_version, "
    "cuda_headers_version, created_unix_ms, last_used_unix_ms, hit_count, compile_ms, job_id, "
    "kernels_json, launch_json, manifest_json, compile_log) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
    "?19, ?20, ?21, ?22)";

std::string SelectColumns(bool with_details) {
  return absl::StrCat(kLightColumns, with_details ? ", manifest_json, compile_log" : ", '', ''");
}

void BindRecord(SqliteStatement& stmt, const EntryRecord& r) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, value] : r.params) params[name] = value;
  nlohmann::json options = r.options;
  // NOTES: dump() with error_handler replace keeps a non-UTF-8 option from throwing; the key
  // already covers the exact bytes, the row only describes them.
  const auto replace = nlohmann::json::error_handler_t::replace;
  stmt.Bind(1, r.key);
  stmt.Bind(2, r.uri);
  stmt.Bind(3, r.op);
  stmt.Bind(4, params.dump(-1, ' ', false, replace));
  stmt.Bind(5, r.arch);
  stmt.Bind(6, options.dump(-1, ' ', false, replace));
  stmt.Bind(7, r.sha256);
  stmt.Bind(8, static_cast<int64_t>(r.size_bytes));
  stmt.Bind(9, static_cast<int64_t>(r.format_version));
  stmt.Bind(10, r.kiln_version);
  stmt.Bind(11, r.nvrtc_version);
  stmt.Bind(12, r.nvjitlink_version);
  stmt.Bind(13, r.cuda_headers_version);
  stmt.Bind(14, r.created_unix_ms);
  stmt.Bind(15, r.last_used_unix_ms);
  stmt.Bind(16, static_cast<int64_t>(r.hit_count));
  stmt.Bind(17, r.compile_ms);
  stmt.Bind(18, r.job_id);
  stmt.Bind(19, r.kernels_json);
  stmt.Bind(20, r.launch_json);
  stmt.Bind(21, r.manifest_json);
  stmt.Bind(22, r.compile_log);
}

absl::StatusOr<EntryRecord> ReadRow(const SqliteStatement& stmt, const std::string& index_path) {
  EntryRecord r;
  r.key = stmt.Text(0);
  r.uri = stmt.Text(1);
  r.op = stmt.Text(2);
  const std::string params_text = stmt.Text(3);
  r.arch = stmt.Text(4);
  const std::string options_text = stmt.Text(5);
  r.sha256 = stmt.Text(6);
  r.size_bytes = static_cast<uint64_t>(stmt.Int(7));
  r.format_version = static_cast<uint32_t>(stmt.Int(8));
  r.kiln_version = stmt.Text(9);
  r.nvrtc_version = stmt.Text(10);
  r.nvjitlink_version = stmt.Text(11);
  r.cuda_headers_version = stmt.Text(12);
  r.created_unix_ms = stmt.Int(13);
  r.last_used_unix_ms = stmt.Int(14);
  r.hit_count = static_cast<uint64_t>(stmt.Int(15));
  r.compile_ms = stmt.Real(16);
  r.job_id = stmt.Text(17);
  r.kernels_json = stmt.Text(18);
  r.launch_json = stmt.Text(19);
  r.manifest_json = stmt.Text(20);
  r.compile_log = stmt.Text(21);

  auto bad = [&](const char* column, const std::string& text) {
    return absl::DataLossError(absl::StrCat("cache index ", index_path, ": row ", r.key, " has an unreadable ", column,
                                            " (", text.substr(0, 80), "); remove the entry (it will be recompiled)"));
  };
  auto params = nlohmann::json::parse(params_text, nullptr, /*allow_exceptions=*/false);
  if (!params.is_object()) return bad("params_json", params_text);
  for (const auto& [name, value] : params.items()) {
    if (!value.is_string()) return bad("params_json", params_text);
    r.params[name] = value.get<std::string>();
  }
  auto options = nlohmann::json::parse(options_text, nullptr, /*allow_exceptions=*/false);
  if (!options.is_array()) return bad("options_json", options_text);
  for (const auto& option : options) {
    if (!option.is_string()) return bad("options_json", options_text);
    r.options.push_back(option.get<std::string>());
  }
  return r;
}

}  // namespace kiln::cache::entry_row
