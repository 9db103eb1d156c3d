// Tests of cache/artifact_cache.h: the lookup/commit path, problem entries turning into clean
// misses, LRU eviction, shared blobs, recovery and verification, on a real cache folder.
#include "cache/artifact_cache.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <thread>

#include "cache/sha256.h"
#include "tests/cache/cache_fixtures.h"
#include "tests/cache/forked_child.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kiln::testing::ReadFile;
using kiln::testing::TempDir;
using kiln::testing::WriteFile;
using testing::CompatibilityOf;
using testing::FakeCubin;
using testing::Filter;
using testing::FlipByte;
using testing::KeyFor;
using testing::MakeOld;
using testing::MakeRecord;

std::unique_ptr<ArtifactCache> OpenCache(const std::string& dir, uint64_t max_bytes = 1ull << 30,
                                         std::chrono::seconds grace = 10min) {
  CacheOptions options;
  options.dir = dir;
  options.max_bytes = max_bytes;
  options.orphan_grace = grace;
  auto cache = ArtifactCache::Open(options);
  INFO(cache.status().ToString());
  REQUIRE(cache.ok());
  return std::move(*cache);
}

EntryRecord CommitNamed(ArtifactCache& cache, const std::string& name, size_t size = 256,
                        const std::string& bytes_seed = "") {
  auto committed = cache.Commit(MakeRecord(KeyFor(name)), FakeCubin(bytes_seed.empty() ? name : bytes_seed, size));
  INFO(committed.status().ToString());
  REQUIRE(committed.ok());
  return *committed;
}

// Lookup that collects problems.
struct LookupResult {
  std::optional<CachedArtifact> artifact;
  std::vector<std::string> problems;
};
LookupResult LookupNamed(ArtifactCache& cache, const std::string& name,
                         std::optional<Compatibility> expect = std::nullopt) {
  LookupResult result;
  auto found = cache.Lookup(KeyFor(name), expect ? *expect : CompatibilityOf(MakeRecord(KeyFor(name))),
                            [&](const std::string& p) { result.problems.push_back(p); });
  INFO(found.status().ToString());
  REQUIRE(found.ok());
  result.artifact = std::move(*found);
  return result;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) ++n;
  return n;
}

TEST_CASE("Open creates the workspace layout", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir / "ws");
  for (const char* sub : {"blobs", "locks", "tmp", "quarantine"}) CHECK(fs::is_directory(dir / "ws/" + sub));
  CHECK(fs::is_regular_file(dir / "ws/index.sqlite"));
  CHECK((fs::status(dir / "ws/blobs").permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
         fs::perms::others_exec));
  CHECK(ArtifactCache::Open(CacheOptions{}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("under kilnd.service's umask 0027 nothing in the cache is readable by others and blobs are 0440",
          "[artifact_cache]") {
  struct RestoreUmask {
    mode_t old = ::umask(0027);
    ~RestoreUmask() { ::umask(old); }
  } restore;
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir / "ws");
  const EntryRecord entry = CommitNamed(*cache, "k");
  auto lock = cache->LockKey(KeyFor("other"), 1s);
  REQUIRE(lock.ok());
  const auto perms = [](const fs::path& p) { return fs::status(p).permissions() & fs::perms::all; };
  CHECK(perms(cache->blobs().PathOf(entry.sha256)) == (fs::perms::owner_read | fs::perms::group_read));
  CHECK(perms(dir / "ws/blobs") == (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec));
  int checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "ws")) {
    INFO(e.path());
    CHECK((perms(e.path()) & fs::perms::others_all) == fs::perms::none);
    ++checked;
  }
  CHECK(checked >= 8);  // the folders, the index, a blob and its fan folder, a lock file
}

