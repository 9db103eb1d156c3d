#include "client/ranks/rank_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>  // sigabbrev_np
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/ranks/line_tagger.h"

extern char** environ;

namespace kiln::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kKillAfterTerm = std::chrono::seconds(5);

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = 0;
  std::vector<std::string> env;  // "NAME=value", built before fork
};

void Say(const std::string& line) {
  std::string text = "kiln-launch: " + line + "\n";
  (void)!::write(2, text.data(), text.size());
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string SecondsText(std::chrono::milliseconds d) {
  if (d.count() == 0) return "now";
  char text[32];
  std::snprintf(text, sizeof(text), "%g", d.count() / 1000.0);
  return std::string("in ") + text + " s";
}

// "exited with status 3", "killed by signal 9 (SIGKILL)"; the exit code as a shell reports it.
std::string Describe(int status, int* code) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    *code = 128 + sig;
    return "killed by signal " + std::to_string(sig) + " (" + SignalName(sig) +
           (WCOREDUMP(status) ? ", core dumped)" : ")");
  }
  *code = WEXITSTATUS(status);
  return "exited with status " + std::to_string(*code);
}

std::vector<std::string> EnvironmentFor(const LaunchIdentity& identity, int rank, int world) {
  auto set = RankEnvironment(identity, rank, world);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || set.count(std::string(*e, eq - *e)) == 0) env.emplace_back(*e);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, const LaunchIdentity& identity) : options_(options), identity_(identity) {}
  int Run();

 private:
  bool Start(Rank& r);  // false: CMD could not be started (already reported)
  void Reap();
  void OnSignal(int sig, int code);
  void SignalRunning(int sig);
  int Running() const {
    return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
  }
  int ExitStatus() const;

  const LaunchOptions& options_;
  const LaunchIdentity& identity_;
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<LineTagger>> taggers_;
  sigset_t original_mask_{};
  int signal_fd_ = -1;
  std::optional<int> first_failure_;  // exit code of the first rank that failed
  int interrupted_by_ = 0;
  std::optional<Clock::time_point> term_at_, kill_at_;
};

bool Supervisor::Start(Rank& r) {
  std::vector<char*> argv, envp;
  std::vector<std::string> args = options_.command;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : r.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int exec_pipe[2];
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0 ||
      (options_.tag && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0))) {
    Say(std::string("cannot create a pipe: ") + std::strerror(errno));
    first_failure_ = kExitLauncherError;
    return false;
  }
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    // If kiln-launch dies (even kill -9), no rank is left running on a GPU.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitLauncherError);
    if (options_.tag) {
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
    }
    ::signal(SIGPIPE, SIG_DFL);  // ignored in kiln-launch; an ignored signal survives exec
    ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!::write(exec_pipe[1], &err, sizeof(err));
    ::_exit(err == ENOENT ? 127 : 126);
  }
  int fork_errno = errno;
  ::close(exec_pipe[1]);
  if (options_.tag) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
  }
  if (pid < 0) {
    ::close(exec_pipe[0]);
    if (options_.tag) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
    }
    Say(std::string("cannot start rank ") + std::to_string(r.rank) + ": fork failed: " + std::strerror(fork_errno));
    first_failure_ = kExitLauncherError;
    return false;
  }
  r.pid = pid;
  r.running = true;
  if (options_.tag) {
    for (int* p : {out_pipe, err_pipe}) ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    taggers_.push_back(std::make_unique<LineTagger>(r.rank, out_pipe[0], 1));
    taggers_.push_back(std::make_unique<LineTagger>(r.rank, err_pipe[0], 2));
  }
  // The pipe closes at a successful exec; an errno in it means exec failed.
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    Say("cannot run '" + options_.command[0] + "': " + std::strerror(exec_errno));
    first_failure_ = exec_errno == ENOENT ? 127 : 126;
    return false;
  }
  return true;
}

void Supervisor::SignalRunning(int sig) {
  for (const auto& r : ranks_)
    if (r.running) ::kill(r.pid, sig);
}

