// kilnd started the way systemd starts deploy/kilnd.service behind kilnd.socket: a listening
// unix socket passed as descriptor 3 (LISTEN_FDS=1, LISTEN_PID set in the child after fork)
// and a NOTIFY_SOCKET (Type=notify) that the test reads. It serves on that socket, says
// READY=1 once it does and STOPPING=1 at SIGTERM, leaves the socket to systemd, keeps the
// one-daemon-per-socket lock, and refuses a descriptor that is not what kilnd.socket passes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

extern char** environ;

using namespace kiln::testing;
namespace fs = std::filesystem;

namespace {

int UnixSocket(const std::string& path, int type, bool listening) {
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || (listening && listen(fd, 64) != 0))
    throw std::runtime_error("cannot make the unix socket " + path + ": " + std::strerror(errno));
  return fd;
}

// Stands in for systemd's notification socket: the datagrams sd_notify sends.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)), fd_(UnixSocket(path_, SOCK_DGRAM, false)) {}
  ~NotifySocket() { close(fd_); }
  const std::string& path() const { return path_; }
  // The next message, or "" when none came within `timeout`.
  std::string Next(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, int(timeout.count())) <= 0) return "";
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : "";
  }

 private:
  std::string path_;
  int fd_;
};

// A kilnd with `passed` as its descriptors 3, 4, ..., as systemd passes a socket unit's sockets.
class ActivatedKilnd {
 public:
  ActivatedKilnd(std::vector<int> passed, const std::string& root, const std::string& socket,
                 std::map<std::string, std::string> env)
      : log_(root + "/kilnd-" + std::to_string(++count_) + ".log") {
    fs::create_directories(root);
    std::vector<std::string> args = {KilndPath(), "--socket",    socket,          "--cache-dir", root + "/cache",
                                     "--gen-dir", root + "/gen", "--kernels-dir", KernelsDir()};
    env.try_emplace("LISTEN_FDS", std::to_string(passed.size()));
    env.try_emplace("LISTEN_FDNAMES", "kilnd.socket");
    std::map<std::string, std::string> all;
    for (char** e = environ; *e != nullptr; ++e)
      if (const char* eq = std::strchr(*e, '=')) all[std::string(*e, eq - *e)] = eq + 1;
    // None of the developer's own settings, nor a service manager the test itself runs under.
    for (auto it = all.begin(); it != all.end();)
      it = it->first.starts_with("KILN_") || it->first.starts_with("LISTEN_") || it->first == "NOTIFY_SOCKET"
               ? all.erase(it)
               : std::next(it);
    for (auto& [k, v] : env) all[k] = v;
    std::vector<std::string> env_strings;
    for (auto& [k, v] : all) env_strings.push_back(k + "=" + v);
    // LISTEN_PID is the child's own pid: written into this buffer after fork, without allocating.
    char listen_pid[32] = "LISTEN_PID=";
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(listen_pid);
    envp.push_back(nullptr);
    int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) throw std::runtime_error("cannot open " + log_);
    pid_ = fork();
    if (pid_ == 0) {
      char digits[16];
      int n = 0;
      for (pid_t p = getpid(); p > 0; p /= 10) digits[n++] = char('0' + p % 10);
      char* end = listen_pid + std::strlen("LISTEN_PID=");
      while (n > 0) *end++ = digits[--n];
      *end = '\0';
      dup2(out, 1);
      dup2(out, 2);
      // Out of the way first (one may already be 3 or 4), then in place; dup2 clears close-on-exec.
      for (size_t i = 0; i < passed.size(); ++i) passed[i] = fcntl(passed[i], F_DUPFD_CLOEXEC, 100);
      for (size_t i = 0; i < passed.size(); ++i) dup2(passed[i], int(3 + i));
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out);
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }
  ~ActivatedKilnd() {
    if (!exit_code_) {
      kill(pid_, SIGKILL);
      Wait(std::chrono::seconds(10));
    }
  }
  pid_t pid() const { return pid_; }
  void Signal(int sig) { kill(pid_, sig); }
  std::string Log() const { return ReadFile(log_); }
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    for (auto deadline = std::chrono::steady_clock::now() + timeout; !exit_code_;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_)
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      else if (std::chrono::steady_clock::now() >= deadline) break;
      else std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exit_code_;
  }

 private:
  static inline int count_ = 0;
  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Runs a kilnd on `passed_fd` that must refuse to start; its exit code and log.
std::pair<int, std::string> Refused(std::vector<int> passed, const std::string& root, const std::string& socket,
                                    std::map<std::string, std::string> env = {}) {
  ActivatedKilnd kilnd(std::move(passed), root, socket, std::move(env));
  auto code = kilnd.Wait(std::chrono::seconds(30));
  return {code.value_or(-1), kilnd.Log()};
}

}  // namespace