TEST_CASE("commit then lookup returns the verified bytes and the full record", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const std::string bytes = FakeCubin("k", 1000);
  auto committed = cache->Commit(MakeRecord(KeyFor("k")), bytes);
  REQUIRE(committed.ok());
  CHECK(committed->sha256 == Sha256Hex(bytes));
  CHECK(committed->size_bytes == 1000);
  CHECK(committed->created_unix_ms > 0);
  CHECK(committed->last_used_unix_ms == committed->created_unix_ms);

  auto hit = LookupNamed(*cache, "k");
  REQUIRE(hit.artifact.has_value());
  CHECK(hit.problems.empty());
  CHECK(*hit.artifact->cubin == bytes);
  CHECK(hit.artifact->record.sha256 == committed->sha256);
  CHECK(hit.artifact->record.compile_log == MakeRecord("x").compile_log);
  CHECK(hit.artifact->blob_path == cache->blobs().PathOf(committed->sha256));
  CHECK(ReadFile(hit.artifact->blob_path) == bytes);

  auto miss = LookupNamed(*cache, "never committed");
  CHECK_FALSE(miss.artifact.has_value());
  CHECK(miss.problems.empty());
}

TEST_CASE("an incompatible row is a miss, reported, removed, its blob quarantined", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord stored = CommitNamed(*cache, "k");

  using Change = std::function<void(Compatibility&)>;
  const std::vector<std::pair<std::string, Change>> changes = {
      {"arch", [](Compatibility& c) { c.arch = "sm_100a"; }},
      {"uri", [](Compatibility& c) { c.uri = "other_uri"; }},
      {"options", [](Compatibility& c) { c.options.push_back("-G"); }},
      {"format version", [](Compatibility& c) { c.format_version += 1; }},
      {"kiln version", [](Compatibility& c) { c.kiln_version = "9.9.9"; }},
      {"nvrtc version", [](Compatibility& c) { c.nvrtc_version = "12.8"; }},
      {"nvjitlink version", [](Compatibility& c) { c.nvjitlink_version = "12.8"; }},
  };
  for (const auto& [what, change] : changes) {
    INFO(what);
    CommitNamed(*cache, "k");
    Compatibility expect = CompatibilityOf(stored);
    change(expect);
    auto result = LookupNamed(*cache, "k", expect);
    CHECK_FALSE(result.artifact.has_value());
    REQUIRE(result.problems.size() == 1);
    CHECK_THAT(result.problems[0], Catch::Contains(stored.key));
    CHECK_THAT(result.problems[0], Catch::Contains(what));
    CHECK_THAT(result.problems[0], Catch::Contains("quarantined"));
    CHECK_FALSE(cache->index().Find(stored.key)->has_value());
    CHECK_FALSE(cache->blobs().Exists(stored.sha256));
  }
  CHECK(cache->quarantined() == changes.size());
  // Recompiling (committing again) makes it a hit.
  CommitNamed(*cache, "k");
  CHECK(LookupNamed(*cache, "k").artifact.has_value());
}

TEST_CASE("an incompatible row whose blob another entry uses keeps the blob", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord a = CommitNamed(*cache, "a", 256, "shared");
  const EntryRecord b = CommitNamed(*cache, "b", 256, "shared");
  REQUIRE(a.sha256 == b.sha256);
  Compatibility expect = CompatibilityOf(a);
  expect.arch = "sm_80";
  auto result = LookupNamed(*cache, "a", expect);
  CHECK_FALSE(result.artifact.has_value());
  REQUIRE(result.problems.size() == 1);
  CHECK_THAT(result.problems[0], Catch::Contains("kept its blob"));
  CHECK(LookupNamed(*cache, "b").artifact.has_value());
}

TEST_CASE("a corrupt or missing blob makes a clean, reported miss", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord stored = CommitNamed(*cache, "k", 4096);
  const std::string path = cache->blobs().PathOf(stored.sha256);

  SECTION("flipped byte") {
    FlipByte(path, 100);
    auto result = LookupNamed(*cache, "k");
    CHECK_FALSE(result.artifact.has_value());
    REQUIRE(result.problems.size() == 1);
    CHECK_THAT(result.problems[0], Catch::Contains("corrupt"));
    CHECK_THAT(result.problems[0], Catch::Contains("quarantine/" + stored.sha256));
    CHECK_FALSE(fs::exists(path));
    CHECK(FilesIn(dir / "quarantine") == 2);  // blob + .why
  }
  SECTION("deleted blob") {
    fs::remove(path);
    auto result = LookupNamed(*cache, "k");
    CHECK_FALSE(result.artifact.has_value());
    REQUIRE(result.problems.size() == 1);
    CHECK_THAT(result.problems[0], Catch::Contains("not in the store"));
  }
  CHECK_FALSE(cache->index().Find(stored.key)->has_value());
  // The next lookup is a plain miss with nothing to report.
  auto again = LookupNamed(*cache, "k");
  CHECK_FALSE(again.artifact.has_value());
  CHECK(again.problems.empty());
}

