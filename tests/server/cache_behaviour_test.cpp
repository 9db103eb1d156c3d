// The cache through the daemon: JIT disabled, cache disabled, corrupted blobs healed,
// Verify, listing, lookup by key prefix, eviction.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "cache/sha256.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {
const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};

std::string BlobPath(const std::string& cache_dir, const std::string& sha) {
  return cache_dir + "/blobs/" + sha.substr(0, 2) + "/" + sha;
}

void FlipByte(const std::string& path, size_t offset) {
  std::string bytes = ReadFile(path);
  REQUIRE(bytes.size() > offset);
  bytes[offset] = char(bytes[offset] ^ 0x5a);
  fs::permissions(path, fs::perms::owner_write, fs::perm_options::add);
  WriteFile(path, bytes);
}

size_t CountFiles(const std::string& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}
}  // namespace

TEST_CASE("with JIT disabled, cached entries are served and misses are refused naming the spec", "[cache]") {
  TempDir dir;
  {
    DaemonProcess warm({.root = dir.path()});
    Rpc rpc(warm.channel());
    REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
  }
  DaemonProcess d({.root = dir.path(), .extra_args = {"--disable-jit"}});
  Rpc rpc(d.channel());
  auto hit = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(hit.status.ok());
  CHECK(hit.response.origin() == v1::ORIGIN_DISK);
  auto miss = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp16"}, {"hidden", "4096"}}));
  REQUIRE(miss.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(miss.status.error_message(), Catch::Contains("JIT is disabled"));
  CHECK_THAT(miss.status.error_message(), Catch::Contains("rmsnorm_fp16_h4096"));
  CHECK(Stats(rpc).compiles() == 0);
  CHECK_FALSE(Stats(rpc).jit_enabled());
}

TEST_CASE("with the cache disabled, every request compiles and nothing is stored", "[cache]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .env = {{"KILN_NO_CACHE", "1"}}});
  Rpc rpc(d.channel());
  for (int i = 0; i < 2; ++i) {
    auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
    CHECK(r.response.sha256() == kiln::cache::Sha256Hex(r.response.cubin()));
  }
  CHECK(Stats(rpc).compiles() == 2);
  CHECK_FALSE(Stats(rpc).cache_enabled());
  CHECK(CountFiles(d.cache_dir() + "/blobs") == 0);
  v1::ListEntriesResponse list;
  grpc::ClientContext ctx;
  auto s = rpc.cache->ListEntries(&ctx, v1::ListEntriesRequest(), &list);
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(s.error_message(), Catch::Contains("--no-cache"));
}

TEST_CASE("a flipped byte in a blob is detected at lookup and healed by a recompile", "[cache]") {
  TempDir dir;
  std::string sha, cache_dir;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc first(d.channel());
    auto r = Get(first, OpRequest("rmsnorm", kBf16_4096));
    REQUIRE(r.status.ok());
    sha = r.response.sha256();
    cache_dir = d.cache_dir();
  }
  FlipByte(BlobPath(cache_dir, sha), 100);
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto healed = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(healed.status.ok());
  CHECK(healed.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(healed.response.sha256() == sha);  // NVRTC is deterministic: the same cubin again
  CHECK(kiln::cache::Sha256Hex(ReadFile(BlobPath(cache_dir, sha))) == sha);
  CHECK(Stats(rpc).quarantined() == 1);
  CHECK(Verify(rpc).problems_size() == 0);
  CHECK(CountFiles(cache_dir + "/quarantine") >= 1);
}

TEST_CASE("Verify re-hashes every blob, quarantines a bad one, and the next request recompiles", "[cache]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto a = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  auto b = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", "1000"}}));
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  auto clean = Verify(rpc);
  CHECK(clean.entries_checked() == 2);
  CHECK(clean.problems_size() == 0);
  FlipByte(BlobPath(d.cache_dir(), a.response.sha256()), 64);
  auto report = Verify(rpc);
  REQUIRE(report.problems_size() == 1);
  CHECK(report.problems(0).cache_key() == a.response.cache_key());
  CHECK_FALSE(report.problems(0).problem().empty());
  CHECK_THAT(report.problems(0).action(), Catch::Contains("quarantine"));
  auto again = Get(rpc, OpRequest("rmsnorm", kBf16_4096));
  REQUIRE(again.status.ok());
  CHECK(again.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(Verify(rpc).problems_size() == 0);
}

