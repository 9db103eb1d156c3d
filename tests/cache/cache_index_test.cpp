// Tests of cache/cache_index.h on a real SQLite file: CRUD of every field, filters, paging,
// hits, totals, LRU order, schema versioning, and two connections sharing one file.
#include "cache/cache_index.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <set>

#include "tests/cache/cache_fixtures.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

using kiln::testing::TempDir;
using kiln::testing::WriteFile;
using testing::Filter;
using testing::KeyFor;
using testing::MakeRecord;

std::unique_ptr<CacheIndex> OpenIndex(const TempDir& dir) {
  auto index = CacheIndex::Open(dir / "index.sqlite");
  REQUIRE(index.ok());
  return std::move(*index);
}

EntryRecord Stored(const std::string& name, const std::string& uri = "rmsnorm_bf16_h4096",
                   const std::string& op = "rmsnorm", const std::string& arch = "sm_90a") {
  EntryRecord r = MakeRecord(KeyFor(name), uri, op, arch);
  r.sha256 = KeyFor("blob:" + name);
  r.size_bytes = 1000;
  r.created_unix_ms = 1700000000000;
  r.last_used_unix_ms = 1700000000000;
  return r;
}

std::string RunSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  std::string result;
  char* error = nullptr;
  int rc = sqlite3_exec(
      db, sql.c_str(),
      [](void* out, int n, char** values, char**) {
        if (n > 0 && values[0] != nullptr) *static_cast<std::string*>(out) = values[0];
        return 0;
      },
      &result, &error);
  std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  INFO(message);
  REQUIRE(rc == SQLITE_OK);
  return result;
}