TEST_CASE("an unreadable index row is a reported miss", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord stored = CommitNamed(*cache, "k");
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open((dir / "index.sqlite").c_str(), &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    REQUIRE(sqlite3_exec(db, "UPDATE entries SET params_json = '{not json'", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto result = LookupNamed(*cache, "k");
  CHECK_FALSE(result.artifact.has_value());
  REQUIRE(result.problems.size() == 1);
  CHECK_THAT(result.problems[0], Catch::Contains("params_json"));
  CHECK_FALSE(cache->index().Find(stored.key)->has_value());
}

TEST_CASE("LRU eviction under a size limit never evicts the just-committed key", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  // Three 1 MiB entries and the index's files (well under 600 KiB) fit; a fourth does not.
  constexpr size_t kMiB = 1 << 20;
  auto cache = OpenCache(dir.path(), /*max_bytes=*/3 * kMiB + (600 << 10));
  for (const char* name : {"a", "b", "c"}) {
    CommitNamed(*cache, name, kMiB);
    std::this_thread::sleep_for(3ms);  // distinct last-use times (ordering, not speed)
  }
  CHECK(cache->index().GetTotals()->entries == 3);

  // "a" is used after "b": "b" becomes the least recently used.
  std::this_thread::sleep_for(5ms);
  cache->RecordHit(KeyFor("a"));
  std::this_thread::sleep_for(5ms);
  CommitNamed(*cache, "d", kMiB);  // 4 MiB > the limit: one must go
  CHECK_FALSE(cache->index().Find(KeyFor("b"))->has_value());
  CHECK_FALSE(cache->blobs().Exists(Sha256Hex(FakeCubin("b", kMiB))));
  for (const char* name : {"a", "c", "d"}) CHECK(cache->index().Find(KeyFor(name))->has_value());
  CHECK(cache->evictions() == 1);
  CHECK(cache->index().Find(KeyFor("a"))->value().hit_count == 1);

  // An entry larger than the whole limit evicts everything else but stays itself.
  const EntryRecord big = CommitNamed(*cache, "big", 5 * kMiB);
  CHECK(cache->index().GetTotals()->entries == 1);
  CHECK(LookupNamed(*cache, "big").artifact.has_value());
  CHECK(cache->index().GetTotals()->bytes == big.size_bytes);
}

TEST_CASE("with evict_in_background a commit only marks the eviction due for its owner's thread", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  CacheOptions options;
  options.dir = dir.path();
  options.max_bytes = 3 << 20;
  options.evict_in_background = true;
  auto cache = ArtifactCache::Open(options).value();
  CHECK_FALSE(cache->TakeDueEviction().has_value());
  for (int i = 0; i < 5; ++i) CommitNamed(*cache, "e" + std::to_string(i), 1 << 20);
  CHECK(cache->index().GetTotals()->entries == 5);  // nothing evicted by the commits
  CHECK(cache->evictions() == 0);
  auto due = cache->TakeDueEviction();
  REQUIRE(due.has_value());
  CHECK(*due == KeyFor("e4"));  // the latest commit, to keep
  CHECK_FALSE(cache->TakeDueEviction().has_value());
  auto evicted = cache->EnforceSizeLimit(*due);
  REQUIRE(evicted.ok());
  CHECK(evicted->evicted.size() >= 3);
  CHECK(LookupNamed(*cache, "e4").artifact.has_value());
  CHECK_FALSE(LookupNamed(*cache, "e0").artifact.has_value());
}

uint64_t FolderBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

TEST_CASE("the size limit covers the whole folder: the index and its WAL count, compiled keys leave no lock files",
          "[artifact_cache]") {
  TempDir dir("kiln-cache");
  constexpr uint64_t kLimit = 1 << 20;
  auto cache = OpenCache(dir.path(), kLimit);
  for (int i = 0; i < 300; ++i) {
    const std::string name = "entry" + std::to_string(i);
    auto lock = cache->LockKey(KeyFor(name), 1s);  // as a compile job holds it
    REQUIRE(lock.ok());
    lock->RemoveOnRelease();
    CommitNamed(*cache, name, 20 << 10);
  }
  const uint64_t held = FolderBytes(dir.path());
  INFO("folder bytes " << held);
  CHECK(held <= kLimit + (64 << 10));  // the limit, plus what the last eviction's own writes added
  CHECK(fs::file_size(dir / "index.sqlite-wal") <= (600 << 10));
  int lock_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "locks")) lock_files += e.is_regular_file();
  CHECK(lock_files == 0);
  CHECK(LookupNamed(*cache, "entry299").artifact.has_value());  // the newest stays
}

TEST_CASE("a lost index is rebuilt from the entry sidecars when the cache opens", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  std::vector<EntryRecord> committed;
  {
    auto cache = OpenCache(dir.path());
    for (int i = 0; i < 3; ++i) committed.push_back(CommitNamed(*cache, "e" + std::to_string(i), 1000));
    // Every committed entry has its sidecar: the row without what only the index keeps.
    for (const auto& record : committed) {
      const std::string sidecar = dir / ("entries/" + record.key.substr(0, 2) + "/" + record.key + ".json");
      REQUIRE(fs::is_regular_file(sidecar));
      CHECK(ReadFile(sidecar).find("compile_log") == std::string::npos);
    }
    CHECK(cache->last_recovery().entries_restored == 0);
  }
  for (const char* file : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) fs::remove(dir / file);
  {
    auto reopened = OpenCache(dir.path());
    CHECK(reopened->last_recovery().entries_restored == 3);
    CHECK(reopened->last_recovery().blobs_without_index == 0);
    CHECK(reopened->index().GetTotals()->entries == 3);
    for (int i = 0; i < 3; ++i) {
      LookupResult hit = LookupNamed(*reopened, "e" + std::to_string(i));
      REQUIRE(hit.artifact.has_value());
      CHECK(hit.problems.empty());
      const EntryRecord& got = hit.artifact->record;
      const EntryRecord& want = committed[static_cast<size_t>(i)];
      CHECK(*hit.artifact->cubin == FakeCubin("e" + std::to_string(i), 1000));
      CHECK(got.uri == want.uri);
      CHECK(got.params == want.params);
      CHECK(got.options == want.options);
      CHECK(got.sha256 == want.sha256);
      CHECK(got.created_unix_ms == want.created_unix_ms);
      CHECK(got.kernels_json == want.kernels_json);
      CHECK(got.launch_json == want.launch_json);
      CHECK(got.compile_log.empty());  // kept by the index only
    }
    // Rows lost from a working index (a WAL removed after a checkpoint) come back the same way.
    REQUIRE(reopened->index().Remove(KeyFor("e1")).ok());
  }
  auto again = OpenCache(dir.path());
  CHECK(again->last_recovery().entries_restored == 1);
  CHECK(LookupNamed(*again, "e1").artifact.has_value());
}

TEST_CASE("entry sidecars go with their entries, and ones that cannot restore an entry are removed",
          "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto sidecar_of = [&](const std::string& name) {
    const std::string key = KeyFor(name);
    return dir / ("entries/" + key.substr(0, 2) + "/" + key + ".json");
  };
  std::string damaged_sha;
  {
    auto cache = OpenCache(dir.path());
    for (const char* name : {"evicted", "missing", "damaged", "garbage", "renamed", "kept"}) CommitNamed(*cache, name);
    REQUIRE(cache->Evict(Filter("", "", "", {KeyFor("evicted")}), false).ok());
    CHECK(!fs::exists(sidecar_of("evicted")));
    damaged_sha = LookupNamed(*cache, "damaged").artifact->record.sha256;
  }
  auto blob_of = [&](const std::string& sha) { return dir / ("blobs/" + sha.substr(0, 2) + "/" + sha); };
  std::string missing_sha;
  {
    auto cache = OpenCache(dir.path());
    missing_sha = LookupNamed(*cache, "missing").artifact->record.sha256;
  }
  for (const char* file : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) fs::remove(dir / file);
  fs::remove(blob_of(missing_sha));
  fs::permissions(blob_of(damaged_sha), fs::perms::owner_write, fs::perm_options::add);
  FlipByte(blob_of(damaged_sha), 10);
  WriteFile(sidecar_of("garbage"), "{not json");
  // A sidecar under another key's name is not that key's entry.
  fs::copy_file(sidecar_of("kept"), sidecar_of("renamed"), fs::copy_options::overwrite_existing);

  auto reopened = OpenCache(dir.path());
  const RecoveryReport& r = reopened->last_recovery();
  CHECK(r.entries_restored == 1);  // kept
  CHECK(r.sidecars_removed == 4);  // missing, damaged, garbage, renamed
  CHECK(LookupNamed(*reopened, "kept").artifact.has_value());
  for (const char* name : {"missing", "damaged", "garbage", "renamed"}) {
    INFO(name);
    CHECK(!LookupNamed(*reopened, name).artifact.has_value());
    CHECK(!fs::exists(sidecar_of(name)));
  }
  CHECK(reopened->quarantined() == 1);  // the damaged blob
  CHECK(!fs::exists(blob_of(damaged_sha)));
}

