// Tests of cache/file_lock.h with real processes: exclusion, timeouts, and the kernel
// releasing the lock of a process killed with -9.
#include "cache/file_lock.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>
#include <vector>

#include "tests/cache/forked_child.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

using namespace std::chrono_literals;
using testing::ChildChannel;
using testing::ForkedChild;

// A child that takes the lock, says so, and holds it until told to go on (or forever).
int HoldLock(const std::string& path, ChildChannel& channel) {
  auto lock = FileLock::TryAcquire(path);
  if (!lock.ok()) return 2;
  channel.NotifyParent();
  channel.WaitForParent(120s);
  return 0;
}

TEST_CASE("TryAcquire fails while another process holds the lock", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  ForkedChild child([&](ChildChannel& c) { return HoldLock(path, c); });
  REQUIRE(child.WaitUntilReady());

  auto attempt = FileLock::TryAcquire(path);
  REQUIRE_FALSE(attempt.ok());
  CHECK(attempt.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(attempt.status().message()), Catch::Contains(path));
  // The holder wrote its pid: the message names it.
  CHECK_THAT(std::string(attempt.status().message()), Catch::Contains(std::to_string(child.pid())));

  auto timed = FileLock::Acquire(path, 50ms);
  REQUIRE_FALSE(timed.ok());
  CHECK(timed.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(timed.status().message()), Catch::Contains(path));

  child.LetGo();
  REQUIRE(child.Wait() == 0);
  auto after = FileLock::TryAcquire(path);
  REQUIRE(after.ok());
  CHECK(after->held());
}

TEST_CASE("a lock held by a process killed with -9 is acquirable right after", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  ForkedChild child([&](ChildChannel& c) { return HoldLock(path, c); });
  REQUIRE(child.WaitUntilReady());
  REQUIRE_FALSE(FileLock::TryAcquire(path).ok());

  child.Kill(SIGKILL);
  REQUIRE(child.Wait() == 128 + SIGKILL);
  auto lock = FileLock::TryAcquire(path);
  REQUIRE(lock.ok());
  CHECK(lock->held());
  CHECK(lock->path() == path);
}

TEST_CASE("Acquire waits for a holder that releases", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  ForkedChild child([&](ChildChannel& c) {
    auto lock = FileLock::TryAcquire(path);
    if (!lock.ok()) return 2;
    c.NotifyParent();
    c.WaitForParent(120s);
    lock->Release();
    return lock->held() ? 3 : 0;
  });
  REQUIRE(child.WaitUntilReady());
  REQUIRE_FALSE(FileLock::TryAcquire(path).ok());
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    child.LetGo();  // the child releases while we wait
  });
  auto lock = FileLock::Acquire(path, 60s);
  release.join();
  REQUIRE(lock.ok());
  CHECK(lock->held());
  CHECK(child.Wait() == 0);
}

TEST_CASE("two FileLocks in one process exclude each other, release and move", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  auto first = FileLock::TryAcquire(path);
  REQUIRE(first.ok());
  CHECK(FileLock::TryAcquire(path).status().code() == absl::StatusCode::kUnavailable);

  FileLock moved = std::move(*first);
  CHECK(moved.held());
  CHECK_FALSE(first->held());
  CHECK(FileLock::TryAcquire(path).status().code() == absl::StatusCode::kUnavailable);

  moved.Release();
  CHECK_FALSE(moved.held());
  auto second = FileLock::Acquire(path, 1s);
  REQUIRE(second.ok());
  { FileLock scoped = std::move(*second); }  // destructor unlocks
  CHECK(FileLock::TryAcquire(path).ok());
}

TEST_CASE("a lock file removed on release: a waiter that had opened it locks the new file", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  auto first = FileLock::TryAcquire(path);
  REQUIRE(first.ok());
  first->RemoveOnRelease();
  absl::StatusOr<FileLock> waiter = absl::UnknownError("not run");
  std::thread wait([&] { waiter = FileLock::Acquire(path, 10s); });
  std::this_thread::sleep_for(200ms);  // the waiter has opened the file and polls it
  first->Release();
  wait.join();
  REQUIRE(waiter.ok());
  // The waiter holds the file the path names: nobody else gets the lock.
  CHECK(std::filesystem::exists(path));
  CHECK(FileLock::TryAcquire(path).status().code() == absl::StatusCode::kUnavailable);
  waiter->RemoveOnRelease();
  waiter->Release();
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("threads taking a lock that is removed at every release still exclude each other", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "key.lock";
  std::atomic<int> inside{0}, overlaps{0}, acquired{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto lock = FileLock::Acquire(path, 30s);
        if (!lock.ok()) continue;
        lock->RemoveOnRelease();
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        inside.fetch_sub(1);
        acquired.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(acquired.load() == 8 * 200);
  CHECK(overlaps.load() == 0);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a lock in a missing folder is an error naming the path", "[file_lock]") {
  kiln::testing::TempDir dir("kiln-lock");
  const std::string path = dir / "no/such/folder/key.lock";
  auto lock = FileLock::Acquire(path, 10ms);
  REQUIRE_FALSE(lock.ok());
  CHECK(lock.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(lock.status().message()), Catch::Contains(path));
}

}  // namespace
}  // namespace kiln::cache