TEST_CASE("a socket-activated kilnd serves on systemd's socket and notifies READY=1 and STOPPING=1",
          "[daemon][systemd]") {
  TempDir dir;
  fs::create_directories(dir / "run");
  const std::string socket = dir / "run/kilnd.sock";
  const int listen_fd = UnixSocket(socket, SOCK_STREAM, true);  // kept open, as systemd does
  NotifySocket notify(dir / "notify");
  const std::map<std::string, std::string> env = {{"NOTIFY_SOCKET", notify.path()}};

  {
    ActivatedKilnd kilnd({listen_fd}, dir.path(), socket, env);
    std::string ready = notify.Next(std::chrono::seconds(60));
    INFO(kilnd.Log());
    CHECK_THAT(ready, Catch::Contains("READY=1") && Catch::Contains("STATUS=serving on " + socket));
    // READY=1 means it serves: a real call on the passed socket, with no waiting for it.
    Rpc rpc(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
    CHECK(Stats(rpc).cache_enabled());
    CHECK_THAT(kilnd.Log(), Catch::Contains("is systemd's (socket activation)"));

    // A second kilnd on the same path is refused by the lock beside the socket, whether it was
    // started by hand or passed the socket too, and leaves the first serving on it.
    RunResult by_hand = Run({.argv = {KilndPath(), "--socket", socket, "--cache-dir", dir / "cache2"}});
    CHECK(by_hand.exit_code == 1);
    CHECK_THAT(by_hand.output,
               Catch::Contains("another kilnd (pid " + std::to_string(kilnd.pid()) + ") already serves"));
    auto [code, log] = Refused({listen_fd}, dir / "second", socket);
    CHECK(code == 1);
    CHECK_THAT(log, Catch::Contains("already serves " + socket));
    CHECK(Stats(rpc).cache_enabled());

    kilnd.Signal(SIGTERM);
    CHECK_THAT(notify.Next(std::chrono::seconds(30)), Catch::Contains("STOPPING=1"));
    CHECK(kilnd.Wait(std::chrono::seconds(60)) == 0);
  }
  // The socket stays systemd's: still there, and a kilnd started again on it serves.
  CHECK(fs::is_socket(socket));
  ActivatedKilnd again({listen_fd}, dir.path(), socket, env);
  CHECK_THAT(notify.Next(std::chrono::seconds(60)), Catch::Contains("READY=1"));
  Rpc rpc(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  CHECK(Stats(rpc).cache_enabled());
  close(listen_fd);
}

TEST_CASE("a connection made before a socket-activated kilnd serves is answered", "[daemon][systemd]") {
  TempDir dir;
  const std::string socket = dir / "kilnd.sock";
  const int listen_fd = UnixSocket(socket, SOCK_STREAM, true);
  // The client connects first, as the one whose connection makes systemd start kilnd does.
  Rpc rpc(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  rpc.channel->GetState(/*try_to_connect=*/true);
  ActivatedKilnd kilnd({listen_fd}, dir.path(), socket, {});
  CHECK(Stats(rpc).cache_enabled());
  close(listen_fd);
}

TEST_CASE("kilnd refuses a descriptor from systemd that is not a listening unix socket", "[daemon][systemd]") {
  TempDir dir;
  const std::string socket = dir / "kilnd.sock";
  SECTION("a regular file") {
    int fd = open((dir / "file").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    auto [code, log] = Refused({fd}, dir.path(), socket);
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("socket activation (LISTEN_FDS=1): descriptor 3 is a regular file, not a "
                                    "listening unix stream socket"));
    close(fd);
  }
  SECTION("a unix socket that is not listening") {
    int fd = UnixSocket(socket, SOCK_STREAM, false);
    auto [code, log] = Refused({fd}, dir.path(), socket);
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("descriptor 3 is a unix stream socket that is not listening"));
    close(fd);
  }
  SECTION("a datagram socket") {
    int fd = UnixSocket(socket, SOCK_DGRAM, false);
    auto [code, log] = Refused({fd}, dir.path(), socket);
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("descriptor 3 is a unix datagram socket"));
    close(fd);
  }
  SECTION("a socket on another path than --socket") {
    int fd = UnixSocket(dir / "other.sock", SOCK_STREAM, true);
    auto [code, log] = Refused({fd}, dir.path(), socket);
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("systemd passed the socket " + dir / "other.sock") &&
                        Catch::Contains("kilnd is set to serve " + socket));
    close(fd);
  }
  SECTION("two sockets") {
    int a = UnixSocket(socket, SOCK_STREAM, true), b = UnixSocket(dir / "b.sock", SOCK_STREAM, true);
    auto [code, log] = Refused({a, b}, dir.path(), socket);
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("socket activation (LISTEN_FDS=2): kilnd takes exactly one descriptor"));
    close(a);
    close(b);
  }
  SECTION("a LISTEN_FDS that is not a number") {
    int fd = UnixSocket(socket, SOCK_STREAM, true);
    auto [code, log] = Refused({fd}, dir.path(), socket, {{"LISTEN_FDS", "three"}});
    CHECK(code == 2);
    CHECK_THAT(log, Catch::Contains("LISTEN_FDS=\"three\""));
    close(fd);
  }
  // Nothing was served: no socket was left behind by kilnd, no lock taken.
  CHECK_FALSE(fs::exists(socket + ".lock"));
}