TEST_CASE("blobs under an index that lost every entry and had no sidecars are counted at open", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  {
    auto cache = OpenCache(dir.path());
    for (int i = 0; i < 3; ++i) CommitNamed(*cache, "e" + std::to_string(i), 1000);
    CHECK(cache->last_recovery().blobs_without_index == 0);
  }
  for (const char* file : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) fs::remove(dir / file);
  fs::remove_all(dir / "entries");  // as a cache written before sidecars
  auto reopened = OpenCache(dir.path());
  CHECK(reopened->last_recovery().entries_restored == 0);
  CHECK(reopened->last_recovery().blobs_without_index == 3);
  CHECK(reopened->last_recovery().blobs_without_index_bytes == 3000);
  CHECK(reopened->index().GetTotals()->entries == 0);
  // A fresh, empty cache has nothing to say.
  TempDir fresh("kiln-cache");
  CHECK(OpenCache(fresh.path())->last_recovery().blobs_without_index == 0);
}

TEST_CASE("a cache over a lowered limit is evicted when it opens, not at the next commit", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  {
    auto cache = OpenCache(dir.path());
    for (int i = 0; i < 40; ++i) CommitNamed(*cache, "e" + std::to_string(i), 64 << 10);
  }
  REQUIRE(FolderBytes(dir.path()) > (2 << 20));
  auto smaller = OpenCache(dir.path(), 1 << 20);
  CHECK(smaller->last_recovery().evicted_over_limit > 20);
  CHECK(smaller->last_recovery().evicted_bytes >= smaller->last_recovery().evicted_over_limit * (64 << 10));
  CHECK(FolderBytes(dir.path()) <= (1 << 20) + (64 << 10));
  CHECK(LookupNamed(*smaller, "e39").artifact.has_value());
  CHECK_FALSE(LookupNamed(*smaller, "e0").artifact.has_value());
}

