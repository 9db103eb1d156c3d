// Tests of cache/blob_store.h on real files: round trip, idempotence, corruption, quarantine,
// listing, and the stale-temp sweep against live and dead writers.
#include "cache/blob_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

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
using testing::ChildChannel;
using testing::FakeCubin;
using testing::FlipByte;
using testing::ForkedChild;
using testing::MakeOld;

size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) ++n;
  return n;
}

TEST_CASE("Open creates the folders", "[blob_store]") {
  TempDir dir("kiln-blobs");
  const std::string root = dir / "nested/cache";
  REQUIRE(BlobStore::Open(root).ok());
  for (const char* sub : {"blobs", "tmp", "quarantine"}) CHECK(fs::is_directory(root + "/" + sub));
  CHECK(BlobStore::Open("").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("folders removed while the store is open are recreated and reported once", "[blob_store]") {
  TempDir dir("kiln-blobs");
  std::vector<std::string> repairs;
  auto store = BlobStore::Open(dir.path(), [&](const std::string& r) { repairs.push_back(r); }).value();
  const std::string first = store->Put(FakeCubin("a", 100)).value();
  fs::remove_all(dir / "blobs");
  fs::remove_all(dir / "tmp");
  fs::remove_all(dir / "quarantine");
  CHECK(store->List().value().empty());  // no blobs, not an error
  CHECK(store->Read(first).status().code() == absl::StatusCode::kNotFound);
  const std::string second = store->Put(FakeCubin("b", 100)).value();
  CHECK(store->Read(second).ok());
  CHECK(store->Put(FakeCubin("c", 100)).ok());
  REQUIRE(repairs.size() == 2);  // blobs/ and tmp/, each once
  CHECK_THAT(repairs[0], Catch::Contains(dir / "blobs was missing"));
  CHECK_THAT(repairs[1], Catch::Contains(dir / "tmp was missing"));
  CHECK(store->Quarantine(second, "test").ok());
  CHECK(repairs.size() == 3);
}

TEST_CASE("blob round trip, put is idempotent and leaves no temp", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path());
  REQUIRE(store.ok());
  const std::string bytes = FakeCubin("a", 5000) + std::string("\0\xff\0", 3);

  auto sha = (*store)->Put(bytes);
  REQUIRE(sha.ok());
  CHECK(*sha == Sha256Hex(bytes));
  const std::string path = (*store)->PathOf(*sha);
  CHECK(path == dir.path() + "/blobs/" + sha->substr(0, 2) + "/" + *sha);
  CHECK(ReadFile(path) == bytes);
  CHECK((*store)->Exists(*sha));
  auto read = (*store)->Read(*sha);
  REQUIRE(read.ok());
  CHECK(*read == bytes);

  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0444);  // immutable

  auto again = (*store)->Put(bytes);
  REQUIRE(again.ok());
  CHECK(*again == *sha);
  CHECK(CountFiles(dir / "blobs") == 1);
  CHECK(CountFiles(dir / "tmp") == 0);

  auto empty = (*store)->Put("");
  REQUIRE(empty.ok());
  CHECK((*store)->Read(*empty).value() == "");
}

TEST_CASE("a flipped byte reads as DATA_LOSS naming blob, expected and actual", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path()).value();
  const std::string bytes = FakeCubin("flip", 1000);
  const std::string sha = store->Put(bytes).value();
  FlipByte(store->PathOf(sha), 500);

  auto read = store->Read(sha);
  REQUIRE_FALSE(read.ok());
  CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  std::string flipped = bytes;
  flipped[500] ^= 0x01;
  const std::string message(read.status().message());
  CHECK_THAT(message, Catch::Contains(store->PathOf(sha)));
  CHECK_THAT(message, Catch::Contains("expected sha256 " + sha));
  CHECK_THAT(message, Catch::Contains(Sha256Hex(flipped)));

  // Putting the right bytes again repairs it.
  REQUIRE(store->Put(bytes).ok());
  CHECK(store->Read(sha).value() == bytes);
}

