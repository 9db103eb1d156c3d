// Several processes (fork) and threads sharing one cache folder: whatever they commit, look
// up and evict at the same time, the index and the blobs stay consistent.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include "cache/artifact_cache.h"
#include "cache/sha256.h"
#include "tests/cache/cache_fixtures.h"
#include "tests/cache/forked_child.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

using namespace std::chrono_literals;
using kiln::testing::TempDir;
using testing::ChildChannel;
using testing::CompatibilityOf;
using testing::FakeCubin;
using testing::ForkedChild;
using testing::KeyFor;
using testing::MakeRecord;

// Names a worker commits: shared ones (every worker, same bytes), its own ones, and aliases
// (different keys, bytes equal to a shared name's: one blob, several rows).
std::vector<std::pair<std::string, std::string>> WorkFor(int worker) {
  std::vector<std::pair<std::string, std::string>> work;  // (key name, bytes seed)
  for (int i = 0; i < 6; ++i) work.push_back({"shared" + std::to_string(i), "shared" + std::to_string(i)});
  for (int i = 0; i < 6; ++i) {
    std::string own = "w" + std::to_string(worker) + "-" + std::to_string(i);
    work.push_back({own, own});
  }
  for (int i = 0; i < 3; ++i)
    work.push_back({"alias" + std::to_string(worker) + "-" + std::to_string(i), "shared" + std::to_string(i)});
  return work;
}

// The child's body: commit everything under the key lock (compile once per key), then look
// everything up; a hit must carry exactly the committed bytes. Exit codes say what failed.
int Worker(const std::string& dir, int worker, uint64_t max_bytes, ChildChannel& channel) {
  CacheOptions options;
  options.dir = dir;
  options.max_bytes = max_bytes;
  channel.WaitForParent(60s);  // all start together
  auto cache = ArtifactCache::Open(options);
  if (!cache.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", worker, cache.status().ToString().c_str());
    return 10;
  }
  auto work = WorkFor(worker);
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, seed] : work) {
      const std::string key = KeyFor(name);
      auto lock = (*cache)->LockKey(key, 60s);
      if (!lock.ok()) return 11;
      auto existing = (*cache)->Lookup(key, CompatibilityOf(MakeRecord(key)));
      if (!existing.ok()) return 12;
      if (existing->has_value()) {
        if (*(*existing)->cubin != FakeCubin(seed, 512)) return 13;
        (*cache)->RecordHit(key);
        continue;
      }
      if (!(*cache)->Commit(MakeRecord(key), FakeCubin(seed, 512)).ok()) return 14;
    }
  }
  for (const auto& [name, seed] : work) {
    auto found = (*cache)->Lookup(KeyFor(name), CompatibilityOf(MakeRecord(KeyFor(name))));
    if (!found.ok()) return 15;
    if (found->has_value() && *(*found)->cubin != FakeCubin(seed, 512)) return 16;
  }
  if (!(*cache)->FlushHits().ok()) return 17;
  return 0;
}

// Every row's blob exists with the row's bytes, every blob has a row, nothing is left in tmp.
void CheckConsistent(const std::string& dir, uint64_t max_bytes) {
  CacheOptions options;
  options.dir = dir;
  options.max_bytes = max_bytes;
  options.orphan_grace = 0s;
  auto cache = ArtifactCache::Open(options);
  REQUIRE(cache.ok());
  const RecoveryReport& recovery = (*cache)->last_recovery();
  CHECK(recovery.rows_without_blob_removed == 0);
  CHECK(recovery.orphan_blobs_removed == 0);
  CHECK(recovery.stale_temps_removed == 0);

  auto verify = (*cache)->Verify();
  REQUIRE(verify.ok());
  for (const auto& p : verify->problems) INFO(p.key << " " << p.problem << " → " << p.action);
  CHECK(verify->problems.empty());

  auto rows = (*cache)->index().All().value();
  std::set<std::string> referenced;
  for (const auto& row : rows) referenced.insert(row.sha256);
  std::set<std::string> on_disk;
  auto blobs = (*cache)->blobs().List().value();
  for (const auto& blob : blobs) on_disk.insert(blob.sha256);
  CHECK(referenced == on_disk);
  CHECK(std::filesystem::is_empty(dir + "/tmp"));
  CHECK((*cache)->index().GetTotals()->bytes <= max_bytes);
}

void RunWorkers(const std::string& dir, int workers, uint64_t max_bytes) {
  std::vector<std::unique_ptr<ForkedChild>> children;
  for (int w = 0; w < workers; ++w) {
    children.push_back(
        std::make_unique<ForkedChild>([&, w](ChildChannel& channel) { return Worker(dir, w, max_bytes, channel); }));
  }
  for (auto& child : children) child->LetGo();
  for (size_t w = 0; w < children.size(); ++w) {
    INFO("worker " << w);
    CHECK(children[w]->Wait(300s).value_or(-1) == 0);
  }
}

TEST_CASE("processes committing the same and different keys leave a consistent cache", "[concurrency]") {
  TempDir dir("kiln-cache-mp");
  const uint64_t unlimited = 1ull << 30;
  RunWorkers(dir.path(), 4, unlimited);

  CheckConsistent(dir.path(), unlimited);
  CacheOptions options;
  options.dir = dir.path();
  auto cache = ArtifactCache::Open(options).value();
  std::set<std::string> expected;
  for (int w = 0; w < 4; ++w)
    for (const auto& [name, seed] : WorkFor(w)) expected.insert(KeyFor(name));
  auto rows = cache->index().All().value();
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(row.key);
  CHECK(keys == expected);  // nothing lost, nothing extra (6 shared + 4×6 own + 4×3 aliases)
  CHECK(rows.size() == 42);
  // One blob per distinct bytes: 6 shared + 24 own (aliases reuse shared blobs).
  CHECK(cache->index().GetTotals()->blobs == 30);
  // Each shared key was committed once (under its lock) and hit by everyone else: 4 workers ×
  // 2 rounds = 8 lookups, 1 commit, 7 hits.
  CHECK(cache->index().Find(KeyFor("shared3"))->value().hit_count == 7);
}

TEST_CASE("processes committing under a tight size limit evict consistently", "[concurrency]") {
  TempDir dir("kiln-cache-mp");
  const uint64_t limit = 8 * 512;  // room for 8 of the 30 distinct blobs
  RunWorkers(dir.path(), 4, limit);
  CheckConsistent(dir.path(), limit);
}

TEST_CASE("threads of one process share one ArtifactCache safely", "[concurrency]") {
  TempDir dir("kiln-cache-mt");
  CacheOptions options;
  options.dir = dir.path();
  options.max_bytes = 20 * 512;
  auto cache = ArtifactCache::Open(options).value();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string name = "t" + std::to_string((t + i) % 12);
        const std::string key = KeyFor(name);
        auto lock = cache->LockKey(key, 60s);
        if (!lock.ok()) {
          ++failures;
          continue;
        }
        auto found = cache->Lookup(key, CompatibilityOf(MakeRecord(key)));
        if (!found.ok()) {
          ++failures;
          continue;
        }
        if (found->has_value()) {
          if (*(*found)->cubin != FakeCubin(name, 512)) ++failures;
          cache->RecordHit(key);
        } else if (!cache->Commit(MakeRecord(key), FakeCubin(name, 512)).ok()) {
          ++failures;
        }
        if (i % 10 == 0 && !cache->FlushHits().ok()) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures == 0);
  cache.reset();
  CheckConsistent(dir.path(), options.max_bytes);
}

}  // namespace
}  // namespace kiln::cache