TEST_CASE("a shared blob is deleted only with its last entry", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord a = CommitNamed(*cache, "a", 300, "same bytes");
  const EntryRecord b = CommitNamed(*cache, "b", 300, "same bytes");
  REQUIRE(a.sha256 == b.sha256);
  CHECK(cache->index().GetTotals()->bytes == 300);

  auto first = cache->Evict(Filter("", "", "", {a.key}), /*dry_run=*/false);
  REQUIRE(first.ok());
  CHECK(first->evicted == std::vector<std::string>{a.key});
  CHECK(first->bytes_freed == 0);
  CHECK(cache->blobs().Exists(a.sha256));
  CHECK(LookupNamed(*cache, "b").artifact.has_value());

  auto second = cache->Evict(Filter("", "", "", {b.key}), false);
  REQUIRE(second.ok());
  CHECK(second->bytes_freed == 300);
  CHECK_FALSE(cache->blobs().Exists(a.sha256));
}

TEST_CASE("re-committing a key with new bytes drops the old blob", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord v1 = CommitNamed(*cache, "k", 256, "v1");
  const EntryRecord v2 = CommitNamed(*cache, "k", 256, "v2");
  CHECK(v1.sha256 != v2.sha256);
  CHECK_FALSE(cache->blobs().Exists(v1.sha256));
  CHECK(*LookupNamed(*cache, "k").artifact->cubin == FakeCubin("v2", 256));
}