TEST_CASE("missing and malformed blob names", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path()).value();
  const std::string absent = Sha256Hex("never stored");
  CHECK(store->Read(absent).status().code() == absl::StatusCode::kNotFound);
  CHECK_FALSE(store->Exists(absent));
  CHECK(store->Read("../../etc/passwd").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(store->Remove(absent).ok());  // already absent is fine
  CHECK(store->Quarantine(absent, "x").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Quarantine moves the blob aside with a .why file", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path()).value();
  const std::string bytes = FakeCubin("q");
  const std::string sha = store->Put(bytes).value();

  auto moved = store->Quarantine(sha, "checksum mismatch in test");
  REQUIRE(moved.ok());
  CHECK_FALSE(store->Exists(sha));
  CHECK_THAT(*moved, Catch::StartsWith(dir.path() + "/quarantine/" + sha + "."));
  CHECK(ReadFile(*moved) == bytes);
  const std::string why = ReadFile(*moved + ".why");
  CHECK_THAT(why, Catch::Contains("checksum mismatch in test"));
  CHECK_THAT(why, Catch::Contains(sha));

  // The same blob again (same millisecond or not) never overwrites the first one.
  REQUIRE(store->Put(bytes).ok());
  auto second = store->Quarantine(sha, "again");
  REQUIRE(second.ok());
  CHECK(*second != *moved);
  CHECK(fs::exists(*moved));
}

TEST_CASE("List names every blob with its size, Remove deletes", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path()).value();
  const std::string a = store->Put(FakeCubin("a", 100)).value();
  const std::string b = store->Put(FakeCubin("b", 200)).value();
  WriteFile(dir / "blobs/zz/not-a-blob", "x");  // ignored
  auto list = store->List();
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  std::map<std::string, uint64_t> sizes;
  for (const auto& blob : *list) sizes[blob.sha256] = blob.size;
  CHECK(sizes[a] == 100);
  CHECK(sizes[b] == 200);
  REQUIRE(store->Remove(a).ok());
  CHECK_FALSE(store->Exists(a));
  CHECK(store->List()->size() == 1);
}

TEST_CASE("SweepStaleTemps keeps live writers' temps and removes dead ones", "[blob_store]") {
  TempDir dir("kiln-blobs");
  auto store = BlobStore::Open(dir.path()).value();

  // A live writer: a child process that is alive (and, for the second temp, holds the flock
  // a writer holds while writing).
  ForkedChild child([&](ChildChannel& c) {
    const std::string path = store->NewTempPath(::getpid());
    WriteFile(path, "half a blob");
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 2;
    WriteFile(dir / "child-temp-path", path);
    c.NotifyParent();
    c.WaitForParent(120s);
    return 0;
  });
  REQUIRE(child.WaitUntilReady());
  const std::string flocked = ReadFile(dir / "child-temp-path");
  const std::string live = store->NewTempPath(child.pid());  // alive, no flock
  WriteFile(live, "x");
  const std::string dead = store->NewTempPath(testing::DeadPid());
  WriteFile(dead, "x");
  const std::string ours = store->NewTempPath(::getpid());
  WriteFile(ours, "x");
  const std::string foreign = dir / "tmp/12345-0123456789abcdef-some-other-host.tmp";
  WriteFile(foreign, "x");
  REQUIRE(std::set<std::string>{flocked, live, dead, ours, foreign}.size() == 5);

  SECTION("young temps: only the dead pid's goes") {
    auto removed = store->SweepStaleTemps(std::chrono::hours(1));
    REQUIRE(removed.ok());
    CHECK(*removed == 1);
    CHECK_FALSE(fs::exists(dead));
    CHECK(fs::exists(live));
    CHECK(fs::exists(ours));
    CHECK(fs::exists(flocked));
    CHECK(fs::exists(foreign));  // another host's pid means nothing here
  }
  SECTION("old temps go too, except one whose writer holds its flock") {
    for (const auto& path : {flocked, live, dead, ours, foreign}) MakeOld(path, 2h);
    auto removed = store->SweepStaleTemps(std::chrono::hours(1));
    REQUIRE(removed.ok());
    CHECK(*removed == 4);
    CHECK(fs::exists(flocked));
    CHECK_FALSE(fs::exists(live));
    CHECK_FALSE(fs::exists(foreign));
  }
  child.LetGo();
  CHECK(child.Wait() == 0);
}

}  // namespace
}  // namespace kiln::cache