void Supervisor::Reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    auto it = std::find_if(ranks_.begin(), ranks_.end(), [&](const Rank& r) { return r.pid == pid; });
    if (it == ranks_.end()) continue;
    it->running = false;
    std::string how = Describe(status, &it->exit_code);
    if (it->exit_code == 0 || it->exit_code == kExitSkip || first_failure_) continue;
    first_failure_ = it->exit_code;
    std::string line = "rank " + std::to_string(it->rank) + " " + how;
    if (Running() > 0 && !term_at_ && !kill_at_) {
      line += "; stopping the others " + SecondsText(options_.grace);
      term_at_ = Clock::now() + options_.grace;
    }
    Say(line);
  }
}

void Supervisor::OnSignal(int sig, int code) {
  if (interrupted_by_ == 0) interrupted_by_ = sig;
  // A terminal's ^C reaches every process of the foreground group, the ranks included;
  // passing it on would deliver it twice.
  if (code != SI_KERNEL) SignalRunning(sig);
  if (!kill_at_) kill_at_ = Clock::now() + kKillAfterTerm;
  term_at_.reset();
}

int Supervisor::ExitStatus() const {
  if (first_failure_) return *first_failure_;
  if (interrupted_by_ != 0) return 128 + interrupted_by_;
  for (const auto& r : ranks_)
    if (r.exit_code == kExitSkip) return kExitSkip;
  return 0;
}

int Supervisor::Run() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&handled, sig);
  ::sigprocmask(SIG_BLOCK, &handled, &original_mask_);
  ::signal(SIGPIPE, SIG_IGN);
  signal_fd_ = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    Say(std::string("signalfd failed: ") + std::strerror(errno));
    return kExitLauncherError;
  }

  ranks_.resize(options_.nproc);
  for (int i = 0; i < options_.nproc; ++i) {
    ranks_[i].rank = i;
    ranks_[i].env = EnvironmentFor(identity_, i, options_.nproc);
  }
  for (auto& r : ranks_) {
    if (Start(r)) continue;
    // Nothing useful can run with a rank missing: stop the ones already started.
    SignalRunning(SIGTERM);
    kill_at_ = Clock::now() + kKillAfterTerm;
    break;
  }

  while (Running() > 0) {
    auto now = Clock::now();
    if (term_at_ && now >= *term_at_) {
      Say("sending SIGTERM to the " + std::to_string(Running()) + " rank(s) still running");
      SignalRunning(SIGTERM);
      term_at_.reset();
      kill_at_ = now + kKillAfterTerm;
    }
    if (kill_at_ && now >= *kill_at_) {
      Say("sending SIGKILL to the " + std::to_string(Running()) + " rank(s) still running " + "5 s after SIGTERM");
      SignalRunning(SIGKILL);
      kill_at_.reset();
    }
    int timeout_ms = -1;
    for (const auto& at : {term_at_, kill_at_}) {
      if (!at) continue;
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*at - now).count();
      int t = static_cast<int>(std::clamp<long long>(ms, 0, 1 << 30));
      timeout_ms = timeout_ms < 0 ? t : std::min(timeout_ms, t);
    }
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    for (const auto& t : taggers_)
      if (t->fd() >= 0) fds.push_back({t->fd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      Say(std::string("poll failed: ") + std::strerror(errno));
      SignalRunning(SIGKILL);
      break;
    }
    for (const auto& t : taggers_) t->Pump();
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      if (info.ssi_signo == SIGCHLD) continue;  // reaped below
      OnSignal(static_cast<int>(info.ssi_signo), info.ssi_code);
    }
    Reap();
  }
  // Every rank has exited; a child of a rank may still hold a pipe open: do not wait for it.
  for (const auto& t : taggers_) t->Finish();
  while (Running() > 0) {  // only after a poll failure
    int status;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    for (auto& r : ranks_)
      if (r.pid == pid) r.running = false;
  }
  ::close(signal_fd_);
  return ExitStatus();
}

}  // namespace

int RunRankGroup(const LaunchOptions& options, const LaunchIdentity& identity) {
  Supervisor supervisor(options, identity);
  return supervisor.Run();
}

}  // namespace kiln::launch
