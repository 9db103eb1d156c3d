// Tests of cache/file_lock.h with real processes: exclusion, timeouts, and the kernel
// releasing the lock of a process killed with -9.
#include "cache/file_lock.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

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
