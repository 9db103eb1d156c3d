#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>

#include "tests/support/temp_dir.h"

extern char** environ;

namespace kiln::testing {

Subprocess::Subprocess(SubprocessOptions options) {
  if (options.argv.empty()) throw std::runtime_error("Subprocess: empty argv");
  output_path_ = options.output_path;
  if (output_path_.empty()) {
    char tmpl[] = "/tmp/kiln-subprocess-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    close(fd);
    output_path_ = tmpl;
    owns_output_ = true;
  }
  // Build the child's environment before forking (no allocation after fork).
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& name : options.unset_env) env.erase(name);
  for (const auto& [k, v] : options.set_env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : options.argv) argv.push_back(s.data());
  argv.push_back(nullptr);

  int in_pipe[2] = {-1, -1};
  if (pipe(in_pipe) != 0) throw std::runtime_error("pipe failed");
  int out_fd = open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) throw std::runtime_error("cannot open " + output_path_);

  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);  // its own group, so a test can kill it and its children
    dup2(in_pipe[0], 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    close(in_pipe[1]);
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) _exit(126);
    if (options.run_as_uid >= 0 && geteuid() == 0) {
      gid_t gid = options.run_as_gid >= 0 ? gid_t(options.run_as_gid) : gid_t(options.run_as_uid);
      if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid_t(options.run_as_uid)) != 0) _exit(125);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    const char msg[] = "Subprocess: execve failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(out_fd);
  close(in_pipe[0]);
  if (!options.stdin_text.empty()) (void)!write(in_pipe[1], options.stdin_text.data(), options.stdin_text.size());
  close(in_pipe[1]);
}

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  if (owns_output_) unlink(output_path_.c_str());
}

bool Subprocess::running() {
  if (exit_code_.has_value() || pid_ <= 0) return false;
  return !Wait(std::chrono::milliseconds(0)).has_value();
}

void Subprocess::Signal(int sig) {
  if (!exit_code_.has_value() && pid_ > 0) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_.has_value()) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string Subprocess::Output() const {
  try {
    return ReadFile(output_path_);
  } catch (...) {
    return "";
  }
}

RunResult Run(SubprocessOptions options, std::chrono::milliseconds timeout) {
  Subprocess p(std::move(options));
  RunResult result;
  auto code = p.Wait(timeout);
  if (!code.has_value()) {
    p.Signal(SIGKILL);
    p.Wait();
    result.exit_code = -1;
  } else {
    result.exit_code = *code;
  }
  result.output = p.Output();
  return result;
}

}  // namespace kiln::testing
