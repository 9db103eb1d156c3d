// ForkedChild: runs a function in a fork()ed child process, with two pipes so the test and
// the child can tell each other "ready" / "go on". Used where the behaviour under test is
// about processes: flock ownership, kill -9, several writers sharing one cache folder.
// The child must not touch an SQLite connection opened by the parent (open its own), and
// must not use Catch2 macros: it reports through its exit code.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>

namespace kiln::cache::testing {

class ChildChannel {
 public:
  ChildChannel(int to_parent, int from_parent) : to_parent_(to_parent), from_parent_(from_parent) {}
  void NotifyParent();  // one "ready" byte
  bool WaitForParent(std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  int to_parent_;
  int from_parent_;
};

class ForkedChild {
 public:
  // `body` runs in the child; its return value is the child's exit code (99 on an exception).
  explicit ForkedChild(std::function<int(ChildChannel&)> body);
  ~ForkedChild();  // kill -9 and reap if still running
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the child's NotifyParent; false on timeout or when the child exited first.
  bool WaitUntilReady(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void LetGo();  // wakes the child's WaitForParent
  void Kill(int sig);
  // Exit code, 128+signal when killed, nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout = std::chrono::seconds(120));

 private:
  pid_t pid_ = -1;
  int from_child_ = -1;
  int to_child_ = -1;
  std::optional<int> exit_code_;
};

// A pid that belonged to a process which has exited and been reaped.
pid_t DeadPid();

}  // namespace kiln::cache::testing