TEST_CASE("entries are listed with filters and pages, found by key prefix, and evicted", "[cache]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  std::vector<std::string> keys;
  for (const char* hidden : {"256", "512", "1024"})
    for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
      auto r = Get(rpc, OpRequest(op, {{"dtype", "fp16"}, {"hidden", hidden}}));
      REQUIRE(r.status.ok());
      keys.push_back(r.response.cache_key());
    }
  // Pages of 4 cover all six, each once.
  std::set<std::string> seen;
  v1::ListEntriesRequest req;
  req.set_page_size(4);
  int pages = 0;
  do {
    v1::ListEntriesResponse page;
    grpc::ClientContext ctx;
    REQUIRE(rpc.cache->ListEntries(&ctx, req, &page).ok());
    CHECK(page.total_matching() == 6);
    for (const auto& e : page.entries()) {
      CHECK(seen.insert(e.cache_key()).second);
      CHECK(e.size_bytes() > 0);
      CHECK(e.kernels_size() == 1);
      CHECK(fs::exists(e.blob_path()));
    }
    req.set_page_token(page.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 10);
  CHECK(pages == 2);
  CHECK(seen.size() == 6);

  v1::ListEntriesRequest by_op;
  by_op.set_op("fused_add_rmsnorm");
  v1::ListEntriesResponse fused;
  grpc::ClientContext c1;
  REQUIRE(rpc.cache->ListEntries(&c1, by_op, &fused).ok());
  CHECK(fused.entries_size() == 3);

  v1::GetEntryRequest get;
  get.set_cache_key(keys[0].substr(0, 12));
  v1::CacheEntry entry;
  grpc::ClientContext c2;
  REQUIRE(rpc.cache->GetEntry(&c2, get, &entry).ok());
  CHECK(entry.cache_key() == keys[0]);
  CHECK(entry.uri() == "rmsnorm_fp16_h256");
  CHECK(entry.params().at("hidden") == "256");

  v1::EvictEntriesRequest unfiltered;
  v1::EvictEntriesResponse none;
  grpc::ClientContext c3;
  auto refused = rpc.cache->EvictEntries(&c3, unfiltered, &none);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  v1::EvictEntriesRequest evict;
  evict.set_uri_prefix("fused_add_rmsnorm_");
  evict.set_dry_run(true);
  v1::EvictEntriesResponse dry;
  grpc::ClientContext c4;
  REQUIRE(rpc.cache->EvictEntries(&c4, evict, &dry).ok());
  CHECK(dry.evicted_size() == 3);
  CHECK(Stats(rpc).entries() == 6);
  evict.set_dry_run(false);
  v1::EvictEntriesResponse done;
  grpc::ClientContext c5;
  REQUIRE(rpc.cache->EvictEntries(&c5, evict, &done).ok());
  CHECK(done.evicted_size() == 3);
  CHECK(done.bytes_freed() > 0);
  CHECK(Stats(rpc).entries() == 3);
  // Evicted entries are gone from memory too: the next request compiles.
  auto r = Get(rpc, OpRequest("fused_add_rmsnorm", {{"dtype", "fp16"}, {"hidden", "256"}}));
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
}

TEST_CASE("kilnd evicts to --cache-max-mb after the compile that crossed it and leaves no lock files", "[cache]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path(), .extra_args = {"--cache-max-mb", "1"}});
  Rpc rpc(d.channel());
  auto folder_bytes = [&] {
    uint64_t total = 0;
    for (const auto& e : fs::recursive_directory_iterator(d.cache_dir()))
      if (e.is_regular_file()) total += e.file_size();
    return total;
  };
  // About 10 KiB each: together well past what 1 MiB leaves beside the index and its WAL.
  for (int hidden = 64; hidden <= 64 * 80; hidden += 64) {
    auto reply = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", std::to_string(hidden)}}, "sm_90"));
    INFO(hidden << ": " << reply.status.error_message());
    REQUIRE(reply.status.ok());
  }
  // The eviction runs on the daemon's own thread within about a second of the commit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (folder_bytes() > (1u << 20) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  INFO("cache folder bytes " << folder_bytes());
  CHECK(folder_bytes() <= (1u << 20));
  CHECK(Stats(rpc).evictions() > 0);
  CHECK(d.Log().find("least recently used cache entries") != std::string::npos);
  // The newest entry stays; lock files went with their compiles.
  auto newest = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", std::to_string(64 * 80)}}, "sm_90"));
  CHECK(newest.response.origin() != v1::ORIGIN_COMPILED);
  CHECK(CountFiles(d.cache_dir() + "/locks") == 0);
}

TEST_CASE("kilnd rebuilds a lost index from the entry sidecars at start and serves from disk", "[cache]") {
  TempDir dir;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc rpc(d.channel());
    REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90")).status.ok());
    REQUIRE(Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp16"}, {"hidden", "4096"}}, "sm_90")).status.ok());
  }
  for (const char* file : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"})
    fs::remove(dir.path() + "/cache/" + file);
  DaemonProcess d({.root = dir.path()});
  INFO(d.Log());
  CHECK(d.Log().find("restored 2 entries from their sidecars") != std::string::npos);
  CHECK(d.Log().find(" warning ") != std::string::npos);
  Rpc rpc(d.channel());
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90")).response.origin() == v1::ORIGIN_DISK);
  CHECK(Stats(rpc).compiles() == 0);
}

TEST_CASE("kilnd says loudly at start that its index lost every entry while blobs without sidecars remain", "[cache]") {
  TempDir dir;
  {
    DaemonProcess d({.root = dir.path()});
    Rpc rpc(d.channel());
    REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90")).status.ok());
  }
  for (const char* file : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"})
    fs::remove(dir.path() + "/cache/" + file);
  fs::remove_all(dir.path() + "/cache/entries");  // a cache written before sidecars
  DaemonProcess d({.root = dir.path()});
  INFO(d.Log());
  CHECK(d.Log().find("index.sqlite has no entries, but blobs/ holds 1 cubins") != std::string::npos);
  CHECK(d.Log().find(" error the cache index ") != std::string::npos);  // at error level
  Rpc rpc(d.channel());
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90")).response.origin() == v1::ORIGIN_COMPILED);
}