TEST_CASE("every EntryRecord field round-trips, upsert replaces and remove deletes", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  EntryRecord r = Stored("a");
  r.hit_count = 7;
  REQUIRE(index->Upsert(r).ok());

  auto found = index->Find(r.key);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  const EntryRecord& f = **found;
  CHECK(f.key == r.key);
  CHECK(f.uri == r.uri);
  CHECK(f.op == r.op);
  CHECK(f.params == r.params);
  CHECK(f.arch == r.arch);
  CHECK(f.options == r.options);
  CHECK(f.sha256 == r.sha256);
  CHECK(f.size_bytes == r.size_bytes);
  CHECK(f.format_version == r.format_version);
  CHECK(f.kiln_version == r.kiln_version);
  CHECK(f.nvrtc_version == r.nvrtc_version);
  CHECK(f.nvjitlink_version == r.nvjitlink_version);
  CHECK(f.cuda_headers_version == r.cuda_headers_version);
  CHECK(f.created_unix_ms == r.created_unix_ms);
  CHECK(f.last_used_unix_ms == r.last_used_unix_ms);
  CHECK(f.hit_count == 7);
  CHECK(f.compile_ms == Approx(r.compile_ms));
  CHECK(f.job_id == r.job_id);
  CHECK(f.kernels_json == r.kernels_json);
  CHECK(f.launch_json == r.launch_json);
  CHECK(f.manifest_json == r.manifest_json);
  CHECK(f.compile_log == r.compile_log);

  // Params and options are stored as JSON text (readable with sqlite3).
  const std::string path = dir / "index.sqlite";
  CHECK(RunSql(path, "SELECT json_extract(params_json, '$.dtype') FROM entries") == "bf16");
  CHECK(RunSql(path, "SELECT json_array_length(options_json) FROM entries") == "3");

  r.uri = "rmsnorm_bf16_h8192";
  r.options = {};
  r.params = {};
  REQUIRE(index->Upsert(r).ok());
  auto replaced = index->Find(r.key).value();
  REQUIRE(replaced.has_value());
  CHECK(replaced->uri == "rmsnorm_bf16_h8192");
  CHECK(replaced->options.empty());
  CHECK(replaced->params.empty());
  CHECK(index->GetTotals()->entries == 1);

  REQUIRE(index->Remove(r.key).ok());
  CHECK_FALSE(index->Find(r.key)->has_value());
  CHECK(index->Remove(r.key).ok());  // absent is fine
  CHECK(index->Upsert(EntryRecord{}).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the index is in WAL mode with the schema version and indices", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  const std::string path = dir / "index.sqlite";
  CHECK(RunSql(path, "PRAGMA journal_mode") == "wal");
  CHECK(RunSql(path, "SELECT value FROM meta WHERE name = 'schema_version'") ==
        std::to_string(CacheIndex::kSchemaVersion));
  for (const char* column : {"op", "uri", "arch", "last_used_unix_ms", "sha256"}) {
    INFO(column);
    CHECK(RunSql(path, std::string("SELECT COUNT(*) FROM pragma_index_list('entries') l, "
                                   "pragma_index_info(l.name) i WHERE i.name = '") +
                           column + "'") == "1");
  }
}

TEST_CASE("a newer schema version is FAILED_PRECONDITION naming both versions", "[cache_index]") {
  TempDir dir("kiln-index");
  { auto index = OpenIndex(dir); }
  RunSql(dir / "index.sqlite", "UPDATE meta SET value = '99' WHERE name = 'schema_version'");
  auto reopened = CacheIndex::Open(dir / "index.sqlite");
  REQUIRE_FALSE(reopened.ok());
  CHECK(reopened.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(reopened.status().message());
  CHECK_THAT(message, Catch::Contains("99"));
  CHECK_THAT(message, Catch::Contains(std::to_string(CacheIndex::kSchemaVersion)));
  CHECK_THAT(message, Catch::Contains(dir / "index.sqlite"));
}

TEST_CASE("a file that is not SQLite is DATA_LOSS naming it", "[cache_index]") {
  TempDir dir("kiln-index");
  WriteFile(dir / "index.sqlite", std::string(8192, 'x'));
  auto index = CacheIndex::Open(dir / "index.sqlite");
  REQUIRE_FALSE(index.ok());
  CHECK(index.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(index.status().message()), Catch::Contains(dir / "index.sqlite"));
}

TEST_CASE("List filters by op, uri prefix, arch and keys", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  REQUIRE(index->Upsert(Stored("1", "rmsnorm_bf16_h4096", "rmsnorm", "sm_90a")).ok());
  REQUIRE(index->Upsert(Stored("2", "rmsnorm_bf16_h8192", "rmsnorm", "sm_100a")).ok());
  REQUIRE(index->Upsert(Stored("3", "rmsnorm_fp16_h4096", "rmsnorm", "sm_90a")).ok());
  REQUIRE(index->Upsert(Stored("4", "gemm_bf16", "gemm", "sm_90a")).ok());
  REQUIRE(index->Upsert(Stored("5", "gemm%_x", "gemm", "sm_90a")).ok());

  auto keys_of = [&](const EntryFilter& filter) {
    auto page = index->List(filter, 100, "");
    REQUIRE(page.ok());
    std::set<std::string> keys;
    for (const auto& e : page->entries) keys.insert(e.key);
    CHECK(page->total_matching == keys.size());
    CHECK(page->next_page_token.empty());
    return keys;
  };
  using S = std::set<std::string>;
  CHECK(keys_of({}).size() == 5);
  CHECK(keys_of(Filter("gemm", "", "")) == S{KeyFor("4"), KeyFor("5")});
  CHECK(keys_of(Filter("gem", "", "")).empty());  // exact
  CHECK(keys_of(Filter("", "rmsnorm_bf16", "")) == S{KeyFor("1"), KeyFor("2")});
  CHECK(keys_of(Filter("", "gemm%", "")) == S{KeyFor("5")});  // no wildcards
  CHECK(keys_of(Filter("", "rmsnorm_bf16_h4096", "")) == S{KeyFor("1")});
  CHECK(keys_of(Filter("", "", "sm_100a")) == S{KeyFor("2")});
  CHECK(keys_of(Filter("rmsnorm", "", "sm_90a")) == S{KeyFor("1"), KeyFor("3")});
  CHECK(keys_of(Filter("", "", "", {KeyFor("3"), KeyFor("4"), KeyFor("absent")})) == S{KeyFor("3"), KeyFor("4")});
  CHECK(keys_of(Filter("gemm", "", "", {KeyFor("3"), KeyFor("4")})) == S{KeyFor("4")});

  // Heavy fields only when asked.
  auto light = index->List(Filter("", "", "", {KeyFor("1")}), 10, "").value();
  REQUIRE(light.entries.size() == 1);
  CHECK(light.entries[0].compile_log.empty());
  CHECK(light.entries[0].manifest_json.empty());
  CHECK_FALSE(light.entries[0].kernels_json.empty());
  auto heavy = index->List(Filter("", "", "", {KeyFor("1")}), 10, "", /*with_details=*/true).value();
  CHECK(heavy.entries[0].compile_log == MakeRecord("x").compile_log);
}

TEST_CASE("List pages through every match in key order", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  std::set<std::string> expected;
  for (int i = 0; i < 25; ++i) {
    EntryRecord r = Stored("page" + std::to_string(i), i % 2 ? "odd" : "even");
    expected.insert(r.key);
    REQUIRE(index->Upsert(r).ok());
  }
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = index->List({}, 10, token);
    REQUIRE(page.ok());
    CHECK(page->total_matching == 25);
    for (const auto& e : page->entries) seen.push_back(e.key);
    token = page->next_page_token;
    ++pages;
    REQUIRE(pages < 10);
  } while (!token.empty());
  CHECK(pages == 3);
  CHECK(seen.size() == 25);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(std::set<std::string>(seen.begin(), seen.end()) == expected);

  // Paging with a filter; the token is tied to it.
  auto first = index->List(Filter("", "odd", ""), 5, "").value();
  CHECK(first.total_matching == 12);
  REQUIRE_FALSE(first.next_page_token.empty());
  auto second = index->List(Filter("", "odd", ""), 5, first.next_page_token).value();
  CHECK(second.entries.size() == 5);
  CHECK(second.entries.front().key > first.entries.back().key);
  auto other = index->List(Filter("", "even", ""), 5, first.next_page_token);
  CHECK(other.status().code() == absl::StatusCode::kInvalidArgument);
  auto garbage = index->List({}, 5, "not-a-token");
  CHECK(garbage.status().code() == absl::StatusCode::kInvalidArgument);
  // A page size of 0 means the default (all 25 fit).
  CHECK(index->List({}, 0, "")->entries.size() == 25);
}

TEST_CASE("AddHits counts hits and keeps the newest use time", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  REQUIRE(index->Upsert(Stored("a")).ok());
  REQUIRE(index->Upsert(Stored("b")).ok());
  REQUIRE(index
              ->AddHits({{KeyFor("a"), {3, 1800000000000}},
                         {KeyFor("b"), {1, 1600000000000}},  // older than created: kept as is
                         {KeyFor("gone"), {5, 1800000000000}}})
              .ok());
  REQUIRE(index->AddHits({{KeyFor("a"), {2, 1750000000000}}}).ok());
  auto a = index->Find(KeyFor("a"))->value();
  CHECK(a.hit_count == 5);
  CHECK(a.last_used_unix_ms == 1800000000000);
  auto b = index->Find(KeyFor("b"))->value();
  CHECK(b.hit_count == 1);
  CHECK(b.last_used_unix_ms == 1700000000000);
  CHECK_FALSE(index->Find(KeyFor("gone"))->has_value());
}

TEST_CASE("totals count shared blobs once, LRU order and blob reference counts", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  EntryRecord a = Stored("a"), b = Stored("b"), c = Stored("c");
  b.sha256 = a.sha256;  // same bytes, two keys
  c.size_bytes = 500;
  a.last_used_unix_ms = 3;
  b.last_used_unix_ms = 1;
  c.last_used_unix_ms = 2;
  for (const auto& r : {a, b, c}) REQUIRE(index->Upsert(r).ok());
  auto totals = index->GetTotals().value();
  CHECK(totals.entries == 3);
  CHECK(totals.blobs == 2);
  CHECK(totals.bytes == 1500);
  auto lru = index->LeastRecentlyUsed(2).value();
  REQUIRE(lru.size() == 2);
  CHECK(lru[0].key == b.key);
  CHECK(lru[1].key == c.key);
  CHECK(index->CountRowsWithBlob(a.sha256).value() == 2);
  CHECK(index->CountRowsWithBlob(c.sha256).value() == 1);
  CHECK(index->CountRowsWithBlob(KeyFor("none")).value() == 0);

  auto by_prefix = index->FindByPrefix(a.key.substr(0, 6), 10).value();
  REQUIRE(by_prefix.size() >= 1);
  CHECK(by_prefix[0].key == a.key);
}

TEST_CASE("RemoveIfBlob removes only the row it read and reports rows left", "[cache_index]") {
  TempDir dir("kiln-index");
  auto index = OpenIndex(dir);
  EntryRecord a = Stored("a"), b = Stored("b");
  b.sha256 = a.sha256;
  REQUIRE(index->Upsert(a).ok());
  REQUIRE(index->Upsert(b).ok());

  auto stale = index->RemoveIfBlob(a.key, KeyFor("other blob"), nullptr);
  REQUIRE(stale.ok());
  CHECK_FALSE(*stale);
  CHECK(index->Find(a.key)->has_value());

  uint64_t left = 99;
  auto removed = index->RemoveIfBlob(a.key, a.sha256, [&](const std::string&, uint64_t n) {
    left = n;
    return absl::OkStatus();
  });
  REQUIRE(removed.ok());
  CHECK(*removed);
  CHECK(left == 1);

  // A failing hook rolls the removal back.
  auto failed = index->RemoveIfBlob(b.key, b.sha256,
                                    [](const std::string&, uint64_t) { return absl::InternalError("hook failed"); });
  CHECK_FALSE(failed.ok());
  CHECK(index->Find(b.key)->has_value());
}

TEST_CASE("two connections to one file see each other's writes", "[cache_index]") {
  TempDir dir("kiln-index");
  auto first = OpenIndex(dir);
  auto second = OpenIndex(dir);
  REQUIRE(first->Upsert(Stored("a")).ok());
  CHECK(second->Find(KeyFor("a"))->has_value());
  REQUIRE(second->Remove(KeyFor("a")).ok());
  CHECK_FALSE(first->Find(KeyFor("a"))->has_value());
}

}  // namespace
}  // namespace kiln::cache
