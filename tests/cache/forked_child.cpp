// ForkedChild: fork()ed test children with ready/go pipes.
#include "tests/cache/forked_child.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <thread>

namespace kiln::cache::testing {
namespace {

bool ReadByte(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return false;
  char byte = 0;
  return ::read(fd, &byte, 1) == 1;
}

}  // namespace

void ChildChannel::NotifyParent() {
  char byte = 'r';
  (void)!::write(to_parent_, &byte, 1);
}

bool ChildChannel::WaitForParent(std::chrono::milliseconds timeout) { return ReadByte(from_parent_, timeout); }

ForkedChild::ForkedChild(std::function<int(ChildChannel&)> body) {
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::close(up[0]);
    ::close(down[1]);
    int code = 99;
    try {
      ChildChannel channel(up[1], down[0]);
      code = body(channel);
    } catch (...) {
      code = 99;
    }
    ::_exit(code);  // no atexit handlers, no Catch2 reporting from the child
  }
  ::close(up[1]);
  ::close(down[0]);
  from_child_ = up[0];
  to_child_ = down[1];
}

ForkedChild::~ForkedChild() {
  if (!exit_code_.has_value() && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  ::close(from_child_);
  ::close(to_child_);
}

bool ForkedChild::WaitUntilReady(std::chrono::milliseconds timeout) { return ReadByte(from_child_, timeout); }

void ForkedChild::LetGo() {
  char byte = 'g';
  (void)!::write(to_child_, &byte, 1);
}

void ForkedChild::Kill(int sig) {
  if (!exit_code_.has_value()) ::kill(pid_, sig);
}

std::optional<int> ForkedChild::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_.has_value()) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

pid_t DeadPid() {
  ForkedChild child([](ChildChannel&) { return 0; });
  child.Wait();
  return child.pid();
}

}  // namespace kiln::cache::testing