TEST_CASE("Evict by filter, dry run first", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  auto commit = [&](const std::string& name, const std::string& uri, const std::string& arch) {
    REQUIRE(cache->Commit(MakeRecord(KeyFor(name), uri, "rmsnorm", arch), FakeCubin(name, 100)).ok());
  };
  commit("1", "rmsnorm_bf16", "sm_90a");
  commit("2", "rmsnorm_bf16", "sm_100a");
  commit("3", "rmsnorm_fp16", "sm_90a");

  auto dry = cache->Evict(Filter("", "rmsnorm_bf16", ""), /*dry_run=*/true);
  REQUIRE(dry.ok());
  CHECK(std::set<std::string>(dry->evicted.begin(), dry->evicted.end()) ==
        std::set<std::string>{KeyFor("1"), KeyFor("2")});
  CHECK(dry->bytes_freed == 200);
  CHECK(cache->index().GetTotals()->entries == 3);  // nothing removed

  auto real = cache->Evict(Filter("", "rmsnorm_bf16", "sm_90a"), false);
  REQUIRE(real.ok());
  CHECK(real->evicted == std::vector<std::string>{KeyFor("1")});
  CHECK(real->bytes_freed == 100);
  CHECK(cache->index().GetTotals()->entries == 2);

  auto all = cache->Evict({}, false);
  REQUIRE(all.ok());
  CHECK(all->evicted.size() == 2);
  CHECK(cache->blobs().List()->empty());
}

TEST_CASE("Recover removes rows without blobs and old orphans, keeps young ones", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  std::string kept_orphan, old_orphan;
  EntryRecord rowless, healthy;
  {
    auto cache = OpenCache(dir.path());
    rowless = CommitNamed(*cache, "no blob");
    healthy = CommitNamed(*cache, "healthy");
    fs::remove(cache->blobs().PathOf(rowless.sha256));
    old_orphan = cache->blobs().Put(FakeCubin("old orphan")).value();
    kept_orphan = cache->blobs().Put(FakeCubin("young orphan")).value();
    MakeOld(cache->blobs().PathOf(old_orphan), 1h);
    WriteFile(cache->blobs().NewTempPath(testing::DeadPid()), "half");
  }
  auto cache = OpenCache(dir.path(), 1ull << 30, /*grace=*/10min);  // Open runs Recover
  const RecoveryReport& report = cache->last_recovery();
  CHECK(report.rows_without_blob_removed == 1);
  CHECK(report.orphan_blobs_removed == 1);
  CHECK(report.stale_temps_removed == 1);
  CHECK_FALSE(cache->index().Find(rowless.key)->has_value());
  CHECK_FALSE(cache->blobs().Exists(old_orphan));
  CHECK(cache->blobs().Exists(kept_orphan));
  CHECK(LookupNamed(*cache, "healthy").artifact.has_value());

  // A second pass finds nothing more; with no grace the young orphan goes too.
  auto again = cache->Recover().value();
  CHECK(again.rows_without_blob_removed == 0);
  CHECK(again.orphan_blobs_removed == 0);
  auto no_grace = OpenCache(dir.path(), 1ull << 30, 0s);
  CHECK(no_grace->last_recovery().orphan_blobs_removed == 1);
  CHECK_FALSE(no_grace->blobs().Exists(kept_orphan));
  CHECK(no_grace->blobs().Exists(healthy.sha256));
}

TEST_CASE("Verify finds a flipped byte, quarantines it, and a later lookup misses cleanly", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord bad = CommitNamed(*cache, "bad", 2000);
  const EntryRecord good = CommitNamed(*cache, "good", 2000);
  const EntryRecord missing = CommitNamed(*cache, "missing", 2000);
  const std::string orphan = cache->blobs().Put(FakeCubin("orphan")).value();

  auto clean = cache->Verify();
  REQUIRE(clean.ok());
  CHECK(clean->problems.empty());
  CHECK(clean->entries_checked == 3);
  CHECK(clean->blobs_checked == 4);

  FlipByte(cache->blobs().PathOf(bad.sha256), 1999);
  fs::remove(cache->blobs().PathOf(missing.sha256));
  FlipByte(cache->blobs().PathOf(orphan), 0);

  auto report = cache->Verify();
  REQUIRE(report.ok());
  REQUIRE(report->problems.size() == 3);
  std::map<std::string, VerifyReport::Problem> by_sha;
  for (const auto& p : report->problems) by_sha[p.sha256] = p;

  const auto& flipped = by_sha.at(bad.sha256);
  CHECK(flipped.key == bad.key);
  CHECK_THAT(flipped.problem, Catch::Contains("corrupt"));
  CHECK_THAT(flipped.action, Catch::Contains("quarantined"));
  CHECK(fs::exists(flipped.quarantine_path));
  CHECK(fs::exists(flipped.quarantine_path + ".why"));

  const auto& gone = by_sha.at(missing.sha256);
  CHECK(gone.key == missing.key);
  CHECK_THAT(gone.problem, Catch::Contains("missing"));
  CHECK_THAT(gone.action, Catch::Contains("removed the entry"));

  const auto& orphan_problem = by_sha.at(orphan);
  CHECK(orphan_problem.key.empty());
  CHECK_THAT(orphan_problem.action, Catch::Contains("quarantined"));

  CHECK(cache->quarantined() == 2);
  auto after = LookupNamed(*cache, "bad");
  CHECK_FALSE(after.artifact.has_value());
  CHECK(after.problems.empty());
  CHECK(LookupNamed(*cache, "good").artifact.has_value());
  CHECK(cache->Verify()->problems.empty());
}

TEST_CASE("Verify reports and removes a good orphan blob older than the grace and leaves a young one",
          "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord kept = CommitNamed(*cache, "kept", 1000);
  const std::string young = cache->blobs().Put(FakeCubin("young orphan")).value();
  const std::string old = cache->blobs().Put(FakeCubin("orphan of a failed commit")).value();
  MakeOld(cache->blobs().PathOf(old), 1h);

  auto report = cache->Verify();
  REQUIRE(report.ok());
  REQUIRE(report->problems.size() == 1);
  const auto& problem = report->problems[0];
  CHECK(problem.key.empty());
  CHECK(problem.sha256 == old);
  CHECK_THAT(problem.problem, Catch::Contains("orphan blob: no entry names it"));
  CHECK(problem.action == "removed it");
  CHECK_FALSE(cache->blobs().Exists(old));
  CHECK(cache->blobs().Exists(young));  // a commit may still be naming it
  CHECK(cache->blobs().Exists(kept.sha256));
  CHECK(LookupNamed(*cache, "kept").artifact.has_value());
  CHECK(cache->Verify()->problems.empty());
}

TEST_CASE("hits are buffered until FlushHits and then written together", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const EntryRecord stored = CommitNamed(*cache, "k");
  for (int i = 0; i < 5; ++i) cache->RecordHit(stored.key);
  CHECK(cache->index().Find(stored.key)->value().hit_count == 0);
  REQUIRE(cache->FlushHits().ok());
  auto row = cache->index().Find(stored.key)->value();
  CHECK(row.hit_count == 5);
  CHECK(row.last_used_unix_ms >= stored.last_used_unix_ms);

  cache->RecordHit(stored.key);
  cache.reset();  // the destructor flushes
  auto reopened = OpenCache(dir.path());
  CHECK(reopened->index().Find(stored.key)->value().hit_count == 6);
}

TEST_CASE("LockKey locks <dir>/locks/<aa>/<key>.lock and rejects unsafe keys", "[artifact_cache]") {
  TempDir dir("kiln-cache");
  auto cache = OpenCache(dir.path());
  const std::string key = KeyFor("k");
  auto lock = cache->LockKey(key, 1s);
  REQUIRE(lock.ok());
  CHECK(lock->path() == dir.path() + "/locks/" + key.substr(0, 2) + "/" + key + ".lock");
  auto second = cache->LockKey(key, 20ms);
  CHECK(second.status().code() == absl::StatusCode::kDeadlineExceeded);
  lock->Release();
  CHECK(cache->LockKey(key, 1s).ok());
  for (std::string bad : {"", "a", "../../etc/passwd", ".hidden", "a/b"}) {
    INFO(bad);
    CHECK(cache->LockKey(bad, 1s).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(cache->Commit(MakeRecord(bad), "x").status().code() == absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kiln::cache
